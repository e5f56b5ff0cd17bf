/* qdot_x86.h - the x86 dot kernels and activation quantizers, written once
 * for 256-bit vectors and compiled twice: by qdot_avx2.c (AVX2 + FMA + F16C)
 * and by qdot_avx512.c (adds AVX-512 VNNI). Only include it from those files;
 * the includer defines TS_X86_VNNI (0 or 1) and TS_X86_WIDE_F32 (1: the
 * f32/f16 dots use its own 512-bit versions instead of the ones here).
 *
 * Integer dots: a u8 x s8 product sum per 4 bytes into 8 int32 lanes, as
 * vpdpbusd (VNNI) or vpmaddubsw + vpmaddwd (AVX2). The two give the same
 * lanes because no vpmaddubsw pair sum can saturate: activation quants are in
 * [-127, 127] and the unsigned operand is at most 128 (|w| of a Q8_0 weight;
 * 4-6 bit quants are at most 63), so |pair| <= 2 * 128 * 127 = 32512. Signed
 * weights (Q4_0, Q5_0, Q8_0) use the sign trick |w| * (x * sign(w)). The
 * float work after the integer lanes is the same code in both builds, so
 * AVX2 and AVX-512 results are bit-identical.
 *
 * Each kernel is a tile function over nt = 1 or 4 activation rows (constant
 * after inlining): the weight block is decoded once and dotted with every
 * row. A row's arithmetic does not depend on nt, so the 4-row tile gives the
 * one-row result bit for bit.
 */
#ifndef TS_X86_VNNI
#error "include from qdot_avx2.c / qdot_avx512.c only"
#endif

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/qdot_impl.h"
#include "quant/quant.h"

#define AI static inline __attribute__((always_inline))

/* ---- loads and helpers ---- */

AI float ld_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}
AI float ld_f32(const uint8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}
AI int ld_i16(const uint8_t *p) {
    int16_t v;
    memcpy(&v, p, 2);
    return v;
}
AI __m256i ld256(const uint8_t *p) {
    return _mm256_loadu_si256((const __m256i_u *)p);
}
AI __m128i ld128(const uint8_t *p) {
    return _mm_loadu_si128((const __m128i_u *)p);
}

AI float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
AI float hsum4(__m128 s) {
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
AI int hsum8_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

/* acc + per-4-byte sums of u8 * s8 (8 int32 lanes) */
AI __m256i dp_u8s8(__m256i acc, __m256i u, __m256i s) {
#if TS_X86_VNNI
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}
/* acc + per-2 sums of i16 * i16 */
AI __m256i dp_i16(__m256i acc, __m256i a, __m256i b) {
#if TS_X86_VNNI
    return _mm256_dpwssd_epi32(acc, a, b);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

/* 32 bits -> 32 bytes, 0xff where the bit is set (byte j <- bit j) */
AI __m256i bits_to_bytes(uint32_t bits) {
    const __m256i pick = _mm256_setr_epi64x(0, 0x0101010101010101ll, 0x0202020202020202ll, 0x0303030303030303ll);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), pick);
    v = _mm256_or_si256(v, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfell)); /* all bits but bit j%8 */
    return _mm256_cmpeq_epi8(v, _mm256_set1_epi64x(-1));
}

/* 16 nibbles -> 32 bytes: low nibbles in bytes 0..15, high in 16..31 */
AI __m256i nibbles(const uint8_t *p) {
    const __m128i raw = ld128(p);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0f));
}

/* ---- activation quantization ---- */

/* roundf for each lane: truncate, then step away from zero when the dropped
 * fraction (exact: v - trunc(v)) is at least 0.5 */
AI __m256 round_away(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
    const __m256 step = _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.0f));
    return _mm256_add_ps(t, _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ), step));
}

