/* gemm_avx512.c - the panel GEMM and activation-tile quantizer of repack.h
 * with AVX-512 VNNI: 16 output rows (one zmm of int32 / f32 lanes) x up to 8
 * tokens per call, for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K and
 * Q6_K panels.
 *
 * Per 32-element block and token: the block's integer dot for all 16 rows is
 * 8 vpdpbusd (each: 16 lanes += 4 weight bytes x the token's 4 activation
 * bytes, broadcast), started from the tile's offset term; at the hi
 * precision a second chain of 8 over the low plane q2, and the two are
 * combined as (a1 << 8) + a2. Then one convert, one multiply (row scales x
 * token scale) and one FMA into the f32 accumulator (Q4_1, Q5_1: one more FMA for
 * m * s*sumX); at lo256 (K-quants) no multiply: the FMA goes to a
 * super-block accumulator, scaled by the token's s once at its end. The 4-bit weights of a block are unpacked once (and, shift,
 * and) and reused by every token of the tile. This is exactly the arithmetic
 * of ts_rp_gemm_ref, lane by lane, so the results are bit-identical to it
 * (tests/test_perf_kernels.c).
 *
 * Registers at 8 tokens: lo 8 int + 8 f32 accumulators (lo256: + 8 f32
 * super-block ones); hi 16 int + 8 f32, plus the unpacked weights, the
 * nibble mask and the row scales.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/repack.h"
#include "kernels/rp_kernel.h"
#include "kernels/x86/gemm_x86.h"

#define AI static inline __attribute__((always_inline))

AI __m512i bcast32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}
/* a += u . (the 4 bytes at p, broadcast): one vpdpbusd with an embedded
 * {1to16} broadcast operand. gcc 12 does not fold the broadcast load into
 * the instruction (clang does); with a separate vpbroadcastd per vpdpbusd
 * the 16-bit kernels ran up to 31% longer (bench_panel, 8 tokens, ns per
 * block: Q8_0 47.3 vs 36.0, Q4_0 41.5 vs 35.0, Q6_K 50.9 vs 49.7; the 8-bit
 * ones the same within the noise), so gcc gets the instruction written out
 * (bench/probes/vnni_bcast.c; docs/PERFORMANCE.md, session 28). */
AI __m512i dpbusd_b(__m512i a, __m512i u, const uint8_t *p) {
#if defined(__GNUC__) && !defined(__clang__)
    __asm__("vpdpbusd %1%{1to16%}, %2, %0" : "+v"(a) : "m"(*(const int32_t(*)[1])p), "v"(u));
    return a;
#else
    return _mm512_dpbusd_epi32(a, u, bcast32(p));
#endif
}
AI __m512 bcastf(const uint8_t *p) {
    float v;
    memcpy(&v, p, 4);
    return _mm512_set1_ps(v);
}

AI void store_rows(float *y, __m512 v, int n_rows) {
    if (n_rows == TS_RP_ROWS)
        _mm512_storeu_ps(y, v);
    else
        _mm512_mask_storeu_ps(y, (__mmask16)((1u << n_rows) - 1), v);
}


/* the pair of byte-vectors v, v + 1 (v even) of a 32-block whose quants
 * start at q (layouts in rp_layout.h; a 5-bit type's hbit vector follows its nibbles) */
