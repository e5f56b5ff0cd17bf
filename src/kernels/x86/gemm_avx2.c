/* gemm_avx2.c - the panel GEMM and activation-tile quantizer of repack.h
 * for AVX2 + FMA + F16C (no VNNI): 16 output rows (two ymm of 8 int32 / f32
 * lanes: rows 0..7 and 8..15, the two 32-byte halves of every 64-byte
 * weight vector) x up to 8 tokens per call, for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * Q2_K, Q3_K, Q4_K, Q5_K and Q6_K panels. This file alone gets -mavx2 -mfma -mf16c.
 *
 * Integer dots without vpdpbusd: vpmaddubsw multiplies the unsigned weight
 * bytes u by the signed activation bytes (broadcast, 4 per row) and adds
 * adjacent pairs into int16 lanes, SATURATING. With |X byte| <= 128 a pair
 * is at most 2 * 128 * umax, so the pair sums are accumulated in int16 over
 * groups of weight vectors small enough to stay below 32767, then widened
 * (vpmaddwd with ones: the lane's two int16 into its row's int32):
 *   4-bit (Q4_0, Q4_1, Q4_K; u <= 15): pair <= 3840, and a group of 8
 *     vectors adds 8 pairs per int16 lane: <= 30720;
 *   Q5_0, Q5_1 (u <= 31): pair <= 7936, groups of 4 <= 31744;
 *   Q6_K (u <= 63): pair <= 16128, groups of 2 <= 32256;
 *   Q8_0 (u = q + 128 <= 255): a pair could reach 65280, so u is split into
 *     nibbles u = 16 uh + ul, each a 4-bit group of 8, widened with 16 and 1.
 * Every intermediate is therefore exact, and the block's int32 is exactly
 * the integer of repack.h's definition (the hi precision as (a1 << 8) + a2
 * with the offset term in a2, like the reference). The f32 work after it is
 * the definition's, lane by lane and in its order (one convert, the row
 * scale times the token scale, one FMA; Q4_1 / Q5_1 / Q4_K one more FMA), so the
 * results are bit-identical to ts_rp_gemm_ref and to the AVX-512 kernels
 * (tests/test_rp_gemm.c, tests/test_perf_kernels.c).
 *
 * Per 32-element block the weights of all 16 rows are decoded once into
 * small unsigned byte vectors (and, shift, or) and reused by every token of
 * the tile; each token's 4 activation bytes per vector are broadcast once
 * and feed both row halves.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/repack.h"
#include "kernels/rp_kernel.h"
#include "kernels/x86/gemm_x86.h"

#define AI static inline __attribute__((always_inline))

AI __m256i bcast32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}
AI __m256 bcastf(const uint8_t *p) {
    float v;
    memcpy(&v, p, 4);
    return _mm256_set1_ps(v);
}
AI __m256i ld256(const uint8_t *p) { return _mm256_loadu_si256((const __m256i_u *)p); }
/* 8 f16 row scales -> f32 */
AI __m256 ld_f16x8(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i_u *)p)); }
/* 8 bytes -> f32, unsigned / signed */
AI __m256 cvt8_u(const uint8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i_u *)p)));
}
AI __m256 cvt8_s(const uint8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i_u *)p)));
}

/* y[0 .. n_rows) of the 8 lanes of v (n_rows may be <= 0: nothing) */
AI void store_lanes(float *y, __m256 v, int n_rows) {
    if (n_rows >= 8) {
        _mm256_storeu_ps(y, v);
    } else if (n_rows > 0) {
        float tmp[8];
        _mm256_storeu_ps(tmp, v);
        memcpy(y, tmp, (size_t)n_rows * sizeof(float));
    }
}


/* Decoded weights of one 32-block: u[v][h] = the unsigned quants of byte
 * vector v (elements 4v..4v+3), rows 8h..8h+7; Q8_0 keeps the low nibbles
 * in u and the high ones in uh. */
typedef struct {
    __m256i u[8][2];
    __m256i uh[8][2];
} wblock;

/* the weights of the 32-block whose quants start at q (layouts in rp_layout.h;
 * a 5-bit type's hbit vector follows its nibbles) */
