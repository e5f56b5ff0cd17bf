/* umt5.c - the umT5 text encoder: weights from GGUF, its layers as engine
 * graphs (umt5.h). */
#include "video/umt5.h"
#include "video/vmem.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "engine/engine.h"
#include "kernels/ops.h"
#include "quant/quant.h"

#define ARCH "t5encoder"
#define MAX_DISTANCE 128 /* not in the file: llama.cpp's and transformers' value */

/* ---- weights ------------------------------------------------------------ */

typedef struct umt5_layer {
    ts_wmat q, k, v, o, gate, up, down; /* [n_out][n_in] rows as stored */
    const ts_gguf_tensor *attn_norm, *ffn_norm, *rel_b; /* rel_b NULL: layer 0's (T5) */
} umt5_layer;

struct ts_umt5 {
    ts_gguf *g;
    ts_umt5_config c;
    const ts_gguf_tensor *embd, *out_norm;
    size_t embd_row; /* bytes of one token_embd row */
    umt5_layer *layers;
    /* Every vector as f32, each entry padded to 16 floats: the output norm
     * at 0, then per layer (layer_stride floats apart, so that one graph
     * serves every layer with its arena binding displaced): attn_norm [d],
     * ffn_norm [d], the bias table [n_head][2 * max_distance + 1]. */
    float *vec;
    int64_t n_vec, layer0, layer_stride, off_ffn_norm, off_bias;
    uint64_t weight_bytes;
    int n_runs;
};

static int64_t pad16(int64_t n) { return (n + 15) & ~(int64_t)15; }

/* Tensor `name` of GGUF shape [ne0] (ne1 == 0) or [ne0, ne1], of a type
 * that dequantizes in rows of ne0; NULL with err (optional: NULL and no
 * error when absent). */
static const ts_gguf_tensor *need(const ts_umt5 *m, const char *name, int64_t ne0, int64_t ne1, bool optional,
                                  ts_err *err) {
    const ts_gguf_tensor *t = ts_gguf_find_tensor(m->g, name);
    if (!t) {
        if (!optional)
            ts_err_set(err, "missing tensor '%s' (not a T5/umT5 encoder file, or a variant tessera does not know)",
                       name);
        return NULL;
    }
    const bool ok = ne1 ? t->n_dims == 2 && t->ne[0] == ne0 && t->ne[1] == ne1 : t->n_dims == 1 && t->ne[0] == ne0;
    if (!ok) {
        char sh[96];
        ts_vm_fmt_shape(sh, sizeof sh, t);
        if (ne1)
            ts_err_set(err, "tensor '%s' has shape %s, expected [%lld, %lld]", name, sh, (long long)ne0,
                       (long long)ne1);
        else
            ts_err_set(err, "tensor '%s' has shape %s, expected [%lld]", name, sh, (long long)ne0);
        return NULL;
    }
    const ts_type_traits *tr = ts_type_info(t->type);
    if (!tr || !tr->can_dequant || !ts_row_size(t->type, ne0)) {
        ts_err_set(err, "tensor '%s': type %s cannot be read in rows of %lld", name, tr ? tr->name : "unknown",
                   (long long)ne0);
        return NULL;
    }
    return t;
}

static int mat(ts_umt5 *m, const char *name, int64_t n_in, int64_t n_out, ts_wmat *out, ts_err *err) {
    const ts_gguf_tensor *t = need(m, name, n_in, n_out, false, err);
    if (!t)
        return -1;
    *out = (ts_wmat){.type = t->type, .data = t->data, .n_in = n_in, .n_out = n_out,
                     .row_bytes = ts_row_size(t->type, n_in)};
    m->weight_bytes += t->nbytes;
    return 0;
}

/* n floats of tensor t (any type that dequantizes) at dst. */
static int vec_copy(ts_umt5 *m, const ts_gguf_tensor *t, float *dst, int64_t n, ts_err *err) {
    if (ts_dequant_row(t->type, t->data, dst, n, err))
        return ts_err_prefix(err, "tensor '%s'", t->name);
    m->weight_bytes += t->nbytes;
    return 0;
}

