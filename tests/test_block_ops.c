/* test_block_ops.c - tests of the scalar reference kernels of
 * kernels/block_ops.h (src/kernels/ref/block_ops_ref.c), each against a
 * straightforward double-precision formula written here, on random data
 * from a fixed seed.
 *
 * Bounds (u = 2^-24, the f32 unit roundoff; every kernel reduces in double
 * and rounds each output once, so most bounds are a few u of the scale of
 * the terms; the slack is for the rounding of the inputs to f32):
 *  - layernorm: |out - ref| <= 1e-6 * max(1, max_i |ref[t][i]|) over row t
 *    (ref: one-pass mean and E[x^2] - mean^2 in double). Rows of unit
 *    variance, of variance 1e-6 (below eps = 1e-5, so eps dominates),
 *    constant rows and n = 1 (out = b exactly).
 *  - mul: exact (a product of two floats is exact in double, so the f32
 *    product is the rounded double one).
 *  - modulate / gated residual: |y - ref| <= 2^-23 * (sum of |terms|).
 *  - routing: ids equal to a qsort of (logit desc, index asc), exactly;
 *    |w - ref| <= 1e-6 (weights are in [0, 1]); all-equal logits select
 *    0 .. k-1; logits near 1000 stay finite (stable softmax).
 *  - grouping: every (token, slot) exactly once, in its expert's list, in
 *    increasing (token, slot) order; offsets from 0 to n_tok * k; bad ids
 *    and n_tok * k > INT32_MAX rejected.
 *  - grouped matmul: |y - ref| <= 1e-6 * (|y0| + sum_j |w_j| sum_i |x_i W_ri|)
 *    (k <= 8 roundings of u each, < 5.4e-7); F32, F16, BF16, Q8_0, Q4_0 and
 *    a repacked Q8_0 expert (when the active level packs Q8_0); an expert
 *    with no tokens has NULL data (never read); bit-identical for 1 and 3
 *    threads.
 *  - MoE FFN: |out - ref| <= 1e-5 * sum_j |w_j| sum_i |D_ri h_i|, h the
 *    double-precision activation (the kernel rounds gate/up to f32 and uses
 *    the f32 expf/tanhf of ts_swiglu_f32 / ts_geglu_tanh_f32: about 10 u
 *    relative per h_i, plus k roundings of the sum); SwiGLU and GeGLU; out
 *    aliasing x; bit-identical for 1 and 3 threads.
 *  - cross-attention: |out - ref| <= 1e-6 * max |v| of the kv head (out is
 *    a convex combination of v); n_kv = 1 gives v exactly; GQA, MQA, MHA,
 *    large scores; out aliasing q; bit-identical for 1 and 3 threads.
 *
 * Output buffers carry sentinel floats after their end, checked after every
 * call.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/block_ops.h"
#include "kernels/linear.h"
#include "kernels/repack.h"
#include "quant/quant.h"

#include "check.h"

/* ---- buffers with sentinels ------------------------------------------ */

#define GUARD 16
static const uint32_t SENTINEL = 0x7fc0beefu; /* a NaN no kernel writes */

static void *bufs[256];
static int n_bufs;

/* n floats followed by GUARD sentinels */
static float *fbuf(size_t n) {
    float *p = malloc((n + GUARD) * sizeof(float));
    if (!p || n_bufs == 256) {
        fprintf(stderr, "fbuf: out of memory\n");
        exit(2);
    }
    for (int i = 0; i < GUARD; i++) memcpy(p + n + i, &SENTINEL, 4);
    bufs[n_bufs++] = p;
    return p;
}
static void *xbuf(size_t bytes) {
    void *p = calloc(bytes ? bytes : 1, 1);
    if (!p || n_bufs == 256) {
        fprintf(stderr, "xbuf: out of memory\n");
        exit(2);
    }
    bufs[n_bufs++] = p;
    return p;
}
static void free_all(void) {
    for (int i = 0; i < n_bufs; i++) free(bufs[i]);
    n_bufs = 0;
}
static int guard_ok(const float *p, size_t n) {
    for (int i = 0; i < GUARD; i++)
        if (memcmp(p + n + i, &SENTINEL, 4) != 0) return 0;
    return 1;
}

/* ---- error statistics ------------------------------------------------ */

typedef struct {
    const char *name;
    long n;
    double worst; /* max err / bound */
} stat;

static void close_to(stat *s, double got, double ref, double bound, const char *what, long i) {
    const double err = fabs(got - ref);
    s->n++;
    if (bound > 0 && err / bound > s->worst) s->worst = err / bound;
    if (!(err <= bound)) s->worst = INFINITY;
    CHECK(err <= bound, "%s: %s[%ld] = %.9g, expected %.9g (err %.3g > bound %.3g)", s->name, what, i, got, ref,
          err, bound);
}
static void report(const stat *s) { printf("%-18s %8ld values  max err/bound %.3g\n", s->name, s->n, s->worst); }

static ts_threadpool *pool3;

/* ---- layernorm ------------------------------------------------------- */

