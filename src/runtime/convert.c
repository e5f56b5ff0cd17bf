/* convert.c - the weight-type probe and row conversion (convert.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"
#include "runtime/convert.h"

int ts_rt_convert_rows(uint32_t src_type, const void *src, size_t src_row_bytes, uint32_t dst_type, void *dst,
                        int64_t n_in, int64_t n_rows, ts_err *err) {
    const ts_type_traits *st = ts_type_info(src_type), *dt = ts_type_info(dst_type);
    if (!st || !dt)
        return ts_err_set(err, "convert: unknown type id %u or %u", src_type, dst_type);
    if (!st->can_dequant)
        return ts_err_set(err, "convert: cannot read %s", st->name);
    if (!dt->can_quant)
        return ts_err_set(err, "convert: cannot write %s", dt->name);
    const size_t srb = ts_row_size(src_type, n_in), drb = ts_row_size(dst_type, n_in);
    if (!srb || !drb || src_row_bytes < srb)
        return ts_err_set(err, "convert %s -> %s: rows of %lld elements do not fit the block sizes", st->name, dt->name,
                          (long long)n_in);
    if (n_rows < 0)
        return ts_err_set(err, "convert: %lld rows", (long long)n_rows);
    float *tmp = malloc((size_t)n_in * sizeof(float));
    if (!tmp)
        return ts_err_set(err, "out of memory converting weights");
    for (int64_t r = 0; r < n_rows; r++) {
        if (ts_dequant_row(src_type, (const uint8_t *)src + (size_t)r * src_row_bytes, tmp, n_in, err) ||
            ts_quant_row(dst_type, tmp, (uint8_t *)dst + (size_t)r * drb, n_in, err)) {
            free(tmp);
            return -1;
        }
    }
    free(tmp);
    return 0;
}

/* xorshift64*: deterministic probe data */
static uint64_t rng_next(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}
static float rng_float(uint64_t *s) { return (float)((double)(rng_next(s) >> 11) / 9007199254740992.0) * 2.0f - 1.0f; }

/* why = what + msg, cut to why_n (messages are cut on purpose). */
static void why_set(char *why, size_t why_n, const char *what, const char *msg) {
    if (!why_n)
        return;
    size_t a = strlen(what), b = strlen(msg);
    if (a >= why_n)
        a = why_n - 1;
    if (b >= why_n - a)
        b = why_n - a - 1;
    memcpy(why, what, a);
    memcpy(why + a, msg, b);
    why[a + b] = 0;
}

/* One probe: builds a 1-node matmul graph over weights of `type`, runs it,
 * compares with a double-precision CPU reference. Returns 0 ok (nmse set),
 * 1 refused (why set), -1 fatal error (err). */
