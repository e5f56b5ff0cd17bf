/* qdot_neon.c - the TS_CPU_NEON dispatch table: aarch64 AdvSIMD kernels with
 * the dotprod extension (sdot: signed 8-bit x 8-bit, 4 products per int32
 * lane). This file alone gets -march=armv8.2-a+dotprod+fp16; it only runs
 * after cpu.c found asimd, asimddp and the fp16 hwcaps.
 *
 * sdot is signed x signed, so quants are used as their signed values
 * directly (q - 8, q - 16, q - 32, ...) and no sign trick or bias correction
 * is needed. The integer part of each block is exact; the float work differs
 * from x86 in lane layout only (results within the bound of the tests).
 *
 * As on x86, each kernel is a tile over nt = 1 or 4 activation rows (constant
 * after inlining) whose per-row arithmetic does not depend on nt: the 4-row
 * tile gives the one-row results bit for bit.
 */
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "kernels/arm/gemm_arm.h"
#include "kernels/qdot_impl.h"
#include "quant/quant.h"

#define AI static inline __attribute__((always_inline))

/* ---- loads ---- */

AI float ld_f16(const uint8_t *p) {
    __fp16 h;
    memcpy(&h, p, 2);
    return (float)h;
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
AI int8x16_t lds8(const uint8_t *p) {
    return vld1q_s8((const int8_t *)p);
}
AI uint8x16_t ldu8(const uint8_t *p) {
    return vld1q_u8(p);
}
AI int16x8_t lds16(const uint8_t *p) {
    int16x8_t v;
    memcpy(&v, p, 16);
    return v;
}
AI int8x16_t s8(uint8x16_t v) {
    return vreinterpretq_s8_u8(v);
}

/* ---- activation quantization ---- */

AI float amax_finite(const float *x, int n4, int *finite) {
    const float32x4_t inf = vdupq_n_f32(INFINITY);
    float32x4_t m = vdupq_n_f32(0.0f);
    uint32x4_t ok = vdupq_n_u32(~0u);
    for (int k = 0; k < n4; k++) {
        const float32x4_t a = vabsq_f32(vld1q_f32(x + 4 * k));
        m = vmaxq_f32(m, a);
        ok = vandq_u32(ok, vcltq_f32(a, inf)); /* false for inf and NaN */
    }
    *finite = vminvq_u32(ok) == ~0u;
    return vmaxvq_f32(m);
}

/* 16 values -> 16 int8 (roundf = fcvtas: nearest, ties away from zero);
 * returns their sum */
AI int quant16(const float *x, float32x4_t id, uint8_t *q) {
    int32x4_t v[4];
    for (int k = 0; k < 4; k++) v[k] = vcvtaq_s32_f32(vmulq_f32(vld1q_f32(x + 4 * k), id));
    const int16x8_t a = vcombine_s16(vqmovn_s32(v[0]), vqmovn_s32(v[1]));
    const int16x8_t b = vcombine_s16(vqmovn_s32(v[2]), vqmovn_s32(v[3]));
    vst1q_s8((int8_t *)q, vcombine_s8(vqmovn_s16(a), vqmovn_s16(b)));
    return vaddvq_s32(vaddq_s32(vaddq_s32(v[0], v[1]), vaddq_s32(v[2], v[3])));
}

/* non-finite blocks and subnormal d: the scalar definition (see x86) */
static void quant_q8_neon(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / 32; i++, x += 32, b += TS_ACT_Q8_BYTES) {
        int finite;
        const float d = amax_finite(x, 8, &finite) / 127.0f;
        if (!finite || (d != 0.0f && d < 0x1p-126f)) {
            ts_ref_quant_q8_block(x, b);
            continue;
        }
        const float32x4_t id = vdupq_n_f32(d != 0.0f ? 1.0f / d : 0.0f);
        const int16_t sum = (int16_t)(quant16(x, id, b + 4) + quant16(x + 16, id, b + 20));
        const uint16_t dh = ts_f32_to_f16(d);
        memcpy(b, &dh, 2);
        memcpy(b + 2, &sum, 2);
    }
}

