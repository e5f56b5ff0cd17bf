/* rp_kernel.h - what the per-level panel-kernel files share
 * (x86/gemm_avx512.c, x86/gemm_avx2.c, arm/gemm_neon.c; include it in those
 * only): the kind of a panel type, the geometry and K-quant field offsets of
 * repack.c's panel layout, and the entry points that instantiate a file's
 * panel_tile() once per token count, so that nt is a compile-time constant
 * in every copy. */
#ifndef TS_KERNELS_RP_KERNEL_H
#define TS_KERNELS_RP_KERNEL_H

#include <stddef.h>

enum { K_Q4_0, K_Q4_1, K_Q5_0, K_Q8_0, K_Q4_K, K_Q6_K, K_Q5_K, K_Q3_K };

/* K-quant kinds: a panel block is 256 inputs, 8 sub-blocks of 32 */
static inline int rp_kq(int kind) { return kind == K_Q3_K || kind == K_Q4_K || kind == K_Q5_K || kind == K_Q6_K; }

/* bytes of one panel block (16 rows x 32 inputs, or x 256 for the K-quants) */
static inline size_t rp_wb(int kind) {
    return kind == K_Q4_0 ? 288 : kind == K_Q4_1 ? 320 : kind == K_Q5_0 ? 352 : kind == K_Q8_0 ? 544
         : kind == K_Q3_K ? 1824 : kind == K_Q4_K ? 2368 : kind == K_Q5_K ? 2880 : 3360;
}

/* K-quant field offsets inside a panel block (repack.c's layout table):
 *   rp_sub: bytes per sub-block; sub-block j's quants start at rp_sub * j
 *   rp_gsc: Q3_K, Q6_K: the first int8 group scale of sub-block j at
 *           rp_sub * j + rp_gsc (16 rows), the second 16 bytes further
 *   rp_d:   f16 d of the 16 rows; Q4_K, Q5_K: dmin 32 bytes further, the
 *           scale bytes of sub-block j at rp_d + 64 + 16 j, the min bytes
 *           at rp_d + 192 + 16 j */
static inline int rp_sub(int kind) { return kind == K_Q3_K ? 224 : kind == K_Q4_K ? 256 : kind == K_Q5_K ? 320 : 416; }
static inline int rp_gsc(int kind) { return kind == K_Q3_K ? 192 : 384; }
static inline int rp_d(int kind) { return kind == K_Q3_K ? 1792 : kind == K_Q4_K ? 2048 : kind == K_Q5_K ? 2560 : 3328; }

#define RP_CASES(kind, hi)                                             \
    switch (nt) {                                                      \
    case 1: panel_tile(kind, hi, n, w, x, 1, y, ys, n_rows); break;    \
    case 2: panel_tile(kind, hi, n, w, x, 2, y, ys, n_rows); break;    \
    case 3: panel_tile(kind, hi, n, w, x, 3, y, ys, n_rows); break;    \
    case 4: panel_tile(kind, hi, n, w, x, 4, y, ys, n_rows); break;    \
    case 5: panel_tile(kind, hi, n, w, x, 5, y, ys, n_rows); break;    \
    case 6: panel_tile(kind, hi, n, w, x, 6, y, ys, n_rows); break;    \
    case 7: panel_tile(kind, hi, n, w, x, 7, y, ys, n_rows); break;    \
    default: panel_tile(kind, hi, n, w, x, 8, y, ys, n_rows); break;   \
    }

/* name: a ts_rp_gemm_fn (repack.h) over the file's panel_tile for `kind` */
#define RP_ENTRY(name, kind)                                                                                  \
    void name(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys, int n_rows) { \
        if (hi) {                                                                                             \
            RP_CASES(kind, 1)                                                                                 \
        } else {                                                                                              \
            RP_CASES(kind, 0)                                                                                 \
        }                                                                                                     \
    }

#endif
