/* test_kernels.c - tests of the CPU kernels (src/kernels/cpu.c, qdot*.c and
 * their per-ISA versions): dispatch and TS_CPU_LEVEL, activation quantizers,
 * every dot kernel at every level this machine can run against the scalar
 * reference, GEMV/GEMM drivers, and the fidelity of the quantized dot
 * against the f32 dot of the dequantized weight.
 *
 * Bounds (u = 2^-24, the f32 unit roundoff):
 *  - Quantizers: bytes identical at every level (same arithmetic; inf/NaN
 *    blocks go to the scalar code). The 32-blocks equal ts_quant_row(Q8_0)'s
 *    d and q for finite data; sums equal the sums of the quants.
 *  - Dots vs the scalar reference: integer parts are exact; the f32 terms are
 *    summed in another order. A sum of K terms, each from at most 3 roundings
 *    (scale product, int -> float, multiply), in any order is within
 *    (K + 3) u sum|term| of the exact value, so two orders differ by at most
 *    2 (K + 3) u sum|term|. sum|term| <= M = sum_i |x_i| (|w_i| + 2 |o_i|),
 *    x the dequantized activation, w the dequantized weight and o its offset
 *    part (m of Q4_1/Q5_1, -dmin*m of Q2_K/Q4_K/Q5_K; 0 for the rest: the
 *    scale part of w is w - o, so |scale part| + |o| <= |w| + 2|o|). K is at
 *    most n/16 for the quantized types (2 terms per 32-block, lanes counted
 *    as terms) and n for f32/f16: bound = 2 (K + 8) u M.
 *  - AVX2 and AVX-512: bit-identical. GEMM (4-token tiles) vs GEMV:
 *    bit-identical at every level.
 *  - Fidelity: |dot(w, Q(x)) - sum w_i x_i| <= sum_i |w_i| e_i + (K + 8) u M',
 *    e_i the rounding bound of x_i's block: (1/2 + 3e-5) d + 127 |d - dh| for
 *    TS_ACT_Q8 (d = amax/127, dh its f16; 3e-5 d covers the f32 rounding of
 *    x * (1/d), as in test_quant.c) and (1/2 + 3e-5) d for TS_ACT_Q8K (d kept
 *    in f32); M' = sum |w_i| (|x_i| + e_i) + 2 sum |o_i| (|x_i| + e_i).
 *
 * Buffers end at a page boundary followed by an inaccessible page, so any
 * read or write past the end of a weight, activation or output buffer
 * crashes the test; output rows carry sentinel floats around the rows a
 * call may write, checked after every call.
 *
 * Usage: test_kernels [--dispatch-only] [--expect-level NAME] [--slack]
 *   --dispatch-only      only the dispatch checks (TS_CPU_LEVEL is checked if set)
 *   --expect-level NAME  fail unless ts_cpu_detect() is NAME (emulated CPUs)
 *   --slack              leave 64 bytes between a buffer and its guard page:
 *                        QEMU 7.2's x86 TCG reads 16 bytes for a scalar
 *                        vfmadd231ss with a memory operand, which would fault
 *                        on a valid 4-byte read at the end of a page
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/cpu.h"
#include "kernels/qdot.h"
#include "quant/quant.h"

#include "check.h"


static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ---- guarded buffers ---- */

typedef struct {
    uint8_t *base;
    size_t len;
} mapping;
static mapping maps[64];
static int n_maps;
static size_t slack; /* bytes between a buffer's end and the guard page */

/* size bytes ending exactly at an inaccessible page */
static void *galloc(size_t size) {
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    const size_t body = (size + slack + pg - 1) / pg * pg;
    uint8_t *base = mmap(NULL, body + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED || n_maps == 64) {
        fprintf(stderr, "galloc: out of memory\n");
        exit(2);
    }
    mprotect(base + body, pg, PROT_NONE);
    maps[n_maps++] = (mapping){base, body + pg};
    uint8_t *p = base + body - slack - size;
    memset(base, 0xa5, body);
    return p;
}
static void gfree_all(void) {
    for (int i = 0; i < n_maps; i++) munmap(maps[i].base, maps[i].len);
    n_maps = 0;
}

/* ---- levels ---- */

static const ts_kern *levels[TS_CPU_LEVEL_COUNT];
static int n_levels;

static void collect_levels(void) {
    for (int l = 0; l < TS_CPU_LEVEL_COUNT; l++) {
        const ts_kern *k = ts_kern_for_level((ts_cpu_level)l);
        if (k) levels[n_levels++] = k;
    }
}
static const ts_kern *level_tab(ts_cpu_level l) {
    for (int i = 0; i < n_levels; i++)
        if (levels[i]->level == l) return levels[i];
    return NULL;
}

