/* qdot_ref.c - scalar reference of the activation quantizers and of the dot
 * products (weight row in its GGUF type) x (quantized activation row); the
 * TS_CPU_SCALAR dispatch table.
 *
 * These define what every SIMD kernel computes: per block, an exact integer
 * dot of the quants times the f32 product of the two scales, summed over the
 * blocks in order. The references recompute the activation sums they need
 * from the quants instead of reading the stored ones, so a wrong stored sum
 * makes the SIMD kernels (which use it) disagree with them.
 *
 * Block layouts (as ggml's ggml-common.h; element decoding as in
 * src/quant/quant.c): see the comment above each function.
 */
#include <math.h>
#include <string.h>

#include "kernels/qdot_impl.h"
#include "quant/quant.h"

static inline float rd_f16(const uint8_t *p) {
    return ts_f16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}
static inline float rd_f32(const uint8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}
static inline void wr_u16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)(v & 0xff);
    p[1] = (uint8_t)(v >> 8);
}

/* ---- activation quantization ---- */

/* q = roundf(x * id) clamped to [-127, 127]; NaN (from an inf/NaN input, or
 * 0 * inf when id overflowed) -> 0. */
static inline int q8_round(float x, float id) {
    const float v = roundf(x * id);
    if (!(v == v)) return 0;
    if (v >= 127.0f) return 127;
    if (v <= -127.0f) return -127;
    return (int)v;
}

/* max |x|; NaN when any x is NaN (ggml's MAX() loop would keep a NaN only
 * when it comes last and otherwise drop it silently; here it reaches d, so
 * the dot of the block is NaN). Same value as ggml for every other block. */
static inline float block_amax(const float *x, int n) {
    float amax = 0.0f;
    for (int j = 0; j < n; j++) {
        const float a = fabsf(x[j]);
        if (a > amax || a != a) amax = a;
    }
    return amax;
}

void ts_ref_quant_q8_block(const float *x, uint8_t *b) {
    const float d = block_amax(x, 32) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int j = 0; j < 32; j++) {
        const int q = q8_round(x[j], id);
        b[4 + j] = (uint8_t)(int8_t)q;
        sum += q;
    }
    wr_u16(b, ts_f32_to_f16(d));
    wr_u16(b + 2, (uint16_t)(int16_t)sum);
}

void ts_ref_quant_q8k_block(const float *x, uint8_t *b) {
    const float d = block_amax(x, 256) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    memcpy(b, &d, 4);
    for (int g = 0; g < 16; g++) {
        int16_t sum = 0;
        for (int j = 16 * g; j < 16 * g + 16; j++) {
            const int q = q8_round(x[j], id);
            b[4 + j] = (uint8_t)(int8_t)q;
            sum = (int16_t)(sum + q);
        }
        memcpy(b + 260 + 2 * g, &sum, 2);
    }
}

static void quant_q8(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / 32; i++) ts_ref_quant_q8_block(x + 32 * i, b + TS_ACT_Q8_BYTES * i);
}

static void quant_q8k(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / 256; i++) ts_ref_quant_q8k_block(x + 256 * i, b + TS_ACT_Q8K_BYTES * i);
}

/* ---- 32-element blocks x TS_ACT_Q8 ---- */

/* activation block: d at 0, quants at 4 */
#define XQ(x) ((const int8_t *)((x) + 4))

/* Q4_0 {f16 d; u8 qs[16]}: element j < 16 = low nibble of qs[j], j >= 16 =
 * high nibble of qs[j-16]; value (q - 8) * d. */
static float dot_q4_0(int64_t n, const void *vw, const void *vx) {
    const uint8_t *w = vw, *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / 32; i++, w += 18, x += TS_ACT_Q8_BYTES) {
        const int8_t *q8 = XQ(x);
        int isum = 0;
        for (int j = 0; j < 16; j++)
            isum += ((w[2 + j] & 15) - 8) * q8[j] + ((w[2 + j] >> 4) - 8) * q8[j + 16];
        sum += (rd_f16(w) * rd_f16(x)) * (float)isum;
    }
    return sum;
}

