/* amx_gemm.c - the AMX engine's matmul alone (kernels/amx/amx.h) against
 * the CPU kernels (kernels/linear.h) on the same Q4_0 matrix: what the
 * tiles reach of their peak without the rest of a layer.
 *
 *   bench_amx_gemm [n_in n_out] [reps] [exact|q8|int8]    (AMX_ONLY=1: no CPU column)
 *
 * For each act mode, widths 16 .. 512 and 1 and 2 threads: the median of
 * `reps` (default 7) calls, as ms and GMAC/s, for the tiles and for the CPU
 * kernels (16-bit activations: the exact mode's definition). One line saying
 * why and exit 0 where the unit is unusable. Random weights and inputs: the
 * time does not depend on them. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/threadpool.h"
#include "kernels/amx/amx.h"
#include "kernels/linear.h"
#include "kernels/repack.h"
#include "quant/quant.h"

static int cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const int64_t n_in = argc > 2 ? strtol(argv[1], NULL, 10) : 2048, n_out = argc > 2 ? strtol(argv[2], NULL, 10) : 8192;
    const int reps = argc > 3 ? (int)strtol(argv[3], NULL, 10) : (argc == 2 ? (int)strtol(argv[1], NULL, 10) : 7);
    char why[200];
    if (!ts_amx_hw_status(why, sizeof why)) {
        printf("bench_amx_gemm: skipped: %s\n", why);
        return 0;
    }
    if (n_in <= 0 || n_in % 256 || n_out <= 0 || n_out % 16 || reps < 1 || reps > 100) {
        fprintf(stderr, "usage: bench_amx_gemm [n_in (a multiple of 256) n_out (of 16)] [reps 1..100] [exact|q8|int8]\n");
        return 2;
    }
    enum { MAX_W = 512 };
    ts_err err = {{0}};
    const size_t rb = ts_row_size(TS_TYPE_Q4_0, n_in);
    uint8_t *rows = malloc(rb * (size_t)n_out);
    float *x = malloc(sizeof(float) * (size_t)(n_in * MAX_W)), *y = malloc(sizeof(float) * (size_t)(n_out * MAX_W));
    uint8_t *panels = malloc(ts_rp_matrix_bytes(TS_TYPE_Q4_0, n_in, n_out) + 64);
    if (!rows || !x || !y || !panels) return 1;
    uint64_t s = 0x243F6A8885A308D3ull;
    for (size_t i = 0; i < rb * (size_t)n_out; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        rows[i] = (uint8_t)(s >> 56);
    }
    for (int64_t r = 0; r < n_out; r++) /* f16 scales of 2^-8 */
        for (int64_t b = 0; b < n_in / 32; b++) rows[(size_t)r * rb + (size_t)b * 18] = 0x00, rows[(size_t)r * rb + (size_t)b * 18 + 1] = 0x1c;
    for (int64_t i = 0; i < n_in * MAX_W; i++) x[i] = (float)((i * 7919) % 2001 - 1000) * 1e-3f;
    ts_wmat w = {.type = TS_TYPE_Q4_0, .data = rows, .n_in = n_in, .n_out = n_out, .row_bytes = rb};
    if (ts_linear_wants_pack(&w) && ts_linear_pack(&w, panels, NULL) == 0) w.packed = panels;
    printf("Q4_0 %lld x %lld (n_out x n_in), median of %d; GMAC/s = n_out n_in width / time\n", (long long)n_out,
           (long long)n_in, reps);
    printf("| act | threads | width | amx ms | amx GMAC/s | cpu ms | cpu GMAC/s | amx / cpu |\n|---|---|---|---|---|---|---|---|\n");
    static const int widths[] = {16, 32, 64, 128, 256, 512};
    const char *only = argc > 4 ? argv[4] : NULL;
    const bool amx_only = getenv("AMX_ONLY") != NULL; /* no CPU calls between the tiles' */
    for (int act = TS_AMX_EXACT; act <= TS_AMX_INT8; act++) {
        if (only && strcmp(only, ts_amx_act_name((ts_amx_act)act)))
            continue;
        void *packed = aligned_alloc(64, (size_t)(ts_amx_packed_bytes((ts_amx_act)act, TS_TYPE_Q4_0, n_in, n_out) + 63) / 64 * 64);
        if (!packed || ts_amx_pack((ts_amx_act)act, TS_TYPE_Q4_0, rows, rb, n_in, n_out, packed, &err)) {
            fprintf(stderr, "pack: %s\n", err.msg);
            return 1;
        }
        for (int th = 1; th <= 2; th++) {
            ts_threadpool *pool = ts_threadpool_new(th, &err);
            ts_amx_ws *ws = ts_amx_ws_new(n_in, MAX_W, &err);
            ts_linear_ws *lin = ts_linear_ws_new(n_in, MAX_W, th, &err);
            if (!pool || !ws || !lin) {
                fprintf(stderr, "setup: %s\n", err.msg);
                return 1;
            }
            for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
                const int width = widths[wi];
                uint64_t ta[100], tc[100];
                for (int r = 0; r < reps; r++) { /* alternating: the two see the same machine */
                    uint64_t t0 = ts_now_ns();
                    const void *wp = packed;
                    if (ts_amx_matmul(pool, ws, TS_AMX_HW, 1, &wp, &y, x, width, &err)) {
                        fprintf(stderr, "amx: %s\n", err.msg);
                        return 1;
                    }
                    ta[r] = ts_now_ns() - t0;
                    t0 = ts_now_ns();
                    const ts_wmat *wl = &w;
                    if (!amx_only) ts_linear(pool, lin, 1, &wl, &y, x, width);
                    tc[r] = ts_now_ns() - t0;
                }
                qsort(ta, (size_t)reps, sizeof ta[0], cmp_u64);
                qsort(tc, (size_t)reps, sizeof tc[0], cmp_u64);
                const double macs = (double)n_in * (double)n_out * width, a = (double)ta[reps / 2], c = (double)tc[reps / 2];
                printf("| %s | %d | %d | %.3f | %.0f | ", ts_amx_act_name((ts_amx_act)act), th, width, a * 1e-6, macs / a);
                if (amx_only)
                    printf("- | - | - |\n");
                else
                    printf("%.3f | %.0f | %.2fx |\n", c * 1e-6, macs / c, c / a);
            }
            ts_linear_ws_free(lin);
            ts_amx_ws_free(ws);
            ts_threadpool_free(pool);
        }
        free(packed);
    }
    free(rows), free(x), free(y), free(panels);
    return 0;
}
