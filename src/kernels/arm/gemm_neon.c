/* gemm_neon.c - the panel GEMM and activation-tile quantizer of repack.h
 * for aarch64 AdvSIMD + dotprod (this file gets -march=armv8.2-a+dotprod+
 * fp16 with the other arm/ files; it only runs after cpu.c found them).
 *
 * A 64-byte weight vector of a panel is four 16-byte quarters (rows 4k ..
 * 4k+3, 4 bytes each), which is exactly sdot's shape: one vdotq_laneq_s32
 * adds, per int32 lane (row), the 4 weight bytes times the token's 4
 * activation bytes of one lane of a 16-byte activation register. The panel
 * is walked one quarter (4 rows) at a time, so a block's decoded weights (8
 * registers), a tile's f32 accumulators (up to 8) and a token's activation
 * planes fit in the 32 vector registers.
 *
 * sdot is signed x signed; the definition's u is unsigned (repack.h):
 *   2/3/4/5/6-bit types: u <= 63 is its own int8, and the offset term (-o sumX)
 *     from the tile is added as in the definition (Q3_K: the -32 sumX field
 *     shifted right by 3, exact);
 *   Q8_0 (u = q + 128 up to 255): the stored signed byte q = u ^ 0x80 is
 *     used instead, and sum q X = sum u X - 128 sumX is the definition's
 *     integer with its offset term already in (so the tile's is not added;
 *     at the hi precision 256 sum q q1 + sum q q2 likewise).
 * Every sum is exact in int32, so the block integers are the definition's;
 * the f32 work is its operations in its order (vfmaq = fmaf, vfmsq =
 * fmaf(-a, b, c): both round the exact value once), so the results are
 * bit-identical to ts_rp_gemm_ref (tests/test_rp_gemm.c under qemu-aarch64,
 * tools/test_aarch64.sh).
 */
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "kernels/arm/gemm_arm.h"
#include "kernels/repack.h"
#include "kernels/rp_kernel.h"

#define AI static inline __attribute__((always_inline))

AI float32x4_t ld_f16x4(const uint8_t *p) {
    float16x4_t h;
    memcpy(&h, p, 8);
    return vcvt_f32_f16(h);
}
AI float32x4_t bcastf(const uint8_t *p) {
    float v;
    memcpy(&v, p, 4);
    return vdupq_n_f32(v);
}
AI int32x4_t bcast32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return vdupq_n_s32(v);
}
/* 4 bytes -> f32, unsigned / signed */
AI float32x4_t cvt4_u(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    const uint16x4_t h = vget_low_u16(vmovl_u8(vreinterpret_u8_u32(vdup_n_u32(v))));
    return vcvtq_f32_u32(vmovl_u16(h));
}
/* 4 bytes -> the f32 of their low / high nibbles (Q2_K's scale | min bytes) */
AI void cvt4_nib(const uint8_t *p, float32x4_t *lo, float32x4_t *hi) {
    uint32_t v;
    memcpy(&v, p, 4);
    const uint32x4_t b = vmovl_u16(vget_low_u16(vmovl_u8(vreinterpret_u8_u32(vdup_n_u32(v)))));
    *lo = vcvtq_f32_u32(vandq_u32(b, vdupq_n_u32(0x0f)));
    *hi = vcvtq_f32_u32(vshrq_n_u32(b, 4));
}
AI float32x4_t cvt4_s(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    const int16x4_t h = vget_low_s16(vmovl_s8(vreinterpret_s8_u32(vdup_n_u32(v))));
    return vcvtq_f32_s32(vmovl_s16(h));
}


/* The weights of one 32-block, rows 4k .. 4k+3 (k = quarter): u[v] = byte
 * vector v (elements 4v .. 4v+3 of each row) as int8 (u, or Q8_0's q). q:
 * the block's quants (a 5-bit type's hbit vector follows its nibbles);
 * layouts in rp_layout.h. */