/* max |x| over 8k values, and whether any of them is inf/NaN */
AI float amax_finite(const float *x, int n8, int *finite) {
    const __m256 sign = _mm256_set1_ps(-0.0f), inf = _mm256_set1_ps(INFINITY);
    __m256 m = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    for (int k = 0; k < n8; k++) {
        const __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k));
        m = _mm256_max_ps(m, a);
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, inf, _CMP_NLT_UQ)); /* inf or NaN */
    }
    *finite = _mm256_movemask_ps(bad) == 0;
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 32 values -> 32 int8 quants at q (x * id rounded; |result| <= 127 for
 * finite blocks), returns their int32 lanes summed per 8 in *sums */
AI void quant32(const float *x, __m256 id, uint8_t *q, __m256i *sums) {
    __m256i v[4];
    for (int k = 0; k < 4; k++)
        v[k] = _mm256_cvttps_epi32(round_away(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), id)));
    sums[0] = _mm256_add_epi32(v[0], v[1]);
    sums[1] = _mm256_add_epi32(v[2], v[3]);
    /* packs work per 128-bit lane: restore element order with a final
     * permutation of the 4-byte groups */
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
    _mm256_storeu_si256((__m256i_u *)q, _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

/* Blocks with inf/NaN, or whose d is an f32 subnormal (d then carries a
 * large relative rounding error, so |x/d| may exceed 127, and 1/d may
 * overflow), go to the scalar definition; the rest is the same arithmetic in
 * 8 lanes, hence bit-identical. */
static void quant_q8_x86(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / 32; i++, x += 32, b += TS_ACT_Q8_BYTES) {
        int finite;
        const float d = amax_finite(x, 4, &finite) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        if (!finite || (d != 0.0f && d < 0x1p-126f)) {
            ts_ref_quant_q8_block(x, b);
            continue;
        }
        __m256i s[2];
        quant32(x, _mm256_set1_ps(id), b + 4, s);
        const uint16_t dh = ts_f32_to_f16(d);
        const int16_t sum = (int16_t)hsum8_epi32(_mm256_add_epi32(s[0], s[1]));
        memcpy(b, &dh, 2);
        memcpy(b + 2, &sum, 2);
    }
}

static void quant_q8k_x86(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / 256; i++, x += 256, b += TS_ACT_Q8K_BYTES) {
        int finite;
        const float d = amax_finite(x, 32, &finite) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        if (!finite || (d != 0.0f && d < 0x1p-126f)) {
            ts_ref_quant_q8k_block(x, b);
            continue;
        }
        memcpy(b, &d, 4);
        for (int k = 0; k < 8; k++) {
            __m256i s[2];
            quant32(x + 32 * k, _mm256_set1_ps(id), b + 4 + 32 * k, s);
            const int16_t s0 = (int16_t)hsum8_epi32(s[0]), s1 = (int16_t)hsum8_epi32(s[1]);
            memcpy(b + 260 + 4 * k, &s0, 2);
            memcpy(b + 262 + 4 * k, &s1, 2);
        }
    }
}

/* ---- 32-element blocks x TS_ACT_Q8 ---- */

#define Q8B TS_ACT_Q8_BYTES

/* signed weights q (|q| <= 128 as unsigned): sum q * x per 4 bytes */
AI __m256i dot_signed(__m256i q, __m256i absq, const uint8_t *xb) {
    return dp_u8s8(_mm256_setzero_si256(), absq, _mm256_sign_epi8(ld256(xb + 4), q));
}

/* acc += (dw * dx) * lanes */
AI __m256 acc_block(__m256 acc, __m256 dw, const uint8_t *xb, __m256i lanes) {
    const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(ld_f16(xb)));
    return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes), acc);
}

AI void q4_0_tile(int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    __m256 acc[4];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++, w += 18) {
        const __m256 dw = _mm256_set1_ps(ld_f16(w));
        const __m256i q = _mm256_sub_epi8(nibbles(w + 2), _mm256_set1_epi8(8));
        const __m256i aq = _mm256_sign_epi8(q, q);
        for (int t = 0; t < nt; t++) {
            const uint8_t *xb = x[t] + Q8B * i;
            acc[t] = acc_block(acc[t], dw, xb, dot_signed(q, aq, xb));
        }
    }
    for (int t = 0; t < nt; t++) out[t] = hsum8(acc[t]);
}

