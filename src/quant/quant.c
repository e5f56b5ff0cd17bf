/* quant.c - scalar reference conversions between f32 and the stored element
 * types: f16/bf16 rounding, dequantization of the ggml block formats and the
 * round-to-nearest quantizers for Q4_0/Q4_1/Q8_0.
 *
 * Block layouts are those of ggml (ggml-common.h). Blocks inside a mapped file
 * have no alignment guarantee, so every multi-byte field is assembled from
 * bytes (little-endian, as GGUF stores it) instead of through a struct pointer.
 *
 * Arithmetic order follows ggml's dequantize_row_* exactly (scale products are
 * computed first in f32, then `scale * q - min`), and each product is stored to
 * a named float before the subtraction so that no compiler contracts the pair
 * into an fma: the result is then bit-identical to ggml and to gguf-py.
 *
 * Input bytes are untrusted: any bit pattern is a valid input and produces
 * some float (NaN/inf scales propagate), never UB.
 */
#include <math.h>
#include <string.h>

#include "quant/quant.h"

/* ---- little-endian field readers (unaligned-safe) ---- */

static inline uint16_t rd_u16(const uint8_t *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t rd_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline float rd_f16(const uint8_t *p) {
    return ts_f16_to_f32(rd_u16(p));
}
static inline void wr_u16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)(v & 0xff);
    p[1] = (uint8_t)(v >> 8);
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* ---- f16 / bf16 ---- */

float ts_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) /* inf, or NaN with its payload kept */
        return bits_f32(sign | 0x7f800000u | (mant << 13));
    if (exp != 0) /* normal: rebias 15 -> 127 */
        return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
    /* zero or subnormal: mant * 2^-24, exact in f32 */
    return bits_f32(sign | f32_bits((float)mant * 0x1p-24f));
}

uint16_t ts_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: quiet it, keep the top payload bits */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* >= 65520 rounds to inf (and inf stays inf) */
        return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u) { /* >= 2^-14: normal f16 */
        uint32_t r = ax - 0x38000000u; /* exponent bias 127 -> 15 */
        r += 0xfffu + ((r >> 13) & 1u); /* round to nearest, ties to even */
        return (uint16_t)(sign | (r >> 13));
    }
    uint32_t e = ax >> 23;
    if (e < 102) /* below 2^-25: rounds to zero */
        return sign;
    /* f16 subnormal: value / 2^-24 rounded to nearest even; a carry into
     * 0x400 correctly yields the smallest normal */
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t sh = 126 - e; /* 14..24 */
    uint32_t q = m >> sh;
    uint32_t rem = m & ((1u << sh) - 1u);
    uint32_t half = 1u << (sh - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}

float ts_bf16_to_f32(uint16_t h) {
    return bits_f32((uint32_t)h << 16);
}

uint16_t ts_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: force quiet, as ggml */
        return (uint16_t)((u >> 16) | 64u);
    /* round to nearest even; inf stays inf, overflow rounds up to inf */
    return (uint16_t)(((uint64_t)u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* ---- dequantization: one function per type, nb = number of blocks ---- */

/* Q4_0: {f16 d; u8 qs[16]}; element j<16 is the low nibble of qs[j], j>=16 the
 * high nibble of qs[j-16]; value (q - 8) * d. */
static void dq_q4_0(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 18, y += 32) {
        const float d = rd_f16(b);
        const uint8_t *qs = b + 2;
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((qs[j] & 0x0f) - 8) * d;
            y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
        }
    }
}

/* Q4_1: {f16 d; f16 m; u8 qs[16]}; value q * d + m. */
static void dq_q4_1(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 20, y += 32) {
        const float d = rd_f16(b);
        const float m = rd_f16(b + 2);
        const uint8_t *qs = b + 4;
        for (int j = 0; j < 16; j++) {
            const float p0 = (float)(qs[j] & 0x0f) * d;
            const float p1 = (float)(qs[j] >> 4) * d;
            y[j] = p0 + m;
            y[j + 16] = p1 + m;
        }
    }
}

/* Q5_0: {f16 d; u32 qh; u8 qs[16]}; bit j of qh is bit 4 of element j;
 * value (q - 16) * d. */
