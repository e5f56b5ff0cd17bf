/* amx_quant_i8.h - the int8 mode's quantization of one row, shared by
 * packing and the references (amx.c) and by the kernels of each unit
 * (amx_gemm_impl.h: on the hardware build it vectorizes with AVX-512). One
 * definition, so the weights, the activations and the references agree. */
#ifndef TS_KERNELS_AMX_QUANT_I8_H
#define TS_KERNELS_AMX_QUANT_I8_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* one row at the int8 mode's precision: one scale for the row (a token's
 * activations, a weight row) */
/* the largest |x| of n values by its bits (NaN and inf above every finite
 * value): an integer max, which vectorizes where a float one cannot */
static inline uint32_t ts_amx_amax_bits(const float *x, int64_t n) {
    uint32_t mb = 0;
    for (int64_t k = 0; k < n; k++) {
        uint32_t u;
        memcpy(&u, &x[k], 4);
        u &= 0x7fffffffu;
        mb = u > mb ? u : mb;
    }
    return mb;
}

/* the int8 scale of values whose largest |x| has bits mb: amax / 127; 0
 * where amax is (nearly) zero, NaN where it is not finite */
static inline float ts_amx_i8_scale(uint32_t mb) {
    float amax;
    memcpy(&amax, &mb, 4);
    return mb > 0x7f7fffffu ? NAN : amax < 0x1p-100f ? 0.0f : amax / 127.0f;
}

static inline void ts_amx_quant_row_i8(const float *x, int64_t n, int8_t *q, float *s_out) {
    const uint32_t mb = ts_amx_amax_bits(x, n);
    float amax;
    memcpy(&amax, &mb, 4);
    *s_out = ts_amx_i8_scale(mb);
    if (!(*s_out > 0.0f)) { /* zero or not finite (n > 0 said, for gcc's object-size check) */
        if (n > 0) memset(q, 0, (size_t)n);
        return;
    }
    const float inv = 127.0f / amax;
    /* round to nearest even as lrintf does, by the 1.5 * 2^23 trick (exact
     * for |v| < 2^22; here |v| <= 127 and a rounding), then clamp: the loop
     * vectorizes instead of calling lrintf per element */
    for (int64_t k = 0; k < n; k++) {
        const int v = (int)((x[k] * inv + 12582912.0f) - 12582912.0f);
        q[k] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
    }
}

/* one row at a given scale s > 0 (the per-tensor rule, ts_amx_matmul_pt):
 * x clamped to [-127 s, 127 s] first, so an outlier becomes +-127 and never
 * wraps; NaN becomes -127 (fmaxf takes the number), its remainder carries
 * the NaN (ts_amx_outliers_find). */
static inline void ts_amx_quant_row_i8_at(const float *x, int64_t n, float s, int8_t *q) {
    if (s == 0.0f) { /* an all-zero input (s from its amax) */
        memset(q, 0, (size_t)n);
        return;
    }
    const float inv = 1.0f / s;
    for (int64_t k = 0; k < n; k++) {
        const float v = fminf(fmaxf(x[k] * inv, -127.0f), 127.0f);
        q[k] = (int8_t)(int)((v + 12582912.0f) - 12582912.0f);
    }
}

#endif
