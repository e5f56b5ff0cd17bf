/* test_relattn.c - self-attention with a relative-position bias
 * (kernels/relattn.h, the engine's TS_OP_REL_ATTN: the umT5 encoder's
 * attention).
 *
 *  - the scalar reference ts_rel_attention against the formula written out
 *    here in double (scores, clamped offset into the bias table, softmax,
 *    weighted sum): |out - ref| <= 1e-6 * max |v| of the head (out is a
 *    convex combination of v; the kernel rounds once per output); queries
 *    over every key and over a prefix of them (the padding mask), offsets
 *    beyond max_rel (clamped), max_rel 0, one key; bit-identical for 1 and
 *    3 threads; out aliasing q; nothing written past out;
 *  - the engine op on cpu and loop: bit-identical to the kernel, with the
 *    run's n_kv as the key count (0: every row; n_kv < n_tok: a mask) and
 *    runs narrower than the graph; a node with max_rel < 0 refused.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "kernels/relattn.h"

#include "check.h"

#define GUARD 8

static float *fbuf(size_t n) {
    float *p = malloc((n + GUARD) * sizeof *p);
    for (size_t i = 0; i < GUARD; i++) p[n + i] = 12345.0f;
    return p;
}
static int guard_ok(const float *p, size_t n) {
    for (size_t i = 0; i < GUARD; i++)
        if (p[n + i] != 12345.0f) return 0;
    return 1;
}

static ts_threadpool *pool3;

static void test_reference(void) {
    const struct {
        int n_q, n_kv, n_head, hd, max_rel;
        float scale;
    } cfg[] = {
        {9, 9, 4, 16, 128, 1.0f},  /* T5: every key, offsets within the table */
        {23, 17, 4, 16, 128, 1.0f}, /* padding mask: 17 keys of 23 */
        {40, 40, 2, 8, 5, 1.0f},   /* offsets beyond max_rel: clamped */
        {6, 6, 3, 5, 0, 0.5f},     /* max_rel 0: one bias per head; odd head_dim; scale */
        {4, 1, 2, 4, 3, 1.0f},     /* one key */
    };
    double worst = 0;
    for (size_t ci = 0; ci < sizeof cfg / sizeof cfg[0]; ci++) {
        const int nq = cfg[ci].n_q, nkv = cfg[ci].n_kv, nh = cfg[ci].n_head, hd = cfg[ci].hd, mr = cfg[ci].max_rel;
        const ts_relattn_params ap = {nh, hd, mr, cfg[ci].scale};
        const int row = nh * hd, W = 2 * mr + 1;
        int64_t per;
        ts_err err;
        CHECK(ts_rel_attention_scratch(&ap, nkv, &per, &err) == 0 && per == nkv + hd, "scratch: %s", err.msg);
        double *scr = malloc((size_t)(3 * per) * sizeof *scr);
        float *q = fbuf((size_t)nq * row), *k = fbuf((size_t)nq * row), *v = fbuf((size_t)nq * row);
        float *bias = fbuf((size_t)nh * W), *out = fbuf((size_t)nq * row), *out3 = fbuf((size_t)nq * row);
        for (int i = 0; i < nq * row; i++) q[i] = nrand(), k[i] = nrand(), v[i] = 2 * nrand();
        for (int i = 0; i < nh * W; i++) bias[i] = 2 * nrand();
        ts_rel_attention(NULL, &ap, q, nq, k, v, nkv, bias, out, scr, per);
        ts_rel_attention(pool3, &ap, q, nq, k, v, nkv, bias, out3, scr, per);
        CHECK(guard_ok(out, (size_t)nq * row) && guard_ok(out3, (size_t)nq * row), "wrote past out");
        CHECK(!memcmp(out, out3, (size_t)nq * row * 4), "config %zu: 3 threads differ from 1", ci);
        for (int t = 0; t < nq; t++)
            for (int h = 0; h < nh; h++) {
                double s[64], m = -INFINITY, sum = 0, vmax = 0;
                for (int i = 0; i < nkv; i++) {
                    double d = 0;
                    for (int c = 0; c < hd; c++) d += (double)q[t * row + h * hd + c] * k[i * row + h * hd + c];
                    const int r = i - t < -mr ? -mr : i - t > mr ? mr : i - t;
                    s[i] = d * ap.scale + bias[h * W + r + mr];
                    m = fmax(m, s[i]);
                    for (int c = 0; c < hd; c++) vmax = fmax(vmax, fabs(v[i * row + h * hd + c]));
                }
                for (int i = 0; i < nkv; i++) sum += exp(s[i] - m);
                for (int c = 0; c < hd; c++) {
                    double ref = 0;
                    for (int i = 0; i < nkv; i++) ref += exp(s[i] - m) / sum * v[i * row + h * hd + c];
                    const double e = fabs(out[t * row + h * hd + c] - ref);
                    worst = fmax(worst, e / vmax);
                    CHECK(e <= 1e-6 * vmax, "config %zu t %d h %d c %d: %.9g vs %.9g", ci, t, h, c,
                          out[t * row + h * hd + c], ref);
                    if (nkv == 1)
                        CHECK(out[t * row + h * hd + c] == v[h * hd + c], "one key: out != v");
                }
            }
        ts_rel_attention(pool3, &ap, q, nq, k, v, nkv, bias, q, scr, per); /* out aliasing q */
        CHECK(!memcmp(q, out, (size_t)nq * row * 4), "config %zu: in place differs", ci);
        free(scr), free(q), free(k), free(v), free(bias), free(out), free(out3);
    }
    ts_err err;
    int64_t per;
    const ts_relattn_params bad = {4, 16, -1, 1.0f};
    CHECK(ts_rel_attention_scratch(&bad, 3, &per, &err) == -1, "max_rel -1 accepted");
    const ts_relattn_params good = {4, 16, 8, 1.0f};
    CHECK(ts_rel_attention_scratch(&good, 0, &per, &err) == -1, "n_kv 0 accepted");
    CHECK(ts_rel_attention_scratch(&good, INT64_MAX - 2, &per, &err) == -1, "overflow accepted");
    printf("reference: within %.2g x max|v| of the double formula (bound 1e-6)\n", worst);
}