AI void decode_block(const int kind, const uint8_t *q, wblock *b) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (int h = 0; h < 2; h++) {
        if (kind == K_Q2_K) { /* bits 2k, 2k+1 of 2-bit vector g -> v = 4g + k */
            const __m256i m3 = _mm256_set1_epi8(3);
            for (int g = 0; g < 2; g++) {
                const __m256i raw = ld256(q + 64 * g + 32 * h);
                for (int k = 0; k < 4; k++) b->u[4 * g + k][h] = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * k), m3);
            }
            continue;
        }
        if (kind == K_Q3_K) { /* bits 2k, 2k+1 of 2-bit vector g -> v = 4g + k; bit v of hbit -> bit 2 */
            const __m256i m3 = _mm256_set1_epi8(3), m = _mm256_set1_epi8(0x04);
            const __m256i hb = ld256(q + rp_hb(kind) + 32 * h);
            for (int g = 0; g < 2; g++) {
                const __m256i raw = ld256(q + 64 * g + 32 * h);
                for (int k = 0; k < 4; k++) {
                    const int v = 4 * g + k;
                    const __m256i hs = v <= 2 ? _mm256_slli_epi32(hb, 2 - v) : _mm256_srli_epi32(hb, v - 2);
                    b->u[v][h] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 2 * k), m3),
                                                 _mm256_and_si256(hs, m));
                }
            }
            continue;
        }
        if (kind == K_Q8_0) {
            for (int v = 0; v < 8; v++) {
                const __m256i raw = ld256(q + 64 * v + 32 * h);
                b->u[v][h] = _mm256_and_si256(raw, m4);
                b->uh[v][h] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
            }
            continue;
        }
        for (int j = 0; j < 4; j++) { /* nibble vector j: v = 2j low, 2j + 1 high */
            const __m256i raw = ld256(q + 64 * j + 32 * h);
            b->u[2 * j][h] = _mm256_and_si256(raw, m4);
            b->u[2 * j + 1][h] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
        }
        if (rp_5bit(kind)) { /* bit v of the hbit vector -> bit 4 of vector v */
            const __m256i hb = ld256(q + rp_hb(kind) + 32 * h), m = _mm256_set1_epi8(0x10);
            for (int v = 0; v < 8; v++) {
                /* a shift by < 8 inside 32-bit lanes: bit 4 of each byte
                 * comes from bit v of the same byte */
                const __m256i s = v <= 4 ? _mm256_slli_epi32(hb, 4 - v) : _mm256_srli_epi32(hb, v - 4);
                b->u[v][h] = _mm256_or_si256(b->u[v][h], _mm256_and_si256(s, m));
            }
        } else if (kind == K_Q6_K) { /* bits 2(v%4), +1 of hbit vector v/4 -> bits 4, 5 */
            const __m256i m = _mm256_set1_epi8(0x30);
            for (int g = 0; g < 2; g++) {
                const __m256i hb = ld256(q + rp_hb(kind) + 64 * g + 32 * h);
                const __m256i s[4] = {_mm256_slli_epi32(hb, 4), _mm256_slli_epi32(hb, 2), hb,
                                      _mm256_srli_epi32(hb, 2)};
                for (int k = 0; k < 4; k++)
                    b->u[4 * g + k][h] = _mm256_or_si256(b->u[4 * g + k][h], _mm256_and_si256(s[k], m));
            }
        }
    }
}

/* Exact int32 sums over vectors v in [vb, ve) of u . x (one activation
 * plane xq of one token: byte 4v + c = element 4v + c), both row halves. */