AI void weight_pair(const int kind, const uint8_t *q, const int v, __m512i *u0, __m512i *u1) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    if (kind == K_Q2_K) { /* bits 2(v%4), +1 of 2-bit vector v/4 */
        const __m512i raw = _mm512_loadu_si512((const void *)(q + 64 * (v / 4))), m3 = _mm512_set1_epi8(3);
        const int k = v % 4; /* 0 or 2 */
        *u0 = _mm512_and_si512(_mm512_srli_epi16(raw, 2 * k), m3);
        *u1 = _mm512_and_si512(_mm512_srli_epi16(raw, 2 * k + 2), m3);
        return;
    }
    if (kind == K_Q3_K) { /* bits 2(v%4), +1 of 2-bit vector v/4, and bit v of the hbit vector -> bit 2 */
        const __m512i raw = _mm512_loadu_si512((const void *)(q + 64 * (v / 4))), m3 = _mm512_set1_epi8(3);
        const __m512i hb = _mm512_loadu_si512((const void *)(q + rp_hb(kind))), m = _mm512_set1_epi8(0x04);
        const int k = v % 4; /* 0 or 2 */
        const __m512i h0 = v <= 2 ? _mm512_slli_epi32(hb, 2 - v) : _mm512_srli_epi32(hb, v - 2);
        const __m512i h1 = v + 1 <= 2 ? _mm512_slli_epi32(hb, 1 - v) : _mm512_srli_epi32(hb, v - 1);
        *u0 = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(raw, 2 * k), m3), h0, m, 0xf8);
        *u1 = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(raw, 2 * k + 2), m3), h1, m, 0xf8);
        return;
    }
    if (kind == K_Q8_0) {
        *u0 = _mm512_loadu_si512((const void *)(q + 64 * v));
        *u1 = _mm512_loadu_si512((const void *)(q + 64 * v + 64));
        return;
    }
    const __m512i raw = _mm512_loadu_si512((const void *)(q + 32 * v));
    *u0 = _mm512_and_si512(raw, m4);
    *u1 = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
    if (rp_5bit(kind)) { /* bit v of the hbit vector -> bit 4 */
        const __m512i hb = _mm512_loadu_si512((const void *)(q + rp_hb(kind))), m = _mm512_set1_epi8(0x10);
        const __m512i h0 = v <= 4 ? _mm512_slli_epi32(hb, 4 - v) : _mm512_srli_epi32(hb, v - 4);
        const __m512i h1 = v + 1 <= 4 ? _mm512_slli_epi32(hb, 3 - v) : _mm512_srli_epi32(hb, v - 3);
        *u0 = _mm512_ternarylogic_epi32(*u0, h0, m, 0xf8); /* u0 | (h0 & m) */
        *u1 = _mm512_ternarylogic_epi32(*u1, h1, m, 0xf8);
    } else if (kind == K_Q6_K) { /* bits 2(v%4), +1 of hbit vector v/4 -> bits 4, 5 */
        const __m512i hb = _mm512_loadu_si512((const void *)(q + rp_hb(kind) + 64 * (v / 4))), m = _mm512_set1_epi8(0x30);
        const int k = v % 4; /* 0 or 2 */
        const __m512i h0 = k == 0 ? _mm512_slli_epi32(hb, 4) : hb;
        const __m512i h1 = k == 0 ? _mm512_slli_epi32(hb, 2) : _mm512_srli_epi32(hb, 2);
        *u0 = _mm512_ternarylogic_epi32(*u0, h0, m, 0xf8);
        *u1 = _mm512_ternarylogic_epi32(*u1, h1, m, 0xf8);
    }
}

AI __m512 cvt_bytes_u(const uint8_t *p) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i_u *)p))); }
AI __m512 cvt_bytes_s(const uint8_t *p) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i_u *)p))); }
AI __m512 ld_f16x16(const uint8_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i_u *)p)); }

/* One 32-block (or one 16-element half of it, Q6_K: v in [vb, ve)) for nt
 * tokens: integer dots, then the f32 update with row scales S (16 lanes):
 * f += i * (S * s), or at lo256 (g256) f += i * S (the super-block's s
 * comes later) */
AI void block_part(const int kind, const int hi, const int g256, const uint8_t *q, const uint8_t *x, const int nt,
                   const int vb, const int ve, const int off_at, const __m512 S, __m512 *f) {
    const uint8_t *x2 = x + 32 * nt, *side = x + (hi ? 64 : 32) * nt;
    __m512i a[TS_RP_TT], a2[TS_RP_TT];
    for (int t = 0; t < nt; t++) {
        /* Q3_K's offset 4: the -32 sumX field / 8 (exact) */
        const __m512i o32 = off_at ? bcast32(side + TS_RP_SIDE * t + off_at) : _mm512_setzero_si512();
        const __m512i off = kind == K_Q3_K ? _mm512_srai_epi32(o32, 3) : o32;
        a[t] = hi ? _mm512_setzero_si512() : off;
        if (hi) a2[t] = off;
    }
    for (int v = vb; v < ve; v += 2) {
        __m512i u0, u1;
        weight_pair(kind, q, v, &u0, &u1);
        for (int t = 0; t < nt; t++) {
            a[t] = dpbusd_b(a[t], u0, x + 32 * t + 4 * v);
            a[t] = dpbusd_b(a[t], u1, x + 32 * t + 4 * v + 4);
            if (hi) {
                a2[t] = dpbusd_b(a2[t], u0, x2 + 32 * t + 4 * v);
                a2[t] = dpbusd_b(a2[t], u1, x2 + 32 * t + 4 * v + 4);
            }
        }
    }
    for (int t = 0; t < nt; t++) {
        const __m512i i0 = hi ? _mm512_add_epi32(_mm512_slli_epi32(a[t], 8), a2[t]) : a[t];
        /* lo256: the block's integers at the super-block's scale (a shift by sh, off the multiply ports) */
        const __m512i i = g256 ? _mm512_sllv_epi32(i0, bcast32(side + TS_RP_SIDE * t + 28)) : i0;
        f[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), g256 ? S : _mm512_mul_ps(S, bcastf(side + TS_RP_SIDE * t)), f[t]);
    }
}

