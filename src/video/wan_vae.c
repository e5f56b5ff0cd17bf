/* wan_vae.c - the Wan2.1 VAE decoder (wan_vae.h). */
#include "video/wan_vae.h"
#include "video/vmem.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/threadpool.h"
#include "engine/cpu/cpu_engine.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

#define MAX_CONVS 64
#define MAX_GRAPHS 32

/* A convolution as a matmul over im2col rows. kt: 1, or 3 (causal in
 * time); kk: 1 or 3 (spatial, zero padding kk / 2). level: the spatial
 * scale it runs at (resolution = latent << level). */
typedef struct vconv {
    char name[64];
    int cin, cout, kt, kk, level;
    float *w; /* [cout][kt * kk * kk * cin], columns (time, row, column, channel) */
    float *b; /* [cout] */
} vconv;

typedef struct vres {
    int c1, c2, sc; /* conv ids (sc -1: identity) */
    float *g1, *g2; /* rms gammas [cin], [cout] */
} vres;

struct ts_wan_vae {
    ts_gguf *g;
    vconv conv[MAX_CONVS];
    int n_conv;
    int post, conv_in, head, qkv, proj;
    vres mid[2], up[12];
    int rs_time[3], rs_conv[3]; /* resamplers of stages 0..2 (time -1: 2-D only) */
    float *g_attn, *g_head;
    int z, c_mid;
    float mean[16], std[16];
};

/* ---- loading ----------------------------------------------------------- */

static float *load_f32(ts_wan_vae *v, const char *name, int64_t n, ts_err *err) {
    const ts_gguf_tensor *t = ts_gguf_find_tensor(v->g, name);
    if (!t) {
        ts_err_set(err, "missing tensor '%s' (not a Wan2.1 VAE file, or a variant tessera does not know)", name);
        return NULL;
    }
    if (t->n_elements != n) {
        ts_err_set(err, "tensor '%s' has %lld elements, expected %lld", name, (long long)t->n_elements, (long long)n);
        return NULL;
    }
    float *p = malloc((size_t)n * sizeof(float));
    if (!p) {
        ts_err_set(err, "out of memory");
        return NULL;
    }
    if (ts_dequant_row(t->type, t->data, p, n, err)) {
        free(p);
        ts_err_prefix(err, "tensor '%s'", name);
        return NULL;
    }
    return p;
}

/* Conv `prefix`.weight / .bias with cin input channels (checked against the
 * element count), the kernel kt x kk x kk; returns its id or -1. */
static int load_conv(ts_wan_vae *v, const char *prefix, int cin, int kt, int kk, int level, ts_err *err) {
    char wn[128], bn[128];
    snprintf(wn, sizeof wn, "%.100s.weight", prefix);
    snprintf(bn, sizeof bn, "%.100s.bias", prefix);
    const ts_gguf_tensor *bt = ts_gguf_find_tensor(v->g, bn), *wt = ts_gguf_find_tensor(v->g, wn);
    if (!bt || !wt)
        return ts_err_set(err, "missing tensor '%s' (not a Wan2.1 VAE file)", !bt ? bn : wn);
    const int64_t cout = bt->n_elements, k = (int64_t)kt * kk * kk;
    if (cout < 1 || cout > 65536 || wt->n_elements != cout * cin * k)
        return ts_err_set(err, "tensor '%s' has %lld elements: expected %lld outputs x %d inputs x %lld kernel taps",
                          wn, (long long)wt->n_elements, (long long)cout, cin, (long long)k);
    if (v->n_conv == MAX_CONVS)
        return ts_err_set(err, "too many convolutions");
    vconv *c = &v->conv[v->n_conv];
    snprintf(c->name, sizeof c->name, "%.63s", prefix);
    c->cin = cin, c->cout = (int)cout, c->kt = kt, c->kk = kk, c->level = level;
    float *raw = load_f32(v, wn, wt->n_elements, err);
    if (!raw || !(c->b = load_f32(v, bn, cout, err))) {
        free(raw);
        return -1;
    }
    const int64_t K = k * cin;
    if (!(c->w = aligned_alloc(64, ((size_t)(cout * K) * sizeof(float) + 63) & ~(size_t)63))) {
        free(raw);
        return ts_err_set(err, "out of memory");
    }
    /* [cout][cin][kt][kk][kk] -> [cout][kt][kk][kk][cin] */
    for (int64_t o = 0; o < cout; o++)
        for (int ci = 0; ci < cin; ci++)
            for (int64_t tap = 0; tap < k; tap++)
                c->w[o * K + tap * cin + ci] = raw[(o * cin + ci) * k + tap];
    free(raw);
    return v->n_conv++;
}

