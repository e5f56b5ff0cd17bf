/* test_perf_kernels.c - tests of the performance layer: the thread pool's
 * grain mode, the repacked panel GEMM (src/kernels/repack.c,
 * x86/gemm_avx512.c) and the matmul driver ts_linear (src/kernels/linear.c).
 *
 *   - pool: ts_parallel_for_grain covers every index once for several pool
 *     sizes, grains and spin budgets (TS_SPIN_US=0 makes every wait sleep);
 *   - panels: ts_rp_row of a packed matrix equals ts_dequant_row of the
 *     original row, bit for bit (Q4_0, Q4_1, Q8_0; a partial last panel);
 *   - panel kernels: every level that has one gives the scalar reference's
 *     bits for 1..8 tokens and partial panels; the reference agrees with a
 *     double dot of the dequantized weights and activations (rel. 1e-5 of
 *     the sum of |products|, f32 accumulation over the blocks);
 *   - ts_linear: for packed and unpacked matrices of several types, 1..70
 *     tokens (partial tiles and token blocks), several thread counts, fused
 *     matrices: equal to the one-token result bit for bit (decode = prefill),
 *     and within the activation quantization's error of the f32 reference
 *     matmul (bound below).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/threadpool.h"
#include "kernels/cpu.h"
#include "kernels/fastops.h"
#include "kernels/linear.h"
#include "kernels/ops.h"
#include "kernels/qdot.h"
#include "kernels/repack.h"
#include "quant/quant.h"

/* ---- pool ---- */

typedef struct {
    int *hits;
    int n_threads;
    int bad;
} cover_ctx;

static void cover_fn(void *ctx, int64_t b, int64_t e, int tid) {
    cover_ctx *c = ctx;
    if (tid < 0 || tid >= c->n_threads || b >= e) c->bad = 1;
    for (int64_t i = b; i < e; i++) __atomic_fetch_add(&c->hits[i], 1, __ATOMIC_RELAXED);
}

static void test_pool(const char *spin) {
    setenv("TS_SPIN_US", spin, 1);
    const int sizes[] = {1, 2, 3, 5};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        ts_err err;
        ts_threadpool *p = ts_threadpool_new(sizes[si], &err);
        CHECK(p != NULL, "pool of %d: %s", sizes[si], err.msg);
        if (!p) continue;
        const int64_t ns[] = {0, 1, 2, 7, 100, 1001};
        const int64_t grains[] = {0, 1, 3, 64, 2000};
        for (int rep = 0; rep < 20; rep++)
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
                for (size_t gi = 0; gi < sizeof grains / sizeof grains[0]; gi++) {
                    static int hits[1001];
                    memset(hits, 0, sizeof hits);
                    cover_ctx c = {hits, sizes[si], 0};
                    ts_parallel_for_grain(p, ns[ni], grains[gi], cover_fn, &c);
                    int ok = !c.bad;
                    for (int64_t i = 0; i < ns[ni]; i++) ok &= hits[i] == 1;
                    CHECK(ok, "grain: n=%lld grain=%lld threads=%d spin=%s", (long long)ns[ni],
                          (long long)grains[gi], sizes[si], spin);
                }
        ts_threadpool_free(p);
    }
    unsetenv("TS_SPIN_US");
}

/* ---- panels ---- */

static const uint32_t rp_types[] = {TS_TYPE_Q4_0, TS_TYPE_Q4_1, TS_TYPE_Q5_0, TS_TYPE_Q5_1, TS_TYPE_Q8_0,
                                    TS_TYPE_Q2_K, TS_TYPE_Q3_K, TS_TYPE_Q4_K, TS_TYPE_Q5_K, TS_TYPE_Q6_K};
#define N_RP_TYPES 10

/* random rows of type ty: n_out rows of n_in into q (row_bytes each); types
 * without a quantizer get random bytes with sane f16 scales */
