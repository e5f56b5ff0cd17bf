/* int8_peak.c - compute peaks of this CPU (docs/PERFORMANCE.md): T threads
 * each run 16 independent chains of one instruction (enough to cover the
 * latency at the full issue rate), 1e8 times per run (0.2 - 0.8 s):
 *   int8  vpdpbusd zmm  (64 u8 x s8 multiply-adds = 128 ops per instruction)
 *   int8  vpdpbusd ymm  (64 ops)
 *   fp32  vfmadd zmm    (16 FMAs = 32 flops)
 * and, on a CPU without AVX-512 VNNI (the AVX2 kernels' instructions):
 *   int8  vpmaddubsw ymm (32 u8 x s8 products, their pairs added to int16:
 *                         counted as 64 ops, like vpdpbusd ymm, though the
 *                         int32 accumulation then costs further instructions)
 *   fp32  vfmadd ymm     (8 FMAs = 16 flops)
 * Prints the median of -r runs. Which set runs is checked at run time.
 *
 *   bench_int8_peak [-t 2] [-r 5]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <immintrin.h>

#define ITERS 100000000L /* iterations of the 16 chains per run: ~0.2-0.5 s */
#define CHAINS 16

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
    int kind;
    long iters;
    double sec;
    float sink;
    pthread_barrier_t *bar;
} job;

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) static float run_kind(int kind, long iters) {
    float out = 0;
    if (kind == 0) {
        __m512i a[CHAINS];
        const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
        for (int c = 0; c < CHAINS; c++) a[c] = _mm512_set1_epi32(c);
        for (long i = 0; i < iters; i++)
            for (int c = 0; c < CHAINS; c++) a[c] = _mm512_dpbusd_epi32(a[c], u, s);
        for (int c = 0; c < CHAINS; c++) out += (float)_mm512_reduce_add_epi32(a[c]);
    } else if (kind == 1) {
        __m256i a[CHAINS];
        const __m256i u = _mm256_set1_epi8(3), s = _mm256_set1_epi8(-2);
        for (int c = 0; c < CHAINS; c++) a[c] = _mm256_set1_epi32(c);
        for (long i = 0; i < iters; i++)
            for (int c = 0; c < CHAINS; c++) a[c] = _mm256_dpbusd_epi32(a[c], u, s);
        for (int c = 0; c < CHAINS; c++) {
            int v[8];
            memcpy(v, &a[c], sizeof v);
            out += (float)v[0];
        }
    } else {
        __m512 a[CHAINS];
        const __m512 m = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
        for (int c = 0; c < CHAINS; c++) a[c] = _mm512_set1_ps((float)c);
        for (long i = 0; i < iters; i++)
            for (int c = 0; c < CHAINS; c++) a[c] = _mm512_fmadd_ps(a[c], m, b);
        for (int c = 0; c < CHAINS; c++) out += _mm512_reduce_add_ps(a[c]);
    }
    return out;
}

/* kinds 3, 4: AVX2. A vpmaddubsw chain feeds its int16 result back as the
 * next instruction's unsigned bytes, so nothing can be hoisted out of the loop. */
__attribute__((target("avx2,fma"))) static float run_kind_avx2(int kind, long iters) {
    float out = 0;
    if (kind == 3) {
        __m256i a[CHAINS];
        const __m256i s = _mm256_set1_epi8(-2);
        for (int c = 0; c < CHAINS; c++) a[c] = _mm256_set1_epi32(c);
        for (long i = 0; i < iters; i++)
            for (int c = 0; c < CHAINS; c++) a[c] = _mm256_maddubs_epi16(a[c], s);
        for (int c = 0; c < CHAINS; c++) {
            int v[8];
            memcpy(v, &a[c], sizeof v);
            out += (float)v[0];
        }
    } else {
        __m256 a[CHAINS];
        const __m256 m = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
        for (int c = 0; c < CHAINS; c++) a[c] = _mm256_set1_ps((float)c);
        for (long i = 0; i < iters; i++)
            for (int c = 0; c < CHAINS; c++) a[c] = _mm256_fmadd_ps(a[c], m, b);
        for (int c = 0; c < CHAINS; c++) {
            float v[8];
            _mm256_storeu_ps(v, a[c]);
            out += v[0];
        }
    }
    return out;
}

static void *worker(void *arg) {
    job *j = arg;
    pthread_barrier_wait(j->bar);
    const double t0 = now_s();
    j->sink = j->kind >= 3 ? run_kind_avx2(j->kind, j->iters) : run_kind(j->kind, j->iters);
    j->sec = now_s() - t0;
    return NULL;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int nt = 2, reps = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-t")) nt = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
    }
    if (nt < 1 || nt > 256 || reps < 1 || reps > 50) {
        fprintf(stderr, "usage: bench_int8_peak [-t threads] [-r runs]\n");
        return 2;
    }
    __builtin_cpu_init();
    int k0 = 0, k1 = 3; /* the kinds [k0, k1) this CPU runs */
    if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512bw")) {
        if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
            fprintf(stderr, "bench_int8_peak: this CPU has neither AVX-512 VNNI nor AVX2 + FMA\n");
            return 1;
        }
        printf("bench_int8_peak: no AVX-512 VNNI on this CPU; the AVX2 instructions instead\n");
        k0 = 3, k1 = 5;
    }
    const char *names[5] = {"int8 vpdpbusd zmm", "int8 vpdpbusd ymm", "fp32 vfmadd zmm", "int8 vpmaddubsw ymm",
                            "fp32 vfmadd ymm"};
    const double ops_per_instr[5] = {128, 64, 32, 64, 16};
    for (int kind = k0; kind < k1; kind++) {
        double v[50];
        for (int r = 0; r < reps; r++) {
            pthread_barrier_t bar;
            pthread_barrier_init(&bar, NULL, (unsigned)nt);
            job *jobs = calloc((size_t)nt, sizeof *jobs);
            pthread_t *tid = calloc((size_t)nt, sizeof *tid);
            const long iters = ITERS;
            for (int t = 0; t < nt; t++) {
                jobs[t] = (job){kind, iters, 0, 0, &bar};
                if (t) pthread_create(&tid[t], NULL, worker, &jobs[t]);
            }
            worker(&jobs[0]);
            double worst = 0, sink = 0;
            for (int t = 0; t < nt; t++) {
                if (t) pthread_join(tid[t], NULL);
                worst = jobs[t].sec > worst ? jobs[t].sec : worst;
                sink += jobs[t].sink;
            }
            v[r] = (double)iters * CHAINS * ops_per_instr[kind] * nt / worst / 1e9 + 0 * sink;
            pthread_barrier_destroy(&bar);
            free(jobs);
            free(tid);
        }
        qsort(v, (size_t)reps, sizeof v[0], cmp_d);
        printf("%-18s %d thread(s): median %.0f G%s/s, best %.0f (%d runs)\n", names[kind], nt, v[reps / 2],
               kind == 2 || kind == 4 ? "FLOP" : "OP", v[reps - 1], reps);
    }
    return 0;
}