/* A residual block at `prefix` from cin channels; *cout gets its output. */
static int load_res(ts_wan_vae *v, const char *prefix, int cin, int level, vres *r, int *cout, ts_err *err) {
    char n[96];
    snprintf(n, sizeof n, "%s.residual.0.gamma", prefix);
    if (!(r->g1 = load_f32(v, n, cin, err)))
        return -1;
    snprintf(n, sizeof n, "%s.residual.2", prefix);
    if ((r->c1 = load_conv(v, n, cin, 3, 3, level, err)) < 0)
        return -1;
    const int co = v->conv[r->c1].cout;
    snprintf(n, sizeof n, "%s.residual.3.gamma", prefix);
    if (!(r->g2 = load_f32(v, n, co, err)))
        return -1;
    snprintf(n, sizeof n, "%s.residual.6", prefix);
    if ((r->c2 = load_conv(v, n, co, 3, 3, level, err)) < 0)
        return -1;
    if (v->conv[r->c2].cout != co)
        return ts_err_set(err, "%s.residual.6 maps to %d channels, expected %d", prefix, v->conv[r->c2].cout, co);
    snprintf(n, sizeof n, "%s.shortcut.weight", prefix);
    r->sc = -1;
    if (ts_gguf_find_tensor(v->g, n)) {
        snprintf(n, sizeof n, "%s.shortcut", prefix);
        if ((r->sc = load_conv(v, n, cin, 1, 1, level, err)) < 0)
            return -1;
        if (v->conv[r->sc].cout != co)
            return ts_err_set(err, "%s.shortcut maps to %d channels, expected %d", prefix, v->conv[r->sc].cout, co);
    } else if (co != cin) {
        return ts_err_set(err, "%s changes %d to %d channels but has no shortcut", prefix, cin, co);
    }
    *cout = co;
    return 0;
}

static const float wan21_mean[16] = {-0.7571f, -0.7089f, -0.9113f, 0.1075f,  -0.1745f, 0.9653f,  -0.1517f, 1.5508f,
                                     0.4134f,  -0.0715f, 0.5517f,  -0.3632f, -0.1922f, -0.9497f, 0.2503f,  -0.2921f};
static const float wan21_std[16] = {2.8184f, 1.4541f, 2.3275f, 2.6558f, 1.2196f, 1.7708f, 2.6052f, 2.0743f,
                                    3.2687f, 2.1526f, 2.8652f, 1.5579f, 1.6382f, 1.1253f, 2.8251f, 1.9160f};

static int load_stats(ts_wan_vae *v, const char *key, const float *def, float *out, ts_err *err) {
    const ts_gguf_value *a = ts_gguf_find(v->g, key);
    if (!a) {
        memcpy(out, def, 16 * sizeof(float));
        return 0;
    }
    if (a->type != TS_GGUF_ARRAY || a->arr.n != (uint64_t)v->z || !a->arr.data)
        return ts_err_set(err, "%s must be an array of %d numbers", key, v->z);
    for (int i = 0; i < v->z; i++) {
        out[i] = (float)ts_gguf_arr_f64(a, (uint64_t)i);
        if (!isfinite(out[i]))
            return ts_err_set(err, "%s[%d] is not finite", key, i);
    }
    return 0;
}

