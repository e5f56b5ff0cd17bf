/* test_quant.c - unit tests of src/quant: f16/bf16 conversion (exhaustive
 * round trips, specials, round-to-nearest-even against a reference), the
 * quantize -> dequantize error bounds of Q4_0/Q4_1/Q8_0 on random data, edge
 * cases (zeros, constants, huge/NaN/subnormal inputs) and argument errors.
 *
 * Error bounds asserted (d = the f32 scale the quantizer computes, dh = its
 * stored f16, x an input, y its dequantized value):
 *   Q8_0: d = amax/127, q = round(x/d) in [-127,127]:
 *         |x - y| <= d/2 + 127*|d - dh|            (rounding + scale storage)
 *   Q4_0: d = max/-8 (max = element of largest |x|), q = round(x/d)+8 in [0,15]:
 *         |x - y| <= |d|/2 + 8*|d - dh|, except x/d > 7.5 (only x = -max-ish,
 *         clamped from 16 to 15): |x - y| <= |d| + 8*|d - dh|
 *   Q4_1: d = (max-min)/15, m = min, q = round((x-min)/d) in [0,15]:
 *         |x - y| <= d/2 + 15*|d - dh| + |min - mh|
 *   each + a slack of 3e-5*|d| for the f32 rounding of t = x*(1/d): two
 *   roundings give |t - x/d| <= |x/d| * 2^-23 <= 127 * 2^-23 = 1.5e-5 (Q8_0),
 *   so a value within that of a .5 tie may round the other way.
 *   F16: |x - y| <= 2^-11 |x| (normal range), <= 2^-25 (subnormal range);
 *   BF16: <= 2^-8 |x|.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"

#include "check.h"


static float fbits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t bitsf(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

/* ---- f16 ---- */

static void test_f16(void) {
    /* exhaustive: every non-NaN half survives f16 -> f32 -> f16 */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ts_f16_to_f32((uint16_t)h);
        int is_nan = ((h & 0x7c00) == 0x7c00) && (h & 0x3ff);
        if (is_nan) {
            CHECK(isnan(f), "f16 %04x should decode to NaN", h);
            uint16_t back = ts_f32_to_f16(f);
            CHECK((back & 0x7c00) == 0x7c00 && (back & 0x3ff) && (back & 0x200), "NaN %04x -> %04x not a quiet NaN", h,
                  back);
        } else {
            CHECK(ts_f32_to_f16(f) == h, "f16 round trip %04x -> %g -> %04x", h, f, ts_f32_to_f16(f));
        }
    }
    struct { float f; uint16_t h; } cases[] = {
        {1.0f, 0x3c00},       {-2.0f, 0xc000},          {65504.0f, 0x7bff},      {65519.99f, 0x7bff},
        {65520.0f, 0x7c00},   {1e9f, 0x7c00},           {INFINITY, 0x7c00},      {-INFINITY, 0xfc00},
        {0.0f, 0x0000},       {-0.0f, 0x8000},          {0x1p-24f, 0x0001},      {0x1p-25f, 0x0000},
        {0x1.8p-25f, 0x0001}, {0x3p-25f, 0x0002},       {0x1p-14f, 0x0400},      {0x1.ffcp-15f, 0x0400}, {0x1.ff8p-15f, 0x03ff},
        {1e-10f, 0x0000},     {-1e-10f, 0x8000},        {1.0f + 0x1p-11f, 0x3c00}, {1.0f + 0x3p-11f, 0x3c02},
        {0x1p-126f, 0x0000},  {0x1p-149f, 0x0000},      {0.1f, 0x2e66},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK(ts_f32_to_f16(cases[i].f) == cases[i].h, "f32_to_f16(%a) = %04x, want %04x", cases[i].f,
              ts_f32_to_f16(cases[i].f), cases[i].h);
    CHECK(ts_f16_to_f32(0x0001) == 0x1p-24f, "smallest subnormal");
    CHECK(ts_f16_to_f32(0x03ff) == 0x3ffp-24f, "largest subnormal");
    CHECK(signbit(ts_f16_to_f32(0x8000)) && ts_f16_to_f32(0x8000) == 0.0f, "-0");
    CHECK(ts_f16_to_f32(0x7c00) == INFINITY && ts_f16_to_f32(0xfc00) == -INFINITY, "inf");
    CHECK(isnan(ts_f16_to_f32(0x7e00)) && isnan(ts_f16_to_f32(0x7c01)), "NaN");
    CHECK(isnan(fbits(bitsf(ts_f16_to_f32(ts_f32_to_f16(NAN))))), "NaN -> f16 -> NaN");

    /* random f32 below the overflow threshold: the result is the nearest half
     * (ties to even); the neighbours of h are h-1 and h+1 in magnitude */
    for (int i = 0; i < 200000; i++) {
        uint32_t u = (uint32_t)rng() & 0x7fffffffu;
        if (u >= 0x477ff000u) u %= 0x477ff000u;
        if (i % 4 == 0) u = 0x33000000u + (u % (0x38800000u - 0x33000000u)); /* subnormal zone */
        float f = fbits(u);
        uint16_t h = ts_f32_to_f16(f);
        double err = fabs((double)ts_f16_to_f32(h) - f);
        if (h > 0) {
            double e2 = fabs((double)ts_f16_to_f32((uint16_t)(h - 1)) - f);
            CHECK(err < e2 || (err == e2 && !(h & 1)), "f16(%a) = %04x not nearest (below)", f, h);
        }
        if (h < 0x7bff) {
            double e2 = fabs((double)ts_f16_to_f32((uint16_t)(h + 1)) - f);
            CHECK(err < e2 || (err == e2 && !(h & 1)), "f16(%a) = %04x not nearest (above)", f, h);
        }
        CHECK(ts_f32_to_f16(-f) == (h | 0x8000), "sign symmetry at %a", f);
    }
}