AI void q5_0_tile(int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    __m256 acc[4];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++, w += 22) {
        const __m256 dw = _mm256_set1_ps(ld_f16(w));
        uint32_t qh;
        memcpy(&qh, w + 2, 4);
        const __m256i hb = _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10));
        const __m256i q = _mm256_sub_epi8(_mm256_or_si256(nibbles(w + 6), hb), _mm256_set1_epi8(16));
        const __m256i aq = _mm256_sign_epi8(q, q);
        for (int t = 0; t < nt; t++) {
            const uint8_t *xb = x[t] + Q8B * i;
            acc[t] = acc_block(acc[t], dw, xb, dot_signed(q, aq, xb));
        }
    }
    for (int t = 0; t < nt; t++) out[t] = hsum8(acc[t]);
}

AI void q8_0_tile(int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    __m256 acc[4];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++, w += 34) {
        const __m256 dw = _mm256_set1_ps(ld_f16(w));
        const __m256i q = ld256(w + 2);
        const __m256i aq = _mm256_sign_epi8(q, q);
        for (int t = 0; t < nt; t++) {
            const uint8_t *xb = x[t] + Q8B * i;
            acc[t] = acc_block(acc[t], dw, xb, dot_signed(q, aq, xb));
        }
    }
    for (int t = 0; t < nt; t++) out[t] = hsum8(acc[t]);
}

/* Offset types: sum_j (d q_j + m) dx x_j = (d dx) sum q x + m (dx sum x); the
 * second product is exact (see qdot.h), its term is accumulated by fmaf. */
AI void q4_1_tile(int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    __m256 acc[4];
    float accm[4];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps(), accm[t] = 0.0f;
    for (int64_t i = 0; i < n / 32; i++, w += 20) {
        const __m256 dw = _mm256_set1_ps(ld_f16(w));
        const float m = ld_f16(w + 2);
        const __m256i q = nibbles(w + 4);
        for (int t = 0; t < nt; t++) {
            const uint8_t *xb = x[t] + Q8B * i;
            acc[t] = acc_block(acc[t], dw, xb, dp_u8s8(_mm256_setzero_si256(), q, ld256(xb + 4)));
            accm[t] = fmaf(m, ld_f16(xb) * (float)ld_i16(xb + 2), accm[t]);
        }
    }
    for (int t = 0; t < nt; t++) out[t] = hsum8(acc[t]) + accm[t];
}

AI void q5_1_tile(int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    __m256 acc[4];
    float accm[4];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps(), accm[t] = 0.0f;
    for (int64_t i = 0; i < n / 32; i++, w += 24) {
        const __m256 dw = _mm256_set1_ps(ld_f16(w));
        const float m = ld_f16(w + 2);
        uint32_t qh;
        memcpy(&qh, w + 4, 4);
        const __m256i q = _mm256_or_si256(nibbles(w + 8), _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10)));
        for (int t = 0; t < nt; t++) {
            const uint8_t *xb = x[t] + Q8B * i;
            acc[t] = acc_block(acc[t], dw, xb, dp_u8s8(_mm256_setzero_si256(), q, ld256(xb + 4)));
            accm[t] = fmaf(m, ld_f16(xb) * (float)ld_i16(xb + 2), accm[t]);
        }
    }
    for (int t = 0; t < nt; t++) out[t] = hsum8(acc[t]) + accm[t];
}

/* ---- 256-element super-blocks x TS_ACT_Q8K ----
 *
 * Per 32 quants: vpmaddubsw gives 16 int16 pair sums (|.| <= 2*63*127), which
 * are multiplied by the int16 scale of their 16-element group and summed in
 * pairs into int32 lanes (dp_i16). The scale vector for a 32-element chunk
 * holds group scale A in its low 128 bits and B in the high 128 bits; it is
 * one vpshufb of a vector holding 8 int16 scales in both halves. */