static void put_f16(uint8_t *p, float v) {
    const uint16_t h = ts_f32_to_f16(v);
    memcpy(p, &h, 2);
}
static void make_rows(uint32_t ty, int64_t n_in, int64_t n_out, uint8_t *q, size_t rb) {
    float *f = malloc(sizeof(float) * (size_t)n_in);
    ts_err err;
    for (int64_t r = 0; r < n_out; r++) {
        const float s = 0.5f + (float)(r % 7) * 0.3f;
        uint8_t *row = q + (size_t)r * rb;
        if (ts_type_info(ty)->can_quant) {
            for (int64_t i = 0; i < n_in; i++) f[i] = frand() * s;
            if (ts_quant_row(ty, f, row, n_in, &err)) CHECK(0, "quant: %s", err.msg);
            continue;
        }
        for (size_t i = 0; i < rb; i++) row[i] = (uint8_t)((frand() + 1.0f) * 127.99f);
        const size_t bs = ts_type_info(ty)->size;
        for (size_t b = 0; b < rb / bs; b++) {
            uint8_t *blk = row + b * bs;
            switch (ty) {
            case TS_TYPE_Q5_0: put_f16(blk, 0.05f * s * (1 + frand() * 0.5f)); break;
            case TS_TYPE_Q5_1:
                put_f16(blk, 0.05f * s * (1 + frand() * 0.5f));
                put_f16(blk + 2, -0.8f * s * (1 + frand() * 0.5f));
                break;
            case TS_TYPE_Q4_K:
            case TS_TYPE_Q5_K:
                put_f16(blk, 0.01f * s * (1 + frand() * 0.5f));
                put_f16(blk + 2, 0.005f * s * (1 + frand() * 0.5f));
                break;
            case TS_TYPE_Q6_K: put_f16(blk + 208, 0.0005f * s * (1 + frand() * 0.5f)); break;
            case TS_TYPE_Q3_K: put_f16(blk + 108, 0.01f * s * (1 + frand() * 0.5f)); break;
            case TS_TYPE_Q2_K:
                put_f16(blk + 80, 0.01f * s * (1 + frand() * 0.5f));
                put_f16(blk + 82, 0.005f * s * (1 + frand() * 0.5f));
                break;
            default: break;
            }
        }
    }
    free(f);
}

static void test_panels(void) {
    enum { NI = 512, NO = 37 };
    for (size_t ti = 0; ti < N_RP_TYPES; ti++) {
        const uint32_t ty = rp_types[ti];
        const size_t rb = ts_row_size(ty, NI);
        static uint8_t q[NO * 600], packed[48 * 600];
        make_rows(ty, NI, NO, q, rb);
        ts_wmat w = {ty, q, NI, NO, rb, NULL};
        /* panels are as large as the rows they hold (Q4_K: 148 / 144, Q5_K:
         * 180 / 176, Q3_K: 114 / 110: the K-quants' packed 6-bit scales
         * become bytes) */
        CHECK(ts_rp_matrix_bytes(ty, NI, NO) == (ty == TS_TYPE_Q4_K   ? 48 * rb / 144 * 148
                                                 : ty == TS_TYPE_Q5_K ? 48 * rb / 176 * 180
                                                 : ty == TS_TYPE_Q3_K ? 48 * rb / 110 * 114
                                                                      : 48 * rb),
              "%s: matrix bytes", ts_type_info(ty)->name);
        const size_t pb = ts_rp_panel_bytes(ty, NI);
        for (int p = 0; p < 3; p++) {
            const int nr = NO - 16 * p < 16 ? NO - 16 * p : 16;
            ts_rp_pack_panel(ty, NI, q + (size_t)16 * p * rb, rb, nr, packed + (size_t)p * pb);
        }
        int ok = 1;
        for (int r = 0; r < NO; r++) {
            float a[NI], b[NI];
            ts_rp_row(ty, NI, packed, r, a);
            ts_wmat_row(&w, r, b);
            ok &= !memcmp(a, b, sizeof a);
        }
        CHECK(ok, "%s: rows of the panels differ from the GGUF rows", ts_type_info(ty)->name);
    }
}

/* activation tiles of n_tok random rows (the reference quantizer) */
static void make_tiles(int64_t n_in, int n_tok, int hi, float *x, uint8_t *tiles) {
    for (int t = 0; t < n_tok; t++) {
        for (int64_t i = 0; i < n_in; i++) x[t * n_in + i] = frand() * (1.0f + (float)(i % 5));
        const int t0 = t / 8 * 8, nt = n_tok - t0 < 8 ? n_tok - t0 : 8;
        ts_rp_quant_ref(x + t * n_in, n_in, hi, tiles + ts_rp_tile_offset(n_in, t0, hi), nt, t - t0);
    }
}