/* ---- dispatch ---- */

static void test_env_level(void) {
    /* first kernel call of the process: the env choice is still in force */
    const char *e = getenv("TS_CPU_LEVEL");
    const ts_cpu_level best = ts_cpu_detect();
    const int want = ts_cpu_level_parse(e);
    const ts_cpu_level expect = want >= 0 ? ts_cpu_clamp((ts_cpu_level)want, best) : best;
    CHECK(ts_cpu_level_active() == expect, "TS_CPU_LEVEL=%s: active %s, expected %s", e ? e : "(unset)",
          ts_cpu_level_name(ts_cpu_level_active()), ts_cpu_level_name(expect));
    CHECK(ts_kern_get()->level == expect, "table level");
    printf("detected level %s; TS_CPU_LEVEL=%s -> active %s\n", ts_cpu_level_name(best), e ? e : "(unset)",
           ts_cpu_level_name(ts_cpu_level_active()));
}

static void test_dispatch(void) {
    CHECK(ts_cpu_level_parse("AVX2") == TS_CPU_AVX2, "parse AVX2");
    CHECK(ts_cpu_level_parse("scalar") == TS_CPU_SCALAR, "parse scalar");
    CHECK(ts_cpu_level_parse("avx512") == TS_CPU_AVX512, "parse avx512");
    CHECK(ts_cpu_level_parse("neon") == TS_CPU_NEON, "parse neon");
    CHECK(ts_cpu_level_parse("avx3") == -1 && ts_cpu_level_parse("") == -1 && ts_cpu_level_parse(NULL) == -1,
          "parse junk");
    CHECK(strcmp(ts_cpu_level_name((ts_cpu_level)99), "?") == 0, "name of junk");
    /* clamping */
    CHECK(ts_cpu_clamp(TS_CPU_AVX512, TS_CPU_AVX2) == TS_CPU_AVX2, "avx512 on avx2 machine");
    CHECK(ts_cpu_clamp(TS_CPU_AVX2, TS_CPU_AVX512) == TS_CPU_AVX2, "avx2 on avx512 machine");
    CHECK(ts_cpu_clamp(TS_CPU_SCALAR, TS_CPU_AVX512) == TS_CPU_SCALAR, "scalar on avx512 machine");
    CHECK(ts_cpu_clamp(TS_CPU_NEON, TS_CPU_AVX512) == TS_CPU_AVX2, "neon on x86");
    CHECK(ts_cpu_clamp(TS_CPU_AVX512, TS_CPU_NEON) == TS_CPU_NEON, "avx512 on arm");
    CHECK(ts_cpu_clamp(TS_CPU_SCALAR, TS_CPU_NEON) == TS_CPU_SCALAR, "scalar on arm");
    CHECK(ts_cpu_clamp(TS_CPU_AVX2, TS_CPU_SCALAR) == TS_CPU_SCALAR, "avx2 on old cpu");
    CHECK(ts_cpu_clamp(TS_CPU_NEON, TS_CPU_SCALAR) == TS_CPU_SCALAR, "neon on old cpu");

    const ts_cpu_level best = ts_cpu_detect();
    CHECK(ts_kern_for_level(best) != NULL, "best level has a table");
    CHECK(ts_kern_for_level((ts_cpu_level)77) == NULL, "junk level");
    CHECK(n_levels >= 1 && levels[0]->level == TS_CPU_SCALAR, "scalar always available");
    for (int l = 0; l < TS_CPU_LEVEL_COUNT; l++) {
        const ts_cpu_level got = ts_cpu_force_level((ts_cpu_level)l);
        CHECK(got == ts_cpu_clamp((ts_cpu_level)l, best), "force %d", l);
        CHECK(ts_kern_get()->level == got && ts_cpu_level_active() == got, "forced table");
        const ts_kern *k = ts_kern_for_level((ts_cpu_level)l);
        CHECK(!k || k->level == (ts_cpu_level)l, "table level of %d", l);
    }
    ts_cpu_force_level(best);

    /* every level supports the same types and has both entry points */
    for (int i = 0; i < n_levels; i++) {
        const ts_kern *k = levels[i];
        CHECK(k->quant_q8 && k->quant_q8k, "%s quantizers", ts_cpu_level_name(k->level));
        for (int t = 0; t < TS_TYPE_COUNT; t++)
            CHECK(!k->dot[t] == !levels[0]->dot[t] && !k->dot4[t] == !k->dot[t], "%s type %d support",
                  ts_cpu_level_name(k->level), t);
    }

    ts_err err;
    CHECK(ts_qdot_check(TS_TYPE_Q4_K, 2048, &err) == 0, "Q4_K 2048");
    CHECK(ts_qdot_check(TS_TYPE_F32, 7, &err) == 0, "F32 7");
    CHECK(ts_qdot_check(TS_TYPE_Q4_K, 640, &err) < 0 && strstr(err.msg, "Q4_K") && strstr(err.msg, "640"),
          "Q4_K 640: %s", err.msg);
    CHECK(ts_qdot_check(TS_TYPE_Q4_0, 48, &err) < 0 && strstr(err.msg, "48"), "Q4_0 48: %s", err.msg);
    CHECK(ts_qdot_check(TS_TYPE_Q4_0, 0, &err) < 0, "n = 0");
    CHECK(ts_qdot_check(TS_TYPE_Q8_1, 32, &err) < 0 && strstr(err.msg, "Q8_1"), "Q8_1: %s", err.msg);
    CHECK(ts_qdot_check(4, 32, &err) < 0 && strstr(err.msg, "4"), "removed id 4: %s", err.msg);
    CHECK(ts_qdot_check(1000, 32, &err) < 0 && strstr(err.msg, "1000"), "id 1000: %s", err.msg);
    CHECK(ts_qdot_act_type(TS_TYPE_Q6_K) == TS_ACT_Q8K && ts_qdot_act_type(TS_TYPE_Q5_0) == TS_ACT_Q8 &&
              ts_qdot_act_type(TS_TYPE_F16) == TS_ACT_F32,
          "act types");
    CHECK(ts_act_row_bytes(TS_ACT_Q8, 64) == 72 && ts_act_row_bytes(TS_ACT_Q8K, 512) == 584 &&
              ts_act_row_bytes(TS_ACT_F32, 3) == 12,
          "row bytes");
}