/* ---- bf16 ---- */

static double bf16_val(uint16_t h) {
    return h == 0x7f80 ? 0x1p128 : (double)ts_bf16_to_f32(h);
}

static void test_bf16(void) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ts_bf16_to_f32((uint16_t)h);
        uint16_t back = ts_f32_to_bf16(f);
        if (isnan(f))
            CHECK((back & 0x7f80) == 0x7f80 && (back & 0x40), "bf16 NaN %04x -> %04x not quiet NaN", h, back);
        else
            CHECK(back == h, "bf16 round trip %04x -> %04x", h, back);
    }
    struct { uint32_t f; uint16_t h; } cases[] = {
        {0x3f800000, 0x3f80}, {0x3f808000, 0x3f80}, /* tie, even stays */
        {0x3f818000, 0x3f82}, /* tie, odd rounds up */
        {0x3f808001, 0x3f81}, {0x7f7fffff, 0x7f80}, /* FLT_MAX rounds to inf */
        {0x7f800000, 0x7f80}, {0xff800000, 0xff80}, {0x7f800001, 0x7fc0}, /* sNaN -> quiet */
        {0xffc00000, 0xffc0}, {0x00000001, 0x0000}, {0x00008000, 0x0000}, {0x00018000, 0x0002},
        {0x80000000, 0x8000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK(ts_f32_to_bf16(fbits(cases[i].f)) == cases[i].h, "f32_to_bf16(%08x) = %04x, want %04x", cases[i].f,
              ts_f32_to_bf16(fbits(cases[i].f)), cases[i].h);
    /* nearest with ties to even; in IEEE rounding the overflow to inf acts as
     * if inf were 2^128 (values from halfway between the max and 2^128 up) */
    for (int i = 0; i < 200000; i++) {
        uint32_t u = (uint32_t)rng() & 0x7f7fffffu;
        float f = fbits(u);
        uint16_t h = ts_f32_to_bf16(f);
        double err = fabs(bf16_val(h) - f);
        double lo = fabs(bf16_val((uint16_t)(h - 1)) - f);
        CHECK(h == 0 || err < lo || (err == lo && !(h & 1)), "bf16(%a) not nearest", f);
        if (h < 0x7f80) {
            double hi = fabs(bf16_val((uint16_t)(h + 1)) - f);
            CHECK(err < hi || (err == hi && !(h & 1)), "bf16(%a) not nearest", f);
        }
    }
}

/* ---- quantize -> dequantize error bounds ---- */

#define NB 64 /* blocks per row */
#define N (NB * 32)

static int quant_roundtrip(uint32_t type, const float *x, uint8_t *q, float *y) {
    ts_err err = {{0}};
    if (ts_quant_row(type, x, q, N, &err)) {
        CHECK(0, "quant %u: %s", type, err.msg);
        return -1;
    }
    if (ts_dequant_row(type, q, y, N, &err)) {
        CHECK(0, "dequant %u: %s", type, err.msg);
        return -1;
    }
    return 0;
}

static void check_q8_0(const float *x, float scale) {
    uint8_t q[NB * 34];
    float y[N];
    if (quant_roundtrip(TS_TYPE_Q8_0, x, q, y)) return;
    for (int b = 0; b < NB; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32 * b + j]));
        const float d = amax / 127.0f;
        const uint16_t dh16 = rd16(q + 34 * b);
        CHECK(dh16 == ts_f32_to_f16(d), "Q8_0 block %d scale %04x != f16(%g)", b, dh16, d);
        const float dh = ts_f16_to_f32(dh16);
        const double bound = 0.5 * d + 127.0 * fabs((double)d - dh) + 3e-5 * d;
        for (int j = 0; j < 32; j++) {
            int i = 32 * b + j;
            CHECK(fabs((double)x[i] - y[i]) <= bound, "Q8_0 (scale %g) x[%d]=%g y=%g err %g > bound %g", scale, i,
                  x[i], y[i], fabs((double)x[i] - y[i]), bound);
        }
    }
}