/* value i of token t as the tile holds it: s * X */
static double tile_val(const uint8_t *tiles, int64_t n_in, int n_tok, int hi, int t, int64_t i) {
    const int t0 = t / 8 * 8, nt = n_tok - t0 < 8 ? n_tok - t0 : 8, slot = t - t0;
    const uint8_t *blk = tiles + ts_rp_tile_offset(n_in, t0, hi) + (size_t)(i / 32) * ts_rp_xb(hi) * (size_t)nt;
    int X = (int8_t)blk[32 * slot + i % 32];
    if (hi == TS_RP_HI) X = 256 * X + (int8_t)blk[32 * nt + 32 * slot + i % 32];
    float sc;
    memcpy(&sc, blk + (hi == TS_RP_HI ? 64 : 32) * nt + TS_RP_SIDE * slot, 4);
    return (double)sc * X;
}

/* The SIMD quantizers give the reference's bytes, special blocks included;
 * the quantization error is within half a step (of the block's amax, at
 * lo256 of its super-block's: blocks 0..7 hold the inf and NaN, so at
 * lo256 they all have a NaN scale; blocks 16..23 are zero). */
static void test_quant(void) {
    enum { NI = 32 * 24 };
    static float x[NI];
    for (int hi = 0; hi < 3; hi++) {
        for (int i = 0; i < NI; i++) x[i] = frand() * (float)(1 + i % 7) * (float)(1 << (i / 32 % 8)); /* amax 1..128x */
        for (int i = 32; i < 64; i++) x[i] = 0.0f;                 /* zero block */
        for (int i = 64; i < 96; i++) x[i] = frand() * 1e-32f;     /* tiny: all zero */
        x[100] = INFINITY;                                          /* inf block */
        x[140] = NAN;                                               /* NaN block */
        x[170] = 1e30f;                                             /* huge but finite */
        x[200] = -3.0e38f;
        for (int i = 224; i < 256; i++) x[i] = (float)(i - 240) * 0.5f; /* exact halves: ties */
        for (int i = 512; i < 768; i++) x[i] = 0.0f;                     /* a zero super-block */
        static uint8_t ref[NI / 32 * 96 * 3], got[NI / 32 * 96 * 3];
        memset(ref, 0, sizeof ref);
        for (int slot = 0; slot < 3; slot++) ts_rp_quant_ref(x, NI, hi, ref, 3, slot);
        for (int l = 0; l < TS_CPU_LEVEL_COUNT; l++) {
            const ts_kern *k = ts_kern_for_level((ts_cpu_level)l);
            if (!k || !k->rp_quant) continue;
            memset(got, 0, sizeof got);
            for (int slot = 0; slot < 3; slot++) k->rp_quant(x, NI, hi, got, 3, slot);
            CHECK(!memcmp(ref, got, ts_rp_tiles_bytes(NI, 3, hi)), "quantizer at level %s (hi %d) differs",
                  ts_cpu_level_name((ts_cpu_level)l), hi);
        }
        double worst = 0;
        int specials_ok = 1;
        const int g = hi == TS_RP_LO256 ? 8 : 1; /* blocks sharing a scale */
        for (int i = 0; i < NI; i++) {
            const double v = tile_val(ref, NI, 3, hi, 1, i);
            const int blk = i / 32;
            if (blk / g == 3 / g || blk / g == 4 / g) { /* inf / NaN blocks: NaN scale */
                specials_ok &= v != v;
                continue;
            }
            if (blk == 1 || blk == 2 || blk >= 16) {
                specials_ok &= v == 0.0;
                continue;
            }
            float amax = 0, amax_b = 0;
            for (int j = blk / g * g * 32; j < (blk / g + 1) * g * 32; j++) amax = fmaxf(amax, fabsf(x[j]));
            for (int j = blk * 32; j < blk * 32 + 32; j++) amax_b = fmaxf(amax_b, fabsf(x[j]));
            /* lo256: a block's step is at most twice its own amax's, or a
             * sixteenth of its super-block's (repack.h) */
            const double step = (hi == TS_RP_LO256 ? fmax(2.0 * amax_b, amax / 16.0) : amax) /
                                (hi == TS_RP_HI ? 32512.0 : 127.0);
            worst = fmax(worst, fabs(v - x[i]) / step);
        }
        CHECK(specials_ok, "quantizer (hi %d): zero/tiny/inf/NaN blocks", hi);
        CHECK(worst <= 0.5 + 1e-3, "quantizer (hi %d): error %g steps", hi, worst);
    }
}

