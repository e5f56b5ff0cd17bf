/* qdot_avx512.c - the TS_CPU_AVX512 dispatch table: the x86 kernels of
 * qdot_x86.h with AVX-512 VNNI (vpdpbusd / vpdpwssd on 256-bit vectors) for
 * the integer dots, and 16-lane versions of the f32/f16 dots. This file alone
 * gets the AVX-512 flags; it only runs after cpu.c found F/BW/VL/VNNI and an
 * OS that saves the ZMM state.
 *
 * Why 256-bit integer dots: Zen 4 executes 512-bit integer ops as two halves,
 * so the gain of AVX-512 there is VNNI's fused multiply-add, which works on
 * ymm registers too; keeping the AVX2 lane layout makes the results of both
 * levels bit-identical (a model gives the same logits on either machine).
 */
#define TS_X86_VNNI 1
#define TS_X86_WIDE_F32 1
#include "kernels/x86/qdot_x86.h"
#include "kernels/x86/fastops_x86.h"
#include "kernels/x86/gemm_x86.h"

/* 16 lanes = the AVX2 kernels' two 8-lane accumulators side by side (lanes
 * 0..7: elements 16i..16i+7, lanes 8..15: 16i+8..16i+15); a remaining 8 go
 * to lanes 0..7 (masked fma); the halves are added before the same hsum8. */
AI float wide_finish(__m512 z) {
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(z), 1));
    return hsum8(_mm256_add_ps(_mm512_castps512_ps256(z), hi));
}

AI void f32_tile(int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    __m512 z[4];
    for (int t = 0; t < nt; t++) z[t] = _mm512_setzero_ps();
    const float *wf = (const float *)(const void *)w;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 wz = _mm512_loadu_ps(wf + i);
        for (int t = 0; t < nt; t++)
            z[t] = _mm512_fmadd_ps(wz, _mm512_loadu_ps((const float *)(const void *)x[t] + i), z[t]);
    }
    if (i + 8 <= n) {
        const __m512 wz = _mm512_zextps256_ps512(_mm256_loadu_ps(wf + i));
        for (int t = 0; t < nt; t++) {
            const __m512 xz = _mm512_zextps256_ps512(_mm256_loadu_ps((const float *)(const void *)x[t] + i));
            z[t] = _mm512_mask3_fmadd_ps(wz, xz, z[t], 0x00ff);
        }
        i += 8;
    }
    for (int t = 0; t < nt; t++) {
        float s = wide_finish(z[t]);
        for (int64_t k = i; k < n; k++) s = fmaf(ld_f32(w + 4 * k), ld_f32(x[t] + 4 * k), s);
        out[t] = s;
    }
}

AI void f16_tile(int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    __m512 z[4];
    for (int t = 0; t < nt; t++) z[t] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 wz = _mm512_cvtph_ps(ld256(w + 2 * i));
        for (int t = 0; t < nt; t++)
            z[t] = _mm512_fmadd_ps(wz, _mm512_loadu_ps((const float *)(const void *)x[t] + i), z[t]);
    }
    if (i + 8 <= n) {
        const __m512 wz = _mm512_zextps256_ps512(_mm256_cvtph_ps(ld128(w + 2 * i)));
        for (int t = 0; t < nt; t++) {
            const __m512 xz = _mm512_zextps256_ps512(_mm256_loadu_ps((const float *)(const void *)x[t] + i));
            z[t] = _mm512_mask3_fmadd_ps(wz, xz, z[t], 0x00ff);
        }
        i += 8;
    }
    for (int t = 0; t < nt; t++) {
        float s = wide_finish(z[t]);
        for (int64_t k = i; k < n; k++) s = fmaf(ld_f16(w + 2 * k), ld_f32(x[t] + 4 * k), s);
        out[t] = s;
    }
}

/* The float GEMM's register tile: 4 rows x 4 tokens, 16 accumulators
 * (with 4 weight vectors and an activation vector, 21 of the 32 zmm). Each
 * accumulator is one (row, token) pair with the lanes and the final
 * reduction of the tiles above, so out[r][t] is bit-identical to
 * dot(n, row r, x[t]); what changes is that a loaded activation vector
 * feeds 4 FMAs instead of 1 (the row tile above is load-bound: 1 weight +
 * 4 activation loads per 4 FMAs). kind: 0 f32, 1 f16, 2 bf16. */
AI __m512 ld_w16(const int kind, const uint8_t *p) {
    if (kind == 0) return _mm512_loadu_ps((const float *)(const void *)p);
    if (kind == 1) return _mm512_cvtph_ps(ld256(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(ld256(p)), 16));
}

