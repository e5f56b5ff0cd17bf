/* calib.c - the calibration sidecar (calib.h): read, write, prune, and the
 * per-layer clip records the runtime binds. */
#include "runtime/calib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "quant/quant.h"

#define N_IN TS_CLIP_N_IN

void ts_rt_calib_free(ts_rt_calib *c) {
    if (!c)
        return;
    if (c->hot)
        for (int i = 0; i < c->n_layer * N_IN; i++)
            free(c->hot[i]);
    free(c->hot);
    free(c->n_in);
    free(c->clip);
    free(c->frac);
    free(c->shadow);
    free(c->importance);
    free(c);
}

ts_rt_calib *ts_rt_calib_new(int n_layer, const int64_t *n_in, ts_err *err) {
    if (n_layer < 1 || n_layer > 4096) {
        ts_err_set(err, "calibration: %d layers out of range", n_layer);
        return NULL;
    }
    const size_t n = (size_t)n_layer * N_IN;
    ts_rt_calib *c = calloc(1, sizeof *c);
    if (c) {
        c->n_layer = n_layer;
        c->n_in = calloc(n, sizeof *c->n_in);
        c->clip = calloc(n, sizeof *c->clip);
        c->frac = calloc(n, sizeof *c->frac);
        c->shadow = calloc((size_t)n_layer, sizeof *c->shadow);
        c->hot = calloc(n, sizeof *c->hot);
    }
    bool ok = c && c->n_in && c->clip && c->frac && c->shadow && c->hot;
    for (size_t i = 0; ok && i < n; i++) {
        if (n_in[i] < 0 || n_in[i] > (1 << 24)) {
            ts_rt_calib_free(c);
            ts_err_set(err, "calibration: layer %zu input %zu: width %lld out of range", i / N_IN, i % N_IN,
                       (long long)n_in[i]);
            return NULL;
        }
        c->n_in[i] = n_in[i];
        if (n_in[i] && !(c->hot[i] = calloc((size_t)n_in[i], sizeof(float))))
            ok = false;
    }
    if (!ok) {
        ts_rt_calib_free(c);
        ts_err_set(err, "out of memory");
        return NULL;
    }
    for (int l = 0; l < n_layer; l++)
        c->shadow[l] = 1.0f;
    return c;
}