static void quant_q8k_neon(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / 256; i++, x += 256, b += TS_ACT_Q8K_BYTES) {
        int finite;
        const float d = amax_finite(x, 64, &finite) / 127.0f;
        if (!finite || (d != 0.0f && d < 0x1p-126f)) {
            ts_ref_quant_q8k_block(x, b);
            continue;
        }
        const float32x4_t id = vdupq_n_f32(d != 0.0f ? 1.0f / d : 0.0f);
        memcpy(b, &d, 4);
        for (int g = 0; g < 16; g++) {
            const int16_t s = (int16_t)quant16(x + 16 * g, id, b + 4 + 16 * g);
            memcpy(b + 260 + 2 * g, &s, 2);
        }
    }
}

/* ---- 32-element blocks x TS_ACT_Q8 ---- */

#define Q8B TS_ACT_Q8_BYTES

/* sum of a * x over one activation block's 32 quants (a0: elements 0..15) */
AI int32x4_t dot32(int8x16_t a0, int8x16_t a1, const uint8_t *xb) {
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), a0, lds8(xb + 4)), a1, lds8(xb + 20));
}

AI float32x4_t acc_block(float32x4_t acc, float dw, const uint8_t *xb, int32x4_t lanes) {
    return vfmaq_f32(acc, vcvtq_f32_s32(lanes), vdupq_n_f32(dw * ld_f16(xb)));
}