AI __m512 ld_w8(const int kind, const uint8_t *p) {
    if (kind == 0) return _mm512_zextps256_ps512(_mm256_loadu_ps((const float *)(const void *)p));
    if (kind == 1) return _mm512_zextps256_ps512(_mm256_cvtph_ps(ld128(p)));
    return _mm512_zextps256_ps512(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(ld128(p)), 16)));
}

AI float ld_w1(const int kind, const uint8_t *p) {
    return kind == 0 ? ld_f32(p) : kind == 1 ? ld_f16(p) : ts_bf16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

AI void float_44(const int kind, int64_t n, const uint8_t *w, size_t rb, const void *const x[4], float out[4][4]) {
    const int64_t es = kind == 0 ? 4 : 2; /* weight element size */
    const float *xf[4];
    for (int t = 0; t < 4; t++) xf[t] = x[t];
    __m512 z[4][4];
    for (int r = 0; r < 4; r++)
        for (int t = 0; t < 4; t++) z[r][t] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 wz[4];
        for (int r = 0; r < 4; r++) wz[r] = ld_w16(kind, w + r * rb + es * i);
        for (int t = 0; t < 4; t++) {
            const __m512 xz = _mm512_loadu_ps(xf[t] + i);
            for (int r = 0; r < 4; r++) z[r][t] = _mm512_fmadd_ps(wz[r], xz, z[r][t]);
        }
    }
    if (i + 8 <= n) {
        __m512 wz[4];
        for (int r = 0; r < 4; r++) wz[r] = ld_w8(kind, w + r * rb + es * i);
        for (int t = 0; t < 4; t++) {
            const __m512 xz = _mm512_zextps256_ps512(_mm256_loadu_ps(xf[t] + i));
            for (int r = 0; r < 4; r++) z[r][t] = _mm512_mask3_fmadd_ps(wz[r], xz, z[r][t], 0x00ff);
        }
        i += 8;
    }
    for (int r = 0; r < 4; r++)
        for (int t = 0; t < 4; t++) {
            float s = wide_finish(z[r][t]);
            for (int64_t k = i; k < n; k++) s = fmaf(ld_w1(kind, w + r * rb + es * k), xf[t][k], s);
            out[r][t] = s;
        }
}

static void f32_44(int64_t n, const void *w, size_t rb, const void *const x[4], float out[4][4]) {
    float_44(0, n, w, rb, x, out);
}
static void f16_44(int64_t n, const void *w, size_t rb, const void *const x[4], float out[4][4]) {
    float_44(1, n, w, rb, x, out);
}
static void bf16_44(int64_t n, const void *w, size_t rb, const void *const x[4], float out[4][4]) {
    float_44(2, n, w, rb, x, out);
}

TS_X86_ENTRIES(f32)
TS_X86_ENTRIES(f16)

const ts_kern ts_kern_tab_avx512 = {
    .level = TS_CPU_AVX512,
    .requires = TS_CPU_REQ_AVX512,
    .score = TS_CPU_SCORE_AVX512,
    TS_X86_TABLE_ENTRIES,
    .rp_gemm[TS_TYPE_Q4_0] = ts_rp_q4_0_avx512,
    .rp_gemm[TS_TYPE_Q4_1] = ts_rp_q4_1_avx512,
    .rp_gemm[TS_TYPE_Q8_0] = ts_rp_q8_0_avx512,
    .rp_gemm[TS_TYPE_Q5_0] = ts_rp_q5_0_avx512,
    .rp_gemm[TS_TYPE_Q5_1] = ts_rp_q5_1_avx512,
    .rp_gemm[TS_TYPE_Q2_K] = ts_rp_q2_k_avx512,
    .rp_gemm[TS_TYPE_Q3_K] = ts_rp_q3_k_avx512,
    .rp_gemm[TS_TYPE_Q4_K] = ts_rp_q4_k_avx512,
    .rp_gemm[TS_TYPE_Q5_K] = ts_rp_q5_k_avx512,
    .rp_gemm[TS_TYPE_Q6_K] = ts_rp_q6_k_avx512,
    .dot44[TS_TYPE_F32] = f32_44,
    .dot44[TS_TYPE_F16] = f16_44,
    .dot44[TS_TYPE_BF16] = bf16_44,
    .rp_quant = ts_rp_quant_avx512,
    .attn_block = ts_attn_block_avx512,
    .swiglu = ts_swiglu_avx512,
    .axpy = ts_axpy_avx512,
    .geglu = ts_geglu_avx512,
};
