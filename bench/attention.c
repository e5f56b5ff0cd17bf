/* attention.c - the fast attention kernel alone (kernels/fastops.h,
 * ts_attention_fast) on the head shapes of the real models: a causal
 * prefill of N tokens from position 0 over an f16 KV cache, the best of
 * -r runs, in GFMA/s (QK^T and PV multiply-adds of the causal triangle:
 * n_head * head_dim * N (N + 1) / 2 each). Compare with bench_int8_peak's
 * fp32 line (one FMA = 2 flops). docs/PERFORMANCE.md.
 *
 *   bench_attention [-t 2] [-n 512] [-r 7]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/threadpool.h"
#include "kernels/fastops.h"
#include "quant/quant.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int threads = 2, n = 512, reps = 7;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-n")) n = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: bench_attention [-t 2] [-n 512] [-r 7]\n");
            return 2;
        }
    }
    if (threads < 1 || n < 1 || reps < 1) {
        fprintf(stderr, "bench_attention: -t, -n and -r must be positive\n");
        return 2;
    }
    static const struct { const char *model; int nh, nkv, hd; } shapes[] = {
        {"SmolLM2-135M", 9, 3, 64},      {"Gemma 3 270M", 4, 1, 256}, {"Llama-3.2-1B", 32, 8, 64},
        {"Qwen2.5 0.5B", 14, 2, 64},     {"Qwen2.5 1.5B", 12, 2, 128},
    };
    ts_err err;
    ts_threadpool *pool = ts_threadpool_new(threads, &err);
    if (!pool) {
        fprintf(stderr, "bench_attention: %s\n", err.msg);
        return 1;
    }
    printf("| heads (q / kv) x dim | model | N | best ms | GFMA/s |\n|---|---|---:|---:|---:|\n");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int nh = shapes[s].nh, nkv = shapes[s].nkv, hd = shapes[s].hd;
        const size_t nq = (size_t)n * nh * hd, nk = (size_t)n * nkv * hd;
        float *q = malloc(nq * sizeof(float)), *o = malloc(nq * sizeof(float));
        uint16_t *k = malloc(nk * 2), *v = malloc(nk * 2);
        srand(1);
        for (size_t i = 0; i < nq; i++) q[i] = (float)rand() / (float)RAND_MAX - 0.5f;
        for (size_t i = 0; i < nk; i++) {
            k[i] = ts_f32_to_f16((float)rand() / (float)RAND_MAX - 0.5f);
            v[i] = ts_f32_to_f16((float)rand() / (float)RAND_MAX);
        }
        const ts_attn_params ap = {nh, nkv, hd, 1.0f / sqrtf((float)hd), 0.0f, 0, true, (int64_t)nkv * hd, 0};
        const int64_t stride = ts_attention_fast_scratch(&ap);
        float *scr = malloc(sizeof(float) * (size_t)stride * (size_t)threads);
        if (!q || !o || !k || !v || !scr) {
            fprintf(stderr, "bench_attention: out of memory\n");
            return 1;
        }
        double best = 1e30;
        for (int r = 0; r < reps; r++) {
            const double t0 = now_s();
            ts_attention_fast(pool, &ap, q, k, v, 0, n, o, scr, stride);
            const double t = now_s() - t0;
            best = t < best ? t : best;
        }
        const double fma = 2.0 * nh * hd * (double)n * (n + 1) / 2.0;
        printf("| %d / %d x %d | %s | %d | %.2f | %.1f |\n", nh, nkv, hd, shapes[s].model, n, best * 1e3,
               fma / best * 1e-9);
        free(q), free(o), free(k), free(v), free(scr);
    }
    ts_threadpool_free(pool);
    return 0;
}