/* bit j of qh -> 0x10 in byte j (lo: j < 16, hi: j >= 16) */
AI void qh_bytes(const uint8_t *p, uint8x16_t *lo, uint8x16_t *hi) {
    static const uint8_t sel[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    static const uint8_t ilo[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
    static const uint8_t ihi[16] = {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
    uint32_t qh;
    memcpy(&qh, p, 4);
    const uint8x16_t v = vreinterpretq_u8_u32(vdupq_n_u32(qh));
    const uint8x16_t bit = vld1q_u8(sel), k10 = vdupq_n_u8(0x10);
    *lo = vandq_u8(vtstq_u8(vqtbl1q_u8(v, vld1q_u8(ilo)), bit), k10);
    *hi = vandq_u8(vtstq_u8(vqtbl1q_u8(v, vld1q_u8(ihi)), bit), k10);
}

AI void q4_0_tile(int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    float32x4_t acc[4];
    for (int t = 0; t < nt; t++) acc[t] = vdupq_n_f32(0.0f);
    const uint8x16_t m4 = vdupq_n_u8(0x0f);
    const int8x16_t k8 = vdupq_n_s8(8);
    for (int64_t i = 0; i < n / 32; i++, w += 18) {
        const float dw = ld_f16(w);
        const uint8x16_t raw = ldu8(w + 2);
        const int8x16_t q0 = vsubq_s8(s8(vandq_u8(raw, m4)), k8), q1 = vsubq_s8(s8(vshrq_n_u8(raw, 4)), k8);
        for (int t = 0; t < nt; t++) {
            const uint8_t *xb = x[t] + Q8B * i;
            acc[t] = acc_block(acc[t], dw, xb, dot32(q0, q1, xb));
        }
    }
    for (int t = 0; t < nt; t++) out[t] = vaddvq_f32(acc[t]);
}

AI void q5_0_tile(int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    float32x4_t acc[4];
    for (int t = 0; t < nt; t++) acc[t] = vdupq_n_f32(0.0f);
    const uint8x16_t m4 = vdupq_n_u8(0x0f);
    const int8x16_t k16 = vdupq_n_s8(16);
    for (int64_t i = 0; i < n / 32; i++, w += 22) {
        const float dw = ld_f16(w);
        uint8x16_t h0, h1;
        qh_bytes(w + 2, &h0, &h1);
        const uint8x16_t raw = ldu8(w + 6);
        const int8x16_t q0 = vsubq_s8(s8(vorrq_u8(vandq_u8(raw, m4), h0)), k16);
        const int8x16_t q1 = vsubq_s8(s8(vorrq_u8(vshrq_n_u8(raw, 4), h1)), k16);
        for (int t = 0; t < nt; t++) {
            const uint8_t *xb = x[t] + Q8B * i;
            acc[t] = acc_block(acc[t], dw, xb, dot32(q0, q1, xb));
        }
    }
    for (int t = 0; t < nt; t++) out[t] = vaddvq_f32(acc[t]);
}

AI void q8_0_tile(int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    float32x4_t acc[4];
    for (int t = 0; t < nt; t++) acc[t] = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < n / 32; i++, w += 34) {
        const float dw = ld_f16(w);
        const int8x16_t q0 = lds8(w + 2), q1 = lds8(w + 18);
        for (int t = 0; t < nt; t++) {
            const uint8_t *xb = x[t] + Q8B * i;
            acc[t] = acc_block(acc[t], dw, xb, dot32(q0, q1, xb));
        }
    }
    for (int t = 0; t < nt; t++) out[t] = vaddvq_f32(acc[t]);
}

/* offset types: + m * (dx * sum x), the product exact (see qdot.h) */
AI void q4_1_tile(int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    float32x4_t acc[4];
    float accm[4];
    for (int t = 0; t < nt; t++) acc[t] = vdupq_n_f32(0.0f), accm[t] = 0.0f;
    const uint8x16_t m4 = vdupq_n_u8(0x0f);
    for (int64_t i = 0; i < n / 32; i++, w += 20) {
        const float dw = ld_f16(w), m = ld_f16(w + 2);
        const uint8x16_t raw = ldu8(w + 4);
        const int8x16_t q0 = s8(vandq_u8(raw, m4)), q1 = s8(vshrq_n_u8(raw, 4));
        for (int t = 0; t < nt; t++) {
            const uint8_t *xb = x[t] + Q8B * i;
            acc[t] = acc_block(acc[t], dw, xb, dot32(q0, q1, xb));
            accm[t] = fmaf(m, ld_f16(xb) * (float)ld_i16(xb + 2), accm[t]);
        }
    }
    for (int t = 0; t < nt; t++) out[t] = vaddvq_f32(acc[t]) + accm[t];
}

AI void q5_1_tile(int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    float32x4_t acc[4];
    float accm[4];
    for (int t = 0; t < nt; t++) acc[t] = vdupq_n_f32(0.0f), accm[t] = 0.0f;
    const uint8x16_t m4 = vdupq_n_u8(0x0f);
    for (int64_t i = 0; i < n / 32; i++, w += 24) {
        const float dw = ld_f16(w), m = ld_f16(w + 2);
        uint8x16_t h0, h1;
        qh_bytes(w + 4, &h0, &h1);
        const uint8x16_t raw = ldu8(w + 8);
        const int8x16_t q0 = s8(vorrq_u8(vandq_u8(raw, m4), h0)), q1 = s8(vorrq_u8(vshrq_n_u8(raw, 4), h1));
        for (int t = 0; t < nt; t++) {
            const uint8_t *xb = x[t] + Q8B * i;
            acc[t] = acc_block(acc[t], dw, xb, dot32(q0, q1, xb));
            accm[t] = fmaf(m, ld_f16(xb) * (float)ld_i16(xb + 2), accm[t]);
        }
    }
    for (int t = 0; t < nt; t++) out[t] = vaddvq_f32(acc[t]) + accm[t];
}

/* ---- 256-element super-blocks x TS_ACT_Q8K ---- */

#define Q8KB TS_ACT_Q8K_BYTES

/* sum_g c[g] * bsum[g] over the 16 groups (c as 16 int16) */
AI int bsum_dot(int16x8_t c0, int16x8_t c1, const uint8_t *xb) {
    const int16x8_t b0 = lds16(xb + 260), b1 = lds16(xb + 276);
    int32x4_t s = vmull_s16(vget_low_s16(c0), vget_low_s16(b0));
    s = vmlal_high_s16(s, c0, b0);
    s = vmlal_s16(s, vget_low_s16(c1), vget_low_s16(b1));
    s = vmlal_high_s16(s, c1, b1);
    return vaddvq_s32(s);
}

AI void q2_k_tile(int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    float32x4_t acc[4];
    float accm[4];
    for (int t = 0; t < nt; t++) acc[t] = vdupq_n_f32(0.0f), accm[t] = 0.0f;
    const uint8x16_t m3 = vdupq_n_u8(3);
    for (int64_t i = 0; i < n / 256; i++, w += 84) {
        const float d = ld_f16(w + 80), dmin = ld_f16(w + 82);
        uint8_t sc[16];
        vst1q_u8(sc, vandq_u8(ldu8(w), vdupq_n_u8(0x0f)));
        const uint8x16_t mins = vshrq_n_u8(ldu8(w), 4);
        const int16x8_t m0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mins)));
        const int16x8_t m1 = vreinterpretq_s16_u16(vmovl_high_u8(mins));
        int32x4_t sumi[4];
        for (int t = 0; t < nt; t++) sumi[t] = vdupq_n_s32(0);
        for (int h = 0; h < 2; h++) {
            const uint8x16_t qa = ldu8(w + 16 + 32 * h), qb = ldu8(w + 32 + 32 * h);
            for (int j = 0; j < 4; j++) {
                const int8x16_t sh = vdupq_n_s8((int8_t)(-2 * j));
                const int8x16_t q0 = s8(vandq_u8(vshlq_u8(qa, sh), m3)), q1 = s8(vandq_u8(vshlq_u8(qb, sh), m3));
                const int g = 8 * h + 2 * j;
                for (int t = 0; t < nt; t++) {
                    const uint8_t *xq = x[t] + Q8KB * i + 4 + 128 * h + 32 * j;
                    sumi[t] = vmlaq_n_s32(sumi[t], vdotq_s32(vdupq_n_s32(0), q0, lds8(xq)), sc[g]);
                    sumi[t] = vmlaq_n_s32(sumi[t], vdotq_s32(vdupq_n_s32(0), q1, lds8(xq + 16)), sc[g + 1]);
                }
            }
        }
        for (int t = 0; t < nt; t++) {
            const uint8_t *xb = x[t] + Q8KB * i;
            const float dx = ld_f32(xb);
            acc[t] = vfmaq_f32(acc[t], vcvtq_f32_s32(sumi[t]), vdupq_n_f32(d * dx));
            accm[t] = fmaf(dmin * dx, (float)bsum_dot(m0, m1, xb), accm[t]);
        }
    }
    for (int t = 0; t < nt; t++) out[t] = vaddvq_f32(acc[t]) - accm[t];
}