int32_t ts_umt5_bucket(int64_t rel, int32_t n_bucket, int32_t max_distance) {
    /* transformers' _relative_position_bucket, bidirectional, in its
     * float32 arithmetic: the truncation of the log bucket decides ties
     * (offsets 16, 32, 64 land exactly on bucket edges) */
    const int32_t half = n_bucket / 2, exact = half / 2;
    const int32_t b = rel > 0 ? half : 0;
    const uint64_t a = rel < 0 ? (uint64_t)0 - (uint64_t)rel : (uint64_t)rel; /* INT64_MIN too */
    if (a < (uint64_t)exact)
        return b + (int32_t)a;
    const float denom = (float)log((double)max_distance / (double)exact);
    const float r = logf((float)a / (float)exact) / denom * (float)(half - exact);
    const int64_t big = (int64_t)exact + (isfinite(r) && r < (float)half ? (int64_t)r : half);
    return b + (int32_t)(big < half - 1 ? big : half - 1);
}

static int get_dim(const ts_gguf *g, const char *key, bool required, uint32_t def, uint32_t lo, uint32_t hi,
                   int32_t *out, ts_err *err) {
    uint32_t v = def;
    const int rc = required ? (ts_gguf_get_u32(g, key, &v, err) ? -1 : 1) : ts_gguf_opt_u32(g, key, &v, err);
    if (rc < 0)
        return -1;
    if (v < lo || v > hi)
        return ts_err_set(err, "%s = %u out of range [%u, %u]", key, v, lo, hi);
    *out = (int32_t)v;
    return 0;
}

static int read_config(ts_umt5 *m, ts_err *err) {
    ts_umt5_config *c = &m->c;
    ts_gguf_str arch = {0};
    if (ts_gguf_opt_str(m->g, "general.architecture", &arch, err) < 0)
        return -1;
    if (arch.ptr && !(arch.len == strlen(ARCH) && !memcmp(arch.ptr, ARCH, arch.len)))
        return ts_err_set(err, "general.architecture is '%.*s', expected '" ARCH "' (a T5/umT5 encoder file)",
                          (int)(arch.len > 40 ? 40 : arch.len), arch.ptr);
    if (get_dim(m->g, ARCH ".embedding_length", true, 0, 1, 1u << 16, &c->d_model, err) ||
        get_dim(m->g, ARCH ".feed_forward_length", true, 0, 1, 1u << 18, &c->d_ff, err) ||
        get_dim(m->g, ARCH ".block_count", true, 0, 1, 256, &c->n_layer, err) ||
        get_dim(m->g, ARCH ".attention.head_count", true, 0, 1, 512, &c->n_head, err))
        return -1;
    const uint32_t dkv_def = c->d_model % c->n_head ? 0 : (uint32_t)(c->d_model / c->n_head);
    int32_t vlen = 0;
    if (get_dim(m->g, ARCH ".attention.key_length", !dkv_def, dkv_def, 1, 1024, &c->d_kv, err) ||
        get_dim(m->g, ARCH ".attention.value_length", false, (uint32_t)c->d_kv, 1, 1024, &vlen, err))
        return -1;
    if (vlen != c->d_kv)
        return ts_err_set(err, ARCH ".attention.value_length %d differs from key_length %d", vlen, c->d_kv);
    if (get_dim(m->g, ARCH ".attention.relative_buckets_count", false, 32, 4, 1024, &c->n_bucket, err) ||
        get_dim(m->g, ARCH ".context_length", false, 512, 1, 1u << 16, &c->n_ctx, err))
        return -1;
    c->max_distance = MAX_DISTANCE;
    if (c->n_bucket % 2 || c->n_bucket / 4 >= c->max_distance)
        return ts_err_set(err, ARCH ".attention.relative_buckets_count %d must be even and below 4 x %d",
                          c->n_bucket, c->max_distance);
    c->eps = 1e-6f;
    if (ts_gguf_opt_f32(m->g, ARCH ".attention.layer_norm_rms_epsilon", &c->eps, err) < 0)
        return -1;
    if (!(c->eps > 0.0f && c->eps < 1.0f))
        return ts_err_set(err, ARCH ".attention.layer_norm_rms_epsilon %g must be in (0, 1)", (double)c->eps);
    return 0;
}