int ts_rt_calib_write(const ts_rt_calib *c, const char *path, ts_err *err) {
    ts_gguf_writer *w = ts_gguf_writer_new(err);
    if (!w)
        return -1;
    const size_t n = (size_t)c->n_layer * N_IN;
    float *nf = malloc(n * sizeof *nf);
    int rc = -1;
    if (!nf) {
        ts_err_set(err, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        nf[i] = (float)c->n_in[i];
    const ts_gguf_value pct = {.type = TS_GGUF_FLOAT32, .num.f64 = c->percentile};
    const int64_t ne2[2] = {N_IN, c->n_layer}, ne1[1] = {c->n_layer};
    if (ts_gguf_writer_set_str(w, "general.type", "tessera.calib", err) ||
        ts_gguf_writer_set_u32(w, "tessera.calib.version", 1, err) ||
        ts_gguf_writer_set_kv(w, "tessera.calib.percentile", &pct, err) ||
        ts_gguf_writer_set_u32(w, "tessera.calib.tokens", c->tokens, err) ||
        ts_gguf_writer_set_u32(w, "tessera.calib.chunks", c->chunks, err) ||
        ts_gguf_writer_add_tensor(w, "calib.n_in", TS_TYPE_F32, 2, ne2, nf, n * 4, err) ||
        ts_gguf_writer_add_tensor(w, "calib.clip", TS_TYPE_F32, 2, ne2, c->clip, n * 4, err) ||
        ts_gguf_writer_add_tensor(w, "calib.frac", TS_TYPE_F32, 2, ne2, c->frac, n * 4, err) ||
        ts_gguf_writer_add_tensor(w, "calib.shadow", TS_TYPE_F32, 1, ne1, c->shadow, (uint64_t)c->n_layer * 4, err) ||
        (c->importance && ts_gguf_writer_add_tensor(w, "calib.importance", TS_TYPE_F32, 1, ne1, c->importance,
                                                    (uint64_t)c->n_layer * 4, err)))
        goto done;
    for (size_t i = 0; i < n; i++) {
        if (!c->n_in[i])
            continue;
        char name[64];
        snprintf(name, sizeof name, "blk.%zu.hot.%zu", i / N_IN, i % N_IN);
        const int64_t ne[1] = {c->n_in[i]};
        if (ts_gguf_writer_add_tensor(w, name, TS_TYPE_F32, 1, ne, c->hot[i], (uint64_t)c->n_in[i] * 4, err))
            goto done;
    }
    rc = ts_gguf_writer_write(w, path, err);
done:
    ts_gguf_writer_free(w);
    free(nf);
    return rc;
}

/* The F32 tensor `name` of exactly n elements, or NULL (err set unless optional). */
static const float *f32_tensor(const ts_gguf *g, const char *path, const char *name, int64_t n, bool optional,
                               ts_err *err) {
    const ts_gguf_tensor *t = ts_gguf_find_tensor(g, name);
    if (!t) {
        if (!optional)
            ts_err_set(err, "%s: calibration tensor '%s' missing", path, name);
        return NULL;
    }
    if (t->type != TS_TYPE_F32 || t->n_elements != n) {
        ts_err_set(err, "%s: calibration tensor '%s': expected %lld f32 values, found %lld of type %u", path, name,
                   (long long)n, (long long)t->n_elements, t->type);
        return NULL;
    }
    return t->data;
}

ts_rt_calib *ts_rt_calib_read(const char *path, ts_err *err) {
    ts_gguf *g = ts_gguf_open(path, err);
    if (!g)
        return NULL;
    ts_rt_calib *c = NULL;
    int64_t *n_in = NULL;
    ts_gguf_str type = {0};
    uint32_t ver = 0;
    if (ts_gguf_get_str(g, "general.type", &type, err) || type.len != 13 || memcmp(type.ptr, "tessera.calib", 13)) {
        ts_err_set(err, "%s: not a tessera calibration sidecar (general.type is not 'tessera.calib'); make one with "
                        "`tessera calibrate`",
                   path);
        goto fail;
    }
    if (ts_gguf_get_u32(g, "tessera.calib.version", &ver, err) || ver != 1) {
        ts_err_set(err, "%s: calibration version %u, this build reads 1", path, ver);
        goto fail;
    }
    const ts_gguf_tensor *tn = ts_gguf_find_tensor(g, "calib.n_in");
    if (!tn || tn->type != TS_TYPE_F32 || tn->n_dims != 2 || tn->ne[0] != N_IN || tn->ne[1] < 1 ||
        tn->ne[1] > 4096) {
        ts_err_set(err, "%s: calib.n_in missing or not f32 [n_layer][%d]", path, N_IN);
        goto fail;
    }
    const int nl = (int)tn->ne[1];
    const size_t n = (size_t)nl * N_IN;
    const float *nf = tn->data;
    if (!(n_in = malloc(n * sizeof *n_in))) {
        ts_err_set(err, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        if (!(nf[i] >= 0 && nf[i] <= (float)(1 << 24)) || nf[i] != floorf(nf[i])) {
            ts_err_set(err, "%s: calib.n_in[%zu] = %g is not a width", path, i, (double)nf[i]);
            goto fail;
        }
        n_in[i] = (int64_t)nf[i];
    }
    if (!(c = ts_rt_calib_new(nl, n_in, err)))
        goto fail;
    const float *clip = f32_tensor(g, path, "calib.clip", (int64_t)n, false, err);
    const float *frac = clip ? f32_tensor(g, path, "calib.frac", (int64_t)n, false, err) : NULL;
    const float *shadow = frac ? f32_tensor(g, path, "calib.shadow", nl, false, err) : NULL;
    if (!shadow)
        goto fail;
    const float *imp = f32_tensor(g, path, "calib.importance", nl, true, err);
    if (!imp && ts_gguf_find_tensor(g, "calib.importance"))
        goto fail;
    for (size_t i = 0; i < n; i++) {
        if (!(clip[i] >= 0 && isfinite(clip[i]))) {
            ts_err_set(err, "%s: layer %zu input %zu: clip %g is not a finite value >= 0", path, i / N_IN, i % N_IN,
                       (double)clip[i]);
            goto fail;
        }
        c->clip[i] = clip[i];
        c->frac[i] = frac[i];
        if (!c->n_in[i])
            continue;
        char name[64];
        snprintf(name, sizeof name, "blk.%zu.hot.%zu", i / N_IN, i % N_IN);
        const float *h = f32_tensor(g, path, name, c->n_in[i], false, err);
        if (!h)
            goto fail;
        memcpy(c->hot[i], h, (size_t)c->n_in[i] * 4);
    }
    memcpy(c->shadow, shadow, (size_t)nl * 4);
    if (imp) {
        if (!(c->importance = malloc((size_t)nl * 4))) {
            ts_err_set(err, "out of memory");
            goto fail;
        }
        memcpy(c->importance, imp, (size_t)nl * 4);
    }
    float pct = 0;
    uint32_t tok = 0, ch = 0;
    if (ts_gguf_opt_f32(g, "tessera.calib.percentile", &pct, err) < 0 ||
        ts_gguf_opt_u32(g, "tessera.calib.tokens", &tok, err) < 0 ||
        ts_gguf_opt_u32(g, "tessera.calib.chunks", &ch, err) < 0)
        goto fail;
    c->percentile = pct, c->tokens = tok, c->chunks = ch;
    free(n_in);
    ts_gguf_close(g);
    return c;
fail:
    ts_err_prefix(err, "calib");
    ts_rt_calib_free(c);
    free(n_in);
    ts_gguf_close(g);
    return NULL;
}

int ts_rt_calib_pruned(const ts_rt_calib *c, float prune, bool *pruned, ts_err *err) {
    for (int l = 0; l < c->n_layer; l++)
        pruned[l] = false;
    const int k = (int)lroundf(prune * (float)c->n_layer);
    if (k <= 0)
        return 0;
    if (k >= c->n_layer) { /* every layer: no order needed */
        for (int l = 0; l < c->n_layer; l++)
            pruned[l] = true;
        return 0;
    }
    if (!c->importance)
        return ts_err_set(err, "prune=%g needs the layers' importance, and this calibration has none (run `tessera "
                               "calibrate` without --no-importance)",
                          (double)prune);
    for (int j = 0; j < k; j++) { /* k times the least important layer not yet taken */
        int best = -1;
        for (int l = 0; l < c->n_layer; l++)
            if (!pruned[l] && (best < 0 || c->importance[l] < c->importance[best]))
                best = l;
        pruned[best] = true;
    }
    return 0;
}

uint64_t ts_rt_clip_offsets(const int64_t n_in[TS_CLIP_N_IN], uint64_t off[TS_CLIP_N_IN]) {
    uint64_t total = 0;
    for (int i = 0; i < N_IN; i++) {
        off[i] = total;
        total += n_in[i] ? ts_eng_clip_bytes(n_in[i]) : 0;
    }
    return total;
}

void ts_rt_calib_fill(const ts_rt_calib *c, int l, bool pruned, uint32_t keep, uint32_t extra, void *dst) {
    uint64_t off[N_IN];
    const int64_t *n_in = c->n_in + (size_t)l * N_IN;
    memset(dst, 0, (size_t)ts_rt_clip_offsets(n_in, off));
    for (int i = 0; i < N_IN; i++) {
        if (!n_in[i])
            continue;
        const size_t ci = (size_t)l * N_IN + (size_t)i;
        ts_eng_clip *r = (ts_eng_clip *)((uint8_t *)dst + off[i]);
        r->clip = c->clip[ci];
        r->n_in = (uint32_t)n_in[i];
        r->layer = l, r->input = i;
        const bool shadow = c->shadow[l] > 0 && (!pruned || ((keep >> i) & 1u));
        r->flags = extra | (shadow ? TS_CLIP_SHADOW : 0u);
        uint32_t *hot = ts_eng_clip_hot(r);
        for (int64_t k = 0; k < n_in[i]; k++)
            if (c->hot[ci][k] > 0)
                hot[k >> 5] |= 1u << (k & 31);
    }
}