static void test_layernorm(void) {
    stat st = {"layernorm", 0, 0};
    const struct {
        int64_t n_tok, n;
    } shapes[] = {{1, 1}, {4, 1}, {3, 7}, {6, 64}, {2, 1000}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t nt = shapes[si].n_tok, n = shapes[si].n;
        for (int wb = 0; wb < 4; wb++) {
            const float eps = wb & 1 ? 1e-6f : 1e-5f;
            float *x = fbuf((size_t)(nt * n)), *out = fbuf((size_t)(nt * n)), *out3 = fbuf((size_t)(nt * n));
            float *w = (wb & 1) ? fbuf((size_t)n) : NULL, *b = (wb & 2) ? fbuf((size_t)n) : NULL;
            for (int64_t i = 0; i < n; i++) {
                if (w) w[i] = 1.0f + 0.5f * frand();
                if (b) b[i] = frand();
            }
            for (int64_t t = 0; t < nt; t++)
                for (int64_t i = 0; i < n; i++) {
                    float v;
                    switch (t % 4) {
                    case 0: v = 3.0f * nrand() + 5.0f; break;        /* variance ~9, offset */
                    case 1: v = 1.0f + 1e-3f * nrand(); break;       /* variance ~1e-6 < eps */
                    case 2: v = -2.5f; break;                        /* constant row */
                    default: v = nrand(); break;
                    }
                    x[t * n + i] = v;
                }
            ts_layernorm_f32(NULL, out, x, w, b, nt, n, eps);
            ts_layernorm_f32(pool3, out3, x, w, b, nt, n, eps);
            CHECK(guard_ok(out, (size_t)(nt * n)) && guard_ok(out3, (size_t)(nt * n)), "layernorm wrote past out");
            CHECK(memcmp(out, out3, (size_t)(nt * n) * 4) == 0, "layernorm: 3 threads differ from 1");
            for (int64_t t = 0; t < nt; t++) {
                const float *xr = x + t * n;
                double s = 0, s2 = 0;
                for (int64_t i = 0; i < n; i++) s += xr[i], s2 += (double)xr[i] * xr[i];
                const double mean = s / n, var = s2 / n - mean * mean;
                double ref[1000], scale = 1.0;
                for (int64_t i = 0; i < n; i++) {
                    ref[i] = (xr[i] - mean) / sqrt((var > 0 ? var : 0) + eps) * (w ? w[i] : 1.0) + (b ? b[i] : 0.0);
                    if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
                }
                for (int64_t i = 0; i < n; i++) close_to(&st, out[t * n + i], ref[i], 1e-6 * scale, "out", (long)(t * n + i));
                if (n == 1 || t % 4 == 2) /* x - mean = 0 exactly */
                    for (int64_t i = 0; i < n; i++)
                        CHECK(out[t * n + i] == (b ? b[i] : 0.0f), "layernorm constant row: %g", out[t * n + i]);
            }
            /* in place */
            ts_layernorm_f32(NULL, x, x, w, b, nt, n, eps);
            CHECK(memcmp(x, out, (size_t)(nt * n) * 4) == 0, "layernorm in place differs");
            free_all();
        }
    }
    report(&st);
}

/* ---- elementwise and adaLN ------------------------------------------- */

static void test_elementwise(void) {
    enum { NT = 7, N = 13, TPS = 3, NS = 3 }; /* 3 samples of 3, 3, 1 tokens */
    stat sm = {"mul", 0, 0}, smod = {"modulate", 0, 0}, sres = {"gated_residual", 0, 0};
    float *a = fbuf(NT * N), *b = fbuf(NT * N), *y = fbuf(NT * N), *ada = fbuf(NS * 6 * N);
    for (int i = 0; i < NT * N; i++) a[i] = 4 * nrand(), b[i] = 4 * nrand();
    for (int i = 0; i < NS * 6 * N; i++) ada[i] = nrand();

    for (int row = 0; row < 2; row++) {
        ts_mul_f32(y, a, b, row, NT, N);
        CHECK(guard_ok(y, NT * N), "mul wrote past y");
        for (int t = 0; t < NT; t++)
            for (int i = 0; i < N; i++) {
                const double ref = (double)a[t * N + i] * (row ? b[i] : b[t * N + i]);
                CHECK(y[t * N + i] == (float)ref, "mul b_row=%d [%d][%d]: %.9g vs %.9g", row, t, i, y[t * N + i], ref);
                sm.n++;
            }
    }
    memcpy(y, a, NT * N * 4);
    ts_mul_f32(y, y, b, false, NT, N); /* y aliasing a */
    for (int i = 0; i < NT * N; i++) CHECK(y[i] == a[i] * b[i], "mul in place [%d]", i);

    /* modulate: shift at 0, scale at N, gate at 2N of each sample's [6][N] row */
    const float *shift = ada, *scale = ada + N, *gate = ada + 2 * N;
    for (int c = 0; c < 4; c++) {
        const float *sh = c == 1 ? NULL : shift, *sc = c == 2 ? NULL : scale;
        const int64_t tps = c == 3 ? NT : TPS; /* c == 3: one sample, mod_stride unused */
        ts_modulate_f32(y, a, sh, sc, c == 3 ? 0 : 6 * N, tps, NT, N);
        CHECK(guard_ok(y, NT * N), "modulate wrote past y");
        for (int t = 0; t < NT; t++) {
            const int s = (int)(t / tps);
            for (int i = 0; i < N; i++) {
                const double xs = (double)a[t * N + i] * (1.0 + (sc ? sc[s * 6 * N + i] : 0.0));
                const double shv = sh ? sh[s * 6 * N + i] : 0.0;
                close_to(&smod, y[t * N + i], xs + shv, 0x1p-23 * (fabs(xs) + fabs(shv)), "y", t * N + i);
            }
        }
    }
    memcpy(y, a, NT * N * 4);
    ts_modulate_f32(y, y, shift, scale, 6 * N, TPS, NT, N);
    for (int t = 0; t < NT; t++)
        for (int i = 0; i < N; i++) {
            const int s = t / TPS;
            const double ref = (double)a[t * N + i] * (1.0 + scale[s * 6 * N + i]) + shift[s * 6 * N + i];
            CHECK(y[t * N + i] == (float)ref, "modulate in place [%d][%d]", t, i);
        }

    /* gated residual, then with y aliasing x */
    for (int alias = 0; alias < 2; alias++) {
        float *x = fbuf(NT * N);
        memcpy(x, a, NT * N * 4);
        ts_gated_residual_f32(x, alias ? x : b, gate, 6 * N, TPS, NT, N);
        CHECK(guard_ok(x, NT * N), "gated residual wrote past x");
        for (int t = 0; t < NT; t++)
            for (int i = 0; i < N; i++) {
                const double g = gate[(t / TPS) * 6 * N + i];
                const double yv = alias ? a[t * N + i] : b[t * N + i];
                const double ref = a[t * N + i] + g * yv;
                close_to(&sres, x[t * N + i], ref, 0x1p-23 * (fabs(a[t * N + i]) + fabs(g * yv)), "x", t * N + i);
            }
    }
    free_all();
    report(&sm);
    report(&smod);
    report(&sres);
}

/* ---- routing --------------------------------------------------------- */