AI void decode_quarter(const int kind, const uint8_t *q, const int k, int8x16_t u[8]) {
    if (kind == K_Q8_0) {
        for (int v = 0; v < 8; v++) /* the panel holds u; q = u - 128 = u ^ 0x80 */
            u[v] = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(q + 64 * v + 16 * k), vdupq_n_u8(0x80)));
        return;
    }
    if (kind == K_Q2_K) { /* bits 2j, 2j+1 of 2-bit vector g -> v = 4g + j */
        const uint8x16_t m3 = vdupq_n_u8(3);
        for (int g = 0; g < 2; g++) {
            const uint8x16_t raw = vld1q_u8(q + 64 * g + 16 * k);
            for (int j = 0; j < 4; j++)
                u[4 * g + j] = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(raw, vdupq_n_s8((int8_t)(-2 * j))), m3));
        }
        return;
    }
    if (kind == K_Q3_K) { /* bits 2j, 2j+1 of 2-bit vector g -> v = 4g + j; bit v of hbit -> bit 2 */
        const uint8x16_t m3 = vdupq_n_u8(3), k04 = vdupq_n_u8(0x04), hb = vld1q_u8(q + rp_hb(kind) + 16 * k);
        for (int g = 0; g < 2; g++) {
            const uint8x16_t raw = vld1q_u8(q + 64 * g + 16 * k);
            for (int j = 0; j < 4; j++) {
                const int v = 4 * g + j;
                const uint8x16_t lo = vandq_u8(vshlq_u8(raw, vdupq_n_s8((int8_t)(-2 * j))), m3);
                u[v] = vreinterpretq_s8_u8(vorrq_u8(lo, vandq_u8(vtstq_u8(hb, vdupq_n_u8((uint8_t)(1u << v))), k04)));
            }
        }
        return;
    }
    const uint8x16_t m4 = vdupq_n_u8(0x0f);
    uint8x16_t b[8];
    for (int j = 0; j < 4; j++) { /* nibble vector j: v = 2j low, 2j + 1 high */
        const uint8x16_t raw = vld1q_u8(q + 64 * j + 16 * k);
        b[2 * j] = vandq_u8(raw, m4);
        b[2 * j + 1] = vshrq_n_u8(raw, 4);
    }
    if (rp_5bit(kind)) { /* bit v of the hbit vector -> bit 4 of vector v */
        const uint8x16_t hb = vld1q_u8(q + rp_hb(kind) + 16 * k), k10 = vdupq_n_u8(0x10);
        for (int v = 0; v < 8; v++)
            b[v] = vorrq_u8(b[v], vandq_u8(vtstq_u8(hb, vdupq_n_u8((uint8_t)(1u << v))), k10));
    } else if (kind == K_Q6_K) { /* bits 2(v%4), +1 of hbit vector v/4 -> bits 4, 5 */
        const uint8x16_t k30 = vdupq_n_u8(0x30);
        for (int g = 0; g < 2; g++) {
            const uint8x16_t hb = vld1q_u8(q + rp_hb(kind) + 64 * g + 16 * k);
            for (int i = 0; i < 4; i++) /* a negative count shifts right */
                b[4 * g + i] = vorrq_u8(b[4 * g + i], vandq_u8(vshlq_u8(hb, vdupq_n_s8((int8_t)(4 - 2 * i))), k30));
        }
    }
    for (int v = 0; v < 8; v++) u[v] = vreinterpretq_s8_u8(b[v]);
}

/* sum over vectors v in [vb, ve) of u[v] . (elements 4v .. 4v+3 of the
 * activation plane at xq), per row: exact int32 */
AI int32x4_t dot_plane(const int8x16_t u[8], const uint8_t *xq, const int vb, const int ve, int32x4_t acc) {
    const int8x16_t x0 = vld1q_s8((const int8_t *)xq), x1 = vld1q_s8((const int8_t *)(xq + 16));
    if (vb == 0) {
        acc = vdotq_laneq_s32(acc, u[0], x0, 0);
        acc = vdotq_laneq_s32(acc, u[1], x0, 1);
        acc = vdotq_laneq_s32(acc, u[2], x0, 2);
        acc = vdotq_laneq_s32(acc, u[3], x0, 3);
    }
    if (ve == 8) {
        acc = vdotq_laneq_s32(acc, u[4], x1, 0);
        acc = vdotq_laneq_s32(acc, u[5], x1, 1);
        acc = vdotq_laneq_s32(acc, u[6], x1, 2);
        acc = vdotq_laneq_s32(acc, u[7], x1, 3);
    }
    return acc;
}

/* One 32-block (Q6_K: the half v in [vb, ve), vb 0 or 4, ve 4 or 8) for nt
 * tokens: f[t] = fma((float)i, S * s_t, f[t]) (lo256, g256: fma((float)i,
 * S, f[t]); the super-block's s comes later). x: the block's tile bytes;
 * off_at: side offset of the tile's i32 offset term (0: none) */