#define Q8KB TS_ACT_Q8K_BYTES

/* control for vpshufb: low half <- int16 word a, high half <- word b */
AI __m256i pick_words(int a, int b) {
    return _mm256_set_m128i(_mm_set1_epi16((short)((2 * b) | ((2 * b + 1) << 8))),
                            _mm_set1_epi16((short)((2 * a) | ((2 * a + 1) << 8))));
}
/* 8 int16 in both 128-bit halves */
AI __m256i dup8_epi16(__m128i v) {
    return _mm256_broadcastsi128_si256(v);
}

AI void q2_k_tile(int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    __m256 acc[4], accm[4];
    for (int t = 0; t < nt; t++) acc[t] = accm[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 256; i++, w += 84) {
        const float d = ld_f16(w + 80), dmin = ld_f16(w + 82);
        const __m128i sb = ld128(w);
        const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sb, _mm_set1_epi8(0x0f)));
        const __m256i m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), _mm_set1_epi8(0x0f)));
        __m256i sumi[4];
        for (int t = 0; t < nt; t++) sumi[t] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i g = dup8_epi16(h ? _mm256_extracti128_si256(sc16, 1) : _mm256_castsi256_si128(sc16));
            const __m256i qb = ld256(w + 16 + 32 * h);
            for (int j = 0; j < 4; j++) {
                const __m256i q = _mm256_and_si256(_mm256_srli_epi16(qb, 2 * j), _mm256_set1_epi8(3));
                const __m256i s = _mm256_shuffle_epi8(g, pick_words(2 * j, 2 * j + 1));
                for (int t = 0; t < nt; t++) {
                    const __m256i p = _mm256_maddubs_epi16(q, ld256(x[t] + Q8KB * i + 4 + 128 * h + 32 * j));
                    sumi[t] = dp_i16(sumi[t], s, p);
                }
            }
        }
        for (int t = 0; t < nt; t++) {
            const uint8_t *xb = x[t] + Q8KB * i;
            const float dx = ld_f32(xb);
            const __m256i msum = _mm256_madd_epi16(m16, ld256(xb + 260));
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * dx), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
            accm[t] = _mm256_fmadd_ps(_mm256_set1_ps(dmin * dx), _mm256_cvtepi32_ps(msum), accm[t]);
        }
    }
    for (int t = 0; t < nt; t++) out[t] = hsum8(acc[t]) - hsum8(accm[t]);
}

/* Q3_K: q = u - 4 with u = low2 | hbit << 2 in 0..7 (unsigned for
 * vpmaddubsw); the -4 comes back as -4 * sum_g sc_g * bsum_g. */
AI void q3_k_tile(int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    __m256 acc[4];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 256; i++, w += 110) {
        const float d = ld_f16(w + 108);
        uint8_t su[16];
        ts_k3_unpack_scales(w + 96, su);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_sub_epi8(ld128(su), _mm_set1_epi8(32)));
        const __m256i hm = ld256(w);
        __m256i sumi[4];
        for (int t = 0; t < nt; t++)
            sumi[t] = _mm256_slli_epi32(_mm256_madd_epi16(sc16, ld256(x[t] + Q8KB * i + 260)), 2);
        for (int t = 0; t < nt; t++) sumi[t] = _mm256_sub_epi32(_mm256_setzero_si256(), sumi[t]);
        for (int h = 0; h < 2; h++) {
            const __m256i g = dup8_epi16(h ? _mm256_extracti128_si256(sc16, 1) : _mm256_castsi256_si128(sc16));
            const __m256i qb = ld256(w + 32 + 32 * h);
            for (int j = 0; j < 4; j++) {
                const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(qb, 2 * j), _mm256_set1_epi8(3));
                const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + j), _mm256_set1_epi8(1));
                const __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 2));
                const __m256i s = _mm256_shuffle_epi8(g, pick_words(2 * j, 2 * j + 1));
                for (int t = 0; t < nt; t++) {
                    const __m256i p = _mm256_maddubs_epi16(q, ld256(x[t] + Q8KB * i + 4 + 128 * h + 32 * j));
                    sumi[t] = dp_i16(sumi[t], s, p);
                }
            }
        }
        for (int t = 0; t < nt; t++) {
            const float dx = ld_f32(x[t] + Q8KB * i);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * dx), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) out[t] = hsum8(acc[t]);
}