ts_wan_vae *ts_wan_vae_open(const char *path, ts_err *err) {
    ts_wan_vae *v = calloc(1, sizeof *v);
    if (!v) {
        ts_err_set(err, "out of memory");
        return NULL;
    }
    if (!(v->g = ts_gguf_open(path, err))) { /* its message names the file */
        ts_wan_vae_close(v);
        return NULL;
    }
    const ts_gguf_tensor *pb = ts_gguf_find_tensor(v->g, "conv2.bias");
    if (!pb || pb->n_elements != 16) {
        ts_err_set(err, "%s (the post-quant conv of a Wan2.1 VAE with 16 latent channels)",
                   pb ? "conv2.bias has the wrong size" : "missing tensor 'conv2.bias'");
        goto fail;
    }
    v->z = 16;
    if ((v->post = load_conv(v, "conv2", 16, 1, 1, 0, err)) < 0 || v->conv[v->post].cout != 16 ||
        (v->conv_in = load_conv(v, "decoder.conv1", 16, 3, 3, 0, err)) < 0)
        goto fail;
    int c = v->c_mid = v->conv[v->conv_in].cout;
    if (load_res(v, "decoder.middle.0", c, 0, &v->mid[0], &c, err))
        goto fail;
    if (!(v->g_attn = load_f32(v, "decoder.middle.1.norm.gamma", c, err)) ||
        (v->qkv = load_conv(v, "decoder.middle.1.to_qkv", c, 1, 1, 0, err)) < 0 ||
        (v->proj = load_conv(v, "decoder.middle.1.proj", c, 1, 1, 0, err)) < 0)
        goto fail;
    if (v->conv[v->qkv].cout != 3 * c || v->conv[v->proj].cout != c) {
        ts_err_set(err, "decoder.middle.1: to_qkv / proj do not fit %d channels", c);
        goto fail;
    }
    if (load_res(v, "decoder.middle.2", c, 0, &v->mid[1], &c, err))
        goto fail;
    int level = 0;
    for (int s = 0; s < 4; s++) {
        for (int k = 0; k < 3; k++) {
            char n[64];
            snprintf(n, sizeof n, "decoder.upsamples.%d", 4 * s + k);
            if (load_res(v, n, c, level, &v->up[3 * s + k], &c, err))
                goto fail;
        }
        if (s == 3)
            break;
        char n[96];
        snprintf(n, sizeof n, "decoder.upsamples.%d.time_conv.weight", 4 * s + 3);
        v->rs_time[s] = -1;
        if (ts_gguf_find_tensor(v->g, n)) {
            snprintf(n, sizeof n, "decoder.upsamples.%d.time_conv", 4 * s + 3);
            if ((v->rs_time[s] = load_conv(v, n, c, 3, 1, level, err)) < 0)
                goto fail;
            if (v->conv[v->rs_time[s]].cout != 2 * c) {
                ts_err_set(err, "%s maps to %d channels, expected %d", n, v->conv[v->rs_time[s]].cout, 2 * c);
                goto fail;
            }
        }
        snprintf(n, sizeof n, "decoder.upsamples.%d.resample.1", 4 * s + 3);
        if ((v->rs_conv[s] = load_conv(v, n, c, 1, 3, level + 1, err)) < 0)
            goto fail;
        c = v->conv[v->rs_conv[s]].cout;
        level++;
    }
    if (level != 3) {
        ts_err_set(err, "the decoder upsamples %d times, Wan2.1's 3", level);
        goto fail;
    }
    if (!(v->g_head = load_f32(v, "decoder.head.0.gamma", c, err)) ||
        (v->head = load_conv(v, "decoder.head.2", c, 3, 3, 3, err)) < 0)
        goto fail;
    if (v->conv[v->head].cout != 3) {
        ts_err_set(err, "decoder.head.2 maps to %d channels, expected 3 (RGB)", v->conv[v->head].cout);
        goto fail;
    }
    if (load_stats(v, "wan_vae.latents_mean", wan21_mean, v->mean, err) ||
        load_stats(v, "wan_vae.latents_std", wan21_std, v->std, err))
        goto fail;
    return v;
fail:
    ts_err_prefix(err, "%s", path);
    ts_wan_vae_close(v);
    return NULL;
}

void ts_wan_vae_close(ts_wan_vae *v) {
    if (!v)
        return;
    for (int i = 0; i < v->n_conv; i++)
        free(v->conv[i].w), free(v->conv[i].b);
    for (int i = 0; i < 2; i++)
        free(v->mid[i].g1), free(v->mid[i].g2);
    for (int i = 0; i < 12; i++)
        free(v->up[i].g1), free(v->up[i].g2);
    free(v->g_attn);
    free(v->g_head);
    ts_gguf_close(v->g);
    free(v);
}

int ts_wan_vae_z_dim(const ts_wan_vae *v) { return v->z; }

void ts_wan_vae_denormalize(const ts_wan_vae *v, float *x, int64_t n) {
    for (int c = 0; c < v->z; c++)
        for (int64_t i = 0; i < n; i++)
            x[(int64_t)c * n + i] = x[(int64_t)c * n + i] * v->std[c] + v->mean[c];
}

/* ---- a run -------------------------------------------------------------- */

typedef struct conv_rt {
    ts_eng_buf *wbuf, *bbuf;
    ts_eng_graph *g; /* shared by the convs of one shape */
    float *cache;    /* kt == 3: [2][H][W][cin], the last input frames */
    int n_cache;     /* frames held (0 .. 2) */
    int rep;         /* a resampler's time_conv: 0 first chunk, 1 the "Rep" chunk, 2 after */
} conv_rt;

struct ts_wan_vae_run {
    ts_wan_vae *v;
    ts_engine *e;
    ts_eng_queue *q;
    int T, h, w;
    conv_rt rt[MAX_CONVS];
    struct {
        int64_t n_in, n_out;
        ts_eng_graph *g;
    } graphs[MAX_GRAPHS];
    int n_graphs;
    float *buf[4]; /* X, T1, T2, T3: [<= 4 frames][H][W][C] of the largest level */
    size_t buf_floats;
    float *col, *out; /* [TILE][max K], [TILE][max cout] */
    int64_t max_k, max_cout;
    float *attn[5]; /* XN, Q, K, V, ATT: [h w][c_mid] */
    ts_eng_buf *mbuf[4], *mcol, *mout, *mattn[5];
    ts_eng_graph *g_attn;
    ts_threadpool *pool; /* the host's part: im2col, norms */
    uint64_t bytes;
    ts_wan_vae_stats st;
};

