/* rp_kernel.h - what the per-level panel-kernel files share
 * (x86/gemm_avx512.c, x86/gemm_avx2.c, arm/gemm_neon.c; include it in those
 * only): the panel layout (kinds, block sizes, field offsets: the one
 * definition in kernels/rp_layout.h, which repack.c reads too), and the
 * entry points that instantiate a file's panel_tile() once per token count,
 * so that nt is a compile-time constant in every copy. */
#ifndef TS_KERNELS_RP_KERNEL_H
#define TS_KERNELS_RP_KERNEL_H

#include <stddef.h>

#include "kernels/rp_layout.h"

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

/* name: a ts_rp_gemm_fn (repack.h) over the file's panel_tile for `kind`;
 * panel_tile's precision is TS_RP_LO, TS_RP_HI or (K-quants only: the
 * others read it as lo) TS_RP_LO256 */
#define RP_ENTRY(name, kind)                                                                                  \
    void name(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys, int n_rows) { \
        if (hi == TS_RP_HI) {                                                                                 \
            RP_CASES(kind, TS_RP_HI)                                                                          \
        } else if (hi == TS_RP_LO256 && rp_kq(kind)) {                                                        \
            RP_CASES(kind, TS_RP_LO256)                                                                       \
        } else {                                                                                              \
            RP_CASES(kind, TS_RP_LO)                                                                          \
        }                                                                                                     \
    }

#endif