static int probe_one(ts_engine *e, uint32_t type, int64_t n_in, double *nmse, char *why, size_t why_n, ts_err *err) {
    const ts_type_traits *tt = ts_type_info(type);
    const size_t rb = ts_row_size(type, n_in);
    if (!tt || !tt->can_dequant || !rb) {
        snprintf(why, why_n, "rows of %lld do not fit the type", (long long)n_in);
        return 1;
    }
    if (!ts_eng_supports_op(e, TS_OP_MATMUL, type)) {
        snprintf(why, why_n, "matmul does not take %s", tt->name);
        return 1;
    }
    const ts_eng_desc *d = ts_eng_describe(e);
    const int width = d->n_widths ? d->widths[0] : (d->max_width < 4 ? d->max_width : 4);
    const int64_t n_out = 16;
    const size_t wbytes = (size_t)n_out * rb, xbytes = (size_t)width * (size_t)n_in * 4,
                 ybytes = (size_t)width * (size_t)n_out * 4;
    uint8_t *w = malloc(wbytes), *wpk = NULL;
    float *wf = malloc((size_t)n_out * (size_t)n_in * sizeof(float));
    float *x = malloc(xbytes), *y = malloc(ybytes), *yr = malloc(ybytes);
    int rc = -1;
    ts_eng_buf *bw = NULL, *bx = NULL, *by = NULL;
    ts_eng_queue *q = NULL;
    ts_eng_graph *g = NULL;
    if (!w || !wf || !x || !y || !yr) {
        ts_err_set(err, "out of memory probing %s", tt->name);
        goto done;
    }
    uint64_t s = 0x9E3779B97F4A7C15ull ^ type;
    for (int64_t i = 0; i < (int64_t)width * n_in; i++)
        x[i] = rng_float(&s);
    for (int64_t i = 0; i < n_out * n_in; i++)
        wf[i] = rng_float(&s) * 0.5f;
    if (tt->can_quant) {
        for (int64_t r = 0; r < n_out; r++)
            if (ts_quant_row(type, wf + r * n_in, w + (size_t)r * rb, n_in, err))
                goto done;
    } else {
        /* No quantizer for this type: random bytes, kept only if they
         * decode to finite values (scales could be NaN), else zeros. */
        for (int attempt = 0; attempt < 8; attempt++) {
            for (size_t i = 0; i < wbytes; i++)
                w[i] = (uint8_t)(rng_next(&s) >> 56) & 0x3f;
            bool finite = true;
            for (int64_t r = 0; r < n_out && finite; r++) {
                (void)ts_dequant_row(type, w + (size_t)r * rb, wf + r * n_in, n_in, NULL);
                for (int64_t i = 0; i < n_in; i++)
                    finite &= isfinite(wf[i + r * n_in]) && fabsf(wf[i + r * n_in]) < 1e4f;
            }
            if (finite)
                break;
            memset(w, 0, wbytes);
        }
    }
    for (int64_t r = 0; r < n_out; r++)
        if (ts_dequant_row(type, w + (size_t)r * rb, wf + r * n_in, n_in, err))
            goto done;
    for (int t = 0; t < width; t++)
        for (int64_t r = 0; r < n_out; r++) {
            double acc = 0.0;
            for (int64_t i = 0; i < n_in; i++)
                acc += (double)wf[r * n_in + i] * (double)x[(int64_t)t * n_in + i];
            yr[(int64_t)t * n_out + r] = (float)acc;
        }
    ts_eng_node node = {
        .op = TS_OP_MATMUL,
        .matmul = {.w = TS_ENG_REF(0, 0), .x = TS_ENG_REF(1, 0), .y = TS_ENG_REF(2, 0), .n_in = n_in, .n_out = n_out}};
    ts_err e2 = {{0}};
    g = ts_eng_graph_new(e, &node, 1, 3, width, &e2);
    if (!g) {
        why_set(why, why_n, "graph refused: ", e2.msg);
        rc = 1;
        goto done;
    }
    /* an engine with a layout of its own is probed in it: the kernel the
     * model's matrices will run on */
    const uint64_t own = ts_eng_packed_bytes(e, type, n_in, n_out);
    uint8_t *wdev = w;
    size_t wdev_bytes = wbytes;
    if (own) {
        if (!(wpk = malloc((size_t)own))) {
            ts_err_set(err, "out of memory probing %s", tt->name);
            goto done;
        }
        if (ts_eng_pack(e, type, w, rb, n_in, n_out, wpk, &e2)) {
            why_set(why, why_n, "pack refused: ", e2.msg);
            rc = 1;
            goto done;
        }
        wdev = wpk, wdev_bytes = (size_t)own;
    }
    bw = ts_eng_buf_alloc(e, TS_MEM_DEVICE, wdev_bytes, err);
    bx = bw ? ts_eng_buf_alloc(e, TS_MEM_DEVICE, xbytes, err) : NULL;
    by = bx ? ts_eng_buf_alloc(e, TS_MEM_DEVICE, ybytes, err) : NULL;
    q = by ? ts_eng_queue_new(e, err) : NULL;
    if (!q)
        goto done;
    ts_eng_bind binds[3] = {
        {.buf = bw, .wtype = type, .row_bytes = rb, .layout = own ? TS_WL_ENGINE : TS_WL_ROWS}, {.buf = bx}, {.buf = by}};
    if (ts_eng_enqueue_write(q, bw, 0, wdev, wdev_bytes, err) || ts_eng_enqueue_write(q, bx, 0, x, xbytes, err))
        goto done;
    if (ts_eng_enqueue_graph(q, g, binds, 3, 0, width, &e2)) {
        why_set(why, why_n, "run refused: ", e2.msg);
        rc = 1;
        goto done;
    }
    if (ts_eng_enqueue_read(q, by, 0, y, ybytes, err))
        goto done;
    if (ts_eng_queue_finish(q, &e2)) {
        why_set(why, why_n, "run failed: ", e2.msg);
        rc = 1;
        goto done;
    }
    *nmse = ts_eng_nmse(y, yr, (int64_t)width * n_out);
    if (!(*nmse < 1e-2)) {
        snprintf(why, why_n, "wrong results (nmse %.2g)", *nmse);
        rc = 1;
        goto done;
    }
    rc = 0;
done:
    ts_eng_queue_free(q);
    ts_eng_buf_free(bw);
    ts_eng_buf_free(bx);
    ts_eng_buf_free(by);
    ts_eng_graph_free(g);
    free(w);
    free(wpk);
    free(wf);
    free(x);
    free(y);
    free(yr);
    return rc;
}

static bool is_float_type(uint32_t t) { return t == TS_TYPE_F32 || t == TS_TYPE_F16 || t == TS_TYPE_BF16; }

int ts_rt_probe_weight_type(ts_engine *e, uint32_t type, int64_t n_in, char *note, size_t note_size, ts_err *err) {
    if (note && note_size)
        note[0] = 0;
    if (!e)
        return ts_err_set(err, "probe: engine is NULL");
    const ts_type_traits *tt = ts_type_info(type);
    if (!tt)
        return ts_err_set(err, "probe: unknown weight type id %u", type);
    if (n_in < 1 || n_in > (1 << 24))
        return ts_err_set(err, "probe: n_in %lld out of range", (long long)n_in);
    uint32_t cand[4];
    int nc = 0;
    cand[nc++] = type;
    if (is_float_type(type)) {
        cand[nc++] = TS_TYPE_F16;
        cand[nc++] = TS_TYPE_F32;
    } else {
        cand[nc++] = TS_TYPE_Q8_0;
        cand[nc++] = TS_TYPE_F16;
        cand[nc++] = TS_TYPE_F32;
    }
    size_t len = 0;
    for (int i = 0; i < nc; i++) {
        bool dup = false;
        for (int j = 0; j < i; j++)
            dup |= cand[j] == cand[i];
        if (dup)
            continue;
        double nmse = 0;
        char why[300] = "";
        const int rc = probe_one(e, cand[i], n_in, &nmse, why, sizeof why, err);
        if (rc < 0)
            return -1;
        if (note && note_size > len) {
            if (rc == 0)
                len += (size_t)snprintf(note + len, note_size - len, "%s%s: ok (nmse %.2g)", len ? "; " : "",
                                        ts_type_info(cand[i])->name, nmse);
            else
                len += (size_t)snprintf(note + len, note_size - len, "%s%s: refused (%s)", len ? "; " : "",
                                        ts_type_info(cand[i])->name, why);
        }
        if (rc == 0)
            return (int)cand[i];
    }
    return ts_err_set(err, "%s: no weight type passes the matmul probe for %s rows of %lld", ts_eng_describe(e)->name, tt->name,
                      (long long)n_in);
}