static float *map_alloc(ts_wan_vae_run *r, size_t floats, ts_eng_buf **b, ts_err *err) {
    float *p = ts_vm_map_alloc(r->e, floats * sizeof(float), b, err);
    if (p)
        r->bytes += (floats * sizeof(float) + 63) & ~(size_t)63;
    return p;
}

static ts_eng_graph *conv_graph(ts_wan_vae_run *r, int64_t n_in, int64_t n_out, ts_err *err) {
    for (int i = 0; i < r->n_graphs; i++)
        if (r->graphs[i].n_in == n_in && r->graphs[i].n_out == n_out)
            return r->graphs[i].g;
    if (r->n_graphs == MAX_GRAPHS) {
        ts_err_set(err, "too many convolution shapes");
        return NULL;
    }
    /* slots: 0 weights, 1 im2col rows, 2 output rows, 3 bias */
    const ts_eng_node nd[2] = {
        {.op = TS_OP_MATMUL,
         .matmul = {.w = TS_ENG_REF(0, 0), .x = TS_ENG_REF(1, 0), .y = TS_ENG_REF(2, 0), .n_in = n_in, .n_out = n_out}},
        {.op = TS_OP_ADD_ROW, .add = {.y = TS_ENG_REF(2, 0), .x = TS_ENG_REF(3, 0), .n = n_out}},
    };
    ts_eng_graph *g = ts_eng_graph_new(r->e, nd, 2, 4, TS_VAE_TILE, err);
    if (g)
        r->graphs[r->n_graphs].n_in = n_in, r->graphs[r->n_graphs].n_out = n_out, r->graphs[r->n_graphs++].g = g;
    return g;
}

ts_wan_vae_run *ts_wan_vae_run_new(ts_wan_vae *v, const char *engine, int n_threads, int T, int h, int w,
                                   ts_err *err) {
    if (T < 1 || h < 1 || w < 1 || T > 4096 || h > 4096 || w > 4096) {
        ts_err_set(err, "vae: latent grid %dx%dx%d out of range", T, h, w);
        return NULL;
    }
    ts_wan_vae_run *r = calloc(1, sizeof *r);
    if (!r) {
        ts_err_set(err, "out of memory");
        return NULL;
    }
    r->v = v, r->T = T, r->h = h, r->w = w;
    const ts_eng_open_params op = {.threads = n_threads > 0 ? n_threads : 1};
    /* the host's part and the cpu engine share one pool (two would spin
     * against each other between the alternating im2col and matmuls) */
    if (!(r->pool = ts_threadpool_new(op.threads, err)))
        goto fail;
    r->e = !engine || !strcmp(engine, "cpu") ? ts_eng_cpu_open_pool(r->pool, false, err)
                                             : ts_eng_open_ex(engine, &op, err);
    if (!r->e || !(r->q = ts_eng_queue_new(r->e, err)))
        goto fail;
    /* the largest activation: 4 frames of any conv's level at its widest
     * side (a time_conv's 2C over 2 frames counts the same) */
    for (int i = 0; i < v->n_conv; i++) {
        const vconv *c = &v->conv[i];
        const size_t hw = (size_t)(h << c->level) * (size_t)(w << c->level);
        const size_t f = 4 * hw * (size_t)(c->cin > c->cout ? c->cin : c->cout);
        if (f > r->buf_floats)
            r->buf_floats = f;
        const int64_t K = (int64_t)c->kt * c->kk * c->kk * c->cin;
        if (K > r->max_k)
            r->max_k = K;
        if (c->cout > r->max_cout)
            r->max_cout = c->cout;
    }
    for (int i = 0; i < 4; i++)
        if (!(r->buf[i] = map_alloc(r, r->buf_floats, &r->mbuf[i], err)))
            goto fail;
    if (!(r->col = map_alloc(r, (size_t)TS_VAE_TILE * (size_t)r->max_k, &r->mcol, err)) ||
        !(r->out = map_alloc(r, (size_t)TS_VAE_TILE * (size_t)r->max_cout, &r->mout, err)))
        goto fail;
    const size_t hw0 = (size_t)h * (size_t)w;
    for (int i = 0; i < 5; i++)
        if (!(r->attn[i] = map_alloc(r, hw0 * (size_t)v->c_mid, &r->mattn[i], err)))
            goto fail;
    for (int i = 0; i < v->n_conv; i++) {
        const vconv *c = &v->conv[i];
        conv_rt *t = &r->rt[i];
        const int64_t K = (int64_t)c->kt * c->kk * c->kk * c->cin;
        if (!(t->wbuf = ts_eng_buf_map(r->e, c->w, ((size_t)(c->cout * K) * sizeof(float) + 63) & ~(size_t)63, err)) ||
            !(t->bbuf = ts_eng_buf_map(r->e, c->b, (size_t)c->cout * sizeof(float), err)) ||
            !(t->g = conv_graph(r, K, c->cout, err)))
            goto fail;
        if (c->kt == 3) {
            const size_t n = 2 * (size_t)(h << c->level) * (size_t)(w << c->level) * (size_t)c->cin;
            if (!(t->cache = calloc(n, sizeof(float)))) {
                ts_err_set(err, "out of memory (the causal caches)");
                goto fail;
            }
            r->bytes += n * sizeof(float);
        }
    }
    /* the middle attention over one frame: slots 0-2 q/k/v weights, 3 XN,
     * 4 Q, 5 K, 6 V, 7 ATT, 8 proj weights, 9 the output rows, 10 the qkv
     * bias, 11 the proj bias, 12 the residual */
    const int C = v->c_mid;
#define R(s) TS_ENG_REF((s), 0)
    const ts_eng_node nd[] = {
        {.op = TS_OP_MATMUL, .matmul = {.w = R(0), .x = R(3), .y = R(4), .n_in = C, .n_out = C}},
        {.op = TS_OP_MATMUL, .matmul = {.w = R(1), .x = R(3), .y = R(5), .n_in = C, .n_out = C}},
        {.op = TS_OP_MATMUL, .matmul = {.w = R(2), .x = R(3), .y = R(6), .n_in = C, .n_out = C}},
        {.op = TS_OP_ADD_ROW, .add = {.y = R(4), .x = TS_ENG_REF(10, 0), .n = C}},
        {.op = TS_OP_ADD_ROW, .add = {.y = R(5), .x = TS_ENG_REF(10, (uint64_t)C * 4), .n = C}},
        {.op = TS_OP_ADD_ROW, .add = {.y = R(6), .x = TS_ENG_REF(10, (uint64_t)C * 8), .n = C}},
        {.op = TS_OP_CROSS_ATTN,
         .xattn = {.q = R(4), .k = R(5), .v = R(6), .out = R(7), .n_head = 1, .n_head_kv = 1, .head_dim = C,
                   .n_kv = (int32_t)hw0, .scale = (float)(1.0 / sqrt((double)C)), .fast = true}},
        {.op = TS_OP_MATMUL, .matmul = {.w = R(8), .x = R(7), .y = R(9), .n_in = C, .n_out = C}},
        {.op = TS_OP_ADD_ROW, .add = {.y = R(9), .x = R(11), .n = C}},
        {.op = TS_OP_ADD, .add = {.y = R(12), .x = R(9), .n = C}},
    };
#undef R
    if (hw0 > (1u << 24) || !(r->g_attn = ts_eng_graph_new(r->e, nd, (int)(sizeof nd / sizeof nd[0]), 13, (int)hw0, err)))
        goto fail;
    return r;
fail:
    ts_err_prefix(err, "vae");
    ts_wan_vae_run_free(r);
    return NULL;
}