ts_umt5 *ts_umt5_open(const char *path, ts_err *err) {
    ts_umt5 *m = calloc(1, sizeof *m);
    if (!m) {
        ts_err_set(err, "out of memory");
        return NULL;
    }
    float *rb = NULL;
    if (!(m->g = ts_gguf_open(path, err))) { /* its message names the file */
        ts_umt5_close(m);
        return NULL;
    }
    if (read_config(m, err))
        goto fail;
    ts_umt5_config *c = &m->c;
    const int64_t D = c->d_model, F = c->d_ff, I = (int64_t)c->n_head * c->d_kv, H = c->n_head;
    const int64_t NB = c->n_bucket, M = c->max_distance;
    /* every tensor checked before anything is sized from the metadata */
    /* token_embd: its row count is the vocabulary (at most 2^24) */
    const ts_gguf_tensor *te = ts_gguf_find_tensor(m->g, "token_embd.weight");
    const int64_t nv = te && te->n_dims == 2 && te->ne[1] >= 1 && te->ne[1] <= (1 << 24) ? te->ne[1] : 0;
    if (te && !nv) {
        char sh[96];
        ts_vm_fmt_shape(sh, sizeof sh, te);
        ts_err_set(err, "tensor 'token_embd.weight' has shape %s, expected [%lld, n_vocab <= 2^24]", sh, (long long)D);
        goto fail;
    }
    if (!(m->embd = need(m, "token_embd.weight", D, nv, false, err)))
        goto fail;
    c->n_vocab = (int32_t)m->embd->ne[1];
    m->embd_row = ts_row_size(m->embd->type, D);
    m->weight_bytes += m->embd->nbytes;
    if (!(m->out_norm = need(m, "enc.output_norm.weight", D, 0, false, err)))
        goto fail;
    if (!(m->layers = calloc((size_t)c->n_layer, sizeof *m->layers))) {
        ts_err_set(err, "out of memory");
        goto fail;
    }
    c->rel_bias_layers = 0;
    for (int l = 0; l < c->n_layer; l++) {
        umt5_layer *L = &m->layers[l];
        char n[96];
#define NAME(suffix) (snprintf(n, sizeof n, "enc.blk.%d." suffix ".weight", l), n)
        if (!(L->attn_norm = need(m, NAME("attn_norm"), D, 0, false, err)) ||
            !(L->ffn_norm = need(m, NAME("ffn_norm"), D, 0, false, err)))
            goto fail;
        L->rel_b = need(m, NAME("attn_rel_b"), H, NB, l > 0, err);
        if (!L->rel_b && (l == 0 || ts_gguf_find_tensor(m->g, n)))
            goto fail; /* layer 0's is required; a present one must have its shape */
        c->rel_bias_layers += L->rel_b != NULL;
        if (mat(m, NAME("attn_q"), D, I, &L->q, err) || mat(m, NAME("attn_k"), D, I, &L->k, err) ||
            mat(m, NAME("attn_v"), D, I, &L->v, err) || mat(m, NAME("attn_o"), I, D, &L->o, err) ||
            mat(m, NAME("ffn_gate"), D, F, &L->gate, err) || mat(m, NAME("ffn_up"), D, F, &L->up, err) ||
            mat(m, NAME("ffn_down"), F, D, &L->down, err))
            goto fail;
#undef NAME
    }
    /* the vector arena */
    const int64_t W = 2 * M + 1; /* bias table row: offsets -M .. M */
    m->off_ffn_norm = pad16(D);
    m->off_bias = 2 * pad16(D);
    m->layer0 = pad16(D);
    m->layer_stride = 2 * pad16(D) + pad16(H * W);
    m->n_vec = m->layer0 + (int64_t)c->n_layer * m->layer_stride;
    m->vec = aligned_alloc(64, (size_t)((m->n_vec * 4 + 63) & ~63));
    rb = malloc((size_t)(NB * H) * sizeof *rb);
    if (!m->vec || !rb) {
        ts_err_set(err, "out of memory");
        goto fail;
    }
    memset(m->vec, 0, (size_t)m->n_vec * 4);
    if (vec_copy(m, m->out_norm, m->vec, D, err))
        goto fail;
    /* bucket of each offset -M .. M; every offset beyond M has M's bucket
     * (the log bucket reaches the last one at max_distance) */
    int32_t bucket[2 * MAX_DISTANCE + 1];
    for (int64_t r = -M; r <= M; r++)
        bucket[r + M] = ts_umt5_bucket(r, c->n_bucket, c->max_distance);
    for (int l = 0; l < c->n_layer; l++) {
        const umt5_layer *L = &m->layers[l];
        float *base = m->vec + m->layer0 + (int64_t)l * m->layer_stride;
        if (vec_copy(m, L->attn_norm, base, D, err) || vec_copy(m, L->ffn_norm, base + m->off_ffn_norm, D, err))
            goto fail;
        float *tab = base + m->off_bias;
        if (!L->rel_b) { /* T5: layer 0's table */
            memcpy(tab, m->vec + m->layer0 + m->off_bias, (size_t)(H * W) * sizeof(float));
            continue;
        }
        /* rel_b [n_bucket][n_head] (transformers' embedding) -> [n_head][offset] */
        if (vec_copy(m, L->rel_b, rb, NB * H, err))
            goto fail;
        for (int64_t h = 0; h < H; h++)
            for (int64_t r = 0; r < W; r++)
                tab[h * W + r] = rb[(int64_t)bucket[r] * H + h];
    }
    free(rb);
    return m;
fail:
    free(rb);
    ts_err_prefix(err, "%s", path);
    ts_umt5_close(m);
    return NULL;
}