/* ---- activation data ---- */

enum { X_NORMAL, X_HEAVY, X_EXTREME, X_NMODES };

static void gen_act(float *x, int64_t n, int mode) {
    for (int64_t i = 0; i < n; i++) {
        switch (mode) {
        case X_NORMAL: x[i] = nrand(); break;
        case X_HEAVY: x[i] = (rng() % 37 == 0 ? 40.0f : 1.0f) * nrand(); break;
        default: x[i] = (i & 1) ? 1.0f : -1.0f; break; /* every q = +-127 */
        }
    }
}

/* the value a quantized activation stands for, and its rounding bound */
static void act_dequant(ts_act_type a, const uint8_t *xq, const float *x, int64_t n, double *xd, double *e) {
    for (int64_t i = 0; i < n; i++) {
        if (a == TS_ACT_F32) {
            xd[i] = x[i];
            e[i] = 0;
        } else if (a == TS_ACT_Q8) {
            const uint8_t *b = xq + TS_ACT_Q8_BYTES * (i / 32);
            const double dh = ts_f16_to_f32((uint16_t)(b[0] | (b[1] << 8)));
            float amax = 0.0f;
            for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[i / 32 * 32 + j]));
            const double d = amax / 127.0f;
            xd[i] = dh * (int8_t)b[4 + i % 32];
            e[i] = (0.5 + 3e-5) * d + 127.0 * fabs(d - dh);
        } else {
            const uint8_t *b = xq + TS_ACT_Q8K_BYTES * (i / 256);
            float d;
            memcpy(&d, b, 4);
            xd[i] = (double)d * (int8_t)b[4 + i % 256];
            e[i] = (0.5 + 3e-5) * d;
        }
    }
}

/* ---- quantizers ---- */

static void check_q8_sums(const uint8_t *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += TS_ACT_Q8_BYTES) {
        int s = 0;
        for (int j = 0; j < 32; j++) s += (int8_t)b[4 + j];
        int16_t st;
        memcpy(&st, b + 2, 2);
        CHECK(st == s, "Q8 block %lld: stored sum %d, quants sum to %d", (long long)i, st, s);
    }
}
static void check_q8k_sums(const uint8_t *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += TS_ACT_Q8K_BYTES) {
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int j = 0; j < 16; j++) s += (int8_t)b[4 + 16 * g + j];
            int16_t st;
            memcpy(&st, b + 260 + 2 * g, 2);
            CHECK(st == s, "Q8K block %lld group %d: stored sum %d, quants sum to %d", (long long)i, g, st, s);
        }
    }
}

/* x: specials in some blocks. Returns a mask of blocks (of 32) that stay
 * finite and normal (the ones comparable with ts_quant_row). */