static void dq_q5_0(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 22, y += 32) {
        const float d = rd_f16(b);
        const uint32_t qh = rd_u32(b + 2);
        const uint8_t *qs = b + 6;
        for (int j = 0; j < 16; j++) {
            const int q0 = (int)((qs[j] & 0x0fu) | (((qh >> j) & 1u) << 4));
            const int q1 = (int)((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
            y[j] = (float)(q0 - 16) * d;
            y[j + 16] = (float)(q1 - 16) * d;
        }
    }
}

/* Q5_1: {f16 d; f16 m; u32 qh; u8 qs[16]}; value q * d + m. */
static void dq_q5_1(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 24, y += 32) {
        const float d = rd_f16(b);
        const float m = rd_f16(b + 2);
        const uint32_t qh = rd_u32(b + 4);
        const uint8_t *qs = b + 8;
        for (int j = 0; j < 16; j++) {
            const uint32_t q0 = (qs[j] & 0x0fu) | (((qh >> j) & 1u) << 4);
            const uint32_t q1 = (qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4);
            const float p0 = (float)q0 * d;
            const float p1 = (float)q1 * d;
            y[j] = p0 + m;
            y[j + 16] = p1 + m;
        }
    }
}

/* Q8_0: {f16 d; i8 qs[32]}; value q * d. */
static void dq_q8_0(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 34, y += 32) {
        const float d = rd_f16(b);
        for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)b[2 + j] * d;
    }
}

/* Q2_K: {u8 scales[16]; u8 qs[64]; f16 d; f16 dmin} over 256 elements in 16
 * groups of 16. Each scales byte: low nibble scale, high nibble min. Element
 * e = 128n + 32j + l (n<2, j<4, l<32) is bits 2j..2j+1 of qs[32n + l], group
 * 8n + 2j + (l >= 16); value (d*sc) * q - (dmin*m). */
static void dq_q2_k(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 84, y += 256) {
        const uint8_t *sc = b;
        const uint8_t *qs = b + 16;
        const float d = rd_f16(b + 80);
        const float dmin = rd_f16(b + 82);
        for (int n = 0; n < 2; n++) {
            for (int j = 0; j < 4; j++) {
                for (int h = 0; h < 2; h++) {
                    const uint8_t s = sc[8 * n + 2 * j + h];
                    const float dl = d * (float)(s & 0x0f);
                    const float ml = dmin * (float)(s >> 4);
                    float *o = y + 128 * n + 32 * j + 16 * h;
                    const uint8_t *q = qs + 32 * n + 16 * h;
                    for (int l = 0; l < 16; l++) {
                        const float p = dl * (float)((q[l] >> (2 * j)) & 3);
                        o[l] = p - ml;
                    }
                }
            }
        }
    }
}

/* Q3_K: {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}. 16 groups of 16 with
 * 6-bit signed scales (stored +32): low 4 bits are nibbles of scales[0..7]
 * (group s<8: low nibble of byte s; s>=8: high nibble of byte s-8), high 2 bits
 * are bits 2*(s/4) of scales[8 + s%4]. Element e = 128n + 32j + l takes 2 low
 * bits from qs[32n + l] >> 2j, and subtracts 4 when bit 4n+j of hmask[l] is
 * clear; value (d * (sc - 32)) * q. */
static void dq_q3_k(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 110, y += 256) {
        const uint8_t *hm = b;
        const uint8_t *qs = b + 32;
        const uint8_t *sb = b + 96;
        const float d = rd_f16(b + 108);
        for (int n = 0; n < 2; n++) {
            for (int j = 0; j < 4; j++) {
                const int bit = 4 * n + j;
                for (int h = 0; h < 2; h++) {
                    const int s = 8 * n + 2 * j + h;
                    const int lo = s < 8 ? (sb[s] & 0x0f) : (sb[s - 8] >> 4);
                    const int hi = (sb[8 + s % 4] >> (2 * (s / 4))) & 3;
                    const float dl = d * (float)((lo | (hi << 4)) - 32);
                    float *o = y + 128 * n + 32 * j + 16 * h;
                    for (int l = 16 * h; l < 16 * h + 16; l++) {
                        int q = (qs[32 * n + l] >> (2 * j)) & 3;
                        if (!((hm[l] >> bit) & 1)) q -= 4;
                        o[l - 16 * h] = dl * (float)q;
                    }
                }
            }
        }
    }
}

/* The 12-byte packed 6-bit (scale, min) pairs of Q4_K/Q5_K, 8 sub-blocks:
 * pairs 0..3 are the low 6 bits of bytes 0..3 / 4..7; pairs 4..7 take their
 * low nibble from byte 8+k (scale: low nibble, min: high nibble) and their top
 * 2 bits from the top bits of bytes k / 4+k. */