void ts_umt5_close(ts_umt5 *m) {
    if (!m)
        return;
    ts_gguf_close(m->g);
    free(m->layers);
    free(m->vec);
    free(m);
}

const ts_umt5_config *ts_umt5_cfg(const ts_umt5 *m) { return &m->c; }
const ts_gguf *ts_umt5_gguf(const ts_umt5 *m) { return m->g; }
uint64_t ts_umt5_weight_bytes(const ts_umt5 *m) { return m->weight_bytes; }

/* ---- a run: graphs over slots -------------------------------------------- */

enum {
    /* activations */
    S_X = 0, /* [W][d] the residual stream */
    S_XN,    /* [W][d] normed */
    S_Q, S_K, S_V, S_ATT, /* [W][n_head * d_kv] */
    S_O,     /* [W][d] attention / FFN output */
    S_G, S_U, /* [W][d_ff] gate, up */
    S_VEC,   /* the vector arena (norms, bias tables: at offsets) */
    /* a layer's matrices */
    S_WQ, S_WK, S_WV, S_WO, S_WG, S_WU, S_WD,
    S_COUNT
};

typedef ts_vm_placed placed;

struct ts_umt5_run {
    ts_umt5 *m;
    ts_engine *e;
    ts_eng_queue *q;
    int width;
    float *act[S_VEC];
    size_t act_bytes[S_VEC];
    ts_eng_buf *abuf[S_VEC];
    ts_eng_buf *vbuf, *fbuf; /* the vector arena; the whole file (rows kept as stored) */
    ts_vm_packs packs;       /* matrices repacked for the engine */
    ts_eng_graph *g_layer, *g_out;
    ts_eng_bindset **bs; /* [n_layer] */
    ts_eng_bind base[S_COUNT];
    ts_umt5_stats st;
};

static int place(ts_umt5_run *r, const ts_wmat *w, placed *out, ts_err *err) {
    return ts_vm_place(&r->packs, w, r->fbuf, ts_gguf_base(r->m->g), out, err);
}