static void test_panel_kernels(void) {
    enum { NI = 256, NO = 29, NT = 19 };
    static uint8_t q[NO * 300], packed[32 * 300], tiles[NT * 8 * 96], t1[8 * 96];
    static float x[NT * NI], y_ref[NT * 32], y[NT * 32];
    for (int hi = 0; hi < 3; hi++) /* TS_RP_LO, TS_RP_HI, TS_RP_LO256 */
        for (size_t ti = 0; ti < N_RP_TYPES; ti++) {
            const uint32_t ty = rp_types[ti];
            const char *name = ts_type_info(ty)->name;
            const size_t rb = ts_row_size(ty, NI), pb = ts_rp_panel_bytes(ty, NI);
            make_rows(ty, NI, NO, q, rb);
            for (int p = 0; p < 2; p++)
                ts_rp_pack_panel(ty, NI, q + (size_t)16 * p * rb, rb, p ? NO - 16 : 16, packed + (size_t)p * pb);
            make_tiles(NI, NT, hi, x, tiles);
            const ts_rp_gemm_fn ref = ts_rp_gemm_ref(ty);
            for (int t0 = 0; t0 < NT; t0 += 8) {
                const int nt = NT - t0 < 8 ? NT - t0 : 8;
                for (int p = 0; p < 2; p++)
                    ref(NI, packed + (size_t)p * pb, tiles + ts_rp_tile_offset(NI, t0, hi), nt, hi,
                        y_ref + t0 * 32 + 16 * p, 32, p ? NO - 16 : 16);
            }
            /* the reference against a double dot of what the tiles hold */
            double worst = 0;
            for (int t = 0; t < NT; t++)
                for (int r = 0; r < NO; r++) {
                    float wr[NI];
                    ts_rp_row(ty, NI, packed, r, wr);
                    double d = 0, mag = 0;
                    for (int i = 0; i < NI; i++) {
                        const double p = (double)wr[i] * tile_val(tiles, NI, NT, hi, t, i);
                        d += p, mag += fabs(p);
                    }
                    worst = fmax(worst, fabs(y_ref[t * 32 + r] - d) / (mag + 1e-30));
                }
            CHECK(worst < 1e-5, "%s panel reference (hi %d): rel err %g", name, hi, worst);
            for (int l = 0; l < TS_CPU_LEVEL_COUNT; l++) {
                const ts_kern *k = ts_kern_for_level((ts_cpu_level)l);
                if (!k || !k->rp_gemm[ty]) continue;
                memset(y, 0, sizeof y);
                for (int t0 = 0; t0 < NT; t0 += 8) {
                    const int nt = NT - t0 < 8 ? NT - t0 : 8;
                    for (int p = 0; p < 2; p++)
                        k->rp_gemm[ty](NI, packed + (size_t)p * pb, tiles + ts_rp_tile_offset(NI, t0, hi), nt, hi,
                                       y + t0 * 32 + 16 * p, 32, p ? NO - 16 : 16);
                }
                int same = 1;
                for (int t = 0; t < NT; t++) same &= !memcmp(y + t * 32, y_ref + t * 32, NO * sizeof(float));
                CHECK(same, "%s panel kernel at level %s (hi %d) differs from the reference", name,
                      ts_cpu_level_name((ts_cpu_level)l), hi);
                /* one token at a time (tiles of 1): the same bits */
                float y1[32];
                same = 1;
                for (int t = 0; t < NT; t++) {
                    ts_rp_quant_ref(x + t * NI, NI, hi, t1, 1, 0);
                    for (int p = 0; p < 2; p++)
                        k->rp_gemm[ty](NI, packed + (size_t)p * pb, t1, 1, hi, y1 + 16 * p, 32, p ? NO - 16 : 16);
                    same &= !memcmp(y1, y_ref + t * 32, NO * sizeof(float));
                }
                CHECK(same, "%s panel kernel at level %s (hi %d): one token differs from its tile", name,
                      ts_cpu_level_name((ts_cpu_level)l), hi);
            }
        }
}