static const float *sort_row;
static int by_logit(const void *pa, const void *pb) {
    const int a = *(const int *)pa, b = *(const int *)pb;
    if (sort_row[a] != sort_row[b]) return sort_row[a] > sort_row[b] ? -1 : 1;
    return a - b;
}

/* expected ids (qsort) and weights (naive softmax, logits are small) */
static void route_ref(const float *l, int n_expert, int k, ts_moe_score score, bool norm, int *id, double *w) {
    int order[256];
    for (int e = 0; e < n_expert; e++) order[e] = e;
    sort_row = l;
    qsort(order, (size_t)n_expert, sizeof(int), by_logit);
    double all = 0, sel = 0;
    for (int e = 0; e < n_expert; e++) all += exp(l[e]);
    for (int j = 0; j < k; j++) sel += exp(l[order[j]]);
    double sig = 0;
    for (int j = 0; j < k; j++) sig += 1 / (1 + exp(-l[order[j]]));
    for (int j = 0; j < k; j++) {
        id[j] = order[j];
        if (score == TS_MOE_SIGMOID_TOPK)
            w[j] = (1 / (1 + exp(-l[order[j]]))) / (norm ? sig : 1.0);
        else if (score == TS_MOE_TOPK_SOFTMAX)
            w[j] = exp(l[order[j]]) / sel;
        else
            w[j] = norm ? (exp(l[order[j]]) / all) / (sel / all) : exp(l[order[j]]) / all;
    }
}

static void test_route(void) {
    stat st = {"moe_route", 0, 0};
    const struct {
        int n_expert, k;
    } cfg[] = {{1, 1}, {8, 1}, {8, 2}, {8, 8}, {60, 4}, {64, 8}, {128, 8}};
    enum { NT = 23 };
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        const int ne = cfg[c].n_expert, k = cfg[c].k;
        float *l = fbuf((size_t)NT * ne), *w = fbuf((size_t)NT * k);
        int32_t *ids = xbuf((size_t)NT * k * sizeof(int32_t));
        for (int ties = 0; ties < 2; ties++) {
            /* ties: logits on a grid of 0.5 in [-2, 2], so many are equal */
            for (int i = 0; i < NT * ne; i++) l[i] = ties ? 0.5f * (float)(int)(4.5f * frand()) : 2.5f * nrand();
            for (int mode = 0; mode < 5; mode++) {
                /* 0 top-k softmax; 1, 2 softmax top-k as is / renormalized; 3, 4 sigmoid likewise */
                const ts_moe_score score = mode == 0 ? TS_MOE_TOPK_SOFTMAX : mode < 3 ? TS_MOE_SOFTMAX_TOPK
                                                                                      : TS_MOE_SIGMOID_TOPK;
                const bool norm = mode == 2 || mode == 4;
                ts_moe_route(l, NT, ne, k, score, norm, ids, w);
                CHECK(guard_ok(w, (size_t)NT * k), "route wrote past weights");
                for (int t = 0; t < NT; t++) {
                    int rid[256];
                    double rw[256], sum = 0;
                    route_ref(l + t * ne, ne, k, score, norm, rid, rw);
                    for (int j = 0; j < k; j++) {
                        CHECK(ids[t * k + j] == rid[j], "route ne=%d k=%d mode=%d ties=%d: ids[%d][%d] = %d, expected %d",
                              ne, k, mode, ties, t, j, ids[t * k + j], rid[j]);
                        close_to(&st, w[t * k + j], rw[j], 1e-6, "weight", t * k + j);
                        sum += w[t * k + j];
                    }
                    if (score == TS_MOE_TOPK_SOFTMAX || norm) CHECK(fabs(sum - 1) <= 1e-6, "weights sum %.9g", sum);
                }
            }
        }
        /* all-equal logits: experts 0 .. k-1 */
        for (int i = 0; i < NT * ne; i++) l[i] = 0.25f;
        for (int mode = 0; mode < 2; mode++) {
            ts_moe_route(l, NT, ne, k, mode ? TS_MOE_SOFTMAX_TOPK : TS_MOE_TOPK_SOFTMAX, false, ids, w);
            for (int t = 0; t < NT; t++)
                for (int j = 0; j < k; j++) {
                    CHECK(ids[t * k + j] == j, "all-equal logits: ids[%d][%d] = %d", t, j, ids[t * k + j]);
                    close_to(&st, w[t * k + j], mode ? 1.0 / ne : 1.0 / k, 1e-6, "equal weight", j);
                }
        }
        free_all();
    }
    /* large logits: max subtracted */
    const float big[3] = {999.0f, 1000.0f, -1000.0f};
    int32_t id2[2];
    float w2[2];
    ts_moe_route(big, 1, 3, 2, TS_MOE_TOPK_SOFTMAX, false, id2, w2);
    CHECK(id2[0] == 1 && id2[1] == 0, "large logits: ids %d %d", id2[0], id2[1]);
    close_to(&st, w2[0], 1 / (1 + exp(-1.0)), 1e-6, "large-logit weight", 0);
    close_to(&st, w2[1], exp(-1.0) / (1 + exp(-1.0)), 1e-6, "large-logit weight", 1);
    ts_moe_route(big, 1, 3, 2, TS_MOE_SOFTMAX_TOPK, false, id2, w2);
    close_to(&st, w2[0], 1 / (1 + exp(-1.0)), 1e-6, "large-logit weight (softmax-topk)", 0);
    /* NaN logits still give distinct, valid ids */
    const float nanl[4] = {NAN, 1.0f, NAN, 2.0f};
    int32_t id4[4];
    float w4[4];
    ts_moe_route(nanl, 1, 4, 4, TS_MOE_TOPK_SOFTMAX, false, id4, w4);
    int seen = 0;
    for (int j = 0; j < 4; j++) seen |= (id4[j] >= 0 && id4[j] < 4) ? 1 << id4[j] : 0;
    CHECK(seen == 15, "NaN logits: ids %d %d %d %d", id4[0], id4[1], id4[2], id4[3]);
    report(&st);
}

/* ---- grouping -------------------------------------------------------- */

/* ids, offsets and pairs agree: each (tok, slot) once, in its expert's list,
 * lists in increasing (tok, slot) order */
