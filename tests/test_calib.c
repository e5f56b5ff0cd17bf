/* test_calib.c - calibrated per-tensor INT8 with shadow outliers, end to end
 * on a real model through the public API (seed 003; docs/ENGINE.md
 * "Calibration"):
 *
 *   test_calib MODEL.gguf CALIB_TEXT EVAL_TEXT OTHER_MODEL.gguf
 *
 * 1. ts_calib_* gathers 3 windows of 128 tokens of CALIB_TEXT on the CPU and
 *    writes a sidecar at p99: each input's clip > 0, about 1% of its
 *    elements beyond it (the histogram's resolution: within 0.3% .. 3%).
 * 2. One window of EVAL_TEXT on `amx,emulate=1,act=int8` (the tile
 *    emulator: the unit's bits) against the exact CPU logits:
 *    - calib=: closer to exact than plain per-tensor INT8 (scale=tensor) by
 *      at least 3x in RMS logit error; the outliers were computed on the CPU
 *      (dev_outliers > 0) and some of them count as unprofiled or not;
 *    - calib= with the profile emptied (no channel hot): the same logits,
 *      bit for bit (the remainder comes from the actual input), and every
 *      outlier counted unprofiled;
 *    - calib=,prune=1 (no layer keeps its shadow): bit-identical to
 *      scale=tensor (each input at its own amax scale), nothing on the CPU;
 *      with prune_keep=down the down inputs' outliers (and only those) on
 *      the CPU, closer to exact than prune=1;
 *    - refusals, each naming what to do: calib= on an engine that applies
 *      no clip records, prune= without calib=, prune=0.5 on a sidecar without
 *      importance, a sidecar of another model, a file that is not one, and
 *      ts_calib_begin with a context open or during another calibration.
 * TS_CALIB_BREAK=1 (the gate shown failing): the test drops the shadow
 * (every layer's flag off in the sidecar but not the prune count), so the
 * "closer than per-tensor" check must fail.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "runtime/calib.h"
#include "tessera.h"

#define N_CTX 128

static ts_model *load(const char *path) {
    ts_model *m = NULL;
    ts_error e = {0};
    if (ts_model_load(path, NULL, &m, &e) != TS_OK) {
        fprintf(stderr, "load %s: %s\n", path, e.message);
        exit(1);
    }
    return m;
}

static int32_t *tokens(const ts_model *m, const char *path, int64_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(1);
    }
    static char buf[1 << 16];
    const size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    int32_t *ids = malloc(sizeof(int32_t) * (len + 2));
    int64_t k = 0;
    if (!ids || ts_model_tokenize(m, buf, len, true, false, ids, (int64_t)len + 2, &k, NULL) != TS_OK || k < 4 * N_CTX) {
        fprintf(stderr, "tokenize %s failed or too short\n", path);
        exit(1);
    }
    *n = k;
    return ids;
}

/* One window's logits on dev (NULL: CPU); returns the context's stats in st.
 * NULL when the device did not take the model (st->device_fallback says why). */
static float *window(ts_model *m, const char *dev, const int32_t *ids, ts_stats *st) {
    ts_context_params cp = ts_context_default_params();
    cp.n_ctx = N_CTX, cp.n_batch = N_CTX, cp.chunk = N_CTX, cp.prefill_min_tokens = 2, cp.n_threads = 2;
    cp.prefill_device = dev ? dev : "none";
    ts_context *c = NULL;
    ts_error e = {0};
    if (ts_context_create(m, &cp, &c, &e) != TS_OK) {
        fprintf(stderr, "context: %s\n", e.message);
        exit(1);
    }
    ts_model_info info = TS_STRUCT_INIT(ts_model_info);
    ts_model_get_info(m, &info);
    float *lg = malloc(sizeof(float) * (size_t)N_CTX * (size_t)info.n_vocab);
    *st = (ts_stats)TS_STRUCT_INIT(ts_stats);
    ts_context_get_stats(c, st);
    static char fb[512];
    if (dev && st->device_fallback) {
        snprintf(fb, sizeof fb, "%s", st->device_fallback);
        st->device_fallback = fb;
        free(lg);
        ts_context_free(c);
        return NULL;
    }
    if (ts_context_eval(c, ids, N_CTX, lg) != TS_OK) {
        fprintf(stderr, "eval on %s: %s\n", dev ? dev : "cpu", ts_last_error(c));
        exit(1);
    }
    ts_context_get_stats(c, st);
    CHECK(!dev || st->prefill_dev_tokens == N_CTX, "%s ran %lld tokens on the device", dev,
          (long long)st->prefill_dev_tokens);
    ts_context_free(c);
    return lg;
}