AI void q3_k_tile(int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    float32x4_t acc[4];
    for (int t = 0; t < nt; t++) acc[t] = vdupq_n_f32(0.0f);
    const uint8x16_t m3 = vdupq_n_u8(3), k4 = vdupq_n_u8(4);
    for (int64_t i = 0; i < n / 256; i++, w += 110) {
        const float d = ld_f16(w + 108);
        uint8_t su[16];
        int8_t sc[16];
        ts_k3_unpack_scales(w + 96, su);
        vst1q_s8(sc, vsubq_s8(s8(vld1q_u8(su)), vdupq_n_s8(32)));
        const uint8x16_t hm0 = ldu8(w), hm1 = ldu8(w + 16);
        int32x4_t sumi[4];
        for (int t = 0; t < nt; t++) sumi[t] = vdupq_n_s32(0);
        for (int h = 0; h < 2; h++) {
            const uint8x16_t qa = ldu8(w + 32 + 32 * h), qb = ldu8(w + 48 + 32 * h);
            for (int j = 0; j < 4; j++) {
                const int8x16_t sh = vdupq_n_s8((int8_t)(-2 * j));
                const uint8x16_t bit = vdupq_n_u8((uint8_t)(1u << (4 * h + j)));
                /* q = low2 + 4 * hbit - 4 */
                const uint8x16_t u0 = vorrq_u8(vandq_u8(vshlq_u8(qa, sh), m3), vandq_u8(vtstq_u8(hm0, bit), k4));
                const uint8x16_t u1 = vorrq_u8(vandq_u8(vshlq_u8(qb, sh), m3), vandq_u8(vtstq_u8(hm1, bit), k4));
                const int8x16_t q0 = vsubq_s8(s8(u0), s8(k4)), q1 = vsubq_s8(s8(u1), s8(k4));
                const int g = 8 * h + 2 * j;
                for (int t = 0; t < nt; t++) {
                    const uint8_t *xq = x[t] + Q8KB * i + 4 + 128 * h + 32 * j;
                    sumi[t] = vmlaq_n_s32(sumi[t], vdotq_s32(vdupq_n_s32(0), q0, lds8(xq)), sc[g]);
                    sumi[t] = vmlaq_n_s32(sumi[t], vdotq_s32(vdupq_n_s32(0), q1, lds8(xq + 16)), sc[g + 1]);
                }
            }
        }
        for (int t = 0; t < nt; t++) {
            const float dx = ld_f32(x[t] + Q8KB * i);
            acc[t] = vfmaq_f32(acc[t], vcvtq_f32_s32(sumi[t]), vdupq_n_f32(d * dx));
        }
    }
    for (int t = 0; t < nt; t++) out[t] = vaddvq_f32(acc[t]);
}

