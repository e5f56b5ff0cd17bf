/* calib.c - activation calibration for per-tensor INT8 with shadow outliers
 * (seed 003; include/tessera.h "calibration"). The model's own CPU layer
 * graphs carry TS_CLIP_COLLECT records (runtime/calib.h, engine.h
 * ts_eng_clip): every matmul input of every window a context evaluates adds
 * to its |x| histogram and per-channel maxima. A chunk's maxima are kept as
 * one sample; writing picks each input's clip as a percentile of the
 * histogram and counts, per channel, the chunks in which it went beyond. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "engine/engine.h"
#include "model/model_impl.h"
#include "runtime/calib.h"
#include "runtime/layers.h"

struct ts_calib {
    ts_model *model;
    int n_layer;
    int64_t *n_in;     /* [n_layer * 4] */
    uint64_t *off;     /* [n_layer * 4]: record offsets in a layer's block */
    uint64_t stride;   /* bytes per layer */
    uint8_t *records;  /* [n_layer * stride]: the model's once attached */
    bool attached;     /* the model's CPU weights carry (and own) records */
    int64_t chan_total; /* sum of n_in: floats per chunk sample */
    float *samples;    /* [n_chunks][chan_total] */
    int n_chunks, cap_chunks;
};

static ts_eng_clip *rec(ts_calib *c, int l, int i) {
    return (ts_eng_clip *)(c->records + (size_t)l * c->stride + c->off[(size_t)l * TS_CLIP_N_IN + i]);
}

void ts_calib_free(ts_calib *c) {
    if (!c) return;
    free(c->n_in);
    free(c->off);
    if (c->attached) {
        /* the model takes its records back; with a context still open they
         * stay with the model (freed with it, collecting unread) */
        ts_err e = {{0}};
        (void)ts_rt_weights_set_calib(c->model->mdl->host_w, NULL, 0, &e);
    } else {
        free(c->records);
    }
    free(c->samples);
    free(c);
}

ts_status ts_calib_begin(ts_model *model, ts_calib **out, ts_error *err) {
    if (out) *out = NULL;
    if (!model || !out) return ts_api_fail(err, NULL, TS_ERR_INVALID_ARG, "ts_calib_begin: %s is NULL", model ? "out" : "model");
    ts_mdl *m = model->mdl;
    if (!m || !m->host_w) return ts_api_fail(err, NULL, TS_ERR_INVALID_ARG, "calibration needs a model with weights (not vocab_only)");
    const int nl = m->hp.n_layer;
    ts_calib *c = calloc(1, sizeof *c);
    if (c) {
        c->model = model;
        c->n_layer = nl;
        c->n_in = calloc((size_t)nl * TS_CLIP_N_IN, sizeof *c->n_in);
        c->off = calloc((size_t)nl * TS_CLIP_N_IN, sizeof *c->off);
    }
    if (!c || !c->n_in || !c->off) {
        ts_calib_free(c);
        return ts_api_fail(err, NULL, TS_ERR_NO_MEMORY, "out of memory");
    }
    for (int l = 0; l < nl; l++) {
        const ts_layer *L = &m->layers[l];
        if (!L->w_gate.data && !L->w_gate.packed) {
            ts_calib_free(c);
            return ts_api_fail(err, NULL, TS_ERR_UNSUPPORTED, "calibration: layer %d has no dense FFN (MoE blocks are not calibrated yet)", l);
        }
        int64_t *n = c->n_in + (size_t)l * TS_CLIP_N_IN;
        n[TS_CLIP_IN_ATTN] = L->wq.n_in, n[TS_CLIP_IN_O] = L->wo.n_in;
        n[TS_CLIP_IN_FFN] = L->w_gate.n_in, n[TS_CLIP_IN_DOWN] = L->w_down.n_in;
        const uint64_t b = ts_rt_clip_offsets(n, c->off + (size_t)l * TS_CLIP_N_IN);
        if (b > c->stride) c->stride = b;
        for (int i = 0; i < TS_CLIP_N_IN; i++) c->chan_total += n[i];
    }
    c->stride = (c->stride + 63) & ~(uint64_t)63;
    if (!(c->records = aligned_alloc(64, (size_t)c->stride * (size_t)nl))) {
        ts_calib_free(c);
        return ts_api_fail(err, NULL, TS_ERR_NO_MEMORY, "out of memory");
    }
    memset(c->records, 0, (size_t)c->stride * (size_t)nl);
    for (int l = 0; l < nl; l++)
        for (int i = 0; i < TS_CLIP_N_IN; i++) {
            ts_eng_clip *r = rec(c, l, i);
            r->flags = TS_CLIP_COLLECT;
            r->n_in = (uint32_t)c->n_in[(size_t)l * TS_CLIP_N_IN + i];
            r->layer = l, r->input = i;
        }
    ts_err e = {{0}};
    if (ts_rt_weights_set_calib(m->host_w, c->records, c->stride, &e)) {
        ts_calib_free(c);
        return ts_api_fail(err, NULL, TS_ERR_INVALID_ARG, "ts_calib_begin: %s (free the model's contexts and calibrations first)", e.msg);
    }
    c->attached = true;
    *out = c;
    return ts_api_ok(err);
}