/* Q4_1 {f16 d; f16 m; u8 qs[16]}: value q * d + m. */
static float dot_q4_1(int64_t n, const void *vw, const void *vx) {
    const uint8_t *w = vw, *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / 32; i++, w += 20, x += TS_ACT_Q8_BYTES) {
        const int8_t *q8 = XQ(x);
        int isum = 0, xsum = 0;
        for (int j = 0; j < 16; j++) {
            isum += (w[4 + j] & 15) * q8[j] + (w[4 + j] >> 4) * q8[j + 16];
            xsum += q8[j] + q8[j + 16];
        }
        const float dx = rd_f16(x);
        sum += (rd_f16(w) * dx) * (float)isum + rd_f16(w + 2) * (dx * (float)xsum);
    }
    return sum;
}

/* Q5_0 {f16 d; u32 qh; u8 qs[16]}: bit j of qh is bit 4 of element j;
 * value (q - 16) * d. */
static float dot_q5_0(int64_t n, const void *vw, const void *vx) {
    const uint8_t *w = vw, *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / 32; i++, w += 22, x += TS_ACT_Q8_BYTES) {
        const int8_t *q8 = XQ(x);
        uint32_t qh;
        memcpy(&qh, w + 2, 4);
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            const int q0 = (int)((w[6 + j] & 15u) | (((qh >> j) & 1u) << 4)) - 16;
            const int q1 = (int)((w[6 + j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - 16;
            isum += q0 * q8[j] + q1 * q8[j + 16];
        }
        sum += (rd_f16(w) * rd_f16(x)) * (float)isum;
    }
    return sum;
}

/* Q5_1 {f16 d; f16 m; u32 qh; u8 qs[16]}: value q * d + m. */
static float dot_q5_1(int64_t n, const void *vw, const void *vx) {
    const uint8_t *w = vw, *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / 32; i++, w += 24, x += TS_ACT_Q8_BYTES) {
        const int8_t *q8 = XQ(x);
        uint32_t qh;
        memcpy(&qh, w + 4, 4);
        int isum = 0, xsum = 0;
        for (int j = 0; j < 16; j++) {
            const int q0 = (int)((w[8 + j] & 15u) | (((qh >> j) & 1u) << 4));
            const int q1 = (int)((w[8 + j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
            isum += q0 * q8[j] + q1 * q8[j + 16];
            xsum += q8[j] + q8[j + 16];
        }
        const float dx = rd_f16(x);
        sum += (rd_f16(w) * dx) * (float)isum + rd_f16(w + 2) * (dx * (float)xsum);
    }
    return sum;
}

/* Q8_0 {f16 d; i8 qs[32]}. */
static float dot_q8_0(int64_t n, const void *vw, const void *vx) {
    const uint8_t *w = vw, *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / 32; i++, w += 34, x += TS_ACT_Q8_BYTES) {
        const int8_t *q8 = XQ(x);
        int isum = 0;
        for (int j = 0; j < 32; j++) isum += (int8_t)w[2 + j] * q8[j];
        sum += (rd_f16(w) * rd_f16(x)) * (float)isum;
    }
    return sum;
}

/* ---- 256-element super-blocks x TS_ACT_Q8K ---- */

/* Q2_K {u8 scales[16]; u8 qs[64]; f16 d; f16 dmin}: element e = 128n + 32j
 * + l is bits 2j..2j+1 of qs[32n + l], group g = 8n + 2j + l/16; scales[g]:
 * low nibble scale, high nibble min; value d*sc*q - dmin*m. */
static float dot_q2_k(int64_t n, const void *vw, const void *vx) {
    const uint8_t *w = vw, *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / 256; i++, w += 84, x += TS_ACT_Q8K_BYTES) {
        const int8_t *q8 = XQ(x);
        int isum = 0, msum = 0;
        for (int e = 0; e < 256; e++) {
            const int nn = e / 128, j = (e % 128) / 32, l = e % 32;
            const int g = 8 * nn + 2 * j + l / 16;
            const int q = (w[16 + 32 * nn + l] >> (2 * j)) & 3;
            isum += (w[g] & 15) * q * q8[e];
            msum += (w[g] >> 4) * q8[e];
        }
        const float dx = rd_f32(x);
        sum += (rd_f16(w + 80) * dx) * (float)isum - (rd_f16(w + 82) * dx) * (float)msum;
    }
    return sum;
}

/* Q3_K {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}: element e = 128n +
 * 32j + l has low bits (qs[32n + l] >> 2j) & 3, minus 4 when bit 4n + j of
 * hmask[l] is clear; group g = 8n + 2j + l/16 with the 6-bit scale of
 * ts_k3_unpack_scales' comment (decoded here byte by byte), minus 32. */
static float dot_q3_k(int64_t n, const void *vw, const void *vx) {
    const uint8_t *w = vw, *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / 256; i++, w += 110, x += TS_ACT_Q8K_BYTES) {
        const int8_t *q8 = XQ(x);
        const uint8_t *sb = w + 96;
        int isum = 0;
        for (int e = 0; e < 256; e++) {
            const int nn = e / 128, j = (e % 128) / 32, l = e % 32;
            const int g = 8 * nn + 2 * j + l / 16;
            const int lo = g < 8 ? (sb[g] & 15) : (sb[g - 8] >> 4);
            const int hi = (sb[8 + g % 4] >> (2 * (g / 4))) & 3;
            int q = (w[32 + 32 * nn + l] >> (2 * j)) & 3;
            if (!((w[l] >> (4 * nn + j)) & 1)) q -= 4;
            isum += ((lo | (hi << 4)) - 32) * q * q8[e];
        }
        sum += (rd_f16(w + 108) * rd_f32(x)) * (float)isum;
    }
    return sum;
}