static void k4_scale_min(const uint8_t *q, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Q4_K: {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}: 8 sub-blocks of 32;
 * sub-blocks 2k and 2k+1 are the low and high nibbles of qs[32k..32k+31];
 * value (d*sc) * q - (dmin*m). */
static void dq_q4_k(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 144, y += 256) {
        const float d = rd_f16(b);
        const float dmin = rd_f16(b + 2);
        const uint8_t *sb = b + 4;
        const uint8_t *qs = b + 16;
        for (int k = 0; k < 4; k++) {
            for (int h = 0; h < 2; h++) {
                int sc, m;
                k4_scale_min(sb, 2 * k + h, &sc, &m);
                const float dl = d * (float)sc;
                const float ml = dmin * (float)m;
                float *o = y + 64 * k + 32 * h;
                for (int l = 0; l < 32; l++) {
                    const float p = dl * (float)((qs[32 * k + l] >> (4 * h)) & 0x0f);
                    o[l] = p - ml;
                }
            }
        }
    }
}

/* Q5_K: {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}: as Q4_K
 * plus a 5th bit for sub-block s from bit s of qh[l]. */
static void dq_q5_k(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 176, y += 256) {
        const float d = rd_f16(b);
        const float dmin = rd_f16(b + 2);
        const uint8_t *sb = b + 4;
        const uint8_t *qh = b + 16;
        const uint8_t *qs = b + 48;
        for (int k = 0; k < 4; k++) {
            for (int h = 0; h < 2; h++) {
                const int s = 2 * k + h;
                int sc, m;
                k4_scale_min(sb, s, &sc, &m);
                const float dl = d * (float)sc;
                const float ml = dmin * (float)m;
                float *o = y + 32 * s;
                for (int l = 0; l < 32; l++) {
                    const int q = ((qs[32 * k + l] >> (4 * h)) & 0x0f) | (((qh[l] >> s) & 1) << 4);
                    const float p = dl * (float)q;
                    o[l] = p - ml;
                }
            }
        }
    }
}

/* Q6_K: {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}: two halves of 128;
 * in half n, element 32r + l (r<4, l<32) has low nibble from
 * ql[64n + l + 32*(r&1)] (low nibble for r<2, high for r>=2), top 2 bits from
 * qh[32n + l] >> 2r, group scale scales[8n + 2r + l/16]; value
 * (d * sc) * (q - 32). */
static void dq_q6_k(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 210, y += 256) {
        const uint8_t *ql = b;
        const uint8_t *qh = b + 128;
        const uint8_t *sc = b + 192;
        const float d = rd_f16(b + 208);
        for (int n = 0; n < 2; n++) {
            for (int r = 0; r < 4; r++) {
                for (int l = 0; l < 32; l++) {
                    const int lo = (ql[64 * n + l + 32 * (r & 1)] >> (4 * (r >> 1))) & 0x0f;
                    const int hi = (qh[32 * n + l] >> (2 * r)) & 3;
                    const float ds = d * (float)(int8_t)sc[8 * n + 2 * r + l / 16];
                    y[128 * n + 32 * r + l] = ds * (float)((lo | (hi << 4)) - 32);
                }
            }
        }
    }
}

int ts_dequant_row(uint32_t type, const void *src, float *dst, int64_t n, ts_err *err) {
    const ts_type_traits *t = ts_type_info(type);
    if (!t) return ts_err_set(err, "dequant: unknown tensor type id %u", type);
    if (!t->can_dequant) return ts_err_set(err, "dequant: type %s is not supported", t->name);
    if (n < 0 || n % t->blck)
        return ts_err_set(err, "dequant: %s row length %lld is not a multiple of the block size %u", t->name,
                          (long long)n, t->blck);
    const uint8_t *s = src;
    const int64_t nb = n / t->blck;
    switch (type) {
    case TS_TYPE_F32:
        if (n) memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case TS_TYPE_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = ts_f16_to_f32(rd_u16(s + 2 * i));
        break;
    case TS_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = ts_bf16_to_f32(rd_u16(s + 2 * i));
        break;
    case TS_TYPE_Q4_0: dq_q4_0(s, dst, nb); break;
    case TS_TYPE_Q4_1: dq_q4_1(s, dst, nb); break;
    case TS_TYPE_Q5_0: dq_q5_0(s, dst, nb); break;
    case TS_TYPE_Q5_1: dq_q5_1(s, dst, nb); break;
    case TS_TYPE_Q8_0: dq_q8_0(s, dst, nb); break;
    case TS_TYPE_Q2_K: dq_q2_k(s, dst, nb); break;
    case TS_TYPE_Q3_K: dq_q3_k(s, dst, nb); break;
    case TS_TYPE_Q4_K: dq_q4_k(s, dst, nb); break;
    case TS_TYPE_Q5_K: dq_q5_k(s, dst, nb); break;
    case TS_TYPE_Q6_K: dq_q6_k(s, dst, nb); break;
    default: return ts_err_set(err, "dequant: type %s is not supported", t->name);
    }
    return 0;
}