AI void block_part(const int kind, const int hi, const int g256, const int8x16_t u[8], const uint8_t *x, const int nt, const int vb,
                   const int ve, const int off_at, const float32x4_t S, float32x4_t *f) {
    const uint8_t *x2 = x + 32 * nt, *side = x + (hi ? 64 : 32) * nt;
    for (int t = 0; t < nt; t++) {
        const uint8_t *st = side + TS_RP_SIDE * t;
        const int32x4_t o32 = off_at ? bcast32(st + off_at) : vdupq_n_s32(0);
        const int32x4_t off = kind == K_Q3_K ? vshrq_n_s32(o32, 3) : o32;
        int32x4_t i;
        if (hi) {
            const int32x4_t a1 = dot_plane(u, x + 32 * t, vb, ve, vdupq_n_s32(0));
            const int32x4_t a2 = dot_plane(u, x2 + 32 * t, vb, ve, off);
            i = vaddq_s32(vshlq_n_s32(a1, 8), a2);
        } else {
            i = dot_plane(u, x + 32 * t, vb, ve, off);
        }
        if (g256) i = vshlq_s32(i, bcast32(st + 28)); /* the block's integers at the super-block's scale */
        f[t] = vfmaq_f32(f[t], vcvtq_f32_s32(i), g256 ? S : vmulq_f32(S, bcastf(st)));
    }
}

/* rows 4k .. 4k+3 of the panel against nt tokens */
AI void quarter_tile(const int kind, const int mode, int64_t n, const uint8_t *w, const uint8_t *x, const int nt,
                     const int k, float32x4_t *f) {
    const int kq = rp_kq(kind), hi = mode == TS_RP_HI, g256 = mode == TS_RP_LO256;
    const size_t wb = rp_wb(kind);
    const size_t xb = (hi ? 96 : 64) * (size_t)nt;
    int8x16_t u[8];
    float32x4_t gs[TS_RP_TT]; /* lo256: a super-block's terms before its one multiply */
    for (int t = 0; t < nt; t++) f[t] = vdupq_n_f32(0.0f);
    for (int64_t pb = 0; pb < n / rp_be(kind); pb++, w += wb) {
        const uint8_t *side0 = x + 32 * nt; /* lo256: the super-block's first side (holds its s) */
        float32x4_t *g = g256 ? gs : f;
        if (g256)
            for (int t = 0; t < nt; t++) gs[t] = vdupq_n_f32(0.0f);
        for (int sub = 0; sub < (kq ? 8 : 1); sub++, x += xb) {
            const uint8_t *side = x + (hi ? 64 : 32) * nt;
            if (kind == K_Q2_K) { /* two 16-element groups, each a scale and a min (nibbles of a byte) */
                const uint8_t *q = w + rp_sub(kind) * sub;
                decode_quarter(kind, q, k, u);
                const float32x4_t d = ld_f16x4(w + rp_d(kind) + 8 * k), dm = ld_f16x4(w + rp_m(kind) + 8 * k);
                for (int hg = 0; hg < 2; hg++) {
                    float32x4_t sc, mn;
                    cvt4_nib(q + rp_gsc(kind) + 16 * hg + 4 * k, &sc, &mn);
                    block_part(kind, hi, g256, u, x, nt, 4 * hg, 4 * hg + 4, 0, vmulq_f32(d, sc), g);
                    const float32x4_t ml = vmulq_f32(dm, mn);
                    for (int t = 0; t < nt; t++) { /* + (-sumX_hg) (dmin m_hg) s */
                        const uint8_t *st = side + TS_RP_SIDE * t;
                        const int32x4_t ns = vshrq_n_s32(bcast32(st + 20 + 4 * hg), 5);
                        const float32x4_t nsum = vcvtq_f32_s32(g256 ? vshlq_s32(ns, bcast32(st + 28)) : ns);
                        g[t] = vfmaq_f32(g[t], nsum, g256 ? ml : vmulq_f32(ml, bcastf(st)));
                    }
                }
            } else if (kind == K_Q6_K || kind == K_Q3_K) { /* two 16-element groups, int8 scales */
                const uint8_t *q = w + rp_sub(kind) * sub;
                decode_quarter(kind, q, k, u);
                const float32x4_t d = ld_f16x4(w + rp_d(kind) + 8 * k);
                block_part(kind, hi, g256, u, x, nt, 0, 4, 20, vmulq_f32(d, cvt4_s(q + rp_gsc(kind) + 4 * k)), g);
                block_part(kind, hi, g256, u, x, nt, 4, 8, 24, vmulq_f32(d, cvt4_s(q + rp_gsc(kind) + 16 + 4 * k)), g);
            } else if (kind == K_Q4_K || kind == K_Q5_K) {
                decode_quarter(kind, w + rp_sub(kind) * sub, k, u);
                const float32x4_t dl = vmulq_f32(ld_f16x4(w + rp_d(kind) + 8 * k),
                                                 cvt4_u(w + rp_sc(kind) + 16 * sub + 4 * k));
                const float32x4_t ml = vmulq_f32(ld_f16x4(w + rp_m(kind) + 8 * k),
                                                 cvt4_u(w + rp_mn(kind) + 16 * sub + 4 * k));
                block_part(kind, hi, g256, u, x, nt, 0, 8, 0, dl, g);
                for (int t = 0; t < nt; t++) f[t] = vfmsq_f32(f[t], ml, bcastf(side + TS_RP_SIDE * t + 4));
            } else {
                const int doff = rp_d(kind);
                /* Q8_0: none, the signed weights carry it (top of file) */
                const int off_at = kind == K_Q4_0 ? 8 : kind == K_Q5_0 ? 16 : 0;
                decode_quarter(kind, w, k, u);
                block_part(kind, hi, 0, u, x, nt, 0, 8, off_at, ld_f16x4(w + doff + 8 * k), f);
                if (rp_has_m32(kind)) {
                    const float32x4_t m = ld_f16x4(w + rp_m(kind) + 8 * k);
                    for (int t = 0; t < nt; t++) f[t] = vfmaq_f32(f[t], m, bcastf(side + TS_RP_SIDE * t + 4));
                }
            }
        }
        if (g256)
            for (int t = 0; t < nt; t++) { /* by s * 2^-sh of the first 32-block (2^-sh built in the exponent field) */
                const int32x4_t e = vshlq_n_s32(vsubq_s32(vdupq_n_s32(127), bcast32(side0 + TS_RP_SIDE * t + 28)), 23);
                f[t] = vfmaq_f32(f[t], gs[t], vmulq_f32(bcastf(side0 + TS_RP_SIDE * t), vreinterpretq_f32_s32(e)));
            }
    }
}

