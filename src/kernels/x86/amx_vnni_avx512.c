/* amx_vnni_avx512.c - the AMX engine's INT8 matrices (packed act=int8,
 * kernels/amx/amx.h) multiplied with AVX-512 VNNI instead of the tiles: the
 * `vnni` unit (TS_AMX_VNNI). The same stored bytes, read directly: one
 * 64-byte vector of a row tile holds 16 output rows x 4 consecutive K
 * values, which is exactly vpdpbusd's signed operand (16 int32 lanes, each
 * the sum of 4 byte products), so a broadcast of a token's 4 activation
 * bytes against it advances 16 rows by 4 K at once.
 *
 * vpdpbusd multiplies unsigned by signed bytes and the activations are
 * signed: they go in as X + 128 (an xor with 0x80), and 128 * sum_k W[r][k]
 * is taken off after the loop (computed with the same instruction from a
 * broadcast of 0x80, once per group of row tiles for every token). The
 * int32 result is then the tiles' TDPBSSD sum exactly (the products and
 * sums wrap alike and the true sum fits: amx.h's TS_AMX_I8_MAX_K), and the
 * float step is the tile kernels' (float)i * (s_t * w_s) without
 * contraction (-ffp-contract=off, cmake/kernel_isa.cmake): the unit's
 * outputs are bit-identical to the emulator's and the hardware's.
 *
 * Blocking: NR <= 4 row tiles (64 output rows) x NT <= 4 tokens per step,
 * 16 accumulators; every token of the call runs against a group while its
 * weights are in L2. */
#include <immintrin.h>

#include "kernels/amx/amx_impl.h"
#include "kernels/amx/amx_quant_i8.h"

#define VN_RT 4  /* row tiles per group */
#define VN_TOK 4 /* tokens per step */

/* the tokens [t, t + NT) against row tiles w[0 .. NR) (corr: their
 * 128 * row sums), into y */
static inline __attribute__((always_inline)) void vnni_step(const ts_amx_hdr *h, const uint8_t *const *w,
                                                            const __m512i *corr, int64_t r0, int nrow_last,
                                                            const ts_amx_xq *x, int t, float *y, int64_t ldy,
                                                            const int NR, const int NT) {
    __m512i acc[VN_RT][VN_TOK];
    for (int i = 0; i < NR; i++)
        for (int u = 0; u < NT; u++) acc[i][u] = _mm512_setzero_si512();
    const __m512i flip = _mm512_set1_epi32((int)0x80808080u);
    const int8_t *xr[VN_TOK];
    for (int u = 0; u < NT; u++) xr[u] = x->q1 + (int64_t)(t + u) * x->ld;
    const int64_t nj = h->k_pad / 4;
    for (int64_t j = 0; j < nj; j++) {
        __m512i xb[VN_TOK];
        for (int u = 0; u < NT; u++) {
            int32_t v;
            __builtin_memcpy(&v, xr[u] + 4 * j, 4);
            xb[u] = _mm512_xor_si512(_mm512_set1_epi32(v), flip);
        }
        for (int i = 0; i < NR; i++) {
            const __m512i wv = _mm512_loadu_si512((const void *)(w[i] + 64 * j));
            for (int u = 0; u < NT; u++) acc[i][u] = _mm512_dpbusd_epi32(acc[i][u], xb[u], wv);
        }
    }
    for (int i = 0; i < NR; i++) {
        const __m512 ws = _mm512_loadu_ps((const void *)(w[i] + h->off_wd));
        const int nrow = i == NR - 1 ? nrow_last : 16;
        const __mmask16 m = (__mmask16)((1u << nrow) - 1u);
        for (int u = 0; u < NT; u++) {
            const __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[i][u], corr[i]));
            const __m512 s = _mm512_mul_ps(_mm512_set1_ps(x->s[t + u]), ws);
            _mm512_mask_storeu_ps(y + (int64_t)(t + u) * ldy + r0 + 16 * i, m, _mm512_mul_ps(f, s));
        }
    }
}

#define VN_CASE_T(NR)                                                                                           \
    case NR:                                                                                                    \
        switch (nt) {                                                                                           \
        case 1: vnni_step(h, w, corr, r0, nrow_last, x, t, y, ldy, NR, 1); break;                               \
        case 2: vnni_step(h, w, corr, r0, nrow_last, x, t, y, ldy, NR, 2); break;                               \
        case 3: vnni_step(h, w, corr, r0, nrow_last, x, t, y, ldy, NR, 3); break;                               \
        default: vnni_step(h, w, corr, r0, nrow_last, x, t, y, ldy, NR, 4); break;                              \
        }                                                                                                       \
        break;

/* row tiles [p0, p1) in groups of VN_RT x tokens [t0, t1) */
static void i8_rows_vnni(const ts_amx_hdr *h, int64_t p0, int64_t p1, const ts_amx_xq *x, int t0, int t1, float *y,
                         int64_t ldy) {
    const __m512i b80 = _mm512_set1_epi32((int)0x80808080u);
    const int64_t nj = h->k_pad / 4;
    for (int64_t p = p0; p < p1; p += VN_RT) {
        const int nr = p1 - p < VN_RT ? (int)(p1 - p) : VN_RT;
        const uint8_t *w[VN_RT];
        __m512i corr[VN_RT];
        for (int i = 0; i < nr; i++) {
            w[i] = ts_amx_rt(h, p + i);
            __m512i c = _mm512_setzero_si512();
            for (int64_t j = 0; j < nj; j++) c = _mm512_dpbusd_epi32(c, b80, _mm512_loadu_si512((const void *)(w[i] + 64 * j)));
            corr[i] = c;
        }
        const int64_t r0 = 16 * p, last = 16 * (p + nr - 1);
        const int nrow_last = h->n_out - last < 16 ? (int)(h->n_out - last) : 16;
        for (int t = t0; t < t1; t += VN_TOK) {
            const int nt = t1 - t < VN_TOK ? t1 - t : VN_TOK;
            switch (nr) {
                VN_CASE_T(1)
                VN_CASE_T(2)
                VN_CASE_T(3)
                VN_CASE_T(4)
            }
        }
    }
}

static void quant_i8_vnni(const float *x, int64_t n, int8_t *q, float *s) { ts_amx_quant_row_i8(x, n, q, s); }

const ts_amx_kernels ts_amx_kernels_vnni = {
    .rows = {NULL, NULL, i8_rows_vnni}, /* the int8 path only: the others are the tiles' */
    .quant_i8 = quant_i8_vnni,
    .run_one = NULL,
};