/* Q4_K / Q5_K: sub-block s (32 elements) has one scale: both halves of the
 * scale vector pick word s. q5: Q5_K (high-bit plane at w + 16, quants at
 * w + 48), else Q4_K (quants at w + 16). */
AI void k45_tile(int64_t n, const uint8_t *w, size_t bsz, int q5, const uint8_t *const *x, float *out,
                 const int nt) {
    __m256 acc[4];
    __m128 accm[4];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps(), accm[t] = _mm_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (int64_t i = 0; i < n / 256; i++, w += bsz) {
        const float d = ld_f16(w), dmin = ld_f16(w + 2);
        uint8_t sm[16];
        ts_k4_unpack_scales(w + 4, sm);
        const __m256i sm16 = _mm256_cvtepu8_epi16(ld128(sm)); /* scales 0..7, mins 0..7 */
        const __m128i mins = _mm256_extracti128_si256(sm16, 1);
        const __m256i g = dup8_epi16(_mm256_castsi256_si128(sm16));
        const uint8_t *qs = w + (q5 ? 48 : 16);
        __m256i hb = q5 ? ld256(w + 16) : _mm256_setzero_si256();
        __m256i sumi[4];
        for (int t = 0; t < nt; t++) sumi[t] = _mm256_setzero_si256();
        for (int k = 0; k < 4; k++) {
            const __m256i qb = ld256(qs + 32 * k);
            __m256i ql = _mm256_and_si256(qb, m4), qh = _mm256_and_si256(_mm256_srli_epi16(qb, 4), m4);
            if (q5) {
                const __m256i one = _mm256_set1_epi8(1);
                ql = _mm256_or_si256(ql, _mm256_slli_epi16(_mm256_and_si256(hb, one), 4));
                qh = _mm256_or_si256(qh, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 1), one), 4));
                hb = _mm256_srli_epi16(hb, 2);
            }
            const __m256i sl = _mm256_shuffle_epi8(g, pick_words(2 * k, 2 * k));
            const __m256i sh = _mm256_shuffle_epi8(g, pick_words(2 * k + 1, 2 * k + 1));
            for (int t = 0; t < nt; t++) {
                const uint8_t *xq = x[t] + Q8KB * i + 4 + 64 * k;
                sumi[t] = dp_i16(sumi[t], sl, _mm256_maddubs_epi16(ql, ld256(xq)));
                sumi[t] = dp_i16(sumi[t], sh, _mm256_maddubs_epi16(qh, ld256(xq + 32)));
            }
        }
        for (int t = 0; t < nt; t++) {
            const uint8_t *xb = x[t] + Q8KB * i;
            const float dx = ld_f32(xb);
            const __m256i bs = ld256(xb + 260);
            /* sums of 32 = pairs of the 16-sums, then times the mins */
            const __m128i s32 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
            const __m128i msum = _mm_madd_epi16(mins, s32);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * dx), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
            accm[t] = _mm_fmadd_ps(_mm_set1_ps(dmin * dx), _mm_cvtepi32_ps(msum), accm[t]);
        }
    }
    for (int t = 0; t < nt; t++) out[t] = hsum8(acc[t]) - hsum4(accm[t]);
}
AI void q4_k_tile(int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    k45_tile(n, w, 144, 0, x, out, nt);
}
AI void q5_k_tile(int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    k45_tile(n, w, 176, 1, x, out, nt);
}