static double rms_diff(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return sqrt(s / (double)n);
}

static void expect_fallback(ts_model *m, const char *dev, const int32_t *ids, const char *want) {
    ts_stats st;
    float *lg = window(m, dev, ids, &st);
    CHECK(!lg && st.device_fallback && strstr(st.device_fallback, want), "%s: wanted a refusal with '%s', got %s", dev,
          want, lg ? "a run" : st.device_fallback);
    free(lg);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: test_calib MODEL CALIB_TEXT EVAL_TEXT OTHER_MODEL\n");
        return 2;
    }
    const bool brk = getenv("TS_CALIB_BREAK") && atoi(getenv("TS_CALIB_BREAK"));
    char side[256], empty[256], noimp[256];
    snprintf(side, sizeof side, "test_calib_%d.calib", (int)getpid());
    snprintf(empty, sizeof empty, "test_calib_%d_empty.calib", (int)getpid());
    snprintf(noimp, sizeof noimp, "test_calib_%d.txt", (int)getpid());

    /* 1. gather */
    ts_model *m = load(argv[1]);
    ts_model_info info = TS_STRUCT_INIT(ts_model_info);
    ts_model_get_info(m, &info);
    int64_t n_cal = 0;
    int32_t *cal_ids = tokens(m, argv[2], &n_cal);
    ts_calib *cal = NULL;
    ts_error e = {0};
    CHECK(ts_calib_begin(m, &cal, &e) == TS_OK, "ts_calib_begin: %s", e.message);
    {
        ts_stats st;
        for (int c = 0; c < 3; c++) {
            float *lg = window(m, NULL, cal_ids + c * N_CTX, &st);
            free(lg);
            CHECK(ts_calib_end_chunk(cal) == TS_OK, "end chunk");
        }
    }
    ts_calib_input_stats *stats = calloc((size_t)info.n_layer * 4, sizeof *stats);
    CHECK(ts_calib_write(cal, 99.0f, side, stats, &e) == TS_OK, "write: %s", e.message);
    int bad_stats = 0;
    for (int i = 0; i < info.n_layer * 4; i++) {
        const ts_calib_input_stats *s = &stats[i];
        if (!(s->clip > 0 && s->clip <= s->amax && s->frac_beyond > 0.003f && s->frac_beyond < 0.03f &&
              s->hot_channels >= 1 && s->stable_channels <= s->hot_channels))
            if (bad_stats++ < 5)
                CHECK(0, "layer %d input %d: clip %g amax %g beyond %g hot %d stable %d", s->layer, s->input,
                      (double)s->clip, (double)s->amax, (double)s->frac_beyond, s->hot_channels, s->stable_channels);
    }
    /* with a context open, or a second calibration: refused */
    {
        ts_calib *c2 = NULL;
        CHECK(ts_calib_begin(m, &c2, &e) != TS_OK && strstr(e.message, "one calibration at a time"),
              "a second ts_calib_begin: %s", e.message);
        ts_calib_free(c2);
        ts_calib_free(cal);
        ts_context_params cp = ts_context_default_params();
        cp.n_ctx = N_CTX;
        ts_context *ctx = NULL;
        CHECK(ts_context_create(m, &cp, &ctx, &e) == TS_OK, "context: %s", e.message);
        CHECK(ts_calib_begin(m, &c2, &e) != TS_OK && strstr(e.message, "a context of this model is open"),
              "ts_calib_begin with a context open: %s", e.message);
        ts_calib_free(c2);
        ts_context_free(ctx);
    }
    free(stats);
    ts_model_free(m);

    /* the emptied profile, and the broken-on-purpose sidecar */
    ts_err ie = {{0}};
    ts_rt_calib *rc = ts_rt_calib_read(side, &ie);
    CHECK(rc != NULL, "read back: %s", ie.msg);
    if (!rc) return 1;
    for (int i = 0; i < rc->n_layer * TS_CLIP_N_IN; i++)
        if (rc->hot[i]) memset(rc->hot[i], 0, (size_t)rc->n_in[i] * sizeof(float));
    CHECK(ts_rt_calib_write(rc, empty, &ie) == 0, "write empty: %s", ie.msg);
    if (brk) {
        for (int l = 0; l < rc->n_layer; l++) rc->shadow[l] = 0;
        ts_rt_calib_free(rc);
        rc = ts_rt_calib_read(side, &ie);
        for (int l = 0; l < rc->n_layer; l++) rc->shadow[l] = 0;
        CHECK(ts_rt_calib_write(rc, side, &ie) == 0, "write broken: %s", ie.msg);
        fprintf(stderr, "TS_CALIB_BREAK: the sidecar keeps no layer's shadow\n");
    }
    ts_rt_calib_free(rc);

    /* 2. evaluate */
    m = load(argv[1]);
    int64_t n_ev = 0;
    int32_t *ev = tokens(m, argv[3], &n_ev);
    const size_t n = (size_t)N_CTX * (size_t)info.n_vocab;
    char dev[512];
    ts_stats st, st_pt, st_cal, st_emp, st_pr, st_kd;
    float *exact = window(m, NULL, ev, &st);
    float *pt = window(m, "amx,emulate=1,act=int8,scale=tensor", ev, &st_pt);
    snprintf(dev, sizeof dev, "amx,emulate=1,act=int8,calib=%s", side);
    float *cl = window(m, dev, ev, &st_cal);
    snprintf(dev, sizeof dev, "amx,emulate=1,act=int8,calib=%s", empty);
    float *emp = window(m, dev, ev, &st_emp);
    snprintf(dev, sizeof dev, "amx,emulate=1,act=int8,calib=%s,prune=1", side);
    float *pr = window(m, dev, ev, &st_pr);
    snprintf(dev, sizeof dev, "amx,emulate=1,act=int8,calib=%s,prune=1,prune_keep=down", side);
    float *kd = window(m, dev, ev, &st_kd);
    CHECK(pt && cl && emp && pr && kd, "a device run was refused: %s %s %s %s", st_pt.device_fallback,
          st_cal.device_fallback, st_emp.device_fallback, st_pr.device_fallback);
    if (pt && cl && emp && pr) {
        const double d_pt = rms_diff(pt, exact, n), d_cl = rms_diff(cl, exact, n);
        printf("RMS logit error vs exact: per tensor %.4f, calibrated + shadow %.4f (%.1fx closer)\n", d_pt, d_cl,
               d_pt / d_cl);
        CHECK(d_cl * 3 < d_pt, "calibrated + shadow %.4f is not 3x closer to exact than per tensor %.4f", d_cl, d_pt);
        printf("outliers: %lld on the CPU (%lld unprofiled) in %.1f ms; emptied profile: %lld, %lld unprofiled\n",
               (long long)st_cal.dev_outliers, (long long)st_cal.dev_outliers_unprofiled, st_cal.dev_outlier_ms,
               (long long)st_emp.dev_outliers, (long long)st_emp.dev_outliers_unprofiled);
        if (!brk) {
            CHECK(st_cal.dev_outliers > 0 && st_cal.dev_outliers_unprofiled < st_cal.dev_outliers,
                  "outliers %lld unprofiled %lld", (long long)st_cal.dev_outliers,
                  (long long)st_cal.dev_outliers_unprofiled);
            CHECK(st_cal.dev_outliers_pruned == 0, "pruned %lld without prune=", (long long)st_cal.dev_outliers_pruned);
        }
        CHECK(!memcmp(emp, cl, n * sizeof(float)) || brk, "the emptied profile changed the logits");
        CHECK(st_emp.dev_outliers == st_cal.dev_outliers && st_emp.dev_outliers_unprofiled == st_emp.dev_outliers,
              "emptied profile: %lld outliers, %lld unprofiled (calibrated: %lld)", (long long)st_emp.dev_outliers,
              (long long)st_emp.dev_outliers_unprofiled, (long long)st_cal.dev_outliers);
        CHECK(!memcmp(pr, pt, n * sizeof(float)), "prune=1 differs from scale=tensor");
        CHECK(st_pr.dev_outliers == 0 && st_pr.dev_outliers_pruned > 0, "prune=1: %lld outliers, %lld pruned",
              (long long)st_pr.dev_outliers, (long long)st_pr.dev_outliers_pruned);
        /* prune_keep=down: only the down inputs' outliers on the CPU (the
         * others counted pruned; their totals differ from calib='s, as the
         * upstream arithmetic does); closer to exact than prune=1 */
        const double d_kd = rms_diff(kd, exact, n), d_pr = rms_diff(pr, exact, n);
        printf("prune=1: RMS %.4f; prune=1,prune_keep=down: %.4f, %lld outliers on the CPU, %lld pruned\n", d_pr, d_kd,
               (long long)st_kd.dev_outliers, (long long)st_kd.dev_outliers_pruned);
        CHECK(st_kd.dev_outliers > 0 && st_kd.dev_outliers < st_cal.dev_outliers && st_kd.dev_outliers_pruned > 0,
              "prune_keep=down: %lld + %lld outliers, calibrated %lld", (long long)st_kd.dev_outliers,
              (long long)st_kd.dev_outliers_pruned, (long long)st_cal.dev_outliers);
        CHECK(d_kd < d_pr, "prune_keep=down %.4f is not closer to exact than prune=1 %.4f", d_kd, d_pr);
    }
    free(exact), free(pt), free(cl), free(emp), free(pr), free(kd);

    /* refusals */
    snprintf(dev, sizeof dev, "loop,calib=%s", side);
    expect_fallback(m, dev, ev, "applies no clip records (amx,act=int8 does)");
    snprintf(dev, sizeof dev, "amx,emulate=1,calib=%s", side);
    expect_fallback(m, dev, ev, "applies no clip records");
    expect_fallback(m, "amx,emulate=1,act=int8,prune=0.5", ev, "prune=0.5 needs calib=FILE");
    snprintf(dev, sizeof dev, "amx,emulate=1,act=int8,calib=%s,prune=0.5", side);
    expect_fallback(m, dev, ev, "needs the layers' importance");
    FILE *f = fopen(noimp, "w");
    if (f) {
        fputs("not a sidecar\n", f);
        fclose(f);
    }
    snprintf(dev, sizeof dev, "amx,emulate=1,act=int8,calib=%s", noimp);
    expect_fallback(m, dev, ev, noimp);
    expect_fallback(m, "amx,emulate=1,act=int8,prune=2", ev, "prune=2: expected a fraction");
    expect_fallback(m, "amx,emulate=1,act=int8,prune_keep=up", ev, "'up' is not an input");
    snprintf(dev, sizeof dev, "amx,emulate=1,act=int8,calib=%s,prune_keep=down", side);
    expect_fallback(m, dev, ev, "prune_keep= needs prune=P");
    free(ev);
    ts_model_free(m);
    ts_model *other = load(argv[4]);
    int64_t n_o = 0;
    int32_t *ev_o = tokens(other, argv[3], &n_o);
    snprintf(dev, sizeof dev, "amx,emulate=1,act=int8,calib=%s", side);
    expect_fallback(other, dev, ev_o, "calibrated for another model");
    free(ev_o);
    ts_model_free(other);

    remove(side), remove(empty), remove(noimp);
    free(cal_ids);
    if (failures) fprintf(stderr, "test_calib: %d failure(s)\n", failures);
    else printf("test_calib: ok\n");
    return failures ? 1 : 0;
}