/* One REL_ATTN node on engine `spec` over n_tok rows (graph width 40) with
 * the run's n_kv; out compared bit for bit with the kernel over keys. */
static void engine_case(const char *spec, int n_tok, int n_kv) {
    enum { NH = 4, HD = 16, MR = 6, WIDTH = 40 };
    const int row = NH * HD;
    ts_err err = {{0}};
    float *q = fbuf(WIDTH * row), *k = fbuf(WIDTH * row), *v = fbuf(WIDTH * row), *bias = fbuf(NH * (2 * MR + 1));
    float *ref = fbuf(WIDTH * row), *got = fbuf(WIDTH * row);
    for (int i = 0; i < WIDTH * row; i++) q[i] = nrand(), k[i] = nrand(), v[i] = nrand();
    for (int i = 0; i < NH * (2 * MR + 1); i++) bias[i] = nrand();
    const ts_relattn_params ap = {NH, HD, MR, 1.0f};
    const int keys = n_kv > 0 && n_kv < n_tok ? n_kv : n_tok;
    double *scr = malloc((size_t)(keys + HD) * sizeof *scr);
    ts_rel_attention(NULL, &ap, q, n_tok, k, v, keys, bias, ref, scr, keys + HD);
    ts_eng_node nd = {.op = TS_OP_REL_ATTN,
                      .relattn = {.q = TS_ENG_REF(0, 0), .k = TS_ENG_REF(1, 0), .v = TS_ENG_REF(2, 0),
                                  .out = TS_ENG_REF(3, 0), .bias = TS_ENG_REF(4, 0), .n_head = NH, .head_dim = HD,
                                  .max_rel = MR, .scale = 1.0f}};
    ts_engine *e = ts_eng_open(spec, &err);
    ts_eng_queue *qu = e ? ts_eng_queue_new(e, &err) : NULL;
    ts_eng_graph *g = qu ? ts_eng_graph_new(e, &nd, 1, 5, WIDTH, &err) : NULL;
    ts_eng_buf *b[5] = {0};
    const size_t bytes[5] = {WIDTH * row * 4, WIDTH * row * 4, WIDTH * row * 4, WIDTH * row * 4,
                             NH * (2 * MR + 1) * 4};
    const float *src[5] = {q, k, v, NULL, bias};
    int rc = !g;
    for (int i = 0; i < 5 && !rc; i++)
        rc = !(b[i] = ts_eng_buf_alloc(e, TS_MEM_DEVICE, bytes[i], &err)) ||
             (src[i] && ts_eng_enqueue_write(qu, b[i], 0, src[i], bytes[i], &err));
    ts_eng_bind binds[5];
    for (int i = 0; i < 5; i++) binds[i] = (ts_eng_bind){.buf = b[i]};
    rc = rc || ts_eng_enqueue_graph_window(qu, g, binds, 5, 0, n_tok, n_kv, &err) ||
         ts_eng_enqueue_read(qu, b[3], 0, got, (size_t)n_tok * row * 4, &err) || ts_eng_queue_finish(qu, &err);
    CHECK(!rc, "%s rel_attn: %s", spec, err.msg);
    CHECK(!rc && !memcmp(ref, got, (size_t)n_tok * row * 4), "%s rel_attn (n_tok %d, n_kv %d) differs from the kernel",
          spec, n_tok, n_kv);
    for (int i = 0; i < 5; i++) ts_eng_buf_free(b[i]);
    ts_eng_graph_free(g), ts_eng_queue_free(qu), ts_eng_close(e);
    free(q), free(k), free(v), free(bias), free(ref), free(got), free(scr);
}

