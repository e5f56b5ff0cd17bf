/* panel.c - the panel GEMM kernels of the active level (kernels/repack.h)
 * alone, on one thread, over weights that stay in L2: what a kernel can do
 * when memory is not the limit.
 *
 *   bench_panel [iters] [panels]
 *
 * For each panel type, 1 and 8 tokens per tile, each activation precision
 * (16-bit, 8-bit, and for the K-quants 8-bit with one scale per 256):
 * `panels` (default 64) panels of 16 rows x 2048 inputs (64: 1.1 - 2.1 MiB,
 * in L2; 20000: 360 - 670 MiB, streamed from memory as decode does), swept
 * `iters` times (default 2000 / tokens); prints weight bytes per second and
 * ns per 32-input block of 16 rows. Weights and activations are random bytes and
 * values: the kernels' time does not depend on them. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "kernels/cpu.h"
#include "kernels/repack.h"
#include "quant/quant.h"

enum { N_IN = 2048 };

int main(int argc, char **argv) {
    const long iters_arg = argc > 1 ? strtol(argv[1], NULL, 10) : 0;
    const long np_arg = argc > 2 ? strtol(argv[2], NULL, 10) : 0;
    const int N_PANELS = np_arg > 0 && np_arg < 1000000 ? (int)np_arg : 64;
    const ts_kern *k = ts_kern_get();
    static const uint32_t types[] = {TS_TYPE_Q4_0, TS_TYPE_Q4_1, TS_TYPE_Q5_0, TS_TYPE_Q8_0, TS_TYPE_Q4_K, TS_TYPE_Q6_K};
    float *x = malloc(sizeof(float) * N_IN * TS_RP_TT);
    uint8_t *tile = malloc(ts_rp_tiles_bytes(N_IN, TS_RP_TT, 1));
    float y[TS_RP_ROWS * TS_RP_TT];
    if (!x || !tile) return 1;
    uint64_t s = 0x9e3779b97f4a7c15u;
    for (int i = 0; i < N_IN * TS_RP_TT; i++) {
        s = s * 6364136223846793005u + 1442695040888963407u;
        x[i] = (float)(int32_t)(s >> 40) / 8388608.0f;
    }
    printf("level %s, one thread, %d panels x 16 rows x %d inputs\n", ts_cpu_level_name(k->level), N_PANELS, N_IN);
    printf("| type | tokens | act | GB/s of weights | ns / block of 16 rows |\n|---|---|---|---|---|\n");
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const uint32_t ty = types[ti];
        ts_rp_gemm_fn fn = k->rp_gemm[ty] ? k->rp_gemm[ty] : ts_rp_gemm_ref(ty);
        const size_t pb = ts_rp_panel_bytes(ty, N_IN);
        uint8_t *w = malloc(pb * (size_t)N_PANELS);
        if (!w) return 1;
        for (size_t i = 0; i < pb * (size_t)N_PANELS; i++) {
            s = s * 6364136223846793005u + 1442695040888963407u;
            w[i] = (uint8_t)(s >> 56);
        }
        for (int nt = 1; nt <= TS_RP_TT; nt += TS_RP_TT - 1)
            for (int m = 0; m < (ts_rp_is_k(ty) ? 3 : 2); m++) {
                static const int modes[3] = {TS_RP_HI, TS_RP_LO, TS_RP_LO256};
                static const char *const names[3] = {"16-bit", "8-bit", "8-bit/256"};
                const int hi = modes[m];
                for (int t = 0; t < nt; t++) ts_rp_quant_ref(x + (size_t)t * N_IN, N_IN, hi, tile, nt, t);
                const long iters = iters_arg > 0 ? iters_arg : 2000 / nt;
                for (int p = 0; p < N_PANELS; p++) fn(N_IN, w + pb * p, tile, nt, hi, y, TS_RP_ROWS, TS_RP_ROWS);
                const uint64_t t0 = ts_now_ns();
                for (long it = 0; it < iters; it++)
                    for (int p = 0; p < N_PANELS; p++) fn(N_IN, w + pb * p, tile, nt, hi, y, TS_RP_ROWS, TS_RP_ROWS);
                const double dt = (double)(ts_now_ns() - t0) * 1e-9;
                const double blocks = (double)iters * N_PANELS * (N_IN / 32);
                printf("| %s | %d | %s | %.1f | %.2f |\n", ts_type_info(ty)->name, nt, names[m],
                       (double)pb * (double)N_PANELS * (double)iters / dt * 1e-9, dt * 1e9 / blocks);
            }
        free(w);
    }
    free(x);
    free(tile);
    return 0;
}