/* ---- ts_linear ---- */

static void test_linear(int hi, int k256) {
    if (hi)
        unsetenv("TS_ACT");
    else
        setenv("TS_ACT", "q8", 1);
    if (k256) /* K-quant calls at lo256 (repack.h; the default at q8) */
        unsetenv("TS_ACT_K256");
    else
        setenv("TS_ACT_K256", "0", 1);
    enum { NI = 512, NO = 80, MAXT = 70 };
    const uint32_t types[] = {TS_TYPE_Q4_0, TS_TYPE_Q4_1, TS_TYPE_Q8_0, TS_TYPE_Q5_0, TS_TYPE_Q5_1, TS_TYPE_Q2_K, TS_TYPE_Q3_K,
                              TS_TYPE_Q4_K, TS_TYPE_Q5_K, TS_TYPE_Q6_K, TS_TYPE_F32, TS_TYPE_F16, TS_TYPE_BF16};
    const int nts = (int)(sizeof types / sizeof types[0]);
    static float x[MAXT * NI], y[3][MAXT * NO], y1[3][MAXT * NO], yr[MAXT * NO];
    static float scratch[4 * NI], wf[3][NO * NI];
    for (int i = 0; i < MAXT * NI; i++) x[i] = frand() * 2.0f;
    ts_err err;
    for (int ti = 0; ti < nts; ti++) {
        /* three matrices of the input: this type, and the next two (fusion of
         * different types, as gemma's Q5_0 Q and K with a Q8_0 V) */
        ts_wmat w[3];
        uint8_t *mem[3], *packed[3] = {NULL, NULL, NULL};
        for (int m = 0; m < 3; m++) {
            const uint32_t ty = types[(ti + m) % nts];
            const int64_t no = NO - 16 * m + (m == 2 ? 3 : 0); /* 80, 64, 51 rows */
            const size_t rb = ts_row_size(ty, NI);
            mem[m] = malloc(rb * (size_t)no);
            make_rows(ty, NI, no, mem[m], rb);
            w[m] = (ts_wmat){ty, mem[m], NI, no, rb, NULL};
            for (int64_t r = 0; r < no; r++) ts_wmat_row(&w[m], r, wf[m] + r * NI);
        }
        for (int pack = 0; pack < 2; pack++) {
            if (pack)
                for (int m = 0; m < 3; m++)
                    if (ts_linear_wants_pack(&w[m])) {
                        packed[m] = aligned_alloc(64, (ts_rp_matrix_bytes(w[m].type, NI, w[m].n_out) + 63) / 64 * 64);
                        if (ts_linear_pack(&w[m], packed[m], &err) == 0)
                            w[m].packed = packed[m];
                        else
                            CHECK(0, "pack: %s", err.msg);
                    }
            const int threads[] = {1, 2, 3};
            for (int th = 0; th < 3; th++) {
                ts_threadpool *pool = ts_threadpool_new(threads[th], &err);
                ts_linear_ws *ws = ts_linear_ws_new(NI, MAXT, threads[th], &err);
                CHECK(pool && ws, "setup: %s", err.msg);
                if (!pool || !ws) return;
                CHECK(ts_linear_ws_hi(ws) == hi, "TS_ACT not honoured");
                const ts_wmat *wp[3] = {&w[0], &w[1], &w[2]};
                float *yp[3] = {y[0], y[1], y[2]};
                const int ntoks[] = {1, 5, 17, 70};
                for (int k = 0; k < 4; k++) {
                    const int n = ntoks[k];
                    ts_linear(pool, ws, 3, wp, yp, x, n);
                    for (int m = 0; m < 3; m++) {
                        const char *name = ts_type_info(w[m].type)->name;
                        /* one token at a time (the same job: at lo its
                         * matrices' types set the tiles' precision): the
                         * same bits */
                        int same = 1;
                        for (int t = 0; t < n; t++) {
                            float *o[3] = {y1[0] + t * w[0].n_out, y1[1] + t * w[1].n_out, y1[2] + t * w[2].n_out};
                            ts_linear(pool, ws, 3, wp, o, x + t * NI, 1);
                            same &= !memcmp(y1[m] + t * w[m].n_out, y[m] + t * w[m].n_out,
                                            sizeof(float) * (size_t)w[m].n_out);
                        }
                        CHECK(same, "%s%s: %d tokens on %d threads differ from one token at a time", name,
                              w[m].packed ? " (packed)" : "", n, threads[th]);
                        /* against the f32 reference matmul: the activation
                         * quantization (8 bits per 32-block) gives ~0.5% of
                         * the rms of a product; bound 2% of sqrt(n) * rms of
                         * |products| scaled by ... simply relative to the
                         * sum of |w||x| (a bound that holds per row) */
                        ts_matmul(NULL, &w[m], x, NI, yr, w[m].n_out, n, scratch, NI);
                        double worst = 0;
                        const int exact = w[m].type == TS_TYPE_F32 || w[m].type == TS_TYPE_F16 ||
                                          w[m].type == TS_TYPE_BF16;
                        for (int t = 0; t < n; t++)
                            for (int64_t r = 0; r < w[m].n_out; r++) {
                                const float *wr = wf[m] + r * NI;
                                double mag = 0;
                                for (int i = 0; i < NI; i++) mag += fabs((double)wr[i] * x[t * NI + i]);
                                const double e = fabs(y[m][t * w[m].n_out + r] - yr[t * w[m].n_out + r]) / mag;
                                worst = e > worst ? e : worst;
                            }
                        /* f32/f16/bf16 weights, and at hi the unpacked
                         * quantized ones (f32 reference): f32 rounding only;
                         * packed at hi: 16-bit activations; lo: 8-bit ones */
                        const double bound = exact || (hi && !w[m].packed) ? 1e-5 : hi ? 1e-4 : 4e-3;
                        CHECK(worst < bound, "%s%s hi %d: %d tokens: rel err %g vs the reference (bound %g)", name,
                              w[m].packed ? " (packed)" : "", hi, n, worst, bound);
                    }
                }
                ts_linear_ws_free(ws);
                ts_threadpool_free(pool);
            }
        }
        for (int m = 0; m < 3; m++) {
            free(mem[m]);
            free(packed[m]);
        }
    }
}