static void check_groups(const int32_t *ids, int64_t nt, int k, int ne, const int64_t *off, const ts_moe_pair *pairs) {
    CHECK(off[0] == 0 && off[ne] == nt * k, "offsets [0] %lld [n_expert] %lld, n_tok*k %lld", (long long)off[0],
          (long long)off[ne], (long long)(nt * k));
    int *seen = calloc((size_t)(nt * k) + 1, sizeof(int));
    for (int e = 0; e < ne; e++) {
        CHECK(off[e] <= off[e + 1], "offsets decrease at %d", e);
        for (int64_t p = off[e]; p < off[e + 1]; p++) {
            const ts_moe_pair q = pairs[p];
            const int ok = q.tok >= 0 && q.tok < nt && q.slot >= 0 && q.slot < k;
            CHECK(ok, "pair %lld out of range: (%d, %d)", (long long)p, q.tok, q.slot);
            if (!ok) continue;
            CHECK(ids[q.tok * k + q.slot] == e, "pair (%d, %d) in expert %d's list, id %d", q.tok, q.slot, e,
                  ids[q.tok * k + q.slot]);
            seen[q.tok * k + q.slot]++;
            if (p > off[e])
                CHECK(pairs[p - 1].tok * k + pairs[p - 1].slot < q.tok * k + q.slot, "expert %d's list out of order", e);
        }
    }
    for (int64_t i = 0; i < nt * k; i++)
        CHECK(seen[i] == 1, "(token %lld, slot %lld) appears %d times", (long long)(i / k), (long long)(i % k), seen[i]);
    free(seen);
}

static void test_group(void) {
    const struct {
        int n_expert, k, n_tok;
    } cfg[] = {{1, 1, 5}, {8, 1, 1}, {8, 2, 31}, {8, 8, 9}, {64, 6, 100}, {16, 4, 0}};
    long n_pairs = 0;
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        const int ne = cfg[c].n_expert, k = cfg[c].k, nt = cfg[c].n_tok;
        float *l = fbuf((size_t)nt * ne + 1), *w = fbuf((size_t)nt * k + 1);
        int32_t *ids = xbuf((size_t)nt * k * sizeof(int32_t));
        int64_t *off = xbuf((size_t)(ne + 1) * sizeof(int64_t));
        ts_moe_pair *pairs = xbuf((size_t)nt * k * sizeof(ts_moe_pair));
        for (int i = 0; i < nt * ne; i++) l[i] = nrand();
        /* expert ne-1 never chosen when k < ne: an expert with no tokens */
        if (k < ne)
            for (int t = 0; t < nt; t++) l[t * ne + ne - 1] = -100.0f;
        ts_moe_route(l, nt, ne, k, TS_MOE_TOPK_SOFTMAX, false, ids, w);
        ts_err err = {{0}};
        CHECK(ts_moe_group(ids, nt, k, ne, off, pairs, &err) == 0, "group: %s", err.msg);
        check_groups(ids, nt, k, ne, off, pairs);
        if (k < ne) CHECK(off[ne - 1] == off[ne], "expert %d should have no tokens", ne - 1);
        n_pairs += (long)nt * k;
        free_all();
    }
    /* hand-made ids, with repeated experts and an empty one */
    const int32_t hid[6] = {2, 0, 2, 2, 0, 3}; /* 3 tokens, k = 2, 5 experts */
    int64_t off[6];
    ts_moe_pair pairs[6];
    ts_err err = {{0}};
    CHECK(ts_moe_group(hid, 3, 2, 5, off, pairs, &err) == 0, "group: %s", err.msg);
    const int64_t want_off[6] = {0, 2, 2, 5, 6, 6};
    CHECK(memcmp(off, want_off, sizeof off) == 0, "hand-made offsets %lld %lld %lld %lld %lld %lld", (long long)off[0],
          (long long)off[1], (long long)off[2], (long long)off[3], (long long)off[4], (long long)off[5]);
    check_groups(hid, 3, 2, 5, off, pairs);
    /* errors */
    const int32_t bad[4] = {0, 1, 5, 2};
    memset(pairs, 0x5a, sizeof pairs);
    CHECK(ts_moe_group(bad, 2, 2, 5, off, pairs, &err) == -1 && strstr(err.msg, "ids[1][0] = 5"), "bad id: %s",
          err.msg);
    printf("bad id rejected: %s\n", err.msg);
    const unsigned char *pb = (const unsigned char *)pairs;
    int untouched = 1;
    for (size_t i = 0; i < sizeof pairs; i++) untouched &= pb[i] == 0x5a;
    CHECK(untouched, "pairs written on failure");
    const int32_t neg[1] = {-1};
    CHECK(ts_moe_group(neg, 1, 1, 5, off, pairs, &err) == -1, "negative id accepted");
    CHECK(ts_moe_group(hid, (int64_t)1 << 40, 8, 5, off, pairs, &err) == -1 && strstr(err.msg, "INT32_MAX"),
          "huge n_tok: %s", err.msg);
    printf("huge n_tok rejected: %s\n", err.msg);
    CHECK(ts_moe_group(hid, 3, 0, 5, off, pairs, &err) == -1, "k = 0 accepted");
    CHECK(ts_moe_group(hid, 3, 2, 0, off, pairs, &err) == -1, "n_expert = 0 accepted");
    printf("%-18s %8ld pairs   each exactly once\n", "moe_group", n_pairs);
}

/* ---- expert weights -------------------------------------------------- */

typedef struct {
    ts_wmat w;
    float *deq; /* [n_out][n_in] the dequantized values (the test's copy) */
} expert;

/* random matrix in `type` (entries ~ scale * nrand), dequantized copy kept;
 * packed: also repacked into panels when the active level packs the type */