/* Q4_K / Q5_K (q5: the high-bit plane at w + 16, quants at w + 48) */
AI void k45_tile(int64_t n, const uint8_t *w, size_t bsz, int q5, const uint8_t *const *x, float *out,
                 const int nt) {
    float32x4_t acc[4];
    float accm[4];
    for (int t = 0; t < nt; t++) acc[t] = vdupq_n_f32(0.0f), accm[t] = 0.0f;
    const uint8x16_t m4 = vdupq_n_u8(0x0f), k10 = vdupq_n_u8(0x10);
    for (int64_t i = 0; i < n / 256; i++, w += bsz) {
        const float d = ld_f16(w), dmin = ld_f16(w + 2);
        uint8_t sm[16]; /* scales 0..7, mins 0..7 */
        ts_k4_unpack_scales(w + 4, sm);
        /* the mins apply to pairs of 16-groups: widen to 16 int16, one per group */
        const uint8x8_t mn = vld1_u8(sm + 8);
        const uint8x16_t mg = vzip1q_u8(vcombine_u8(mn, mn), vcombine_u8(mn, mn));
        const int16x8_t m0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mg)));
        const int16x8_t m1 = vreinterpretq_s16_u16(vmovl_high_u8(mg));
        const uint8_t *qs = w + (q5 ? 48 : 16);
        const uint8x16_t hb0 = q5 ? ldu8(w + 16) : vdupq_n_u8(0), hb1 = q5 ? ldu8(w + 32) : vdupq_n_u8(0);
        int32x4_t sumi[4];
        for (int t = 0; t < nt; t++) sumi[t] = vdupq_n_s32(0);
        for (int k = 0; k < 4; k++) {
            const uint8x16_t qa = ldu8(qs + 32 * k), qb = ldu8(qs + 32 * k + 16);
            uint8x16_t l0 = vandq_u8(qa, m4), l1 = vandq_u8(qb, m4);
            uint8x16_t u0 = vshrq_n_u8(qa, 4), u1 = vshrq_n_u8(qb, 4);
            if (q5) {
                const uint8x16_t bl = vdupq_n_u8((uint8_t)(1u << (2 * k))), bu = vdupq_n_u8((uint8_t)(2u << (2 * k)));
                l0 = vorrq_u8(l0, vandq_u8(vtstq_u8(hb0, bl), k10));
                l1 = vorrq_u8(l1, vandq_u8(vtstq_u8(hb1, bl), k10));
                u0 = vorrq_u8(u0, vandq_u8(vtstq_u8(hb0, bu), k10));
                u1 = vorrq_u8(u1, vandq_u8(vtstq_u8(hb1, bu), k10));
            }
            for (int t = 0; t < nt; t++) {
                const uint8_t *xq = x[t] + Q8KB * i + 4 + 64 * k;
                const int32x4_t pl = vdotq_s32(vdotq_s32(vdupq_n_s32(0), s8(l0), lds8(xq)), s8(l1), lds8(xq + 16));
                const int32x4_t pu = vdotq_s32(vdotq_s32(vdupq_n_s32(0), s8(u0), lds8(xq + 32)), s8(u1), lds8(xq + 48));
                sumi[t] = vmlaq_n_s32(sumi[t], pl, sm[2 * k]);
                sumi[t] = vmlaq_n_s32(sumi[t], pu, sm[2 * k + 1]);
            }
        }
        for (int t = 0; t < nt; t++) {
            const uint8_t *xb = x[t] + Q8KB * i;
            const float dx = ld_f32(xb);
            acc[t] = vfmaq_f32(acc[t], vcvtq_f32_s32(sumi[t]), vdupq_n_f32(d * dx));
            accm[t] = fmaf(dmin * dx, (float)bsum_dot(m0, m1, xb), accm[t]);
        }
    }
    for (int t = 0; t < nt; t++) out[t] = vaddvq_f32(acc[t]) - accm[t];
}
AI void q4_k_tile(int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    k45_tile(n, w, 144, 0, x, out, nt);
}
AI void q5_k_tile(int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    k45_tile(n, w, 176, 1, x, out, nt);
}