static void check_q4_0(const float *x, float scale) {
    uint8_t q[NB * 18];
    float y[N];
    if (quant_roundtrip(TS_TYPE_Q4_0, x, q, y)) return;
    for (int b = 0; b < NB; b++) {
        float amax = 0, max = 0;
        for (int j = 0; j < 32; j++)
            if (amax < fabsf(x[32 * b + j])) amax = fabsf(x[32 * b + j]), max = x[32 * b + j];
        const float d = max / -8.0f;
        CHECK(rd16(q + 18 * b) == ts_f32_to_f16(d), "Q4_0 block %d scale", b);
        const float dh = ts_f16_to_f32(rd16(q + 18 * b));
        for (int j = 0; j < 32; j++) {
            int i = 32 * b + j;
            const double r = d != 0 ? (double)x[i] / d : 0;
            const double bound = (r > 7.5 ? fabs(d) : 0.5 * fabs(d)) + 8.0 * fabs((double)d - dh) + 3e-5 * fabs(d);
            CHECK(fabs((double)x[i] - y[i]) <= bound, "Q4_0 (scale %g) x[%d]=%g y=%g err %g > bound %g", scale, i,
                  x[i], y[i], fabs((double)x[i] - y[i]), bound);
        }
    }
}

static void check_q4_1(const float *x, float scale) {
    uint8_t q[NB * 20];
    float y[N];
    if (quant_roundtrip(TS_TYPE_Q4_1, x, q, y)) return;
    for (int b = 0; b < NB; b++) {
        float min = x[32 * b], max = x[32 * b];
        for (int j = 0; j < 32; j++) min = fminf(min, x[32 * b + j]), max = fmaxf(max, x[32 * b + j]);
        const float d = (max - min) / 15.0f;
        CHECK(rd16(q + 20 * b) == ts_f32_to_f16(d) && rd16(q + 20 * b + 2) == ts_f32_to_f16(min),
              "Q4_1 block %d scale/min", b);
        const float dh = ts_f16_to_f32(rd16(q + 20 * b)), mh = ts_f16_to_f32(rd16(q + 20 * b + 2));
        const double bound = 0.5 * d + 15.0 * fabs((double)d - dh) + fabs((double)min - mh) + 3e-5 * d;
        for (int j = 0; j < 32; j++) {
            int i = 32 * b + j;
            CHECK(fabs((double)x[i] - y[i]) <= bound, "Q4_1 (scale %g) x[%d]=%g y=%g err %g > bound %g", scale, i,
                  x[i], y[i], fabs((double)x[i] - y[i]), bound);
        }
    }
}

/* relative bound rel in the normal range, absolute bound abs below it */
static void check_plain(uint32_t type, const float *x, double rel, double abs) {
    uint8_t q[N * 4];
    float y[N];
    if (quant_roundtrip(type, x, q, y)) return;
    for (int i = 0; i < N; i++)
        CHECK(fabs((double)x[i] - y[i]) <= fmax(rel * fabs(x[i]), abs), "type %u x[%d]=%a y=%a", type, i, x[i],
              y[i]);
}