AI void dot_plane(const int kind, const wblock *b, const uint8_t *xq, const int vb, const int ve, __m256i out[2]) {
    const __m256i ones = _mm256_set1_epi16(1);
    /* vectors per int16 group (the saturation bounds at the top) */
    const int g = rp_5bit(kind) ? 4 : kind == K_Q6_K ? 2 : 8;
    __m256i r0 = _mm256_setzero_si256(), r1 = _mm256_setzero_si256();
    for (int v0 = vb; v0 < ve; v0 += g) {
        __m256i a0 = _mm256_setzero_si256(), a1 = _mm256_setzero_si256();
        __m256i h0 = _mm256_setzero_si256(), h1 = _mm256_setzero_si256();
        for (int v = v0; v < v0 + g && v < ve; v++) {
            const __m256i x = bcast32(xq + 4 * v);
            a0 = _mm256_add_epi16(a0, _mm256_maddubs_epi16(b->u[v][0], x));
            a1 = _mm256_add_epi16(a1, _mm256_maddubs_epi16(b->u[v][1], x));
            if (kind == K_Q8_0) {
                h0 = _mm256_add_epi16(h0, _mm256_maddubs_epi16(b->uh[v][0], x));
                h1 = _mm256_add_epi16(h1, _mm256_maddubs_epi16(b->uh[v][1], x));
            }
        }
        r0 = _mm256_add_epi32(r0, _mm256_madd_epi16(a0, ones));
        r1 = _mm256_add_epi32(r1, _mm256_madd_epi16(a1, ones));
        if (kind == K_Q8_0) {
            const __m256i k16 = _mm256_set1_epi16(16);
            r0 = _mm256_add_epi32(r0, _mm256_madd_epi16(h0, k16));
            r1 = _mm256_add_epi32(r1, _mm256_madd_epi16(h1, k16));
        }
    }
    out[0] = r0;
    out[1] = r1;
}

/* One 32-block (or, Q6_K, the half v in [vb, ve)) for nt tokens: the exact
 * integers, then f[t][h] = fma((float)i, S[h] * s_t, f[t][h]) (lo256,
 * g256: fma((float)i, S[h], f[t][h]); the super-block's s comes later). x:
 * the block's tile bytes; off_at: side offset of the i32 offset term (0: none) */
AI void block_part(const int kind, const int hi, const int g256, const wblock *b, const uint8_t *x, const int nt, const int vb,
                   const int ve, const int off_at, const __m256 S[2], __m256 f[][2]) {
    const uint8_t *x2 = x + 32 * nt, *side = x + (hi ? 64 : 32) * nt;
    for (int t = 0; t < nt; t++) {
        const uint8_t *st = side + TS_RP_SIDE * t;
        const __m256i o32 = off_at ? bcast32(st + off_at) : _mm256_setzero_si256();
        const __m256i off = kind == K_Q3_K ? _mm256_srai_epi32(o32, 3) : o32; /* Q3_K: -32 sumX / 8 */
        __m256i i[2];
        dot_plane(kind, b, x + 32 * t, vb, ve, i);
        if (hi) {
            __m256i i2[2];
            dot_plane(kind, b, x2 + 32 * t, vb, ve, i2);
            for (int h = 0; h < 2; h++)
                i[h] = _mm256_add_epi32(_mm256_slli_epi32(i[h], 8), _mm256_add_epi32(i2[h], off));
        } else {
            for (int h = 0; h < 2; h++) i[h] = _mm256_add_epi32(i[h], off);
        }
        if (g256) { /* the block's integers at the super-block's scale: a shift by sh */
            const __m256i sh = bcast32(st + 28);
            for (int h = 0; h < 2; h++) i[h] = _mm256_sllv_epi32(i[h], sh);
        }
        const __m256 s = bcastf(st);
        for (int h = 0; h < 2; h++)
            f[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i[h]), g256 ? S[h] : _mm256_mul_ps(S[h], s), f[t][h]);
    }
}

/* One-token calls prefetch ts_cpu_decode_prefetch() bytes ahead (cpu.h),
 * as the AVX-512 kernels do (gemm_avx512.c). On an AVX2-only AMD EPYC
 * (Zen 3), tg64 medians of 3 alternating rounds (tessera bench -p 0 -n 64
 * -r 3), none / 2 / 4 / 8 KiB ahead: Qwen2.5-Coder 1.5B exact 15.1 / 20.3 /
 * 21.6 / 21.2 t/s, q8 18.3 / 23.0 / 22.5 / 25.0; Llama 3.2 1B Q4_0 exact
 * 29.8 / 32.7 / 31.9 / 32.0, q8 33.7 / 33.4 / 33.8 / 33.7: 4 KiB at this
 * level on every CPU. (On the Intel machine under TS_CPU_LEVEL=avx2 it had
 * cost the 1B q8 decode 19%, session 28: not an AVX2 CPU, so the real one
 * decides.) */