/* ---- quantization (ggml's *_ref round-to-nearest quantizers) ---- */

/* ggml converts `x + 8.5f` / `x + 0.5f` with (int8_t) (truncation) and takes
 * MIN(15, .). For finite blocks t lies in [0, 16.5]; the guards only define
 * what ggml leaves undefined (NaN -> 0, out of range -> clamp). */
static inline uint8_t trunc_nibble(float t) {
    if (!(t > 0.0f)) return 0; /* also NaN */
    if (t >= 15.0f) return 15;
    return (uint8_t)t;
}

/* Q4_0: d = (the element of largest magnitude, first one on ties) / -8, so that
 * element maps to q = 0 and the rest to trunc(x/d + 8.5) clamped to 15. */
static void q_q4_0(const float *x, uint8_t *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32, b += 18) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 32; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        wr_u16(b, ts_f32_to_f16(d));
        for (int j = 0; j < 16; j++) {
            const uint8_t q0 = trunc_nibble(x[j] * id + 8.5f);
            const uint8_t q1 = trunc_nibble(x[j + 16] * id + 8.5f);
            b[2 + j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* Q4_1: d = (max - min) / 15, m = min; q = trunc((x - min)/d + 0.5). */
static void q_q4_1(const float *x, uint8_t *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32, b += 20) {
        float min = 3.40282347e+38f, max = -3.40282347e+38f;
        for (int j = 0; j < 32; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        wr_u16(b, ts_f32_to_f16(d));
        wr_u16(b + 2, ts_f32_to_f16(min));
        for (int j = 0; j < 16; j++) {
            const uint8_t q0 = trunc_nibble((x[j] - min) * id + 0.5f);
            const uint8_t q1 = trunc_nibble((x[j + 16] - min) * id + 0.5f);
            b[4 + j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* Q8_0: d = amax / 127; q = roundf(x / d) (half away from zero). */
static void q_q8_0(const float *x, uint8_t *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32, b += 34) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) {
            const float a = fabsf(x[j]);
            amax = amax > a ? amax : a; /* ggml's MAX(), NaN behaviour included */
        }
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        wr_u16(b, ts_f32_to_f16(d));
        for (int j = 0; j < 32; j++) {
            const float v = roundf(x[j] * id);
            int8_t q;
            if (!(v == v)) q = 0; /* NaN (from inf/NaN input): ggml leaves it undefined */
            else if (v >= 127.0f) q = 127;
            else if (v <= -128.0f) q = -128;
            else q = (int8_t)v;
            b[2 + j] = (uint8_t)q;
        }
    }
}

int ts_quant_row(uint32_t type, const float *src, void *dst, int64_t n, ts_err *err) {
    const ts_type_traits *t = ts_type_info(type);
    if (!t) return ts_err_set(err, "quant: unknown tensor type id %u", type);
    if (!t->can_quant) return ts_err_set(err, "quant: quantizing to %s is not supported", t->name);
    if (n < 0 || n % t->blck)
        return ts_err_set(err, "quant: %s row length %lld is not a multiple of the block size %u", t->name,
                          (long long)n, t->blck);
    uint8_t *o = dst;
    const int64_t nb = n / t->blck;
    switch (type) {
    case TS_TYPE_F32:
        if (n) memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case TS_TYPE_F16:
        for (int64_t i = 0; i < n; i++) wr_u16(o + 2 * i, ts_f32_to_f16(src[i]));
        break;
    case TS_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) wr_u16(o + 2 * i, ts_f32_to_bf16(src[i]));
        break;
    case TS_TYPE_Q4_0: q_q4_0(src, o, nb); break;
    case TS_TYPE_Q4_1: q_q4_1(src, o, nb); break;
    case TS_TYPE_Q8_0: q_q8_0(src, o, nb); break;
    default: return ts_err_set(err, "quant: quantizing to %s is not supported", t->name);
    }
    return 0;
}