AI void panel_tile(const int kind, const int mode, int64_t n, const uint8_t *w, const uint8_t *x, const int nt,
                   float *y, int64_t ys, int n_rows) {
    for (int k = 0; 4 * k < n_rows; k++) { /* quarters holding rows to write */
        float32x4_t f[TS_RP_TT];
        quarter_tile(kind, mode, n, w, x, nt, k, f);
        const int nr = n_rows - 4 * k < 4 ? n_rows - 4 * k : 4;
        for (int t = 0; t < nt; t++) {
            float *yt = y + (int64_t)t * ys + 4 * k;
            if (nr == 4) {
                vst1q_f32(yt, f[t]);
            } else {
                float tmp[4];
                vst1q_f32(tmp, f[t]);
                memcpy(yt, tmp, (size_t)nr * sizeof(float));
            }
        }
    }
}

RP_ENTRY(ts_rp_q4_0_neon, K_Q4_0)
RP_ENTRY(ts_rp_q4_1_neon, K_Q4_1)
RP_ENTRY(ts_rp_q5_0_neon, K_Q5_0)
RP_ENTRY(ts_rp_q5_1_neon, K_Q5_1)
RP_ENTRY(ts_rp_q8_0_neon, K_Q8_0)
RP_ENTRY(ts_rp_q2_k_neon, K_Q2_K)
RP_ENTRY(ts_rp_q3_k_neon, K_Q3_K)
RP_ENTRY(ts_rp_q4_k_neon, K_Q4_K)
RP_ENTRY(ts_rp_q5_k_neon, K_Q5_K)
RP_ENTRY(ts_rp_q6_k_neon, K_Q6_K)

/* ---- activation quantizer: the arithmetic of ts_rp_quant_ref ---- */