void ts_wan_vae_run_free(ts_wan_vae_run *r) {
    if (!r)
        return;
    if (r->q)
        ts_eng_queue_finish(r->q, NULL);
    ts_eng_graph_free(r->g_attn);
    for (int i = 0; i < r->n_graphs; i++)
        ts_eng_graph_free(r->graphs[i].g);
    for (int i = 0; i < MAX_CONVS; i++) {
        ts_eng_buf_free(r->rt[i].wbuf);
        ts_eng_buf_free(r->rt[i].bbuf);
        free(r->rt[i].cache);
    }
    for (int i = 0; i < 4; i++)
        ts_eng_buf_free(r->mbuf[i]), free(r->buf[i]);
    for (int i = 0; i < 5; i++)
        ts_eng_buf_free(r->mattn[i]), free(r->attn[i]);
    ts_eng_buf_free(r->mcol), free(r->col);
    ts_eng_buf_free(r->mout), free(r->out);
    ts_eng_queue_free(r->q);
    ts_eng_close(r->e);
    ts_threadpool_free(r->pool);
    free(r);
}

uint64_t ts_wan_vae_run_bytes(const ts_wan_vae_run *r) { return r->bytes; }
void ts_wan_vae_run_stats(const ts_wan_vae_run *r, ts_wan_vae_stats *out) { *out = r->st; }

/* ---- the decoder's pieces ----------------------------------------------- */

/* x / max(|x|, 1e-12) sqrt(C) gamma per pixel (F.normalize over channels),
 * then SiLU when silu; n pixels of C channels, in place or into y; pixels
 * split over pool. */
typedef struct {
    float *y;
    const float *x, *gamma;
    int C;
    bool silu;
} rms_job;

static void rms_rows(void *ctx, int64_t p0, int64_t p1, int tid) {
    (void)tid;
    const rms_job *j = ctx;
    const int C = j->C;
    const float sc = sqrtf((float)C);
    for (int64_t p = p0; p < p1; p++) {
        const float *xp = j->x + p * C;
        float *yp = j->y + p * C;
        double ss = 0;
        for (int c = 0; c < C; c++)
            ss += (double)xp[c] * xp[c];
        const float nrm = (float)sqrt(ss), inv = 1.0f / (nrm > 1e-12f ? nrm : 1e-12f);
        for (int c = 0; c < C; c++) {
            const float v = xp[c] * inv * sc * j->gamma[c];
            yp[c] = j->silu ? v / (1.0f + expf(-v)) : v;
        }
    }
}