AI void q6_k_tile(int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    float32x4_t acc[4];
    for (int t = 0; t < nt; t++) acc[t] = vdupq_n_f32(0.0f);
    const uint8x16_t m4 = vdupq_n_u8(0x0f), m3 = vdupq_n_u8(0x30);
    const int8x16_t k32 = vdupq_n_s8(32);
    for (int64_t i = 0; i < n / 256; i++, w += 210) {
        const float d = ld_f16(w + 208);
        const int8_t *sc = (const int8_t *)(w + 192);
        int32x4_t sumi[4];
        for (int t = 0; t < nt; t++) sumi[t] = vdupq_n_s32(0);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = w + 64 * h, *qh = w + 128 + 32 * h;
            for (int r = 0; r < 4; r++) {
                /* low nibble source: ql[l + 32(r&1)], nibble r>>1; high bits 2r, 2r+1 of qh[l] */
                const int8x16_t shl = vdupq_n_s8((int8_t)(-4 * (r >> 1)));
                const int8x16_t shh = vdupq_n_s8((int8_t)(4 - 2 * r));
                int8x16_t q[2];
                for (int half = 0; half < 2; half++) {
                    const uint8x16_t lo = vandq_u8(vshlq_u8(ldu8(ql + 32 * (r & 1) + 16 * half), shl), m4);
                    const uint8x16_t hi = vandq_u8(vshlq_u8(ldu8(qh + 16 * half), shh), m3);
                    q[half] = vsubq_s8(s8(vorrq_u8(lo, hi)), k32);
                }
                const int g = 8 * h + 2 * r;
                for (int t = 0; t < nt; t++) {
                    const uint8_t *xq = x[t] + Q8KB * i + 4 + 128 * h + 32 * r;
                    sumi[t] = vmlaq_n_s32(sumi[t], vdotq_s32(vdupq_n_s32(0), q[0], lds8(xq)), sc[g]);
                    sumi[t] = vmlaq_n_s32(sumi[t], vdotq_s32(vdupq_n_s32(0), q[1], lds8(xq + 16)), sc[g + 1]);
                }
            }
        }
        for (int t = 0; t < nt; t++) {
            const float dx = ld_f32(x[t] + Q8KB * i);
            acc[t] = vfmaq_f32(acc[t], vcvtq_f32_s32(sumi[t]), vdupq_n_f32(d * dx));
        }
    }
    for (int t = 0; t < nt; t++) out[t] = vaddvq_f32(acc[t]);
}

/* ---- plain floats: four 4-lane accumulators (elements 16i + 4k + lane),
 * remaining 4s into the first, the last < 4 added in order by fmaf ---- */

AI float f_finish(float32x4_t a[4]) {
    return vaddvq_f32(vaddq_f32(vaddq_f32(a[0], a[1]), vaddq_f32(a[2], a[3])));
}

AI void f32_tile(int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    float32x4_t a[4][4];
    for (int t = 0; t < nt; t++)
        for (int k = 0; k < 4; k++) a[t][k] = vdupq_n_f32(0.0f);
    const float *wf = (const float *)(const void *)w;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        float32x4_t wv[4];
        for (int k = 0; k < 4; k++) wv[k] = vld1q_f32(wf + i + 4 * k);
        for (int t = 0; t < nt; t++)
            for (int k = 0; k < 4; k++)
                a[t][k] = vfmaq_f32(a[t][k], wv[k], vld1q_f32((const float *)(const void *)x[t] + i + 4 * k));
    }
    for (; i + 4 <= n; i += 4) {
        const float32x4_t wv = vld1q_f32(wf + i);
        for (int t = 0; t < nt; t++) a[t][0] = vfmaq_f32(a[t][0], wv, vld1q_f32((const float *)(const void *)x[t] + i));
    }
    for (int t = 0; t < nt; t++) {
        float s = f_finish(a[t]);
        for (int64_t k = i; k < n; k++) s = fmaf(ld_f32(w + 4 * k), ld_f32(x[t] + 4 * k), s);
        out[t] = s;
    }
}

/* F16 and BF16 x f32; a bf16 weight is the top half of an f32, widened by a
 * shift, exactly */
AI float32x4_t ld_h16x4(const int bf, const uint8_t *p) {
    uint16x4_t h;
    memcpy(&h, p, 8);
    return bf ? vreinterpretq_f32_u32(vshll_n_u16(h, 16)) : vcvt_f32_f16(vreinterpret_f16_u16(h));
}

AI float ld_h16(const int bf, const uint8_t *p) {
    return bf ? ts_bf16_to_f32((uint16_t)(p[0] | (p[1] << 8))) : ld_f16(p);
}

