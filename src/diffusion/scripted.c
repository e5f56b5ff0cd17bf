/* scripted.c - a fake denoiser whose predictions come from a script
 * function: tests use it to drive the commit logic with designed confidence
 * sequences, and the benchmark to predict forward counts for a realistic
 * commit profile. It keeps its own view of the canvas (what a model's KV
 * cache would hold: every window's tokens at their positions) and logs each
 * forward's window; with scr also a shadow view (the CPU path's cache) and
 * a log of every call in order. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "diffusion/diffusion.h"

int ts_scripted_init(ts_scripted *s, int32_t n_ctx, int64_t cap_calls, ts_err *err) {
    s->n_ctx = n_ctx;
    s->cap_calls = cap_calls;
    s->n_calls = 0;
    s->n_events = s->n_refresh = 0;
    s->in_flight = false;
    s->canvas = malloc((size_t)(n_ctx > 0 ? n_ctx : 1) * sizeof *s->canvas);
    s->calls = malloc((size_t)(cap_calls > 0 ? cap_calls : 1) * sizeof *s->calls);
    s->shadow = s->scr ? malloc((size_t)(n_ctx > 0 ? n_ctx : 1) * sizeof *s->shadow) : NULL;
    s->events = s->scr ? malloc((size_t)(cap_calls > 0 ? cap_calls : 1) * sizeof *s->events) : NULL;
    if (!s->canvas || !s->calls || (s->scr && (!s->shadow || !s->events))) {
        ts_scripted_free(s);
        return ts_err_set(err, "out of memory for a scripted denoiser of %d positions", n_ctx);
    }
    for (int32_t i = 0; i < n_ctx; i++) s->canvas[i] = s->mask_id;
    for (int32_t i = 0; s->shadow && i < n_ctx; i++) s->shadow[i] = s->mask_id;
    return 0;
}

void ts_scripted_free(ts_scripted *s) {
    free(s->canvas);
    free(s->calls);
    free(s->shadow);
    free(s->events);
    s->canvas = NULL;
    s->calls = NULL;
    s->shadow = NULL;
    s->events = NULL;
}

static void log_event(ts_scripted *s, char kind, int32_t pos0, int32_t n, int32_t n_kv) {
    if (s->events && s->n_events < s->cap_calls) s->events[s->n_events] = (ts_scripted_event){kind, pos0, n, n_kv};
    s->n_events++;
}

/* One window into `view` (the canvas or the shadow) and its logits rows,
 * scripted as call `call`; need: the rows asked for (NULL: all). */
static int compute(ts_scripted *s, int32_t *view, int64_t call, const int32_t *tokens, int32_t n, int32_t pos0,
                   int32_t n_kv, float *logits, const uint8_t *need, int32_t need_n, ts_err *err) {
    if (pos0 < 0 || n < 0 || (int64_t)pos0 + n > n_kv || n_kv > s->n_ctx)
        return ts_err_set(err, "scripted: window [%d, %d) with n_kv %d outside the canvas of %d", pos0, pos0 + n,
                          n_kv, s->n_ctx);
    memcpy(view + pos0, tokens, (size_t)n * sizeof *tokens);
    if (!logits) return 0;
    const int32_t V = s->n_vocab;
    /* the rest mass 1 - conf goes to up to 8 "filler" ids: the highest ones
     * other than the mask. With every other logit at -1e30 (exp exactly 0)
     * and the fillers after the token, the softmax sum adds the same nonzero
     * terms in the same order on every row, so equal scripted confidences
     * give bit-equal computed ones (ties stay ties) as long as the scripted
     * tokens are below the fillers. */
    int32_t fill[8], n_fill = 0;
    for (int32_t r = 0; r < n; r++) {
        float *row = logits + (size_t)r * (size_t)V;
        if (need && (r >= need_n || !need[r])) { /* not asked for */
            if (s->rows_nan)
                for (int32_t v = 0; v < V; v++) row[v] = NAN;
            continue;
        }
        int32_t pos = pos0 + r + (s->shift ? 1 : 0), tok = 0;
        float conf = 0.5f;
        if (pos < s->n_ctx && s->script) s->script(s->ud, call, pos, view, &tok, &conf);
        if (tok < 0 || tok >= V) tok = 0;
        n_fill = 0;
        for (int32_t v = V - 1; v >= 0 && n_fill < 8; v--)
            if (v != s->mask_id && v != tok) fill[n_fill++] = v;
        if (!(conf > 0.0f)) conf = 1e-30f;
        if (conf > 1.0f) conf = 1.0f;
        for (int32_t v = 0; v < V; v++) row[v] = -1e30f;
        row[tok] = 0.0f;
        /* softmax(row)[tok] == conf: each filler holds (1 - conf) / n_fill */
        if (conf < 1.0f && n_fill > 0) {
            float lf = logf((1.0f - conf) / ((float)n_fill * conf));
            for (int32_t i = 0; i < n_fill; i++) row[fill[i]] = lf;
        }
    }
    return 0;
}