/* One-token calls prefetch the weight stream themselves,
 * ts_cpu_decode_prefetch() bytes ahead of the block being computed (cpu.h
 * chooses it per CPU). On the Intel machine the hardware prefetchers alone
 * left decode at 72-77% of the read bandwidth on Qwen2.5 1.5B, and 4 KiB
 * ahead gave tg64 (medians of 3 alternating rounds) Qwen2.5-Coder 1.5B
 * exact 18.4 -> 19.4 t/s (8 KiB 19.7, 16 KiB 19.4, 32 KiB 18.6), Llama 3.2
 * 1B Q4_0 q8 27.2 -> 29.1 / 28.4 / 28.0 / 26.1. On an AMD EPYC (Zen 4) the
 * same 4 KiB cost 20-43% instead, and requesting the block's own lines at
 * its start was best (docs/PERFORMANCE.md, session 31). The address is
 * formed as an integer: past the matrix's end it names no object, and a
 * prefetch never faults. */

AI void panel_tile(const int kind, const int mode, int64_t n, const uint8_t *w, const uint8_t *x, const int nt,
                   float *y, int64_t ys, int n_rows) {
    const int kq = rp_kq(kind), hi = mode == TS_RP_HI, g256 = mode == TS_RP_LO256;
    const size_t wb = rp_wb(kind);
    const int pf = nt == 1 ? ts_cpu_decode_prefetch() : -1; /* bytes ahead, -1: none (cpu.h) */
    const size_t xb = (hi ? 96 : 64) * (size_t)nt;
    __m512 f[TS_RP_TT], gs[TS_RP_TT]; /* lo256: gs gathers a super-block's terms before its one multiply */
    for (int t = 0; t < nt; t++) f[t] = _mm512_setzero_ps();
    for (int64_t pb = 0; pb < n / rp_be(kind); pb++, w += wb) {
        if (pf >= 0) /* decode */
            for (size_t l = 0; l < wb; l += 64)
                _mm_prefetch((const char *)((uintptr_t)w + (size_t)pf + l), _MM_HINT_T0);
        const uint8_t *side0 = x + 32 * nt; /* lo256: the super-block's first side (holds its s) */
        __m512 *g = g256 ? gs : f;
        if (g256)
            for (int t = 0; t < nt; t++) gs[t] = _mm512_setzero_ps();
        for (int sub = 0; sub < (kq ? 8 : 1); sub++, x += xb) {
            const uint8_t *side = x + (hi ? 64 : 32) * nt;
            if (kind == K_Q2_K) { /* two 16-element groups, each a scale and a min (nibbles of a byte) */
                const uint8_t *q = w + rp_sub(kind) * sub;
                const __m512 d = ld_f16x16(w + rp_d(kind)), dm = ld_f16x16(w + rp_m(kind));
                const __m512i m4 = _mm512_set1_epi32(0x0f);
                for (int h = 0; h < 2; h++) {
                    const __m512i gsc = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i_u *)(q + rp_gsc(kind) + 16 * h)));
                    const __m512 sc = _mm512_cvtepi32_ps(_mm512_and_si512(gsc, m4));
                    const __m512 mn = _mm512_cvtepi32_ps(_mm512_srli_epi32(gsc, 4));
                    block_part(kind, hi, g256, q, x, nt, 4 * h, 4 * h + 4, 0, _mm512_mul_ps(d, sc), g);
                    const __m512 ml = _mm512_mul_ps(dm, mn);
                    for (int t = 0; t < nt; t++) { /* + (-sumX_h) (dmin m_h) s */
                        const __m512i ns = _mm512_srai_epi32(bcast32(side + TS_RP_SIDE * t + 20 + 4 * h), 5);
                        const __m512 nsum = _mm512_cvtepi32_ps(g256 ? _mm512_sllv_epi32(ns, bcast32(side + TS_RP_SIDE * t + 28)) : ns);
                        g[t] = _mm512_fmadd_ps(nsum, g256 ? ml : _mm512_mul_ps(ml, bcastf(side + TS_RP_SIDE * t)), g[t]);
                    }
                }
            } else if (kind == K_Q6_K || kind == K_Q3_K) { /* two 16-element groups, int8 scales */
                const uint8_t *q = w + rp_sub(kind) * sub;
                const __m512 d = ld_f16x16(w + rp_d(kind));
                block_part(kind, hi, g256, q, x, nt, 0, 4, 20, _mm512_mul_ps(d, cvt_bytes_s(q + rp_gsc(kind))), g);
                block_part(kind, hi, g256, q, x, nt, 4, 8, 24, _mm512_mul_ps(d, cvt_bytes_s(q + rp_gsc(kind) + 16)), g);
            } else if (kind == K_Q4_K || kind == K_Q5_K) {
                const __m512 dl = _mm512_mul_ps(ld_f16x16(w + rp_d(kind)),
                                                cvt_bytes_u(w + rp_sc(kind) + 16 * sub));
                const __m512 ml = _mm512_mul_ps(ld_f16x16(w + rp_m(kind)),
                                                cvt_bytes_u(w + rp_mn(kind) + 16 * sub));
                block_part(kind, hi, g256, w + rp_sub(kind) * sub, x, nt, 0, 8, 0, dl, g);
                for (int t = 0; t < nt; t++) f[t] = _mm512_fnmadd_ps(ml, bcastf(side + TS_RP_SIDE * t + 4), f[t]);
            } else {
                const int doff = rp_d(kind);
                const int off_at = kind == K_Q4_0 ? 8 : kind == K_Q8_0 ? 12 : kind == K_Q5_0 ? 16 : 0;
                block_part(kind, hi, 0, w, x, nt, 0, 8, off_at, ld_f16x16(w + doff), f);
                if (rp_has_m32(kind)) {
                    const __m512 m = ld_f16x16(w + rp_m(kind));
                    for (int t = 0; t < nt; t++) f[t] = _mm512_fmadd_ps(m, bcastf(side + TS_RP_SIDE * t + 4), f[t]);
                }
            }
        }
        if (g256) /* by S * 2^-KMAX = s * 2^-sh of the first 32-block (2^-sh built in the exponent field) */
            for (int t = 0; t < nt; t++) {
                const __m512i e = _mm512_slli_epi32(_mm512_sub_epi32(_mm512_set1_epi32(127), bcast32(side0 + TS_RP_SIDE * t + 28)), 23);
                const __m512 c = _mm512_mul_ps(bcastf(side0 + TS_RP_SIDE * t), _mm512_castsi512_ps(e));
                f[t] = _mm512_fmadd_ps(gs[t], c, f[t]);
            }
    }
    for (int t = 0; t < nt; t++) store_rows(y + (int64_t)t * ys, f[t], n_rows);
}