static void plant_specials(float *x, int64_t n, unsigned char *plain) {
    const int64_t nb = n / 32;
    for (int64_t i = 0; i < nb; i++) plain[i] = 1;
    for (int64_t i = 0; i < nb; i++) {
        float *b = x + 32 * i;
        switch (rng() % 12) {
        case 0: b[rng() % 32] = NAN; plain[i] = 0; break;
        case 1: b[rng() % 32] = INFINITY; plain[i] = 0; break;
        case 2: b[31] = -INFINITY; plain[i] = 0; break;
        case 3: for (int j = 0; j < 32; j++) b[j] = 0.0f; break;
        case 4: for (int j = 0; j < 32; j++) b[j] *= 1e-39f; plain[i] = 0; break; /* subnormal d */
        case 5: for (int j = 0; j < 32; j++) b[j] *= 1e36f; break; /* huge, still finite */
        case 6: /* ties: amax = 127 gives d = 1, so x = k + 0.5 rounds away from zero */
            for (int j = 0; j < 32; j++) b[j] = (float)((int)(rng() % 200) - 100) + 0.5f;
            b[rng() % 32] = (rng() & 1) ? 127.0f : -127.0f;
            break;
        case 7: b[0] = NAN; b[1] = INFINITY; plain[i] = 0; break;
        default: break;
        }
    }
}

static void test_quantizers(void) {
    const int64_t lens[] = {256, 512, 2304};
    int compared = 0;
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        for (int rep = 0; rep < 6; rep++) {
            const int64_t n = lens[li];
            float *x = galloc((size_t)n * sizeof(float));
            unsigned char plain[2304 / 32];
            gen_act(x, n, rep % 2 ? X_HEAVY : X_NORMAL);
            if (rep >= 2) plant_specials(x, n, plain);
            else memset(plain, 1, sizeof plain);
            const size_t b8 = ts_act_row_bytes(TS_ACT_Q8, n), bk = ts_act_row_bytes(TS_ACT_Q8K, n);
            uint8_t *r8 = galloc(b8), *rk = galloc(bk), *q8 = galloc(b8), *qk = galloc(bk);
            levels[0]->quant_q8(x, r8, n);
            levels[0]->quant_q8k(x, rk, n);
            check_q8_sums(r8, n / 32);
            check_q8k_sums(rk, n / 256);
            for (int l = 1; l < n_levels; l++) {
                memset(q8, 0x5a, b8);
                memset(qk, 0x5a, bk);
                ts_act_quantize(levels[l], TS_ACT_Q8, x, q8, n);
                ts_act_quantize(levels[l], TS_ACT_Q8K, x, qk, n);
                for (int64_t i = 0; i < n / 32; i++)
                    CHECK(memcmp(q8 + 36 * i, r8 + 36 * i, 36) == 0, "%s Q8 n=%lld rep %d block %lld differs",
                          ts_cpu_level_name(levels[l]->level), (long long)n, rep, (long long)i);
                for (int64_t i = 0; i < n / 256; i++)
                    CHECK(memcmp(qk + 292 * i, rk + 292 * i, 292) == 0, "%s Q8K n=%lld rep %d block %lld differs",
                          ts_cpu_level_name(levels[l]->level), (long long)n, rep, (long long)i);
            }
            /* 32-blocks: ggml's Q8_0 (ts_quant_row) d and q on finite blocks */
            uint8_t *g = galloc((size_t)n / 32 * 34);
            ts_err err;
            CHECK(ts_quant_row(TS_TYPE_Q8_0, x, g, n, &err) == 0, "ts_quant_row: %s", err.msg);
            for (int64_t i = 0; i < n / 32; i++) {
                if (!plain[i]) continue;
                compared++;
                CHECK(memcmp(g + 34 * i, r8 + 36 * i, 2) == 0 && memcmp(g + 34 * i + 2, r8 + 36 * i + 4, 32) == 0,
                      "Q8 block %lld differs from ts_quant_row(Q8_0)", (long long)i);
            }
            /* NaN/inf blocks: q = 0 and a non-finite d, so any dot is NaN */
            for (int64_t i = 0; i < n / 32; i++) {
                int nonfinite = 0;
                for (int j = 0; j < 32; j++) nonfinite |= !isfinite(x[32 * i + j]);
                if (!nonfinite) continue;
                const float d = ts_f16_to_f32((uint16_t)(r8[36 * i] | (r8[36 * i + 1] << 8)));
                int nz = 0;
                for (int j = 0; j < 32; j++) nz |= r8[36 * i + 4 + j];
                CHECK(!isfinite(d) && !nz, "non-finite block %lld: d %g, quants not all 0", (long long)i, d);
            }
            /* Q8K: d = amax/127 in f32, |x - d q| <= (1/2 + 3e-5) d on finite blocks */
            for (int64_t i = 0; i < n / 256; i++) {
                float amax = 0.0f, d;
                int fin = 1;
                for (int j = 0; j < 256; j++) {
                    fin &= isfinite(x[256 * i + j]);
                    amax = fmaxf(amax, fabsf(x[256 * i + j]));
                }
                memcpy(&d, rk + 292 * i, 4);
                if (!fin || amax < 1e-30f) continue;
                CHECK(d == amax / 127.0f, "Q8K block %lld: d %g, amax/127 %g", (long long)i, d, amax / 127.0f);
                for (int j = 0; j < 256; j++) {
                    const double err_j = fabs((double)x[256 * i + j] - (double)d * (int8_t)rk[292 * i + 4 + j]);
                    CHECK(err_j <= (0.5 + 3e-5) * d, "Q8K rounding %g > d/2 (d %g)", err_j, d);
                }
            }
            gfree_all();
        }
    }
    printf("quantizers: %d levels byte-identical; %d finite 32-blocks equal to ts_quant_row(Q8_0)\n", n_levels,
           compared);
}