/* (scale, min) of sub-block s of Q4_K/Q5_K, byte by byte. */
static void k4_pair(const uint8_t *q, int s, int *sc, int *m) {
    if (s < 4) {
        *sc = q[s] & 63;
        *m = q[s + 4] & 63;
    } else {
        *sc = (q[s + 4] & 15) | ((q[s - 4] >> 6) << 4);
        *m = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
    }
}

/* Q4_K {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}: 8 sub-blocks of 32;
 * sub-block s = 2k + h is nibble h of qs[32k .. 32k+31]; value d*sc*q - dmin*m. */
static float dot_q4_k(int64_t n, const void *vw, const void *vx) {
    const uint8_t *w = vw, *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / 256; i++, w += 144, x += TS_ACT_Q8K_BYTES) {
        const int8_t *q8 = XQ(x);
        int isum = 0, msum = 0;
        for (int s = 0; s < 8; s++) {
            int sc, m;
            k4_pair(w + 4, s, &sc, &m);
            int ps = 0, xs = 0;
            for (int l = 0; l < 32; l++) {
                ps += ((w[16 + 32 * (s / 2) + l] >> (4 * (s % 2))) & 15) * q8[32 * s + l];
                xs += q8[32 * s + l];
            }
            isum += sc * ps;
            msum += m * xs;
        }
        const float dx = rd_f32(x);
        sum += (rd_f16(w) * dx) * (float)isum - (rd_f16(w + 2) * dx) * (float)msum;
    }
    return sum;
}

/* Q5_K {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}: Q4_K plus
 * bit s of qh[l] as bit 4 of element l of sub-block s. */
static float dot_q5_k(int64_t n, const void *vw, const void *vx) {
    const uint8_t *w = vw, *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / 256; i++, w += 176, x += TS_ACT_Q8K_BYTES) {
        const int8_t *q8 = XQ(x);
        int isum = 0, msum = 0;
        for (int s = 0; s < 8; s++) {
            int sc, m;
            k4_pair(w + 4, s, &sc, &m);
            int ps = 0, xs = 0;
            for (int l = 0; l < 32; l++) {
                const int q = ((w[48 + 32 * (s / 2) + l] >> (4 * (s % 2))) & 15) | (((w[16 + l] >> s) & 1) << 4);
                ps += q * q8[32 * s + l];
                xs += q8[32 * s + l];
            }
            isum += sc * ps;
            msum += m * xs;
        }
        const float dx = rd_f32(x);
        sum += (rd_f16(w) * dx) * (float)isum - (rd_f16(w + 2) * dx) * (float)msum;
    }
    return sum;
}