ts_status ts_calib_end_chunk(ts_calib *c) {
    if (!c) return TS_ERR_INVALID_ARG;
    if (c->n_chunks == c->cap_chunks) {
        const int cap = c->cap_chunks ? 2 * c->cap_chunks : 16;
        float *s = realloc(c->samples, (size_t)cap * (size_t)c->chan_total * sizeof *s);
        if (!s) return TS_ERR_NO_MEMORY;
        c->samples = s, c->cap_chunks = cap;
    }
    float *dst = c->samples + (size_t)c->n_chunks * (size_t)c->chan_total;
    for (int l = 0; l < c->n_layer; l++)
        for (int i = 0; i < TS_CLIP_N_IN; i++) {
            ts_eng_clip *r = rec(c, l, i);
            float *cm = ts_eng_clip_chan_max(r);
            memcpy(dst, cm, (size_t)r->n_in * sizeof *dst);
            memset(cm, 0, (size_t)r->n_in * sizeof *cm);
            dst += r->n_in;
        }
    c->n_chunks++;
    return TS_OK;
}

ts_status ts_calib_write(ts_calib *c, float percentile, const char *path, ts_calib_input_stats *stats, ts_error *err) {
    if (!c || !path) return ts_api_fail(err, NULL, TS_ERR_INVALID_ARG, "ts_calib_write: %s is NULL", c ? "path" : "calib");
    if (!(percentile > 0 && percentile < 100))
        return ts_api_fail(err, NULL, TS_ERR_INVALID_ARG, "percentile %g: expected a value in (0, 100), e.g. 99.9", (double)percentile);
    if (c->n_chunks < 1) return ts_api_fail(err, NULL, TS_ERR_INVALID_ARG, "calibration: no chunk was evaluated (ts_calib_end_chunk)");
    ts_err e = {{0}};
    ts_rt_calib *rc = ts_rt_calib_new(c->n_layer, c->n_in, &e);
    if (!rc) return ts_api_fail(err, NULL, TS_ERR_NO_MEMORY, "%s", e.msg);
    rc->percentile = percentile;
    rc->chunks = (uint32_t)c->n_chunks;
    int64_t base = 0;
    for (int l = 0; l < c->n_layer; l++)
        for (int i = 0; i < TS_CLIP_N_IN; i++) {
            ts_eng_clip *r = rec(c, l, i);
            const size_t ci = (size_t)l * TS_CLIP_N_IN + (size_t)i;
            const uint32_t *hist = ts_eng_clip_hist(r);
            uint64_t total = 0, cum = 0;
            for (int b = 0; b < TS_CLIP_BINS; b++) total += hist[b];
            if (!l && !i) rc->tokens = (uint32_t)(r->n_tok < UINT32_MAX ? r->n_tok : UINT32_MAX);
            int b = 0;
            const double want = (double)percentile / 100.0 * (double)total;
            while (b < TS_CLIP_BINS - 1 && (double)(cum + hist[b]) < want) cum += hist[b++];
            cum += hist[b];
            rc->clip[ci] = total ? ts_eng_clip_bin_top(b) : 0.0f;
            rc->frac[ci] = total ? (float)((double)(total - cum) / (double)total) : 0.0f;
            int64_t hot = 0, stable = 0;
            for (uint32_t k = 0; k < r->n_in; k++) {
                int beyond = 0;
                for (int s = 0; s < c->n_chunks; s++)
                    beyond += c->samples[(size_t)s * (size_t)c->chan_total + (size_t)base + k] > rc->clip[ci];
                rc->hot[ci][k] = (float)beyond / (float)c->n_chunks;
                hot += beyond > 0;
                stable += 2 * beyond >= c->n_chunks;
            }
            if (stats) {
                stats[ci] = (ts_calib_input_stats){.layer = l, .input = i, .n_in = (int32_t)r->n_in,
                                                   .clip = rc->clip[ci], .frac_beyond = rc->frac[ci],
                                                   .hot_channels = (int32_t)hot, .stable_channels = (int32_t)stable};
                float amax = 0;
                for (int s = 0; s < c->n_chunks; s++)
                    for (uint32_t k = 0; k < r->n_in; k++) {
                        const float v = c->samples[(size_t)s * (size_t)c->chan_total + (size_t)base + k];
                        if (v > amax) amax = v;
                    }
                stats[ci].amax = amax;
            }
            base += r->n_in;
        }
    const int w = ts_rt_calib_write(rc, path, &e);
    ts_rt_calib_free(rc);
    if (w) return ts_api_fail(err, NULL, TS_ERR_IO, "%s", e.msg);
    return ts_api_ok(err);
}

ts_status ts_calib_edit(const char *in_path, const char *out_path, int32_t clip_layer, const float *importance,
                        ts_error *err) {
    if (!in_path || !out_path) return ts_api_fail(err, NULL, TS_ERR_INVALID_ARG, "ts_calib_edit: a path is NULL");
    ts_err e = {{0}};
    ts_rt_calib *c = ts_rt_calib_read(in_path, &e);
    if (!c) return ts_api_fail(err, NULL, TS_ERR_INVALID_ARG, "%s", e.msg);
    ts_status st = TS_OK;
    if (clip_layer >= c->n_layer) {
        st = ts_api_fail(err, NULL, TS_ERR_INVALID_ARG, "layer %d: the calibration has %d", (int)clip_layer, c->n_layer);
        goto done;
    }
    if (clip_layer >= 0) c->shadow[clip_layer] = 0.0f;
    if (importance) {
        if (!c->importance && !(c->importance = malloc((size_t)c->n_layer * sizeof(float)))) {
            st = ts_api_fail(err, NULL, TS_ERR_NO_MEMORY, "out of memory");
            goto done;
        }
        memcpy(c->importance, importance, (size_t)c->n_layer * sizeof(float));
    }
    if (ts_rt_calib_write(c, out_path, &e)) st = ts_api_fail(err, NULL, TS_ERR_IO, "%s", e.msg);
    else st = ts_api_ok(err);
done:
    ts_rt_calib_free(c);
    return st;
}