static void rms(ts_threadpool *pool, float *y, const float *x, int64_t n, int C, const float *gamma, bool silu) {
    rms_job j = {y, x, gamma, C, silu};
    ts_parallel_for(pool, n, rms_rows, &j);
}

/* im2col rows [i0, i1) of a tile: output pixel p0 + i's kt x kk x kk
 * taps of cin channels (zeros outside the frame or for a NULL frame). */
typedef struct {
    float *col;
    const float *const *frames; /* the output frame's first input frame */
    const vconv *c;
    int64_t K, p0;
    int H, W, Wo, Ho;
    bool up;
} im2col_job;

static void im2col_rows(void *ctx, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    const im2col_job *j = ctx;
    const vconv *c = j->c;
    const int pad = c->kk / 2, cin = c->cin;
    for (int64_t i = i0; i < i1; i++) {
        const int y = (int)((j->p0 + i) / j->Wo), x = (int)((j->p0 + i) % j->Wo);
        float *row = j->col + i * j->K;
        for (int a = 0; a < c->kt; a++) {
            const float *src = j->frames[a];
            for (int dy = 0; dy < c->kk; dy++)
                for (int dx = 0; dx < c->kk; dx++, row += cin) {
                    const int sy = y + dy - pad, sx = x + dx - pad;
                    if (!src || sy < 0 || sx < 0 || sy >= j->Ho || sx >= j->Wo) {
                        memset(row, 0, (size_t)cin * sizeof(float));
                        continue;
                    }
                    const int iy = j->up ? sy / 2 : sy, ix = j->up ? sx / 2 : sx;
                    memcpy(row, src + ((int64_t)iy * j->W + ix) * cin, (size_t)cin * sizeof(float));
                }
        }
    }
}

/* Convolution cid over T output frames. frames[t + a] (a < kt) are the
 * input frames of output t (NULL: zeros), each [H][W][cin] (H, W the input
 * size; up: read through a nearest 2x upsampling, the output is 2H x 2W).
 * out [T][Ho][Wo][cout]. */
static int conv_frames(ts_wan_vae_run *r, int cid, const float *const *frames, int T, int H, int W, bool up,
                       float *out, ts_err *err) {
    const vconv *c = &r->v->conv[cid];
    const conv_rt *t = &r->rt[cid];
    const int Ho = up ? 2 * H : H, Wo = up ? 2 * W : W, cin = c->cin;
    const int64_t K = (int64_t)c->kt * c->kk * c->kk * cin, npx = (int64_t)Ho * Wo;
    ts_eng_bind b[4] = {
        {.buf = t->wbuf, .wtype = TS_TYPE_F32, .row_bytes = (uint64_t)K * 4, .layout = TS_WL_ROWS},
        {.buf = r->mcol},
        {.buf = r->mout},
        {.buf = t->bbuf},
    };
    for (int f = 0; f < T; f++) {
        float *of = out + (int64_t)f * npx * c->cout;
        for (int64_t p0 = 0; p0 < npx; p0 += TS_VAE_TILE) {
            const int n = (int)(npx - p0 < TS_VAE_TILE ? npx - p0 : TS_VAE_TILE);
            im2col_job j = {r->col, frames + f, c, K, p0, H, W, Wo, Ho, up};
            ts_parallel_for(r->pool, n, im2col_rows, &j);
            const uint64_t t0 = ts_now_ns();
            if (ts_eng_enqueue_graph(r->q, t->g, b, 4, 0, n, err) || ts_eng_queue_finish(r->q, err))
                return ts_err_prefix(err, "vae: %s", c->name);
            r->st.matmul_ns += ts_now_ns() - t0;
            memcpy(of + p0 * c->cout, r->out, (size_t)n * (size_t)c->cout * sizeof(float));
        }
        r->st.flops += 2.0 * (double)npx * (double)K * c->cout;
    }
    return 0;
}

/* The causal convolution cid over x [T][H][W][cin] with its cache (zeros
 * before the first frame), then the cache updated as diffusers does: the
 * last two input frames, or the cache's last frame and the one input frame,
 * or that frame alone at the start. */
