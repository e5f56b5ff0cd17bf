/* qrows.h - random GGUF weight rows of the panel types for kernel tests
 * (test_rp_gemm.c, test_amx.c): quant bytes random or at their extremes,
 * scales sane (f16 magnitudes 2^-10 .. 2^2, a zero now and then). Needs
 * check.h's rng() and quant/quant.h. */
#ifndef TS_TEST_QROWS_H
#define TS_TEST_QROWS_H

#include <math.h>

static uint16_t rand_f16(void) {
    if (rng() % 16 == 0) return 0; /* a zero scale now and then */
    const float mag = ldexpf(1.0f + (float)(rng() % 1024) / 1024.0f, (int)(rng() % 12) - 10);
    return ts_f32_to_f16(rng() & 1 ? -mag : mag);
}
static void put_f16(uint8_t *p, uint16_t h) {
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

enum { W_RANDOM, W_MAX, W_MIN, W_MIXED, W_MODES };

/* one quant byte of mode m: the stored byte that makes every u extreme
 * (Q8_0: u = byte ^ 0x80, so 0x7f is u = 255 and 0x80 is u = 0) */
static uint8_t wbyte(uint32_t ty, int m) {
    const uint8_t hi = ty == TS_TYPE_Q8_0 ? 0x7f : 0xff, lo = ty == TS_TYPE_Q8_0 ? 0x80 : 0x00;
    switch (m) {
    case W_MAX: return hi;
    case W_MIN: return lo;
    case W_MIXED: return rng() & 1 ? hi : lo;
    default: return (uint8_t)rng();
    }
}

/* n_rows GGUF rows of n_in elements: quant bytes by mode, sane scales */
static void make_rows(uint32_t ty, int64_t n_in, int n_rows, int mode, uint8_t *q) {
    const size_t rb = ts_row_size(ty, n_in);
    const int kq = ty == TS_TYPE_Q2_K || ty == TS_TYPE_Q3_K || ty == TS_TYPE_Q4_K || ty == TS_TYPE_Q5_K || ty == TS_TYPE_Q6_K;
    const size_t bs = ts_row_size(ty, kq ? 256 : 32);
    for (size_t i = 0; i < rb * (size_t)n_rows; i++) q[i] = wbyte(ty, mode);
    for (size_t b = 0; b < rb * (size_t)n_rows / bs; b++) {
        uint8_t *blk = q + b * bs;
        switch (ty) {
        case TS_TYPE_Q4_1:
        case TS_TYPE_Q5_1:
        case TS_TYPE_Q4_K:
        case TS_TYPE_Q5_K:
            put_f16(blk, rand_f16());
            put_f16(blk + 2, rand_f16());
            if (ty != TS_TYPE_Q4_1 && ty != TS_TYPE_Q5_1)
                for (int k = 4; k < 16; k++) blk[k] = (uint8_t)rng(); /* 6-bit scales and mins */
            break;
        case TS_TYPE_Q6_K:
            for (int k = 192; k < 208; k++) blk[k] = (uint8_t)rng(); /* int8 group scales */
            put_f16(blk + 208, rand_f16());
            break;
        case TS_TYPE_Q2_K:
            for (int k = 0; k < 16; k++) blk[k] = (uint8_t)rng(); /* 4-bit scales and mins */
            put_f16(blk + 80, rand_f16());
            put_f16(blk + 82, rand_f16());
            break;
        case TS_TYPE_Q3_K:
            for (int k = 96; k < 108; k++) blk[k] = (uint8_t)rng(); /* packed 6-bit group scales */
            put_f16(blk + 108, rand_f16());
            break;
        default: put_f16(blk, rand_f16()); break; /* Q4_0 Q5_0 Q8_0: d first */
        }
    }
}

#endif