/* ---- weights ---- */

typedef struct {
    uint32_t type;
    int scale_off[2]; /* f16 scale fields per block (-1: none) */
    int q_off, q_len; /* offset types: the bytes that hold the quants */
} wtype_info;

static const wtype_info wtypes[] = {
    {TS_TYPE_Q4_0, {0, -1}, 0, 0},    {TS_TYPE_Q4_1, {0, 2}, 4, 16},     {TS_TYPE_Q5_0, {0, -1}, 0, 0},
    {TS_TYPE_Q5_1, {0, 2}, 4, 20},    {TS_TYPE_Q8_0, {0, -1}, 0, 0},     {TS_TYPE_Q2_K, {80, 82}, 16, 64},
    {TS_TYPE_Q3_K, {108, -1}, 0, 0},  {TS_TYPE_Q4_K, {0, 2}, 16, 128},   {TS_TYPE_Q5_K, {0, 2}, 16, 160},
    {TS_TYPE_Q6_K, {208, -1}, 0, 0},  {TS_TYPE_F32, {-1, -1}, 0, 0},    {TS_TYPE_F16, {-1, -1}, 0, 0},
    {TS_TYPE_BF16, {-1, -1}, 0, 0},
};

enum { W_RANDOM, W_EXTREME, W_NMODES };