/* ---- fast attention and SwiGLU ---- */

/* double-precision causal attention of query token t (position pos0 + t) */
static void attn_double(const ts_attn_params *ap, const float *q, const float *kc, const float *vc, int64_t pos0,
                        int t, double *out) {
    const int hd = ap->head_dim, g = ap->n_head / ap->n_head_kv;
    static double sc[4096];
    for (int h = 0; h < ap->n_head; h++) {
        const int64_t p = pos0 + t;
        int64_t lo = ap->n_swa ? p - ap->n_swa + 1 : 0;
        if (lo < 0) lo = 0;
        double mx = -1e300, sum = 0;
        for (int64_t k = lo; k <= p; k++) {
            double d = 0;
            for (int i = 0; i < hd; i++)
                d += (double)q[((int64_t)t * ap->n_head + h) * hd + i] * kc[k * ap->kv_stride + (h / g) * hd + i];
            d *= ap->scale;
            if (ap->softcap > 0) d = ap->softcap * tanh(d / ap->softcap);
            sc[k] = d;
            mx = d > mx ? d : mx;
        }
        for (int64_t k = lo; k <= p; k++) sum += (sc[k] = exp(sc[k] - mx));
        for (int i = 0; i < hd; i++) {
            double a = 0;
            for (int64_t k = lo; k <= p; k++) a += sc[k] / sum * vc[k * ap->kv_stride + (h / g) * hd + i];
            out[h * hd + i] = a;
        }
    }
}