/* 16 int32 (each in [-128, 127]) -> 16 bytes in order (exact narrowing) */
AI void store16(uint8_t *dst, int32x4_t a, int32x4_t b, int32x4_t c, int32x4_t d) {
    const int16x8_t ab = vcombine_s16(vmovn_s32(a), vmovn_s32(b)), cd = vcombine_s16(vmovn_s32(c), vmovn_s32(d));
    vst1q_s8((int8_t *)dst, vcombine_s8(vmovn_s16(ab), vmovn_s16(cd)));
}

void ts_rp_quant_neon(const float *x, int64_t n_in, int hi, uint8_t *tile, int nt, int slot) {
    if (hi == TS_RP_LO256 && n_in % 256) hi = TS_RP_LO; /* as ts_rp_quant_ref */
    const float C = hi == TS_RP_HI ? 32512.0f : 127.0f;
    const int gb = hi == TS_RP_LO256 ? 8 : 1; /* 32-blocks sharing a scale */
    hi = hi == TS_RP_HI;
    const size_t xb = (hi ? 96 : 64) * (size_t)nt;
    const float32x4_t fmax = vdupq_n_f32(3.4028235e38f);
    int zero = 1;
    float s256 = 0.0f, id256 = 0.0f, amax = 0.0f;
    for (int64_t b = 0; b < n_in / 32; b++, x += 32) {
        uint8_t *q1 = tile + (size_t)b * xb + 32 * slot;
        uint8_t *q2 = q1 + 32 * nt;
        uint8_t *side = tile + (size_t)b * xb + (hi ? 64 : 32) * nt + TS_RP_SIDE * slot;
        float32x4_t v[8];
        for (int k = 0; k < 8; k++) v[k] = vld1q_f32(x + 4 * k);
        if (b % gb == 0) { /* the group's scale: amax over its gb blocks */
            float32x4_t m = vdupq_n_f32(0.0f);
            uint32x4_t ok = vdupq_n_u32(~0u);
            for (int k = 0; k < 8 * gb; k++) {
                const float32x4_t a = vabsq_f32(vld1q_f32(x + 4 * k));
                ok = vandq_u32(ok, vcleq_f32(a, fmax)); /* false for inf and NaN */
                m = vmaxq_f32(m, a);
            }
            const int finite = vminvq_u32(ok) == ~0u;
            amax = finite ? vmaxvq_f32(m) : 0.0f; /* max is exact in any order */
            zero = !finite || amax < 0x1p-100f;
            s256 = !finite ? NAN : zero ? 0.0f : amax / C;
            id256 = zero ? 0.0f : C / amax;
        }
        int k = 0; /* lo256: this block's step S * 2^-k (repack.h) */
        if (gb > 1 && !zero) {
            float32x4_t m = vabsq_f32(v[0]);
            for (int j = 1; j < 8; j++) m = vmaxq_f32(m, vabsq_f32(v[j]));
            k = ts_rp_k256_k(vmaxvq_f32(m), amax);
        }
        const float s = s256 / (float)(1 << k);
        const float32x4_t id = vdupq_n_f32(id256 * (float)(1 << k));
        int32x4_t X[8];
        for (int k = 0; k < 8; k++) /* vcvtn: nearest even, as lrintf */
            X[k] = zero ? vdupq_n_s32(0) : vcvtnq_s32_f32(vmulq_f32(v[k], id));
        if (hi) {
            int32x4_t H[8], L[8];
            for (int k = 0; k < 8; k++) {
                H[k] = vshrq_n_s32(vaddq_s32(X[k], vdupq_n_s32(128)), 8); /* floor((X + 128) / 256) */
                L[k] = vsubq_s32(X[k], vshlq_n_s32(H[k], 8));
            }
            store16(q1, H[0], H[1], H[2], H[3]);
            store16(q1 + 16, H[4], H[5], H[6], H[7]);
            store16(q2, L[0], L[1], L[2], L[3]);
            store16(q2 + 16, L[4], L[5], L[6], L[7]);
        } else {
            store16(q1, X[0], X[1], X[2], X[3]);
            store16(q1 + 16, X[4], X[5], X[6], X[7]);
        }
        ts_rp_put_side(side, s, vaddvq_s32(vaddq_s32(vaddq_s32(X[0], X[1]), vaddq_s32(X[2], X[3]))),
                       vaddvq_s32(vaddq_s32(vaddq_s32(X[4], X[5]), vaddq_s32(X[6], X[7]))),
                       gb > 1 && !zero ? TS_RP_K256_KMAX - k : 0);
    }
}