AI void panel_tile(const int kind, const int mode, int64_t n, const uint8_t *w, const uint8_t *x, const int nt,
                   float *y, int64_t ys, int n_rows) {
    const int kq = rp_kq(kind), hi = mode == TS_RP_HI, g256 = mode == TS_RP_LO256;
    const size_t wb = rp_wb(kind);
    const int pf = nt == 1 ? ts_cpu_decode_prefetch() : -1; /* bytes ahead, -1: none (cpu.h) */
    const size_t xb = (hi ? 96 : 64) * (size_t)nt;
    __m256 f[TS_RP_TT][2], gs[TS_RP_TT][2]; /* lo256: gs gathers a super-block's terms before its one multiply */
    for (int t = 0; t < nt; t++) f[t][0] = f[t][1] = _mm256_setzero_ps();
    wblock b;
    for (int64_t pb = 0; pb < n / rp_be(kind); pb++, w += wb) {
        if (pf >= 0) /* decode */
            for (size_t l = 0; l < wb; l += 64)
                _mm_prefetch((const char *)((uintptr_t)w + (size_t)pf + l), _MM_HINT_T0);
        const uint8_t *side0 = x + 32 * nt; /* lo256: the super-block's first side (holds its s) */
        __m256(*g)[2] = g256 ? gs : f;
        if (g256)
            for (int t = 0; t < nt; t++) gs[t][0] = gs[t][1] = _mm256_setzero_ps();
        for (int sub = 0; sub < (kq ? 8 : 1); sub++, x += xb) {
            const uint8_t *side = x + (hi ? 64 : 32) * nt;
            if (kind == K_Q2_K) { /* two 16-element groups, each a scale and a min (nibbles of a byte) */
                const uint8_t *q = w + rp_sub(kind) * sub;
                decode_block(kind, q, &b);
                const __m256i m4 = _mm256_set1_epi32(0x0f);
                for (int hg = 0; hg < 2; hg++) {
                    __m256 S[2], ml[2];
                    for (int h = 0; h < 2; h++) {
                        const __m256i gb =
                            _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i_u *)(q + rp_gsc(kind) + 16 * hg + 8 * h)));
                        S[h] = _mm256_mul_ps(ld_f16x8(w + rp_d(kind) + 16 * h), _mm256_cvtepi32_ps(_mm256_and_si256(gb, m4)));
                        ml[h] = _mm256_mul_ps(ld_f16x8(w + rp_m(kind) + 16 * h), _mm256_cvtepi32_ps(_mm256_srli_epi32(gb, 4)));
                    }
                    block_part(kind, hi, g256, &b, x, nt, 4 * hg, 4 * hg + 4, 0, S, g);
                    for (int t = 0; t < nt; t++) { /* + (-sumX_hg) (dmin m_hg) s */
                        const uint8_t *st = side + TS_RP_SIDE * t;
                        const __m256i ns = _mm256_srai_epi32(bcast32(st + 20 + 4 * hg), 5);
                        const __m256 nsum = _mm256_cvtepi32_ps(g256 ? _mm256_sllv_epi32(ns, bcast32(st + 28)) : ns);
                        const __m256 s = bcastf(st);
                        for (int h = 0; h < 2; h++)
                            g[t][h] = _mm256_fmadd_ps(nsum, g256 ? ml[h] : _mm256_mul_ps(ml[h], s), g[t][h]);
                    }
                }
            } else if (kind == K_Q6_K || kind == K_Q3_K) { /* two 16-element groups, int8 scales */
                const uint8_t *q = w + rp_sub(kind) * sub;
                const int doff = rp_d(kind), s0 = rp_gsc(kind), s1 = rp_gsc(kind) + 16;
                decode_block(kind, q, &b);
                __m256 S[2];
                for (int h = 0; h < 2; h++) S[h] = _mm256_mul_ps(ld_f16x8(w + doff + 16 * h), cvt8_s(q + s0 + 8 * h));
                block_part(kind, hi, g256, &b, x, nt, 0, 4, 20, S, g);
                for (int h = 0; h < 2; h++) S[h] = _mm256_mul_ps(ld_f16x8(w + doff + 16 * h), cvt8_s(q + s1 + 8 * h));
                block_part(kind, hi, g256, &b, x, nt, 4, 8, 24, S, g);
            } else if (kind == K_Q4_K || kind == K_Q5_K) {
                decode_block(kind, w + rp_sub(kind) * sub, &b);
                __m256 dl[2], ml[2];
                for (int h = 0; h < 2; h++) {
                    dl[h] = _mm256_mul_ps(ld_f16x8(w + rp_d(kind) + 16 * h),
                                          cvt8_u(w + rp_sc(kind) + 16 * sub + 8 * h));
                    ml[h] = _mm256_mul_ps(ld_f16x8(w + rp_m(kind) + 16 * h),
                                          cvt8_u(w + rp_mn(kind) + 16 * sub + 8 * h));
                }
                block_part(kind, hi, g256, &b, x, nt, 0, 8, 0, dl, g);
                for (int t = 0; t < nt; t++) {
                    const __m256 ds = bcastf(side + TS_RP_SIDE * t + 4);
                    for (int h = 0; h < 2; h++) f[t][h] = _mm256_fnmadd_ps(ml[h], ds, f[t][h]);
                }
            } else {
                const int doff = rp_d(kind);
                const int off_at = kind == K_Q4_0 ? 8 : kind == K_Q8_0 ? 12 : kind == K_Q5_0 ? 16 : 0;
                decode_block(kind, w, &b);
                const __m256 S[2] = {ld_f16x8(w + doff), ld_f16x8(w + doff + 16)};
                block_part(kind, hi, 0, &b, x, nt, 0, 8, off_at, S, f);
                if (rp_has_m32(kind)) {
                    const __m256 m[2] = {ld_f16x8(w + rp_m(kind)), ld_f16x8(w + rp_m(kind) + 16)};
                    for (int t = 0; t < nt; t++) {
                        const __m256 ds = bcastf(side + TS_RP_SIDE * t + 4);
                        for (int h = 0; h < 2; h++) f[t][h] = _mm256_fmadd_ps(m[h], ds, f[t][h]);
                    }
                }
            }
        }
        if (g256)
            for (int t = 0; t < nt; t++) { /* by s * 2^-sh of the first 32-block (2^-sh built in the exponent field) */
                const __m256i e = _mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(127), bcast32(side0 + TS_RP_SIDE * t + 28)), 23);
                const __m256 s = _mm256_mul_ps(bcastf(side0 + TS_RP_SIDE * t), _mm256_castsi256_ps(e));
                for (int h = 0; h < 2; h++) f[t][h] = _mm256_fmadd_ps(gs[t][h], s, f[t][h]);
            }
    }
    for (int t = 0; t < nt; t++) {
        store_lanes(y + (int64_t)t * ys, f[t][0], n_rows);
        store_lanes(y + (int64_t)t * ys + 8, f[t][1], n_rows - 8);
    }
}