static void put_f16(uint8_t *p, float f) {
    const uint16_t h = ts_f32_to_f16(f);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

static void gen_weights(const wtype_info *ti, uint8_t *w, int64_t n, int rows, int mode) {
    const ts_type_traits *tr = ts_type_info(ti->type);
    const size_t rb = ts_row_size(ti->type, n);
    if (ti->type == TS_TYPE_F32) {
        for (int64_t i = 0; i < n * rows; i++) {
            const float v = mode == W_EXTREME ? ((i & 1) ? 1.0f : -1.0f) : nrand() * 0.05f;
            memcpy(w + 4 * i, &v, 4);
        }
        return;
    }
    if (ti->type == TS_TYPE_F16) {
        for (int64_t i = 0; i < n * rows; i++) put_f16(w + 2 * i, mode == W_EXTREME ? 65504.0f : nrand() * 0.05f);
        return;
    }
    if (ti->type == TS_TYPE_BF16) {
        for (int64_t i = 0; i < n * rows; i++) {
            const uint16_t h = ts_f32_to_bf16(mode == W_EXTREME ? 65536.0f : nrand() * 0.05f);
            w[2 * i] = (uint8_t)h, w[2 * i + 1] = (uint8_t)(h >> 8);
        }
        return;
    }
    for (size_t i = 0; i < rb * (size_t)rows; i++) w[i] = (uint8_t)rng();
    const int64_t nblk = n / tr->blck * rows;
    for (int64_t b = 0; b < nblk; b++) {
        uint8_t *blk = w + (size_t)b * tr->size;
        if (mode == W_EXTREME) /* largest quants everywhere: 0x80 = -128 for Q8_0, all ones otherwise */
            memset(blk, ti->type == TS_TYPE_Q8_0 ? 0x80 : 0xff, tr->size);
        for (int s = 0; s < 2; s++) {
            if (ti->scale_off[s] < 0) continue;
            const float mag = ldexpf(1.0f + 0.5f * frand(), -(int)(rng() % 8) - 3); /* 2^-10 .. 2^-2 */
            const float v = mode == W_EXTREME ? 1.0f : (rng() & 1) ? mag : -mag;
            put_f16(blk + ti->scale_off[s], v);
        }
    }
}

/* dequantized row and its offset part (the row with its quants zeroed) */
static void weight_parts(const wtype_info *ti, const uint8_t *row, int64_t n, float *wd, float *off) {
    ts_err err;
    if (ts_dequant_row(ti->type, row, wd, n, &err) < 0) {
        CHECK(0, "dequant: %s", err.msg);
        return;
    }
    for (int64_t i = 0; i < n; i++) off[i] = 0.0f;
    if (!ti->q_len) return;
    const ts_type_traits *tr = ts_type_info(ti->type);
    const size_t rb = ts_row_size(ti->type, n);
    uint8_t *tmp = malloc(rb);
    memcpy(tmp, row, rb);
    for (int64_t b = 0; b < n / tr->blck; b++) memset(tmp + (size_t)b * tr->size + ti->q_off, 0, (size_t)ti->q_len);
    ts_dequant_row(ti->type, tmp, off, n, NULL);
    free(tmp);
}

/* ---- dots, GEMV, GEMM ---- */

#define ROWS 13
#define TOK 7
#define YSTRIDE (ROWS + 3)
static const uint32_t SENTINEL = 0x7fa5a5a5u; /* a NaN no kernel produces */

typedef struct {
    double max_ratio;       /* max |fast - ref| / bound over the levels */
    double fid_ratio;       /* max |qdot - exact| / fidelity bound */
    double fid_rel_sum;     /* sum of |qdot - exact| / sum|w x| */
    double fid_rel_norm;    /* sum of |qdot - exact| / (|w|_2 |x|_2) */
    double fid_rel_max;     /* max of |qdot - exact| / sum|w x| */
    int fid_count;
} dot_stats;

static int is_sentinel(float f) {
    return bits(f) == SENTINEL;
}

static void run_dot_case(const wtype_info *ti, int64_t n, int wmode, int xmode, dot_stats *st) {
    const ts_type_traits *tr = ts_type_info(ti->type);
    const ts_act_type at = ts_qdot_act_type(ti->type);
    const size_t rb = ts_row_size(ti->type, n);
    const size_t xb = ts_act_row_bytes(at, n);
    const int quant = at != TS_ACT_F32;
    const double K = quant ? (double)n / 16 : (double)n;
    const double u = 0x1p-24;

    uint8_t *w = galloc(rb * ROWS);
    float *x = galloc((size_t)n * TOK * sizeof(float));
    uint8_t *xq = galloc(xb * TOK);
    float *y = galloc(sizeof(float) * YSTRIDE * TOK);
    float *y2 = galloc(sizeof(float) * YSTRIDE * TOK);
    float *yx = galloc(sizeof(float) * YSTRIDE * TOK); /* AVX2 results, for AVX-512 */
    gen_weights(ti, w, n, ROWS, wmode);
    gen_act(x, n * TOK, xmode);
    for (int t = 0; t < TOK; t++) ts_act_quantize(levels[0], at, x + n * t, xq + xb * t, n);

    float ref[TOK][ROWS];
    double M[TOK][ROWS];
    double *xd = malloc(sizeof(double) * (size_t)n), *e = malloc(sizeof(double) * (size_t)n);
    float *wd = malloc(sizeof(float) * (size_t)n), *off = malloc(sizeof(float) * (size_t)n);
    for (int t = 0; t < TOK; t++) {
        act_dequant(at, xq + xb * t, x + n * t, n, xd, e);
        for (int r = 0; r < ROWS; r++) {
            ref[t][r] = levels[0]->dot[ti->type](n, w + rb * r, xq + xb * t);
            weight_parts(ti, w + rb * r, n, wd, off);
            double m = 0, exact = 0, fb = 0, mp = 0, sabs = 0, w2 = 0, x2 = 0;
            for (int64_t i = 0; i < n; i++) {
                m += fabs(xd[i]) * (fabs(wd[i]) + 2 * fabs(off[i]));
                exact += (double)wd[i] * x[n * t + i];
                fb += fabs(wd[i]) * e[i];
                mp += (fabs(wd[i]) + 2 * fabs(off[i])) * (fabs(x[n * t + i]) + e[i]);
                sabs += fabs((double)wd[i] * x[n * t + i]);
                w2 += (double)wd[i] * wd[i];
                x2 += (double)x[n * t + i] * x[n * t + i];
            }
            M[t][r] = m;
            /* fidelity of the scalar (reference) quantized dot */
            const double err = fabs((double)ref[t][r] - exact);
            const double bound = fb + (K + 8) * u * mp + 1e-30;
            CHECK(err <= bound, "fidelity %s n=%lld w%d x%d t%d r%d: |%g - %g| = %g > %g", tr->name, (long long)n,
                  wmode, xmode, t, r, ref[t][r], exact, err, bound);
            if (err / bound > st->fid_ratio) st->fid_ratio = err / bound;
            if (wmode == W_RANDOM && sabs > 0) {
                st->fid_rel_sum += err / sabs;
                st->fid_rel_norm += err / sqrt(w2 * x2);
                if (err / sabs > st->fid_rel_max) st->fid_rel_max = err / sabs;
                st->fid_count++;
            }
        }
    }
    free(xd), free(e), free(wd), free(off);

    for (int l = 0; l < n_levels; l++) {
        const ts_kern *k = levels[l];
        const char *ln = ts_cpu_level_name(k->level);
        for (int i = 0; i < YSTRIDE * TOK; i++) memcpy(&y[i], &SENTINEL, 4), memcpy(&y2[i], &SENTINEL, 4);
        /* GEMV over a middle range first: nothing outside it may be written */
        for (int t = 0; t < TOK; t++) ts_qgemv(k, ti->type, w, rb, n, xq + xb * t, y + YSTRIDE * t, 2, ROWS - 3);
        for (int t = 0; t < TOK; t++)
            for (int r = 0; r < YSTRIDE; r++) {
                const int inside = r >= 2 && r < ROWS - 3;
                CHECK(inside != is_sentinel(y[YSTRIDE * t + r]), "%s %s gemv range: row %d written=%d", ln,
                      tr->name, r, !inside);
            }
        for (int t = 0; t < TOK; t++) {
            ts_qgemv(k, ti->type, w, rb, n, xq + xb * t, y + YSTRIDE * t, 0, 2);
            ts_qgemv(k, ti->type, w, rb, n, xq + xb * t, y + YSTRIDE * t, ROWS - 3, ROWS);
        }
        /* GEMM: every row and token, bit-identical to GEMV */
        ts_qgemm(k, ti->type, w, rb, n, xq, xb, TOK, y2, YSTRIDE, 0, ROWS);
        for (int t = 0; t < TOK; t++) {
            for (int r = ROWS; r < YSTRIDE; r++)
                CHECK(is_sentinel(y[YSTRIDE * t + r]) && is_sentinel(y2[YSTRIDE * t + r]), "%s %s: padding written",
                      ln, tr->name);
            for (int r = 0; r < ROWS; r++) {
                const float a = y[YSTRIDE * t + r], b = y2[YSTRIDE * t + r];
                CHECK(bits(a) == bits(b), "%s %s n=%lld t%d r%d: gemm %.9g != gemv %.9g", ln, tr->name, (long long)n,
                      t, r, b, a);
                const double bound = 2 * (K + 8) * u * M[t][r];
                const double err = fabs((double)a - ref[t][r]);
                CHECK(err <= bound, "%s %s n=%lld w%d x%d t%d r%d: %.9g vs ref %.9g (err %g > bound %g)", ln,
                      tr->name, (long long)n, wmode, xmode, t, r, a, ref[t][r], err, bound);
                if (bound > 0 && err / bound > st->max_ratio) st->max_ratio = err / bound;
                if (k->level == TS_CPU_AVX2) yx[YSTRIDE * t + r] = a;
                if (k->level == TS_CPU_AVX512 && level_tab(TS_CPU_AVX2))
                    CHECK(bits(a) == bits(yx[YSTRIDE * t + r]), "%s n=%lld t%d r%d: avx512 %.9g != avx2 %.9g",
                          tr->name, (long long)n, t, r, a, yx[YSTRIDE * t + r]);
            }
        }
    }
    gfree_all();
}

static void test_dots(void) {
    const int64_t len32[] = {32, 64, 96, 576, 640, 1536};
    const int64_t len256[] = {256, 512, 2304};
    const int64_t len1[] = {1, 3, 7, 8, 9, 15, 16, 17, 24, 31, 33, 40, 100, 576, 1001};
    printf("%-5s %12s %12s %14s %14s %14s\n", "type", "err/bound", "fid/bound", "mean|e|/S|wx|", "max|e|/S|wx|",
           "mean|e|/|w||x|");
    for (size_t ti = 0; ti < sizeof wtypes / sizeof wtypes[0]; ti++) {
        const wtype_info *w = &wtypes[ti];
        const ts_act_type at = ts_qdot_act_type(w->type);
        const int64_t *lens = at == TS_ACT_Q8 ? len32 : at == TS_ACT_Q8K ? len256 : len1;
        const size_t nl = at == TS_ACT_Q8 ? 6 : at == TS_ACT_Q8K ? 3 : sizeof len1 / sizeof len1[0];
        dot_stats st = {0};
        for (size_t li = 0; li < nl; li++)
            for (int wm = 0; wm < W_NMODES; wm++)
                for (int xm = 0; xm < X_NMODES; xm++) run_dot_case(w, lens[li], wm, xm, &st);
        printf("%-5s %12.3g %12.3g %14.3g %14.3g %14.3g\n", ts_type_info(w->type)->name, st.max_ratio, st.fid_ratio,
               st.fid_rel_sum / st.fid_count, st.fid_rel_max, st.fid_rel_norm / st.fid_count);
    }
}

/* NaN in an activation block makes the dot NaN at every level */
static void test_nan(void) {
    const int64_t n = 256;
    for (size_t ti = 0; ti < sizeof wtypes / sizeof wtypes[0]; ti++) {
        const wtype_info *wi = &wtypes[ti];
        const ts_act_type at = ts_qdot_act_type(wi->type);
        const size_t rb = ts_row_size(wi->type, n), xb = ts_act_row_bytes(at, n);
        uint8_t *w = galloc(rb);
        float *x = galloc(sizeof(float) * n);
        uint8_t *xq = galloc(xb);
        gen_weights(wi, w, n, 1, W_RANDOM);
        gen_act(x, n, X_NORMAL);
        x[77] = NAN;
        for (int l = 0; l < n_levels; l++) {
            ts_act_quantize(levels[l], at, x, xq, n);
            const float r = levels[l]->dot[wi->type](n, w, xq);
            CHECK(isnan(r), "%s %s: NaN activation gives %g", ts_cpu_level_name(levels[l]->level),
                  ts_type_info(wi->type)->name, r);
        }
        gfree_all();
    }
}

/* GEMM over more tokens than one token block (64), and an odd count */
static void test_gemm_blocking(void) {
    const int64_t n = 256;
    const int ntok = 70, rows = 5;
    for (size_t ti = 0; ti < sizeof wtypes / sizeof wtypes[0]; ti++) {
        const wtype_info *wi = &wtypes[ti];
        const ts_act_type at = ts_qdot_act_type(wi->type);
        const size_t rb = ts_row_size(wi->type, n), xb = ts_act_row_bytes(at, n);
        uint8_t *w = galloc(rb * rows);
        float *x = galloc(sizeof(float) * n * ntok);
        uint8_t *xq = galloc(xb * ntok);
        float *y = galloc(sizeof(float) * rows * ntok), *y2 = galloc(sizeof(float) * rows * ntok);
        gen_weights(wi, w, n, rows, W_RANDOM);
        gen_act(x, n * ntok, X_NORMAL);
        for (int t = 0; t < ntok; t++) ts_act_quantize(levels[0], at, x + n * t, xq + xb * t, n);
        for (int l = 0; l < n_levels; l++) {
            ts_qgemm(levels[l], wi->type, w, rb, n, xq, xb, ntok, y, rows, 0, rows);
            for (int t = 0; t < ntok; t++) ts_qgemv(levels[l], wi->type, w, rb, n, xq + xb * t, y2 + rows * t, 0, rows);
            CHECK(memcmp(y, y2, sizeof(float) * rows * ntok) == 0, "%s %s: gemm over %d tokens != gemv",
                  ts_cpu_level_name(levels[l]->level), ts_type_info(wi->type)->name, ntok);
        }
        gfree_all();
    }
}

int main(int argc, char **argv) {
    rng_seed(0x243f6a8885a308d3ull);
    int dispatch_only = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dispatch-only") == 0) {
            dispatch_only = 1;
        } else if (strcmp(argv[i], "--slack") == 0) {
            slack = 64;
        } else if (strcmp(argv[i], "--expect-level") == 0 && i + 1 < argc) {
            const char *want = argv[++i];
            CHECK(ts_cpu_level_parse(want) == (int)ts_cpu_detect(), "detected level %s, expected %s",
                  ts_cpu_level_name(ts_cpu_detect()), want);
        } else {
            fprintf(stderr, "usage: %s [--dispatch-only] [--expect-level NAME] [--slack]\n", argv[0]);
            return 2;
        }
    }
    test_env_level();
    collect_levels();
    printf("levels tested:");
    for (int i = 0; i < n_levels; i++) printf(" %s", ts_cpu_level_name(levels[i]->level));
    printf("\n");
    if (dispatch_only) {
        test_dispatch();
    } else {
        test_dispatch();
        test_quantizers();
        test_dots();
        test_nan();
        test_gemm_blocking();
    }
    if (failures) {
        fprintf(stderr, "%d failure(s)\n", failures);
        return 1;
    }
    printf("all kernel tests passed\n");
    return 0;
}