static int causal(ts_wan_vae_run *r, int cid, const float *x, int T, int H, int W, float *out, ts_err *err) {
    const vconv *c = &r->v->conv[cid];
    conv_rt *t = &r->rt[cid];
    const size_t fr = (size_t)H * (size_t)W * (size_t)c->cin;
    const float *frames[2 + 4] = {NULL, NULL};
    if (c->kt == 1) {
        for (int i = 0; i < T; i++)
            frames[i] = x + i * fr;
    } else {
        /* history: the cache's frames right-aligned in two slots */
        for (int i = 0; i < t->n_cache; i++)
            frames[2 - t->n_cache + i] = t->cache + i * fr;
        for (int i = 0; i < T; i++)
            frames[2 + i] = x + i * fr;
    }
    if (conv_frames(r, cid, frames, T, H, W, false, out, err))
        return -1;
    if (c->kt == 3) {
        if (T >= 2) {
            memcpy(t->cache, x + (size_t)(T - 2) * fr, 2 * fr * sizeof(float));
            t->n_cache = 2;
        } else if (t->n_cache >= 1) {
            memmove(t->cache, t->cache + (size_t)(t->n_cache - 1) * fr, fr * sizeof(float));
            memcpy(t->cache + fr, x, fr * sizeof(float));
            t->n_cache = 2;
        } else {
            memcpy(t->cache, x, fr * sizeof(float));
            t->n_cache = 1;
        }
    }
    return 0;
}

/* A residual block over x [T][H][W][cin] in buf 0; the result in buf 0. */
static int residual(ts_wan_vae_run *r, const vres *rb, int T, int H, int W, ts_err *err) {
    const ts_wan_vae *v = r->v;
    const int cin = v->conv[rb->c1].cin, co = v->conv[rb->c1].cout;
    const int64_t npx = (int64_t)T * H * W;
    float *x = r->buf[0], *a = r->buf[1], *b = r->buf[2], *h = r->buf[3];
    if (rb->sc >= 0 && causal(r, rb->sc, x, T, H, W, h, err))
        return -1;
    rms(r->pool, a, x, npx, cin, rb->g1, true);
    if (causal(r, rb->c1, a, T, H, W, b, err))
        return -1;
    rms(r->pool, b, b, npx, co, rb->g2, true);
    if (causal(r, rb->c2, b, T, H, W, a, err))
        return -1;
    const float *sc = rb->sc >= 0 ? h : x;
    for (int64_t i = 0; i < npx * co; i++)
        x[i] = a[i] + sc[i];
    return 0;
}

/* The middle attention on each frame of buf 0 ([T][h][w][C]), in place. */
static int attention(ts_wan_vae_run *r, int T, ts_err *err) {
    const ts_wan_vae *v = r->v;
    const int C = v->c_mid;
    const int64_t n = (int64_t)r->h * r->w;
    const conv_rt *q = &r->rt[v->qkv], *p = &r->rt[v->proj];
    for (int f = 0; f < T; f++) {
        rms(r->pool, r->attn[0], r->buf[0] + f * n * C, n, C, v->g_attn, false);
        ts_eng_bind b[13];
        const ts_eng_bind wq = {.buf = q->wbuf, .wtype = TS_TYPE_F32, .row_bytes = (uint64_t)C * 4, .layout = TS_WL_ROWS};
        b[0] = wq, b[1] = wq, b[2] = wq;
        b[1].off = (uint64_t)C * C * 4, b[2].off = (uint64_t)2 * C * C * 4;
        for (int i = 0; i < 5; i++)
            b[3 + i] = (ts_eng_bind){.buf = r->mattn[i]};
        b[8] = (ts_eng_bind){.buf = p->wbuf, .wtype = TS_TYPE_F32, .row_bytes = (uint64_t)C * 4, .layout = TS_WL_ROWS};
        /* the projection's rows go to Q's buffer: Q is read by the attention
         * node before them */
        b[9] = (ts_eng_bind){.buf = r->mattn[1]};
        b[10] = (ts_eng_bind){.buf = q->bbuf};
        b[11] = (ts_eng_bind){.buf = p->bbuf};
        b[12] = (ts_eng_bind){.buf = r->mbuf[0], .off = (uint64_t)(f * n * C) * 4};
        const uint64_t t0 = ts_now_ns();
        if (ts_eng_enqueue_graph(r->q, r->g_attn, b, 13, 0, (int)n, err) || ts_eng_queue_finish(r->q, err))
            return ts_err_prefix(err, "vae: middle attention");
        r->st.matmul_ns += ts_now_ns() - t0;
        r->st.flops += 2.0 * (double)n * C * 4 * C + 4.0 * (double)n * n * C;
    }
    return 0;
}

/* A resampler of stage s over buf 0 ([*T][H][W][C]): the time doubling (a
 * 3-D one), then nearest 2x and the 3x3 conv. *T is updated. */