static int make_expert(expert *ex, uint32_t type, int64_t n_out, int64_t n_in, float scale, bool packed) {
    const size_t rb = ts_row_size(type, n_in);
    uint8_t *data = xbuf(rb * (size_t)n_out);
    float *row = fbuf((size_t)n_in);
    ex->deq = fbuf((size_t)(n_out * n_in));
    ts_err err;
    for (int64_t r = 0; r < n_out; r++) {
        for (int64_t i = 0; i < n_in; i++) row[i] = scale * nrand();
        CHECK(ts_quant_row(type, row, data + r * rb, n_in, &err) == 0, "quant: %s", err.msg);
        CHECK(ts_dequant_row(type, data + r * rb, ex->deq + r * n_in, n_in, &err) == 0, "dequant: %s", err.msg);
    }
    ex->w = (ts_wmat){type, data, n_in, n_out, rb, NULL};
    if (packed && ts_linear_wants_pack(&ex->w)) {
        uint8_t *panels = xbuf(ts_rp_matrix_bytes(type, n_in, n_out));
        if (ts_linear_pack(&ex->w, panels, &err) == 0) {
            memset(data, 0xff, rb * (size_t)n_out); /* only the panels may be read now */
            ex->w.packed = panels;
            return 1;
        }
    }
    return 0;
}

static const uint32_t types[] = {TS_TYPE_F32, TS_TYPE_F16, TS_TYPE_Q8_0, TS_TYPE_Q4_0, TS_TYPE_BF16, TS_TYPE_Q8_0};

/* ---- grouped matmul -------------------------------------------------- */

/* ts_moe_linear (the fast kernels) against ts_moe_matmul (the reference):
 * every output within 1e-4 of the sum of |terms| of its dots (the
 * 16-bit activations' rounding, ts_linear's hi precision; measured worst
 * ratio printed), y by token with weights and y by pair; a token's result
 * bit-identical whether it runs with the others or alone (decode). */
static void test_moe_linear(void) {
    stat st = {"moe_linear", 0, 0};
    const struct {
        int n_expert, k, n_tok;
    } cfg[] = {{6, 2, 9}, {4, 4, 5}, {3, 1, 1}, {6, 1, 17}, {8, 8, 3}};
    enum { NIN = 64, NOUT = 48 };
    ts_err err;
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        const int ne = cfg[c].n_expert, k = cfg[c].k, nt = cfg[c].n_tok;
        expert ex[8];
        ts_wmat wm[8];
        float *l = fbuf((size_t)nt * ne), *rw = fbuf((size_t)nt * k);
        int32_t *ids = xbuf((size_t)nt * k * sizeof(int32_t));
        int64_t *off = xbuf((size_t)(ne + 1) * sizeof(int64_t)), *off1 = xbuf((size_t)(ne + 1) * sizeof(int64_t));
        ts_moe_pair *pairs = xbuf((size_t)nt * k * sizeof(ts_moe_pair)), *pairs1 = xbuf((size_t)k * sizeof(ts_moe_pair));
        for (int i = 0; i < nt * ne; i++) l[i] = nrand();
        ts_moe_route(l, nt, ne, k, TS_MOE_SOFTMAX_TOPK, false, ids, rw);
        CHECK(ts_moe_group(ids, nt, k, ne, off, pairs, &err) == 0, "group: %s", err.msg);
        for (int e = 0; e < ne; e++) {
            make_expert(&ex[e], types[e % 6], NOUT, NIN, 0.2f, true); /* panels where the type has them */
            wm[e] = ex[e].w;
        }
        const int64_t np = off[ne];
        float *x = fbuf((size_t)nt * NIN), *scratch = fbuf(3 * NIN);
        float *gx = fbuf((size_t)nt * NIN), *gy = fbuf((size_t)nt * NOUT);
        for (int i = 0; i < nt * NIN; i++) x[i] = nrand();
        ts_linear_ws *ws = ts_linear_ws_new(NIN, nt, 3, &err);
        CHECK(ws != NULL, "ws: %s", err.msg);
        if (!ws) return;
        /* y by token, weighted, and y by pair */
        float *y = fbuf((size_t)nt * NOUT), *yr = fbuf((size_t)nt * NOUT), *yp = fbuf((size_t)np * NOUT),
              *ypr = fbuf((size_t)np * NOUT);
        memset(y, 0, (size_t)nt * NOUT * 4), memset(yr, 0, (size_t)nt * NOUT * 4);
        memset(yp, 0, (size_t)np * NOUT * 4), memset(ypr, 0, (size_t)np * NOUT * 4);
        ts_moe_linear(pool3, ws, wm, ne, off, pairs, rw, k, x, NIN, false, y, NOUT, false, gx, gy);
        ts_moe_matmul(pool3, wm, ne, off, pairs, rw, k, x, NIN, false, yr, NOUT, false, scratch, NIN);
        ts_moe_linear(pool3, ws, wm, ne, off, pairs, NULL, k, x, NIN, false, yp, NOUT, true, gx, gy);
        ts_moe_matmul(pool3, wm, ne, off, pairs, NULL, k, x, NIN, false, ypr, NOUT, true, scratch, NIN);
        CHECK(guard_ok(y, (size_t)nt * NOUT) && guard_ok(yp, (size_t)np * NOUT) && guard_ok(gx, (size_t)nt * NIN) &&
                  guard_ok(gy, (size_t)nt * NOUT),
              "moe_linear wrote past a buffer");
        for (int t = 0; t < nt; t++)
            for (int r = 0; r < NOUT; r++) {
                double mag = 0;
                for (int j = 0; j < k; j++) {
                    const float *w = ex[ids[t * k + j]].deq + r * NIN;
                    for (int i = 0; i < NIN; i++) mag += fabs(rw[t * k + j] * (double)x[t * NIN + i] * w[i]);
                }
                close_to(&st, y[t * NOUT + r], yr[t * NOUT + r], 1e-4 * mag, "y(token)", t * NOUT + r);
            }
        for (int e = 0; e < ne; e++)
            for (int64_t p = off[e]; p < off[e + 1]; p++)
                for (int r = 0; r < NOUT; r++) {
                    double mag = 0;
                    for (int i = 0; i < NIN; i++) mag += fabs((double)x[pairs[p].tok * NIN + i] * ex[e].deq[r * NIN + i]);
                    close_to(&st, yp[p * NOUT + r], ypr[p * NOUT + r], 1e-4 * mag, "y(pair)", (long)(p * NOUT + r));
                }
        /* each token alone: the same bits */
        float *y1 = fbuf(NOUT);
        for (int t = 0; t < nt; t++) {
            CHECK(ts_moe_group(ids + t * k, 1, k, ne, off1, pairs1, &err) == 0, "group: %s", err.msg);
            memset(y1, 0, NOUT * sizeof(float));
            ts_moe_linear(pool3, ws, wm, ne, off1, pairs1, rw + t * k, k, x + t * NIN, NIN, false, y1, NOUT, false, gx,
                          gy);
            CHECK(memcmp(y1, y + t * NOUT, NOUT * sizeof(float)) == 0, "moe_linear: token %d alone differs", t);
        }
        ts_linear_ws_free(ws);
        free_all();
    }
    report(&st);
}