static ts_eng_bind wbind(const placed *p) { return ts_vm_bind(p); }

static int alloc_act(ts_umt5_run *r, int s, size_t bytes, ts_err *err) {
    if (!(r->act[s] = ts_vm_map_alloc(r->e, bytes, &r->abuf[s], err)))
        return -1;
    r->act_bytes[s] = (bytes + 63) & ~(size_t)63;
    r->base[s] = (ts_eng_bind){.buf = r->abuf[s]};
    return 0;
}

#define R(s) TS_ENG_REF((s), 0)
#define V(off) TS_ENG_REF(S_VEC, (uint64_t)(off) * 4)
#define MM(ws, xs, ys, ni, no) \
    nd[k++] = (ts_eng_node) { .op = TS_OP_MATMUL, .matmul = {.w = R(ws), .x = R(xs), .y = R(ys), .n_in = (ni), .n_out = (no)} }
#define RMS(xs, ys, voff) \
    nd[k++] = (ts_eng_node) { .op = TS_OP_RMSNORM, \
                              .rmsnorm = {.x = R(xs), .y = R(ys), .w = V(voff), .n = D, .rows_per_tok = 1, .eps = c->eps} }

/* One layer, with layer 0's arena offsets: a layer binds S_VEC displaced by
 * its distance from layer 0 (every layer's entries are laid out alike). */
static int layer_nodes(const ts_umt5_run *r, ts_eng_node *nd) {
    const ts_umt5 *m = r->m;
    const ts_umt5_config *c = &m->c;
    const int64_t D = c->d_model, F = c->d_ff, I = (int64_t)c->n_head * c->d_kv, L0 = m->layer0;
    int k = 0;
    /* self-attention */
    RMS(S_X, S_XN, L0);
    MM(S_WQ, S_XN, S_Q, D, I);
    MM(S_WK, S_XN, S_K, D, I);
    MM(S_WV, S_XN, S_V, D, I);
    nd[k++] = (ts_eng_node){.op = TS_OP_REL_ATTN,
                            .relattn = {.q = R(S_Q), .k = R(S_K), .v = R(S_V), .out = R(S_ATT),
                                        .bias = V(L0 + m->off_bias), .n_head = c->n_head, .head_dim = c->d_kv,
                                        .max_rel = c->max_distance, .scale = 1.0f}};
    MM(S_WO, S_ATT, S_O, I, D);
    nd[k++] = (ts_eng_node){.op = TS_OP_ADD, .add = {.y = R(S_X), .x = R(S_O), .n = D}};
    /* gated-GELU feed-forward */
    RMS(S_X, S_XN, L0 + m->off_ffn_norm);
    MM(S_WG, S_XN, S_G, D, F);
    MM(S_WU, S_XN, S_U, D, F);
    nd[k++] = (ts_eng_node){.op = TS_OP_GEGLU, .glu = {.gate = R(S_G), .up = R(S_U), .out = R(S_G), .n = F}};
    MM(S_WD, S_G, S_O, F, D);
    nd[k++] = (ts_eng_node){.op = TS_OP_ADD, .add = {.y = R(S_X), .x = R(S_O), .n = D}};
    return k;
}