RP_ENTRY(ts_rp_q4_0_avx2, K_Q4_0)
RP_ENTRY(ts_rp_q4_1_avx2, K_Q4_1)
RP_ENTRY(ts_rp_q5_0_avx2, K_Q5_0)
RP_ENTRY(ts_rp_q5_1_avx2, K_Q5_1)
RP_ENTRY(ts_rp_q8_0_avx2, K_Q8_0)
RP_ENTRY(ts_rp_q2_k_avx2, K_Q2_K)
RP_ENTRY(ts_rp_q3_k_avx2, K_Q3_K)
RP_ENTRY(ts_rp_q4_k_avx2, K_Q4_K)
RP_ENTRY(ts_rp_q5_k_avx2, K_Q5_K)
RP_ENTRY(ts_rp_q6_k_avx2, K_Q6_K)

/* ---- activation quantizer: the arithmetic of ts_rp_quant_ref ---- */

/* the largest of 8 floats (exact in any order) */
AI float hmax_ps(__m256 m8) {
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    return _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
}

AI int32_t hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

/* 32 int32 (each in [-128, 127]) -> 32 bytes in order */
AI void store_bytes(uint8_t *dst, __m256i a, __m256i b, __m256i c, __m256i d) {
    /* packs work per 128-bit lane: the bytes come out as 4-int groups
     * a0 b0 c0 d0 | a1 b1 c1 d1 (a0 = a's first 4); the permute restores
     * a0 a1 b0 b1 c0 c1 d0 d1 */
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
    _mm256_storeu_si256((__m256i_u *)dst, _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

void ts_rp_quant_avx2(const float *x, int64_t n_in, int hi, uint8_t *tile, int nt, int slot) {
    if (hi == TS_RP_LO256 && n_in % 256) hi = TS_RP_LO; /* as ts_rp_quant_ref */
    const float C = hi == TS_RP_HI ? 32512.0f : 127.0f;
    const int gb = hi == TS_RP_LO256 ? 8 : 1; /* 32-blocks sharing a scale */
    hi = hi == TS_RP_HI;
    const size_t xb = (hi ? 96 : 64) * (size_t)nt;
    const __m256 fmax = _mm256_set1_ps(3.4028235e38f);
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    int ok = 1, zero = 1;
    float s256 = 0.0f, id256 = 0.0f, amax = 0.0f;
    for (int64_t b = 0; b < n_in / 32; b++, x += 32) {
        uint8_t *q1 = tile + (size_t)b * xb + 32 * slot;
        uint8_t *q2 = q1 + 32 * nt;
        uint8_t *side = tile + (size_t)b * xb + (hi ? 64 : 32) * nt + TS_RP_SIDE * slot;
        __m256 v[4];
        for (int k = 0; k < 4; k++) v[k] = _mm256_loadu_ps(x + 8 * k);
        if (b % gb == 0) { /* the group's scale: amax over its gb blocks */
            __m256 m8 = _mm256_setzero_ps();
            ok = 1;
            for (int k = 0; k < 4 * gb; k++) {
                const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + 8 * k), absm);
                /* finite: |x| <= FLT_MAX (false for inf; NaN compares false) */
                ok &= _mm256_movemask_ps(_mm256_cmp_ps(a, fmax, _CMP_LE_OQ)) == 0xff;
                m8 = _mm256_max_ps(m8, a);
            }
            amax = ok ? hmax_ps(m8) : 0.0f;
            zero = !ok || amax < 0x1p-100f;
            s256 = !ok ? NAN : zero ? 0.0f : amax / C;
            id256 = zero ? 0.0f : C / amax;
        }
        int k = 0; /* lo256: this block's step S * 2^-k (repack.h) */
        if (gb > 1 && !zero) {
            const __m256 m8 = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], absm), _mm256_and_ps(v[1], absm)),
                                            _mm256_max_ps(_mm256_and_ps(v[2], absm), _mm256_and_ps(v[3], absm)));
            k = ts_rp_k256_k(hmax_ps(m8), amax);
        }
        const float s = s256 / (float)(1 << k);
        const __m256 id = _mm256_set1_ps(id256 * (float)(1 << k));
        __m256i X[4];
        for (int k = 0; k < 4; k++) /* rounds to nearest even, as lrintf */
            X[k] = zero ? _mm256_setzero_si256() : _mm256_cvtps_epi32(_mm256_mul_ps(v[k], id));
        if (hi) {
            const __m256i k128 = _mm256_set1_epi32(128);
            __m256i H[4], L[4];
            for (int k = 0; k < 4; k++) {
                H[k] = _mm256_srai_epi32(_mm256_add_epi32(X[k], k128), 8); /* floor((X + 128) / 256) */
                L[k] = _mm256_sub_epi32(X[k], _mm256_slli_epi32(H[k], 8));
            }
            store_bytes(q1, H[0], H[1], H[2], H[3]);
            store_bytes(q2, L[0], L[1], L[2], L[3]);
        } else {
            store_bytes(q1, X[0], X[1], X[2], X[3]);
        }
        ts_rp_put_side(side, s, hsum_epi32(_mm256_add_epi32(X[0], X[1])), hsum_epi32(_mm256_add_epi32(X[2], X[3])),
                       gb > 1 && !zero ? TS_RP_K256_KMAX - k : 0);
    }
}