AI void h16_tile(const int bf, int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    float32x4_t a[4][4];
    for (int t = 0; t < nt; t++)
        for (int k = 0; k < 4; k++) a[t][k] = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        float32x4_t wv[4];
        for (int k = 0; k < 4; k++) wv[k] = ld_h16x4(bf, w + 2 * (i + 4 * k));
        for (int t = 0; t < nt; t++)
            for (int k = 0; k < 4; k++)
                a[t][k] = vfmaq_f32(a[t][k], wv[k], vld1q_f32((const float *)(const void *)x[t] + i + 4 * k));
    }
    for (; i + 4 <= n; i += 4) {
        const float32x4_t wv = ld_h16x4(bf, w + 2 * i);
        for (int t = 0; t < nt; t++) a[t][0] = vfmaq_f32(a[t][0], wv, vld1q_f32((const float *)(const void *)x[t] + i));
    }
    for (int t = 0; t < nt; t++) {
        float s = f_finish(a[t]);
        for (int64_t k = i; k < n; k++) s = fmaf(ld_h16(bf, w + 2 * k), ld_f32(x[t] + 4 * k), s);
        out[t] = s;
    }
}

AI void f16_tile(int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    h16_tile(0, n, w, x, out, nt);
}

AI void bf16_tile(int64_t n, const uint8_t *w, const uint8_t *const *x, float *out, const int nt) {
    h16_tile(1, n, w, x, out, nt);
}

/* ---- entry points and the table ---- */

#define ENTRIES(name)                                                                         \
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
ENTRIES(q4_0)
ENTRIES(q4_1)
ENTRIES(q5_0)
ENTRIES(q5_1)
ENTRIES(q8_0)
ENTRIES(q2_k)
ENTRIES(q3_k)
ENTRIES(q4_k)
ENTRIES(q5_k)
ENTRIES(q6_k)
ENTRIES(f32)
ENTRIES(f16)
ENTRIES(bf16)

#define ENTRY(T, name) .dot[T] = name##_1, .dot4[T] = name##_4

const ts_kern ts_kern_tab_neon = {
    .level = TS_CPU_NEON,
    .requires = TS_CPU_REQ_NEON,
    .score = TS_CPU_SCORE_NEON,
    .quant_q8 = quant_q8_neon,
    .quant_q8k = quant_q8k_neon,
    ENTRY(TS_TYPE_Q4_0, q4_0),
    ENTRY(TS_TYPE_Q4_1, q4_1),
    ENTRY(TS_TYPE_Q5_0, q5_0),
    ENTRY(TS_TYPE_Q5_1, q5_1),
    ENTRY(TS_TYPE_Q8_0, q8_0),
    ENTRY(TS_TYPE_Q2_K, q2_k),
    ENTRY(TS_TYPE_Q3_K, q3_k),
    ENTRY(TS_TYPE_Q4_K, q4_k),
    ENTRY(TS_TYPE_Q5_K, q5_k),
    ENTRY(TS_TYPE_Q6_K, q6_k),
    ENTRY(TS_TYPE_F32, f32),
    ENTRY(TS_TYPE_F16, f16),
    ENTRY(TS_TYPE_BF16, bf16),
    /* panel GEMM (gemm_neon.c): bit-identical to the scalar definition */
    .rp_gemm[TS_TYPE_Q4_0] = ts_rp_q4_0_neon,
    .rp_gemm[TS_TYPE_Q4_1] = ts_rp_q4_1_neon,
    .rp_gemm[TS_TYPE_Q8_0] = ts_rp_q8_0_neon,
    .rp_gemm[TS_TYPE_Q5_0] = ts_rp_q5_0_neon,
    .rp_gemm[TS_TYPE_Q5_1] = ts_rp_q5_1_neon,
    .rp_gemm[TS_TYPE_Q2_K] = ts_rp_q2_k_neon,
    .rp_gemm[TS_TYPE_Q3_K] = ts_rp_q3_k_neon,
    .rp_gemm[TS_TYPE_Q4_K] = ts_rp_q4_k_neon,
    .rp_gemm[TS_TYPE_Q5_K] = ts_rp_q5_k_neon,
    .rp_gemm[TS_TYPE_Q6_K] = ts_rp_q6_k_neon,
    .rp_quant = ts_rp_quant_neon,
};