ts_umt5_run *ts_umt5_run_new(ts_umt5 *m, const ts_umt5_run_params *p, ts_err *err) {
    const ts_umt5_config *c = &m->c;
    const int width = p->max_tokens > 0 ? p->max_tokens : c->n_ctx;
    if (width > (1 << 16)) {
        ts_err_set(err, "umt5: max_tokens %d is more than tessera takes (65536)", width);
        return NULL;
    }
    ts_umt5_run *r = calloc(1, sizeof *r);
    if (!r) {
        ts_err_set(err, "out of memory");
        return NULL;
    }
    r->m = m;
    m->n_runs++;
    r->width = width;
    const int64_t D = c->d_model, F = c->d_ff, I = (int64_t)c->n_head * c->d_kv, L = c->n_layer, W = width;
    ts_eng_open_params op = {.threads = p->n_threads > 0 ? p->n_threads : 1};
    r->e = ts_eng_open_ex(p->engine ? p->engine : "cpu", &op, err);
    if (!r->e || !(r->q = ts_eng_queue_new(r->e, err)))
        goto fail;
    const size_t f4 = sizeof(float);
    const size_t sizes[S_VEC] = {
        [S_X] = W * D * f4, [S_XN] = W * D * f4, [S_Q] = W * I * f4, [S_K] = W * I * f4, [S_V] = W * I * f4,
        [S_ATT] = W * I * f4, [S_O] = W * D * f4, [S_G] = W * F * f4, [S_U] = W * F * f4,
    };
    for (int s = 0; s < S_VEC; s++)
        if (alloc_act(r, s, sizes[s], err))
            goto fail;
    if (!(r->vbuf = ts_eng_buf_map(r->e, m->vec, (size_t)((m->n_vec * 4 + 63) & ~63), err)))
        goto fail;
    r->base[S_VEC] = (ts_eng_bind){.buf = r->vbuf};
    /* the file itself, for matrices kept in their rows (read only: the
     * engines never write a weight binding) */
    if (!(r->fbuf = ts_eng_buf_map(r->e, (void *)(uintptr_t)ts_gguf_base(m->g), (size_t)ts_gguf_file_size(m->g),
                                   err)))
        goto fail;
    r->packs.e = r->e;
    r->bs = calloc((size_t)L, sizeof *r->bs);
    if (!r->bs) {
        ts_err_set(err, "out of memory");
        goto fail;
    }
    ts_eng_node nd[16];
    int k = layer_nodes(r, nd);
    if (!(r->g_layer = ts_eng_graph_new(r->e, nd, k, S_COUNT, width, err)))
        goto fail;
    k = 0;
    RMS(S_X, S_XN, 0); /* the output norm (arena offset 0) */
    if (!(r->g_out = ts_eng_graph_new(r->e, nd, k, S_COUNT, width, err)))
        goto fail;
    for (int l = 0; l < L; l++) {
        const umt5_layer *Lw = &m->layers[l];
        placed pq, pk, pv, po, pg, pu, pd;
        if (place(r, &Lw->q, &pq, err) || place(r, &Lw->k, &pk, err) || place(r, &Lw->v, &pv, err) ||
            place(r, &Lw->o, &po, err) || place(r, &Lw->gate, &pg, err) || place(r, &Lw->up, &pu, err) ||
            place(r, &Lw->down, &pd, err))
            goto fail;
        ts_eng_bind b[S_COUNT];
        memcpy(b, r->base, sizeof b);
        b[S_VEC].off = (uint64_t)l * (uint64_t)m->layer_stride * 4;
        b[S_WQ] = wbind(&pq), b[S_WK] = wbind(&pk), b[S_WV] = wbind(&pv), b[S_WO] = wbind(&po);
        b[S_WG] = wbind(&pg), b[S_WU] = wbind(&pu), b[S_WD] = wbind(&pd);
        if (!(r->bs[l] = ts_eng_bindset_new(r->g_layer, b, S_COUNT, err))) {
            ts_err_prefix(err, "layer %d", l);
            goto fail;
        }
    }
    return r;
fail:
    ts_err_prefix(err, "umt5");
    ts_umt5_run_free(r);
    return NULL;
}

#undef R
#undef V
#undef MM
#undef RMS

void ts_umt5_run_free(ts_umt5_run *r) {
    if (!r)
        return;
    if (r->q)
        ts_eng_queue_finish(r->q, NULL);
    if (r->bs)
        for (int l = 0; l < r->m->c.n_layer; l++)
            ts_eng_bindset_free(r->bs[l]);
    free(r->bs);
    ts_eng_graph_free(r->g_layer);
    ts_eng_graph_free(r->g_out);
    ts_vm_packs_free(&r->packs);
    for (int s = 0; s < S_VEC; s++) {
        ts_eng_buf_free(r->abuf[s]);
        free(r->act[s]);
    }
    ts_eng_buf_free(r->vbuf);
    ts_eng_buf_free(r->fbuf);
    ts_eng_queue_free(r->q);
    ts_eng_close(r->e);
    r->m->n_runs--;
    free(r);
}