/* Q6_K {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}: in half n, element
 * 32r + l has low nibble from ql[64n + l + 32(r&1)] (nibble r>>1), top 2 bits
 * (qh[32n + l] >> 2r) & 3, scale scales[8n + 2r + l/16]; value d*sc*(q - 32). */
static float dot_q6_k(int64_t n, const void *vw, const void *vx) {
    const uint8_t *w = vw, *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / 256; i++, w += 210, x += TS_ACT_Q8K_BYTES) {
        const int8_t *q8 = XQ(x);
        int isum = 0;
        for (int nn = 0; nn < 2; nn++) {
            for (int r = 0; r < 4; r++) {
                for (int l = 0; l < 32; l++) {
                    const int lo = (w[64 * nn + l + 32 * (r & 1)] >> (4 * (r >> 1))) & 15;
                    const int hi = (w[128 + 32 * nn + l] >> (2 * r)) & 3;
                    const int sc = (int8_t)w[192 + 8 * nn + 2 * r + l / 16];
                    isum += sc * ((lo | (hi << 4)) - 32) * q8[128 * nn + 32 * r + l];
                }
            }
        }
        sum += (rd_f16(w + 208) * rd_f32(x)) * (float)isum;
    }
    return sum;
}

/* ---- plain floats x TS_ACT_F32 ---- */

static float dot_f32(int64_t n, const void *vw, const void *vx) {
    const uint8_t *w = vw, *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) sum += rd_f32(w + 4 * i) * rd_f32(x + 4 * i);
    return sum;
}

static float dot_f16(int64_t n, const void *vw, const void *vx) {
    const uint8_t *w = vw, *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) sum += rd_f16(w + 2 * i) * rd_f32(x + 4 * i);
    return sum;
}

/* BF16: the top half of an f32, so the conversion is exact */
static float dot_bf16(int64_t n, const void *vw, const void *vx) {
    const uint8_t *w = vw, *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) sum += ts_bf16_to_f32((uint16_t)(w[2 * i] | (w[2 * i + 1] << 8))) * rd_f32(x + 4 * i);
    return sum;
}

/* The scalar "tile" is four independent dots: same function, same results. */
#define TILE(name)                                                                            \
    static void name##_x4(int64_t n, const void *w, const void *const x[4], float out[4]) { \
        for (int t = 0; t < 4; t++) out[t] = name(n, w, x[t]);                              \
    }
TILE(dot_q4_0)
TILE(dot_q4_1)
TILE(dot_q5_0)
TILE(dot_q5_1)
TILE(dot_q8_0)
TILE(dot_q2_k)
TILE(dot_q3_k)
TILE(dot_q4_k)
TILE(dot_q5_k)
TILE(dot_q6_k)
TILE(dot_f32)
TILE(dot_f16)
TILE(dot_bf16)

#define ENTRY(T, name) .dot[T] = name, .dot4[T] = name##_x4

const ts_kern ts_kern_tab_scalar = {
    .level = TS_CPU_SCALAR,
    .requires = TS_CPU_REQ_SCALAR,
    .score = TS_CPU_SCORE_SCALAR,
    .quant_q8 = quant_q8,
    .quant_q8k = quant_q8k,
    ENTRY(TS_TYPE_Q4_0, dot_q4_0),
    ENTRY(TS_TYPE_Q4_1, dot_q4_1),
    ENTRY(TS_TYPE_Q5_0, dot_q5_0),
    ENTRY(TS_TYPE_Q5_1, dot_q5_1),
    ENTRY(TS_TYPE_Q8_0, dot_q8_0),
    ENTRY(TS_TYPE_Q2_K, dot_q2_k),
    ENTRY(TS_TYPE_Q3_K, dot_q3_k),
    ENTRY(TS_TYPE_Q4_K, dot_q4_k),
    ENTRY(TS_TYPE_Q5_K, dot_q5_k),
    ENTRY(TS_TYPE_Q6_K, dot_q6_k),
    ENTRY(TS_TYPE_F32, dot_f32),
    ENTRY(TS_TYPE_F16, dot_f16),
    ENTRY(TS_TYPE_BF16, dot_bf16),
};