/* Q6_K: q in 0..63 unsigned; the -32 comes back as -32 * sum_g sc_g * bsum_g. */
AI void q6_k_tile(int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    __m256 acc[4];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(0x30);
    for (int64_t i = 0; i < n / 256; i++, w += 210) {
        const float d = ld_f16(w + 208);
        const __m256i sc16 = _mm256_cvtepi8_epi16(ld128(w + 192));
        __m256i sumi[4];
        for (int t = 0; t < nt; t++)
            sumi[t] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                       _mm256_slli_epi32(_mm256_madd_epi16(sc16, ld256(x[t] + Q8KB * i + 260)), 5));
        for (int h = 0; h < 2; h++) {
            const __m256i g = dup8_epi16(h ? _mm256_extracti128_si256(sc16, 1) : _mm256_castsi256_si128(sc16));
            const __m256i la = ld256(w + 64 * h), lb = ld256(w + 64 * h + 32), hb = ld256(w + 128 + 32 * h);
            for (int r = 0; r < 4; r++) {
                const __m256i l4 = r & 1 ? lb : la;
                const __m256i lo = _mm256_and_si256(r >> 1 ? _mm256_srli_epi16(l4, 4) : l4, m4);
                /* bits 2r, 2r+1 of hb to bits 4, 5 */
                const __m256i hi = _mm256_and_si256(r == 0   ? _mm256_slli_epi16(hb, 4)
                                                    : r == 1 ? _mm256_slli_epi16(hb, 2)
                                                    : r == 2 ? hb
                                                             : _mm256_srli_epi16(hb, 2),
                                                    m3);
                const __m256i q = _mm256_or_si256(lo, hi);
                const __m256i s = _mm256_shuffle_epi8(g, pick_words(2 * r, 2 * r + 1));
                for (int t = 0; t < nt; t++) {
                    const __m256i p = _mm256_maddubs_epi16(q, ld256(x[t] + Q8KB * i + 4 + 128 * h + 32 * r));
                    sumi[t] = dp_i16(sumi[t], s, p);
                }
            }
        }
        for (int t = 0; t < nt; t++) {
            const float dx = ld_f32(x[t] + Q8KB * i);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * dx), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) out[t] = hsum8(acc[t]);
}

/* ---- plain floats ----
 * Two 8-lane accumulators per row: elements 16i..16i+7 and 16i+8..16i+15; a
 * remaining 8 go to the first, the last < 8 are added in order by fmaf. The
 * AVX-512 file has a 16-lane version with the same lanes (bit-identical). */

#if !TS_X86_WIDE_F32
AI void f32_tile(int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    __m256 a0[4], a1[4];
    for (int t = 0; t < nt; t++) a0[t] = a1[t] = _mm256_setzero_ps();
    const float *wf = (const float *)(const void *)w;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 w0 = _mm256_loadu_ps(wf + i), w1 = _mm256_loadu_ps(wf + i + 8);
        for (int t = 0; t < nt; t++) {
            const float *xf = (const float *)(const void *)x[t];
            a0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xf + i), a0[t]);
            a1[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xf + i + 8), a1[t]);
        }
    }
    if (i + 8 <= n) {
        const __m256 w0 = _mm256_loadu_ps(wf + i);
        for (int t = 0; t < nt; t++)
            a0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps((const float *)(const void *)x[t] + i), a0[t]);
        i += 8;
    }
    for (int t = 0; t < nt; t++) {
        float s = hsum8(_mm256_add_ps(a0[t], a1[t]));
        for (int64_t k = i; k < n; k++) s = fmaf(ld_f32(w + 4 * k), ld_f32(x[t] + 4 * k), s);
        out[t] = s;
    }
}

#endif

/* F16 and BF16 x f32, 8 lanes: bf16 on every x86 level, f16 where the
 * level has no wider kernel of its own. A bf16 weight is the top half of an
 * f32, widened by a shift, exactly. */
AI __m256 ld_h16x8(const int bf, const uint8_t *p) {
    return bf ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(ld128(p)), 16)) : _mm256_cvtph_ps(ld128(p));
}

AI float ld_h16(const int bf, const uint8_t *p) {
    return bf ? ts_bf16_to_f32((uint16_t)(p[0] | (p[1] << 8))) : ld_f16(p);
}