static void test_moe_matmul(void) {
    stat st = {"moe_matmul", 0, 0};
    const struct {
        int n_expert, k, n_tok;
    } cfg[] = {{6, 2, 9}, {4, 4, 5}, {3, 1, 1}, {6, 1, 17}, {8, 8, 3}};
    enum { NIN = 64, NOUT = 24 };
    int n_packed = 0;
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        const int ne = cfg[c].n_expert, k = cfg[c].k, nt = cfg[c].n_tok;
        expert ex[8];
        ts_wmat wm[8];
        float *l = fbuf((size_t)nt * ne), *rw = fbuf((size_t)nt * k);
        int32_t *ids = xbuf((size_t)nt * k * sizeof(int32_t));
        int64_t *off = xbuf((size_t)(ne + 1) * sizeof(int64_t));
        ts_moe_pair *pairs = xbuf((size_t)nt * k * sizeof(ts_moe_pair));
        for (int i = 0; i < nt * ne; i++) l[i] = nrand();
        if (k < ne)
            for (int t = 0; t < nt; t++) l[t * ne + 1] = -100.0f; /* expert 1: no tokens */
        ts_moe_route(l, nt, ne, k, TS_MOE_SOFTMAX_TOPK, false, ids, rw);
        ts_err err;
        CHECK(ts_moe_group(ids, nt, k, ne, off, pairs, &err) == 0, "group: %s", err.msg);
        for (int e = 0; e < ne; e++) {
            n_packed += make_expert(&ex[e], types[e % 6], NOUT, NIN, 0.2f, e % 6 == 5);
            wm[e] = ex[e].w;
            if (off[e] == off[e + 1]) wm[e].data = NULL, wm[e].packed = NULL; /* never read */
        }
        const int64_t np = off[ne];
        float *x = fbuf((size_t)nt * NIN), *xp = fbuf((size_t)np * NIN);
        for (int i = 0; i < nt * NIN; i++) x[i] = nrand();
        for (int64_t i = 0; i < np * NIN; i++) xp[i] = nrand();
        float *scratch = fbuf(3 * NIN);

        /* (a) x by token, y by token (accumulated from y0), routing weights */
        float *y0 = fbuf((size_t)nt * NOUT), *y = fbuf((size_t)nt * NOUT), *y3 = fbuf((size_t)nt * NOUT);
        for (int i = 0; i < nt * NOUT; i++) y0[i] = nrand();
        memcpy(y, y0, (size_t)nt * NOUT * 4);
        memcpy(y3, y0, (size_t)nt * NOUT * 4);
        ts_moe_matmul(NULL, wm, ne, off, pairs, rw, k, x, NIN, false, y, NOUT, false, scratch, NIN);
        ts_moe_matmul(pool3, wm, ne, off, pairs, rw, k, x, NIN, false, y3, NOUT, false, scratch, NIN);
        CHECK(guard_ok(y, (size_t)nt * NOUT) && guard_ok(scratch, 3 * NIN), "moe_matmul wrote past y or scratch");
        CHECK(memcmp(y, y3, (size_t)nt * NOUT * 4) == 0, "moe_matmul: 3 threads differ from 1");
        for (int t = 0; t < nt; t++)
            for (int r = 0; r < NOUT; r++) {
                double ref = y0[t * NOUT + r], mag = fabs(ref);
                for (int j = 0; j < k; j++) {
                    const float *wr = ex[ids[t * k + j]].deq + r * NIN;
                    double d = 0, m = 0;
                    for (int i = 0; i < NIN; i++) d += (double)x[t * NIN + i] * wr[i], m += fabs((double)x[t * NIN + i] * wr[i]);
                    ref += rw[t * k + j] * d;
                    mag += fabs(rw[t * k + j]) * m;
                }
                close_to(&st, y[t * NOUT + r], ref, 1e-6 * mag, "y(token)", t * NOUT + r);
            }

        /* (b) x by token, y by pair, no weights */
        float *yp = fbuf((size_t)np * NOUT);
        memset(yp, 0, (size_t)np * NOUT * 4);
        ts_moe_matmul(pool3, wm, ne, off, pairs, NULL, k, x, NIN, false, yp, NOUT, true, scratch, NIN);
        CHECK(guard_ok(yp, (size_t)np * NOUT), "moe_matmul wrote past y (by pair)");
        for (int e = 0; e < ne; e++)
            for (int64_t p = off[e]; p < off[e + 1]; p++)
                for (int r = 0; r < NOUT; r++) {
                    double d = 0, m = 0;
                    for (int i = 0; i < NIN; i++) {
                        const double v = (double)x[pairs[p].tok * NIN + i] * ex[e].deq[r * NIN + i];
                        d += v, m += fabs(v);
                    }
                    close_to(&st, yp[p * NOUT + r], d, 1e-6 * m, "y(pair)", (long)(p * NOUT + r));
                }

        /* (c) x by pair, y by token into a wider buffer (stride NOUT + 5) */
        const int ys = NOUT + 5;
        float *yw = fbuf((size_t)nt * ys);
        for (int i = 0; i < nt * ys; i++) yw[i] = 7.0f;
        ts_moe_matmul(NULL, wm, ne, off, pairs, rw, k, xp, NIN, true, yw, ys, false, scratch, NIN);
        for (int t = 0; t < nt; t++) {
            for (int r = NOUT; r < ys; r++) CHECK(yw[t * ys + r] == 7.0f, "moe_matmul wrote column %d of the stride", r);
            for (int r = 0; r < NOUT; r++) {
                double ref = 7.0, mag = 7.0;
                for (int e = 0; e < ne; e++)
                    for (int64_t p = off[e]; p < off[e + 1]; p++) {
                        if (pairs[p].tok != t) continue;
                        double d = 0, m = 0;
                        for (int i = 0; i < NIN; i++) {
                            const double v = (double)xp[p * NIN + i] * ex[e].deq[r * NIN + i];
                            d += v, m += fabs(v);
                        }
                        ref += rw[t * k + pairs[p].slot] * d;
                        mag += fabs(rw[t * k + pairs[p].slot]) * m;
                    }
                close_to(&st, yw[t * ys + r], ref, 1e-6 * mag, "y(strided)", t * ys + r);
            }
        }
        free_all();
    }
    report(&st);
    printf("moe_matmul: repacked Q8_0 experts tested: %d%s\n", n_packed,
           n_packed ? "" : " (the active level does not pack Q8_0)");
}