static int scripted_forward(void *ctx, const int32_t *tokens, int32_t n, int32_t pos0, int32_t n_kv, float *logits,
                            ts_err *err) {
    ts_scripted *s = ctx;
    if (s->in_flight) return ts_err_set(err, "scripted: a forward while a submitted one is in flight");
    if (s->n_calls < s->cap_calls) s->calls[s->n_calls] = (ts_scripted_call){pos0, n, n_kv};
    const int64_t call = s->n_calls++;
    log_event(s, 'F', pos0, n, n_kv);
    const uint8_t *need = s->need; /* set_rows' selection is this forward's */
    const int32_t need_n = s->need_n;
    s->need = NULL;
    return compute(s, s->canvas, call, tokens, n, pos0, n_kv, logits, need, need_n, err);
}

/* submit computes at once (the logits are only read after wait); the log
 * shows what the decoder did between the two */
static int scripted_submit(void *ctx, const int32_t *tokens, int32_t n, int32_t pos0, int32_t n_kv, float *logits,
                           ts_err *err) {
    ts_scripted *s = ctx;
    if (scripted_forward(ctx, tokens, n, pos0, n_kv, logits, err) < 0) return -1;
    s->in_flight = true;
    return 0;
}

static int scripted_wait(void *ctx, ts_err *err) {
    (void)err;
    ts_scripted *s = ctx;
    log_event(s, 'W', 0, 0, 0);
    s->in_flight = false;
    return 0;
}

static bool scripted_done(void *ctx) { return !((ts_scripted *)ctx)->in_flight; }

static int scripted_snapshot(void *ctx, int32_t n, ts_err *err) {
    ts_scripted *s = ctx;
    if (s->in_flight) return ts_err_set(err, "scripted: snapshot while a forward is in flight");
    if (n < 0 || n > s->n_ctx) return ts_err_set(err, "scripted: snapshot of %d rows", n);
    log_event(s, 'S', 0, n, n);
    memcpy(s->shadow, s->canvas, (size_t)n * sizeof *s->canvas);
    return 0;
}

static int scripted_refresh(void *ctx, const int32_t *tokens, int32_t n, int32_t pos0, int32_t n_kv, float *logits,
                            ts_err *err) {
    ts_scripted *s = ctx;
    log_event(s, 'R', pos0, n, n_kv);
    const int64_t call = -1 - s->n_refresh++;
    return compute(s, s->shadow, call, tokens, n, pos0, n_kv, logits, NULL, 0, err);
}

static int scripted_merge(void *ctx, int32_t a, int32_t b, ts_err *err) {
    ts_scripted *s = ctx;
    if (s->in_flight) return ts_err_set(err, "scripted: merge while a forward is in flight");
    if (a < 0 || b < a || b > s->n_ctx) return ts_err_set(err, "scripted: merge of rows [%d, %d)", a, b);
    log_event(s, 'M', a, b - a, 0);
    memcpy(s->canvas + a, s->shadow + a, (size_t)(b - a) * sizeof *s->canvas);
    return 0;
}

static int scripted_set_rows(void *ctx, const uint8_t *need, int32_t n, ts_err *err) {
    (void)err;
    ts_scripted *s = ctx;
    s->need = n > 0 ? need : NULL;
    s->need_n = n;
    return 0;
}

ts_denoiser ts_scripted_denoiser(ts_scripted *s) {
    ts_denoiser d;
    memset(&d, 0, sizeof d);
    d.ctx = s;
    d.n_vocab = s->n_vocab;
    d.mask_id = s->mask_id;
    d.shift = s->shift;
    d.max_window = s->max_window > 0 ? s->max_window : s->n_ctx;
    d.forward = scripted_forward;
    d.set_rows = scripted_set_rows;
    if (s->scr) {
        d.submit = scripted_submit;
        d.wait = scripted_wait;
        d.done = scripted_done;
        d.scr_ctx = s;
        d.snapshot = scripted_snapshot;
        d.refresh = scripted_refresh;
        d.merge = scripted_merge;
    }
    return d;
}
