/* amx_impl.h - what the AMX kernels share inside src/kernels/amx and
 * src/kernels/x86/gemm_amx.c: the packed matrix's header, the quantized
 * activations, the per-unit kernel table and the emulator's instructions.
 */
#ifndef TS_KERNELS_AMX_IMPL_H
#define TS_KERNELS_AMX_IMPL_H

#include "kernels/amx/amx.h"

#define TS_AMX_MAGIC 0x584d4154u /* "TAMX" */
#define TS_AMX_HDR 128

enum { TS_AMX_PATH_INT = 0, TS_AMX_PATH_BF16, TS_AMX_PATH_I8 };

typedef struct ts_amx_hdr {
    uint32_t magic;
    uint8_t act, path;
    uint8_t n_wp;   /* bf16 path: weight planes (1: BF16; 2: hi + lo) */
    uint8_t halves; /* int path: integers per half block (Q3_K, Q6_K) */
    uint8_t has_m;  /* int path: the offset term m * (s sumX) */
    uint8_t pad0[3];
    int32_t o; /* int path: the integer offset */
    uint32_t type;
    int64_t n_in, n_out;
    int64_t k_pad;      /* K elements of a row tile's quants (zeros past n_in) */
    int32_t n_rt;       /* row tiles */
    int32_t n_blk;      /* int path: 32-blocks */
    uint64_t rt_bytes;  /* bytes per row tile (a multiple of 64) */
    uint32_t off_wd;    /* int path: f32 wd from a row tile's start; int8 path: the row scales */
    uint32_t off_wm;    /* int path: f32 wm */
} ts_amx_hdr;
_Static_assert(sizeof(ts_amx_hdr) <= TS_AMX_HDR, "header fits its 128 bytes");

static inline const uint8_t *ts_amx_rt(const ts_amx_hdr *h, int64_t p) {
    return (const uint8_t *)h + TS_AMX_HDR + (size_t)p * h->rt_bytes;
}

/* The activations of one call, quantized once (rows ld bytes apart). */
typedef struct ts_amx_xq {
    int n_tok;
    int64_t ld;        /* bytes between token rows of q1 / q2 / xh / xl */
    int hi;            /* int path: two planes */
    bool g256;         /* int path: one scale per 256 (TS_RP_LO256), applied per super-block */
    int32_t n_blk;     /* int path: 32-blocks per row */
    const int8_t *q1;  /* int: plane 1 [n_tok][ld]; int8: X [n_tok][ld] */
    const int8_t *q2;  /* int (hi): plane 2 */
    const float *s;    /* int: [n_tok][n_blk]; int8: [n_tok] */
    const float *ds;   /* int: s * sumX [n_tok][n_blk] */
    const int32_t *sum; /* int: [n_tok][n_blk][2] sums of X over elements 0..15, 16..31 */
    const int32_t *sh; /* int: [n_tok][n_blk] lo256's shifts (repack.h), else 0 */
    const uint16_t *xh, *xl; /* bf16: [n_tok][ld / 2] */
    int xl_used;       /* bf16: EXACT multiplies xl too */
} ts_amx_xq;

/* One group of the int path's units for its float step (amx_gemm_impl.h):
 * for unit i and token row t (the tile's rows past its tokens are stale),
 *   acc[t][r] = fma(float(c1*256 + (c2 + off)) or float((c1 + off) << sh), wd[r] * sx, acc[t][r]),
 * then where wm: acc[t][r] = fma(wm[r], dsx, acc[t][r]). */
#define TS_AMX_GROUP 16
typedef struct ts_amx_epi {
    int32_t c1[TS_AMX_GROUP][16][16], c2[TS_AMX_GROUP][16][16];
    int32_t off[TS_AMX_GROUP][16], sh[TS_AMX_GROUP][16]; /* sh: lo256 (one plane) only, else 0 */
    float sx[TS_AMX_GROUP][16], dsx[TS_AMX_GROUP][16];
    const float *wd[TS_AMX_GROUP], *wm[TS_AMX_GROUP]; /* 16 rows' scales; wm NULL: no offset term */
} ts_amx_epi;

/* Row tiles [p0, p1) of one matrix against tokens [t0, t1) of x, into
 * y[t * ldy + r] (r the matrix's row). */
typedef void (*ts_amx_rows_fn)(const ts_amx_hdr *h, int64_t p0, int64_t p1, const ts_amx_xq *x, int t0, int t1,
                               float *y, int64_t ldy);
typedef struct ts_amx_kernels {
    ts_amx_rows_fn rows[3]; /* by path */
    void (*quant_i8)(const float *x, int64_t n, int8_t *q, float *s); /* ts_amx_quant_row_i8, this unit's build */
    void (*run_one)(const ts_amx_cfg *cfg, ts_amx_op op, void *c, size_t c_stride, const void *a, size_t a_stride,
                    const void *b, size_t b_stride);
} ts_amx_kernels;

extern const ts_amx_kernels ts_amx_kernels_emu;
#if defined(TS_KERNELS_X86)
extern const ts_amx_kernels ts_amx_kernels_hw;   /* x86/gemm_amx.c */
extern const ts_amx_kernels ts_amx_kernels_vnni; /* x86/amx_vnni_avx512.c: rows[TS_AMX_PATH_I8] only */
#endif

/* the emulator's instructions (amx_emu.c) */
void ts_amx_emu_loadconfig(const void *cfg);
void ts_amx_emu_release(void);
void ts_amx_emu_zero(int t);
void ts_amx_emu_load(int t, const void *base, size_t stride);
void ts_amx_emu_store(int t, void *base, size_t stride);
void ts_amx_emu_dp(ts_amx_op op, int c, int a, int b);

#endif