/* ---- MoE FFN --------------------------------------------------------- */

static double silu_d(double g) { return g / (1.0 + exp(-g)); }
static double gelu_d(double g) { return 0.5 * g * (1.0 + tanh(sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g))); }

static void test_moe_ffn(void) {
    stat st = {"moe_ffn", 0, 0};
    const struct {
        int n_expert, k, n_tok;
    } cfg[] = {{5, 2, 7}, {4, 4, 3}, {3, 1, 1}, {8, 2, 12}};
    enum { NE = 32, NF = 64 };
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        for (int gelu = 0; gelu < 2; gelu++) {
            const int ne = cfg[c].n_expert, k = cfg[c].k, nt = cfg[c].n_tok;
            expert eg[8], eu[8], ed[8];
            ts_wmat wg[8], wu[8], wd[8];
            float *l = fbuf((size_t)nt * ne), *rw = fbuf((size_t)nt * k);
            int32_t *ids = xbuf((size_t)nt * k * sizeof(int32_t));
            int64_t *off = xbuf((size_t)(ne + 1) * sizeof(int64_t));
            ts_moe_pair *pairs = xbuf((size_t)nt * k * sizeof(ts_moe_pair));
            for (int i = 0; i < nt * ne; i++) l[i] = nrand();
            if (k < ne)
                for (int t = 0; t < nt; t++) l[t * ne + ne - 1] = -100.0f; /* last expert: no tokens */
            ts_moe_route(l, nt, ne, k, TS_MOE_TOPK_SOFTMAX, false, ids, rw);
            ts_err err;
            CHECK(ts_moe_group(ids, nt, k, ne, off, pairs, &err) == 0, "group: %s", err.msg);
            for (int e = 0; e < ne; e++) {
                make_expert(&eg[e], types[(e + 0) % 5], NF, NE, 0.3f, false);
                make_expert(&eu[e], types[(e + 1) % 5], NF, NE, 0.3f, false);
                make_expert(&ed[e], types[(e + 2) % 5], NE, NF, 0.2f, false);
                wg[e] = eg[e].w, wu[e] = eu[e].w, wd[e] = ed[e].w;
                if (off[e] == off[e + 1]) wg[e].data = wu[e].data = wd[e].data = NULL;
            }
            size_t n1, n3;
            CHECK(ts_moe_ffn_scratch(nt, k, ne, NE, NF, 1, &n1, &err) == 0, "scratch: %s", err.msg);
            CHECK(ts_moe_ffn_scratch(nt, k, ne, NE, NF, ts_threadpool_n_threads(pool3), &n3, &err) == 0, "scratch: %s",
                  err.msg);
            CHECK(n1 == (size_t)(2 * nt * k * NF + NF), "scratch size %zu", n1);
            float *s1 = fbuf(n1), *s3 = fbuf(n3);
            float *x = fbuf((size_t)nt * NE), *out = fbuf((size_t)nt * NE), *out3 = fbuf((size_t)nt * NE);
            for (int i = 0; i < nt * NE; i++) x[i] = nrand();
            ts_moe_ffn(NULL, wg, wu, wd, ne, gelu, off, pairs, rw, nt, k, x, out, s1);
            ts_moe_ffn(pool3, wg, wu, wd, ne, gelu, off, pairs, rw, nt, k, x, out3, s3);
            CHECK(guard_ok(out, (size_t)nt * NE) && guard_ok(s1, n1) && guard_ok(s3, n3), "moe_ffn wrote past a buffer");
            CHECK(memcmp(out, out3, (size_t)nt * NE * 4) == 0, "moe_ffn: 3 threads differ from 1");
            for (int t = 0; t < nt; t++) {
                double ref[NE] = {0}, mag[NE] = {0};
                for (int j = 0; j < k; j++) {
                    const int e = ids[t * k + j];
                    double h[NF];
                    for (int f = 0; f < NF; f++) {
                        double g = 0, u = 0;
                        for (int i = 0; i < NE; i++) {
                            g += (double)eg[e].deq[f * NE + i] * x[t * NE + i];
                            u += (double)eu[e].deq[f * NE + i] * x[t * NE + i];
                        }
                        h[f] = (gelu ? gelu_d(g) : silu_d(g)) * u;
                    }
                    for (int r = 0; r < NE; r++) {
                        double d = 0, m = 0;
                        for (int f = 0; f < NF; f++) d += ed[e].deq[r * NF + f] * h[f], m += fabs(ed[e].deq[r * NF + f] * h[f]);
                        ref[r] += rw[t * k + j] * d;
                        mag[r] += fabs(rw[t * k + j]) * m;
                    }
                }
                for (int r = 0; r < NE; r++) close_to(&st, out[t * NE + r], ref[r], 1e-5 * mag[r], "out", t * NE + r);
            }
            /* out aliasing x */
            ts_moe_ffn(pool3, wg, wu, wd, ne, gelu, off, pairs, rw, nt, k, x, x, s3);
            CHECK(memcmp(x, out, (size_t)nt * NE * 4) == 0, "moe_ffn in place differs");
            free_all();
        }
    }
    /* scratch sizes */
    size_t n;
    ts_err err;
    CHECK(ts_moe_ffn_scratch(0, 2, 8, 16, 32, 2, &n, &err) == 0 && n == 64, "n_tok = 0: %zu", n);
    CHECK(ts_moe_ffn_scratch(4, 9, 8, 16, 32, 1, &n, &err) == -1, "k > n_expert accepted");
    CHECK(ts_moe_ffn_scratch(1 << 30, 8, 8, 16, 32, 1, &n, &err) == -1 && strstr(err.msg, "INT32_MAX"),
          "too many pairs accepted");
    CHECK(ts_moe_ffn_scratch(1 << 20, 8, 8, 16, (int64_t)1 << 50, 1, &n, &err) == -1 && strstr(err.msg, "overflows"),
          "overflow accepted");
    printf("scratch overflow rejected: %s\n", err.msg);
    CHECK(ts_moe_ffn_scratch(1, 1, 1, 16, 0, 1, &n, &err) == -1, "n_ff = 0 accepted");
    report(&st);
}