static int resample(ts_wan_vae_run *r, int s, int *T, int H, int W, ts_err *err) {
    const ts_wan_vae *v = r->v;
    const int tc = v->rs_time[s];
    const int C = v->conv[v->rs_conv[s]].cin;
    const size_t fr = (size_t)H * W * C;
    if (tc >= 0) {
        conv_rt *t = &r->rt[tc];
        if (t->rep == 0) {
            t->rep = 1; /* the first chunk passes as it is */
        } else {
            /* history: zeros for the chunk after the first ("Rep"), then the cache */
            const float *frames[6] = {NULL, NULL};
            const float *x = r->buf[0];
            if (t->rep == 2)
                frames[0] = t->cache, frames[1] = t->cache + fr;
            for (int i = 0; i < *T; i++)
                frames[2 + i] = x + i * fr;
            if (conv_frames(r, tc, frames, *T, H, W, false, r->buf[1], err))
                return -1;
            /* the cache: the last two input frames (zeros before a lone one
             * after "Rep", the cache's last frame later) */
            if (*T >= 2) {
                memcpy(t->cache, x + (size_t)(*T - 2) * fr, 2 * fr * sizeof(float));
            } else if (t->rep == 1) {
                memset(t->cache, 0, fr * sizeof(float));
                memcpy(t->cache + fr, x, fr * sizeof(float));
            } else {
                memmove(t->cache, t->cache + fr, fr * sizeof(float));
                memcpy(t->cache + fr, x, fr * sizeof(float));
            }
            t->rep = 2;
            /* [T][px][2C] -> [2T][px][C]: frame 2i the first half of the channels */
            const size_t px = (size_t)H * W;
            for (int i = 0; i < *T; i++)
                for (int half = 0; half < 2; half++)
                    for (size_t p = 0; p < px; p++)
                        memcpy(r->buf[0] + ((size_t)(2 * i + half) * px + p) * C,
                               r->buf[1] + ((size_t)i * px + p) * 2 * C + (size_t)half * C, (size_t)C * sizeof(float));
            *T *= 2;
        }
    }
    const float *frames[4];
    for (int i = 0; i < *T; i++)
        frames[i] = r->buf[0] + i * fr;
    if (conv_frames(r, v->rs_conv[s], frames, *T, H, W, true, r->buf[1], err))
        return -1;
    const int co = v->conv[v->rs_conv[s]].cout;
    memcpy(r->buf[0], r->buf[1], (size_t)*T * 4 * H * W * co * sizeof(float));
    return 0;
}

int ts_wan_vae_decode(ts_wan_vae_run *r, const float *latents, float *frames, ts_wan_vae_progress progress,
                      void *user, ts_err *err) {
    const ts_wan_vae *v = r->v;
    const uint64_t t_start = ts_now_ns();
    const int h = r->h, w = r->w, z = v->z;
    const int64_t hw = (int64_t)h * w, HWo = hw * 64, n_out = 1 + 4 * (int64_t)(r->T - 1);
    /* a fresh stream: no cache */
    for (int i = 0; i < v->n_conv; i++)
        r->rt[i].n_cache = 0, r->rt[i].rep = 0;
    int64_t t_out = 0;
    for (int f = 0; f < r->T; f++) {
        /* the latent frame, channels last, through the post-quant conv */
        float *x = r->buf[1];
        for (int c = 0; c < z; c++)
            for (int64_t p = 0; p < hw; p++)
                x[p * z + c] = latents[((int64_t)c * r->T + f) * hw + p];
        if (causal(r, v->post, x, 1, h, w, r->buf[2], err) || causal(r, v->conv_in, r->buf[2], 1, h, w, r->buf[0], err))
            return -1;
        int T = 1, H = h, W = w;
        if (residual(r, &v->mid[0], T, H, W, err) || attention(r, T, err) || residual(r, &v->mid[1], T, H, W, err))
            return -1;
        for (int s = 0; s < 4; s++) {
            for (int k = 0; k < 3; k++)
                if (residual(r, &v->up[3 * s + k], T, H, W, err))
                    return -1;
            if (s < 3) {
                if (resample(r, s, &T, H, W, err))
                    return -1;
                H *= 2, W *= 2;
            }
        }
        const int C = v->conv[v->head].cin;
        rms(r->pool, r->buf[1], r->buf[0], (int64_t)T * H * W, C, v->g_head, true);
        if (causal(r, v->head, r->buf[1], T, H, W, r->buf[2], err))
            return -1;
        /* [T][H][W][3] -> frames [3][n_out][H][W], clamped */
        for (int t = 0; t < T && t_out + t < n_out; t++)
            for (int64_t p = 0; p < HWo; p++)
                for (int c = 0; c < 3; c++) {
                    const float val = r->buf[2][((int64_t)t * HWo + p) * 3 + c];
                    frames[((int64_t)c * n_out + t_out + t) * HWo + p] = val < -1.0f ? -1.0f : val > 1.0f ? 1.0f : val;
                }
        t_out += T;
        if (progress && !progress(f + 1, r->T, user))
            return ts_err_set(err, "vae: cancelled after latent frame %d of %d", f + 1, r->T);
    }
    r->st.frames_ns += ts_now_ns() - t_start;
    if (t_out != n_out)
        return ts_err_set(err, "vae: decoded %lld frames, expected %lld", (long long)t_out, (long long)n_out);
    return 0;
}