/* Against a double reference (f32 cache: < 2e-5 abs on values of order 1;
 * f16 cache: within the f16 rounding of K/V, 3e-3), and decode (one token
 * per call, any thread count) bit-identical to prefill, at every level;
 * several tiles (up to 200 positions), windows crossing tile edges,
 * soft-capping, GQA/MQA, head sizes 64, 128 and 40 (a remainder of 16
 * lanes), groups of 1 to 7 query heads per KV head (scored up to
 * TS_ATTN_G at a time: 7 = 4 + 3, 6 = 4 + 2). */
static void test_attention(void) {
    enum { NCTX = 200, MAXH = 14, MAXD = 128 };
    static float q[NCTX * MAXH * MAXD], kc[NCTX * MAXH * MAXD], vc[NCTX * MAXH * MAXD];
    static uint16_t kh[NCTX * MAXH * MAXD], vh[NCTX * MAXH * MAXD];
    static float out[NCTX * MAXH * MAXD], out1[NCTX * MAXH * MAXD];
    static double ref[MAXH * MAXD];
    const struct { int nh, nkv, hd, swa; float cap; int64_t pos0; int ntok; } cases[] = {
        {8, 2, 64, 0, 0, 0, 150},  {4, 1, 40, 0, 0, 37, 163}, {6, 3, 64, 70, 0, 0, 200},
        {4, 4, 16, 5, 2.0f, 60, 100}, {2, 1, 64, 0, 3.0f, 190, 10}, {14, 2, 64, 0, 0, 5, 90},
        {12, 2, 128, 0, 0, 70, 60},
    };
    ts_err err;
    ts_threadpool *p2 = ts_threadpool_new(2, &err), *p3 = ts_threadpool_new(3, &err);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int nh = cases[c].nh, nkv = cases[c].nkv, hd = cases[c].hd, ntok = cases[c].ntok;
        const int64_t pos0 = cases[c].pos0, npos = pos0 + ntok;
        for (int64_t i = 0; i < (int64_t)ntok * nh * hd; i++) q[i] = frand() * 2;
        for (int64_t i = 0; i < npos * nkv * hd; i++) {
            kc[i] = frand() * 2;
            vc[i] = frand();
            kh[i] = ts_f32_to_f16(kc[i]);
            vh[i] = ts_f32_to_f16(vc[i]);
            kc[i] = ts_f16_to_f32(kh[i]) ; /* the f32 cache holds the same values */
            vc[i] = ts_f16_to_f32(vh[i]);
        }
        for (int f16 = 0; f16 < 2; f16++) {
            ts_attn_params ap = {nh, nkv, hd, 1.0f / sqrtf((float)hd), cases[c].cap, cases[c].swa, f16 != 0,
                                 (int64_t)nkv * hd, 0};
            const void *K = f16 ? (const void *)kh : kc, *V = f16 ? (const void *)vh : vc;
            const int64_t stride = ts_attention_fast_scratch(&ap);
            float *scr = calloc((size_t)stride * 3, sizeof(float));
            for (int l = 0; l < TS_CPU_LEVEL_COUNT; l++) {
                if (!ts_kern_for_level((ts_cpu_level)l)) continue;
                ts_cpu_force_level((ts_cpu_level)l);
                ts_attention_fast(p2, &ap, q, K, V, pos0, ntok, out, scr, stride);
                double worst = 0;
                for (int t = 0; t < ntok; t++) {
                    attn_double(&ap, q, kc, vc, pos0, t, ref);
                    for (int i = 0; i < nh * hd; i++) worst = fmax(worst, fabs(out[(int64_t)t * nh * hd + i] - ref[i]));
                }
                CHECK(worst < 2e-5, "attention case %zu f16 %d level %s: max err %g", c, f16,
                      ts_cpu_level_name((ts_cpu_level)l), worst);
                /* decode: one token per call, 3 threads */
                for (int t = 0; t < ntok; t++)
                    ts_attention_fast(p3, &ap, q + (int64_t)t * nh * hd, K, V, pos0 + t, 1,
                                      out1 + (int64_t)t * nh * hd, scr, stride);
                CHECK(!memcmp(out, out1, sizeof(float) * (size_t)ntok * nh * hd),
                      "attention case %zu f16 %d level %s: decode differs from prefill", c, f16,
                      ts_cpu_level_name((ts_cpu_level)l));
            }
            ts_cpu_force_level(ts_cpu_detect());
            free(scr);
        }
    }
    /* SwiGLU against the reference (expf): relative 1e-6 */
    static float g[3000], u[3000], o1[3000], o2[3000];
    for (int i = 0; i < 3000; i++) g[i] = frand() * 20, u[i] = frand();
    g[0] = -100.0f, g[1] = 100.0f, g[2] = 0.0f;
    ts_swiglu_f32(o1, g, u, 3000);
    for (int l = 0; l < TS_CPU_LEVEL_COUNT; l++) {
        if (!ts_kern_for_level((ts_cpu_level)l)) continue;
        ts_cpu_force_level((ts_cpu_level)l);
        ts_swiglu_fast(p2, o2, g, u, 3000);
        double worst = 0;
        for (int i = 0; i < 3000; i++) worst = fmax(worst, fabs(o1[i] - o2[i]) / (fabs(g[i] * u[i]) + 1e-30));
        CHECK(worst < 1e-6, "swiglu level %s: rel err %g", ts_cpu_level_name((ts_cpu_level)l), worst);
    }
    /* GeGLU against gelu_tanh in double (the f32 reference's tanhf loses
     * the tail near tanh = -1 to cancellation, so it is not the yardstick
     * here): |err| < 1e-6 |g u| */
    for (int l = 0; l < TS_CPU_LEVEL_COUNT; l++) {
        if (!ts_kern_for_level((ts_cpu_level)l)) continue;
        ts_cpu_force_level((ts_cpu_level)l);
        ts_geglu_fast(p2, o2, g, u, 3000);
        double worst = 0;
        for (int i = 0; i < 3000; i++) {
            const double x = g[i], z = 0.7978845608028654 * (x + 0.044715 * x * x * x);
            const double exact = 0.5 * x * (1.0 + tanh(z)) * u[i];
            worst = fmax(worst, fabs(o2[i] - exact) / (fabs(g[i] * u[i]) + 1e-30));
        }
        CHECK(worst < 1e-6, "geglu level %s: rel err %g", ts_cpu_level_name((ts_cpu_level)l), worst);
    }
    /* GELU alone (a DiT's FFN) is GeGLU with up = 1: same bound, over
     * 40000 values so the pool's chunks are exercised too */
    enum { NG = 40000 };
    float *gx = malloc(NG * sizeof *gx), *gy = malloc(NG * sizeof *gy);
    for (int i = 0; i < NG; i++) gx[i] = g[i % 3000] * (1.0f + (float)(i / 3000) * 0.01f);
    for (int l = 0; l < TS_CPU_LEVEL_COUNT; l++) {
        if (!ts_kern_for_level((ts_cpu_level)l)) continue;
        ts_cpu_force_level((ts_cpu_level)l);
        ts_gelu_fast(p2, gy, gx, NG);
        double worst = 0;
        for (int i = 0; i < NG; i++) {
            const double x = gx[i], z = 0.7978845608028654 * (x + 0.044715 * x * x * x);
            worst = fmax(worst, fabs(gy[i] - 0.5 * x * (1.0 + tanh(z))) / (fabs(x) + 1e-30));
        }
        CHECK(worst < 1e-6, "gelu level %s: rel err %g", ts_cpu_level_name((ts_cpu_level)l), worst);
    }
    free(gx), free(gy);
    ts_cpu_force_level(ts_cpu_detect());
    ts_threadpool_free(p2);
    ts_threadpool_free(p3);
}

int main(void) {
    test_pool("0");
    test_pool("50");
    test_panels();
    test_quant();
    test_panel_kernels();
    test_attention();
    test_linear(1, 0);
    test_linear(0, 0);
    test_linear(0, 1);
    unsetenv("TS_ACT");
    if (failures) {
        printf("test_perf_kernels: %d failures\n", failures);
        return 1;
    }
    printf("test_perf_kernels: all checks passed (active level %s)\n", ts_cpu_level_name(ts_cpu_level_active()));
    return 0;
}