/* ---- cross-attention ------------------------------------------------- */

static void test_cross_attention(void) {
    stat st = {"cross_attention", 0, 0};
    const struct {
        int n_q, n_kv, n_head, n_head_kv, hd;
        float scale_mul;
    } cfg[] = {
        {5, 7, 4, 2, 16, 1},  /* GQA */
        {1, 1, 2, 1, 8, 1},   /* n_kv = 1, n_q = 1 */
        {3, 1, 4, 4, 8, 1},   /* n_kv = 1, MHA */
        {3, 9, 6, 3, 5, 1},   /* odd head_dim */
        {4, 11, 3, 3, 12, 1}, /* MHA */
        {2, 6, 8, 1, 4, 1},   /* MQA */
        {6, 77, 4, 2, 16, 40}, /* large scores (|s| up to ~100s) */
    };
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        const int nq = cfg[c].n_q, nkv = cfg[c].n_kv, nh = cfg[c].n_head, nhk = cfg[c].n_head_kv, hd = cfg[c].hd;
        const ts_xattn_params ap = {nh, nhk, hd, cfg[c].scale_mul / sqrtf((float)hd)};
        int64_t per;
        ts_err err;
        CHECK(ts_cross_attention_scratch(&ap, nkv, &per, &err) == 0 && per == nkv + hd, "scratch: %s", err.msg);
        double *scr = xbuf((size_t)(3 * per) * sizeof(double));
        const int qw = nh * hd, kw = nhk * hd;
        float *q = fbuf((size_t)nq * qw), *k = fbuf((size_t)nkv * kw), *v = fbuf((size_t)nkv * kw);
        float *out = fbuf((size_t)nq * qw), *out3 = fbuf((size_t)nq * qw);
        for (int i = 0; i < nq * qw; i++) q[i] = nrand();
        for (int i = 0; i < nkv * kw; i++) k[i] = nrand(), v[i] = 2 * nrand();
        ts_cross_attention(NULL, &ap, q, nq, k, v, nkv, out, scr, per);
        ts_cross_attention(pool3, &ap, q, nq, k, v, nkv, out3, scr, per);
        CHECK(guard_ok(out, (size_t)nq * qw), "cross attention wrote past out");
        CHECK(memcmp(out, out3, (size_t)nq * qw * 4) == 0, "cross attention: 3 threads differ from 1");
        for (int t = 0; t < nq; t++)
            for (int h = 0; h < nh; h++) {
                const int g = h * nhk / nh; /* kv head */
                double s[128], m = -INFINITY, sum = 0, vmax = 0;
                for (int i = 0; i < nkv; i++) {
                    double d = 0;
                    for (int c2 = 0; c2 < hd; c2++) d += (double)q[t * qw + h * hd + c2] * k[i * kw + g * hd + c2];
                    s[i] = d * ap.scale;
                    m = fmax(m, s[i]);
                    for (int c2 = 0; c2 < hd; c2++) vmax = fmax(vmax, fabs(v[i * kw + g * hd + c2]));
                }
                for (int i = 0; i < nkv; i++) sum += exp(s[i] - m);
                for (int c2 = 0; c2 < hd; c2++) {
                    double ref = 0;
                    for (int i = 0; i < nkv; i++) ref += exp(s[i] - m) / sum * v[i * kw + g * hd + c2];
                    close_to(&st, out[t * qw + h * hd + c2], ref, 1e-6 * vmax, "out", t * qw + h * hd + c2);
                    if (nkv == 1)
                        CHECK(out[t * qw + h * hd + c2] == v[g * hd + c2], "n_kv = 1: out != v (%.9g vs %.9g)",
                              out[t * qw + h * hd + c2], v[g * hd + c2]);
                }
            }
        /* out aliasing q */
        ts_cross_attention(pool3, &ap, q, nq, k, v, nkv, q, scr, per);
        CHECK(memcmp(q, out, (size_t)nq * qw * 4) == 0, "cross attention in place differs");
        free_all();
    }
    int64_t per;
    ts_err err;
    const ts_xattn_params bad = {6, 4, 8, 0.1f};
    CHECK(ts_cross_attention_scratch(&bad, 3, &per, &err) == -1, "n_head 6 / n_head_kv 4 accepted");
    printf("bad heads rejected: %s\n", err.msg);
    const ts_xattn_params good = {4, 2, 8, 0.1f};
    CHECK(ts_cross_attention_scratch(&good, 0, &per, &err) == -1, "n_kv = 0 accepted");
    CHECK(ts_cross_attention_scratch(&good, INT64_MAX - 2, &per, &err) == -1, "overflow accepted");
    report(&st);
}

int main(void) {
    rng_seed(0x6a09e667f3bcc908ull);
    ts_err err;
    pool3 = ts_threadpool_new(3, &err);
    if (!pool3) {
        fprintf(stderr, "thread pool: %s\n", err.msg);
        return 2;
    }
    test_layernorm();
    test_elementwise();
    test_route();
    test_group();
    test_moe_matmul();
    test_moe_linear();
    test_moe_ffn();
    test_cross_attention();
    ts_threadpool_free(pool3);
    if (failures) {
        fprintf(stderr, "%d failure(s)\n", failures);
        return 1;
    }
    printf("all block op tests passed\n");
    return 0;
}