static void test_bounds(void) {
    static float x[N];
    const float scales[] = {1.0f, 0.02f, 3e-3f, 100.0f, 1000.0f};
    for (size_t s = 0; s < sizeof scales / sizeof scales[0]; s++) {
        for (int rep = 0; rep < 20; rep++) {
            for (int i = 0; i < N; i++) x[i] = (rep & 1 ? nrand() : frand()) * scales[s];
            /* a few outliers, as real weights have */
            for (int k = 0; k < 8; k++) x[rng() % N] *= 8.0f;
            check_q8_0(x, scales[s]);
            check_q4_0(x, scales[s]);
            check_q4_1(x, scales[s]);
            check_plain(TS_TYPE_F32, x, 0.0, 0.0);
            check_plain(TS_TYPE_F16, x, 0x1p-11, 0x1p-25); /* subnormal step 2^-24 */
            check_plain(TS_TYPE_BF16, x, 0x1p-8, 0.0);
        }
    }
}

/* ---- edge cases ---- */

static void test_edges(void) {
    static float x[N], y[N];
    static uint8_t q[N * 4];
    ts_err err = {{0}};

    /* all zeros: scales 0, every value dequantizes to exactly 0 */
    memset(x, 0, sizeof x);
    const uint32_t qtypes[] = {TS_TYPE_Q8_0, TS_TYPE_Q4_0, TS_TYPE_Q4_1, TS_TYPE_F16, TS_TYPE_BF16, TS_TYPE_F32};
    for (size_t t = 0; t < 6; t++) {
        CHECK(quant_roundtrip(qtypes[t], x, q, y) == 0, "zeros");
        for (int i = 0; i < N; i++) CHECK(y[i] == 0.0f, "zeros type %u y[%d]=%g", qtypes[t], i, y[i]);
    }
    /* ggml's exact bytes for a zero block */
    ts_quant_row(TS_TYPE_Q4_0, x, q, 32, NULL);
    CHECK(rd16(q) == 0x8000 && q[2] == 0x88 && q[17] == 0x88, "Q4_0 zero block bytes (d = 0/-8 = -0, q = 8)");

    /* constant rows: Q4_1 keeps the constant as its min (exact up to f16);
     * Q8_0/Q4_0 map it to the end of the range */
    const float consts[] = {0.37f, -5.5f, 1e-3f, 60000.0f};
    for (size_t c = 0; c < 4; c++) {
        for (int i = 0; i < N; i++) x[i] = consts[c];
        quant_roundtrip(TS_TYPE_Q4_1, x, q, y);
        for (int i = 0; i < N; i++)
            CHECK(y[i] == ts_f16_to_f32(ts_f32_to_f16(consts[c])), "Q4_1 const %g -> %g", consts[c], y[i]);
        quant_roundtrip(TS_TYPE_Q8_0, x, q, y);
        for (int i = 0; i < N; i++)
            CHECK(fabsf(y[i] - consts[c]) <= fabsf(consts[c]) * 0x1p-10f, "Q8_0 const %g -> %g", consts[c], y[i]);
        quant_roundtrip(TS_TYPE_Q4_0, x, q, y);
        for (int i = 0; i < N; i++)
            CHECK(fabsf(y[i] - consts[c]) <= fabsf(consts[c]) * 0x1p-10f, "Q4_0 const %g -> %g", consts[c], y[i]);
    }

    /* huge values: the f16 scale overflows to inf; must not be UB (run under
     * UBSan) and the scale must be inf */
    for (int i = 0; i < N; i++) x[i] = frand() * 1e30f;
    CHECK(quant_roundtrip(TS_TYPE_Q8_0, x, q, y) == 0, "huge Q8_0");
    CHECK(rd16(q) == 0x7c00 || rd16(q) == 0xfc00, "huge Q8_0 scale %04x", rd16(q));
    CHECK(quant_roundtrip(TS_TYPE_Q4_0, x, q, y) == 0, "huge Q4_0");
    CHECK((rd16(q) & 0x7fff) == 0x7c00, "huge Q4_0 scale %04x", rd16(q));
    CHECK(quant_roundtrip(TS_TYPE_Q4_1, x, q, y) == 0, "huge Q4_1");
    /* largest values that still fit: 65504 * 127 in Q8_0 stays finite */
    for (int i = 0; i < N; i++) x[i] = (i & 1 ? -1.0f : 1.0f) * 65504.0f * 127.0f;
    quant_roundtrip(TS_TYPE_Q8_0, x, q, y);
    for (int i = 0; i < N; i++) CHECK(y[i] == x[i], "Q8_0 max finite %g -> %g", x[i], y[i]);

    /* NaN / inf / subnormal inputs: defined bytes, no UB */
    const float specials[] = {NAN, INFINITY, -INFINITY, 1e-40f, -1e-45f, 3.0f};
    for (int i = 0; i < N; i++) x[i] = specials[rng() % 6];
    for (size_t t = 0; t < 6; t++) CHECK(quant_roundtrip(qtypes[t], x, q, y) == 0, "specials type %u", qtypes[t]);
    for (int i = 0; i < 32; i++) x[i] = 1e-40f * (float)(i - 16); /* subnormal block: d underflows */
    for (size_t t = 0; t < 3; t++) {
        CHECK(ts_quant_row(qtypes[t], x, q, 32, &err) == 0, "subnormal block");
        CHECK(ts_dequant_row(qtypes[t], q, y, 32, &err) == 0, "subnormal block");
        for (int i = 0; i < 32; i++) CHECK(fabsf(y[i]) < 1e-30f, "subnormal block type %u y=%g", qtypes[t], y[i]);
    }

    /* dequantizing arbitrary bytes of every supported type is defined */
    static uint8_t raw[256 * 292];
    for (size_t i = 0; i < sizeof raw; i++) raw[i] = (uint8_t)rng();
    for (uint32_t t = 0; t < TS_TYPE_COUNT; t++) {
        const ts_type_traits *tr = ts_type_info(t);
        if (!tr || !tr->can_dequant) continue;
        int64_t n = 256; /* multiple of every block size */
        static float out[256];
        CHECK(ts_dequant_row(t, raw + 1 /* unaligned */, out, n, &err) == 0, "dequant %s: %s", tr->name, err.msg);
    }

    /* hand-made blocks with known values */
    uint8_t b8[34] = {0x00, 0x3c}; /* d = 1.0 */
    for (int j = 0; j < 32; j++) b8[2 + j] = (uint8_t)(int8_t)(j - 16);
    ts_dequant_row(TS_TYPE_Q8_0, b8, y, 32, &err);
    for (int j = 0; j < 32; j++) CHECK(y[j] == (float)(j - 16), "Q8_0 known y[%d]=%g", j, y[j]);
    uint8_t b4[18] = {0x00, 0x40}; /* d = 2.0 */
    for (int j = 0; j < 16; j++) b4[2 + j] = (uint8_t)(j | ((15 - j) << 4));
    ts_dequant_row(TS_TYPE_Q4_0, b4, y, 32, &err);
    for (int j = 0; j < 16; j++)
        CHECK(y[j] == 2.0f * (float)(j - 8) && y[16 + j] == 2.0f * (float)(7 - j), "Q4_0 known j=%d", j);

    /* argument errors name the problem */
    CHECK(ts_dequant_row(TS_TYPE_Q4_0, b4, y, 31, &err) == -1 && strstr(err.msg, "31"), "bad n: %s", err.msg);
    CHECK(ts_quant_row(TS_TYPE_Q8_0, x, q, 33, &err) == -1 && strstr(err.msg, "33"), "bad n: %s", err.msg);
    CHECK(ts_dequant_row(4, b4, y, 32, &err) == -1 && strstr(err.msg, "4"), "removed type: %s", err.msg);
    CHECK(ts_dequant_row(1000, b4, y, 32, &err) == -1, "unknown type");
    CHECK(ts_dequant_row(TS_TYPE_IQ2_XXS, raw, y, 256, &err) == -1 && strstr(err.msg, "IQ2_XXS"), "unsupported: %s",
          err.msg);
    CHECK(ts_quant_row(TS_TYPE_Q4_K, x, q, 256, &err) == -1 && strstr(err.msg, "Q4_K"), "unsupported quant: %s",
          err.msg);
    CHECK(ts_dequant_row(TS_TYPE_F32, NULL, NULL, 0, &err) == 0, "n = 0 is a no-op");
}

int main(void) {
    rng_seed(0x9e3779b97f4a7c15ull);
    test_f16();
    test_bf16();
    test_bounds();
    test_edges();
    if (failures) {
        fprintf(stderr, "test_quant: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_quant: all passed\n");
    return 0;
}