AI void h16_tile(const int bf, int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    __m256 a0[4], a1[4];
    for (int t = 0; t < nt; t++) a0[t] = a1[t] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 w0 = ld_h16x8(bf, w + 2 * i), w1 = ld_h16x8(bf, w + 2 * i + 16);
        for (int t = 0; t < nt; t++) {
            const float *xf = (const float *)(const void *)x[t];
            a0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xf + i), a0[t]);
            a1[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xf + i + 8), a1[t]);
        }
    }
    if (i + 8 <= n) {
        const __m256 w0 = ld_h16x8(bf, w + 2 * i);
        for (int t = 0; t < nt; t++)
            a0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps((const float *)(const void *)x[t] + i), a0[t]);
        i += 8;
    }
    for (int t = 0; t < nt; t++) {
        float s = hsum8(_mm256_add_ps(a0[t], a1[t]));
        for (int64_t k = i; k < n; k++) s = fmaf(ld_h16(bf, w + 2 * k), ld_f32(x[t] + 4 * k), s);
        out[t] = s;
    }
}

AI void bf16_tile(int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    h16_tile(1, n, w, x, out, nt);
}
#if !TS_X86_WIDE_F32
AI void f16_tile(int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    h16_tile(0, n, w, x, out, nt);
}
#endif

/* ---- entry points and the table ---- */

#define TS_X86_ENTRIES(name)                                                                  \
    static float name##_1(int64_t n, const void *w, const void *x) {                          \
        const uint8_t *xs[1] = {x};                                                            \
        float o[1];                                                                            \
        name##_tile(n, w, xs, o, 1);                                                           \
        return o[0];                                                                           \
    }                                                                                          \
    static void name##_4(int64_t n, const void *w, const void *const x[4], float out[4]) {   \
        const uint8_t *xs[4] = {x[0], x[1], x[2], x[3]};                                       \
        name##_tile(n, w, xs, out, 4);                                                         \
    }

TS_X86_ENTRIES(q4_0)
TS_X86_ENTRIES(q4_1)
TS_X86_ENTRIES(q5_0)
TS_X86_ENTRIES(q5_1)
TS_X86_ENTRIES(q8_0)
TS_X86_ENTRIES(q2_k)
TS_X86_ENTRIES(q3_k)
TS_X86_ENTRIES(q4_k)
TS_X86_ENTRIES(q5_k)
TS_X86_ENTRIES(q6_k)
TS_X86_ENTRIES(bf16)
#if !TS_X86_WIDE_F32
TS_X86_ENTRIES(f32)
TS_X86_ENTRIES(f16)
#endif

#define TS_X86_ENTRY(T, name) .dot[T] = name##_1, .dot4[T] = name##_4
#define TS_X86_TABLE_ENTRIES                    \
    .quant_q8 = quant_q8_x86, .quant_q8k = quant_q8k_x86, \
    TS_X86_ENTRY(TS_TYPE_Q4_0, q4_0),           \
    TS_X86_ENTRY(TS_TYPE_Q4_1, q4_1),           \
    TS_X86_ENTRY(TS_TYPE_Q5_0, q5_0),           \
    TS_X86_ENTRY(TS_TYPE_Q5_1, q5_1),           \
    TS_X86_ENTRY(TS_TYPE_Q8_0, q8_0),           \
    TS_X86_ENTRY(TS_TYPE_Q2_K, q2_k),           \
    TS_X86_ENTRY(TS_TYPE_Q3_K, q3_k),           \
    TS_X86_ENTRY(TS_TYPE_Q4_K, q4_k),           \
    TS_X86_ENTRY(TS_TYPE_Q5_K, q5_k),           \
    TS_X86_ENTRY(TS_TYPE_Q6_K, q6_k),           \
    TS_X86_ENTRY(TS_TYPE_F32, f32),             \
    TS_X86_ENTRY(TS_TYPE_F16, f16),             \
    TS_X86_ENTRY(TS_TYPE_BF16, bf16)