static void test_engine(const char *spec) {
    engine_case(spec, 40, 0);  /* the full width, every key */
    engine_case(spec, 23, 0);  /* narrower than the graph */
    engine_case(spec, 23, 17); /* keys 17 .. 22 masked */
    engine_case(spec, 23, 99); /* n_kv past the run: every key */
    ts_err err = {{0}};
    ts_engine *e = ts_eng_open(spec, &err);
    ts_eng_node nd = {.op = TS_OP_REL_ATTN,
                      .relattn = {.q = TS_ENG_REF(0, 0), .k = TS_ENG_REF(0, 0), .v = TS_ENG_REF(0, 0),
                                  .out = TS_ENG_REF(0, 0), .bias = TS_ENG_REF(0, 0), .n_head = 4, .head_dim = 16,
                                  .max_rel = -1, .scale = 1.0f}};
    ts_eng_graph *g = e ? ts_eng_graph_new(e, &nd, 1, 1, 8, &err) : NULL;
    CHECK(e && !g && strstr(err.msg, "max_rel"), "%s: max_rel -1 not refused (%s)", spec, err.msg);
    printf("%s: rel_attn bit-identical to the kernel (masks, narrow runs); bad node: %s\n", spec, err.msg);
    ts_eng_graph_free(g);
    ts_eng_close(e);
}

int main(void) {
    rng_seed(0x510e527fade682d1ull);
    ts_err err;
    if (!(pool3 = ts_threadpool_new(3, &err))) {
        fprintf(stderr, "thread pool: %s\n", err.msg);
        return 2;
    }
    test_reference();
    test_engine("cpu");
    test_engine("loop");
    ts_threadpool_free(pool3);
    if (failures) {
        fprintf(stderr, "%d failure(s)\n", failures);
        return 1;
    }
    printf("test_relattn: ok\n");
    return 0;
}