RP_ENTRY(ts_rp_q4_0_avx512, K_Q4_0)
RP_ENTRY(ts_rp_q4_1_avx512, K_Q4_1)
RP_ENTRY(ts_rp_q5_0_avx512, K_Q5_0)
RP_ENTRY(ts_rp_q5_1_avx512, K_Q5_1)
RP_ENTRY(ts_rp_q8_0_avx512, K_Q8_0)
RP_ENTRY(ts_rp_q2_k_avx512, K_Q2_K)
RP_ENTRY(ts_rp_q3_k_avx512, K_Q3_K)
RP_ENTRY(ts_rp_q4_k_avx512, K_Q4_K)
RP_ENTRY(ts_rp_q5_k_avx512, K_Q5_K)
RP_ENTRY(ts_rp_q6_k_avx512, K_Q6_K)

/* ---- activation quantizer: the arithmetic of ts_rp_quant_ref ---- */

void ts_rp_quant_avx512(const float *x, int64_t n_in, int hi, uint8_t *tile, int nt, int slot) {
    if (hi == TS_RP_LO256 && n_in % 256) hi = TS_RP_LO; /* as ts_rp_quant_ref */
    const float C = hi == TS_RP_HI ? 32512.0f : 127.0f;
    const int gb = hi == TS_RP_LO256 ? 8 : 1; /* 32-blocks sharing a scale */
    hi = hi == TS_RP_HI;
    const size_t xb = (hi ? 96 : 64) * (size_t)nt;
    const __m512 fmax = _mm512_set1_ps(3.4028235e38f);
    for (int64_t b0 = 0; b0 < n_in / 32; b0 += gb) {
        /* the group's amax; finite: every |x| <= FLT_MAX (false for inf, and NaN compares false) */
        __m512 am = _mm512_setzero_ps();
        __mmask16 ok = 0xffff;
        for (int k = 0; k < 2 * gb; k++) {
            const __m512 a = _mm512_abs_ps(_mm512_loadu_ps(x + 32 * b0 + 16 * k));
            ok &= _mm512_cmp_ps_mask(a, fmax, _CMP_LE_OQ);
            am = _mm512_max_ps(am, a);
        }
        const int finite = ok == 0xffff;
        const float amax = finite ? _mm512_reduce_max_ps(am) : 0.0f;
        const int zero = !finite || amax < 0x1p-100f;
        const float s256 = !finite ? NAN : zero ? 0.0f : amax / C, id256 = zero ? 0.0f : C / amax;
        for (int64_t b = b0; b < b0 + gb; b++) {
            const float *xv = x + 32 * b;
            uint8_t *q1 = tile + (size_t)b * xb + 32 * slot;
            uint8_t *q2 = q1 + 32 * nt;
            uint8_t *side = tile + (size_t)b * xb + (hi ? 64 : 32) * nt + TS_RP_SIDE * slot;
            const __m512 v0 = _mm512_loadu_ps(xv), v1 = _mm512_loadu_ps(xv + 16);
            /* lo256: this block's step S * 2^-k (repack.h) */
            const int k = gb > 1 && !zero
                            ? ts_rp_k256_k(_mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1))), amax)
                            : 0;
            const float s = s256 / (float)(1 << k);
            const __m512 id = _mm512_set1_ps(id256 * (float)(1 << k));
            const __m512i X0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, id)), X1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, id));
            /* zero blocks: x * 0 is 0 for finite x; non-finite blocks: force 0 */
            const __m512i Z0 = zero ? _mm512_setzero_si512() : X0, Z1 = zero ? _mm512_setzero_si512() : X1;
            if (hi) {
                const __m512i k128 = _mm512_set1_epi32(128);
                const __m512i h0 = _mm512_srai_epi32(_mm512_add_epi32(Z0, k128), 8);
                const __m512i h1 = _mm512_srai_epi32(_mm512_add_epi32(Z1, k128), 8);
                _mm_storeu_si128((__m128i_u *)q1, _mm512_cvtepi32_epi8(h0));
                _mm_storeu_si128((__m128i_u *)(q1 + 16), _mm512_cvtepi32_epi8(h1));
                _mm_storeu_si128((__m128i_u *)q2, _mm512_cvtepi32_epi8(_mm512_sub_epi32(Z0, _mm512_slli_epi32(h0, 8))));
                _mm_storeu_si128((__m128i_u *)(q2 + 16),
                                 _mm512_cvtepi32_epi8(_mm512_sub_epi32(Z1, _mm512_slli_epi32(h1, 8))));
            } else {
                _mm_storeu_si128((__m128i_u *)q1, _mm512_cvtepi32_epi8(Z0));
                _mm_storeu_si128((__m128i_u *)(q1 + 16), _mm512_cvtepi32_epi8(Z1));
            }
            ts_rp_put_side(side, s, _mm512_reduce_add_epi32(Z0), _mm512_reduce_add_epi32(Z1),
                           gb > 1 && !zero ? TS_RP_K256_KMAX - k : 0);
        }
    }
}