int ts_umt5_run_max_tokens(const ts_umt5_run *r) { return r->width; }

static int sync(ts_umt5_run *r, int s, ts_eng_sync_dir dir, ts_err *err) {
    return ts_eng_enqueue_host_sync(r->q, r->abuf[s], 0, r->act_bytes[s], dir, err);
}

int ts_umt5_encode(ts_umt5_run *r, const int32_t *ids, int n, int n_real, float *out, ts_err *err) {
    const ts_umt5 *m = r->m;
    const ts_umt5_config *c = &m->c;
    if (n < 1 || n > r->width || n_real < 1 || n_real > n)
        return ts_err_set(err, "umt5: %d tokens with %d real: need 1 <= real <= tokens <= %d (the run's max_tokens)",
                          n, n_real, r->width);
    for (int t = 0; t < n; t++)
        if (ids[t] < 0 || ids[t] >= c->n_vocab)
            return ts_err_set(err, "umt5: token %d: id %d out of range [0, %d)", t, ids[t], c->n_vocab);
    const uint64_t t0 = ts_now_ns();
    const int64_t D = c->d_model;
    /* the embedding: rows of token_embd as stored, dequantized */
    const uint8_t *emb = m->embd->data;
    for (int t = 0; t < n; t++)
        if (ts_dequant_row(m->embd->type, emb + (size_t)ids[t] * m->embd_row, r->act[S_X] + (int64_t)t * D, D, err))
            return ts_err_prefix(err, "umt5: token_embd.weight row %d", ids[t]);
    /* keys past n_real masked: the layer graph's n_kv (0: none) */
    const int64_t n_kv = n_real < n ? n_real : 0;
    if (sync(r, S_X, TS_SYNC_TO_DEVICE, err))
        return ts_err_prefix(err, "umt5: embedding");
    const uint64_t t1 = ts_now_ns();
    for (int l = 0; l < c->n_layer; l++)
        if (ts_eng_enqueue_bound(r->q, r->bs[l], 0, n, n_kv, err))
            return ts_err_prefix(err, "umt5: layer %d", l);
    if (ts_eng_queue_finish(r->q, err))
        return ts_err_prefix(err, "umt5: layers");
    const uint64_t t2 = ts_now_ns();
    if (ts_eng_enqueue_graph(r->q, r->g_out, r->base, S_COUNT, 0, n, err) || sync(r, S_XN, TS_SYNC_TO_HOST, err) ||
        ts_eng_queue_finish(r->q, err))
        return ts_err_prefix(err, "umt5: output norm");
    memcpy(out, r->act[S_XN], (size_t)n * (size_t)D * sizeof(float));
    r->st.encodes++;
    r->st.tokens += (uint64_t)n;
    r->st.layer_ns += t2 - t1;
    r->st.total_ns += ts_now_ns() - t0;
    return 0;
}

int ts_umt5_encode_padded(ts_umt5_run *r, const int32_t *ids, int n_real, int n_pad, float *out, ts_err *err) {
    if (n_real < 1 || n_real > n_pad || n_real > r->width || n_pad > (1 << 24))
        return ts_err_set(err, "umt5: %d real tokens padded to %d: need 1 <= real <= padded (<= 2^24), real <= %d "
                               "(the run's max_tokens)",
                          n_real, n_pad, r->width);
    /* the masked run's real rows are those of the real tokens alone */
    if (ts_umt5_encode(r, ids, n_real, n_real, out, err))
        return -1;
    const size_t D = (size_t)r->m->c.d_model;
    memset(out + (size_t)n_real * D, 0, (size_t)(n_pad - n_real) * D * sizeof(float));
    return 0;
}

void ts_umt5_run_stats(const ts_umt5_run *r, ts_umt5_stats *out) { *out = r->st; }
