/* wan.c - the Wan2.1 DiT: weights from GGUF, its graphs on an engine (wan.h). */
#include "video/wan.h"
#include "video/vmem.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "kernels/block_ops.h"
#include "kernels/ops.h"
#include "quant/quant.h"

/* ---- weights ------------------------------------------------------------ */

typedef struct wan_layer {
    ts_wmat sq, sk, sv, so, cq, ck, cv, co, f0, f2; /* [n_out][n_in] */
    /* offsets (floats) into the vector arena */
    int64_t mod;                      /* [6][d] */
    int64_t sbq, sbk, sbv, sbo, snq, snk; /* self-attention biases and q/k norms [d] */
    int64_t cbq, cbk, cbv, cbo, cnq, cnk; /* cross-attention's */
    int64_t n3w, n3b;                 /* the cross-attention's LayerNorm */
    int64_t f0b, f2b;                 /* [ffn], [d] */
} wan_layer;

struct ts_wan {
    ts_gguf *g;
    ts_wan_config c;
    ts_wmat patch, te0, te2, t0, t2, tp, head;
    int64_t patch_b, te0b, te2b, t0b, t2b, tpb, head_b, head_mod; /* vector arena offsets */
    wan_layer *layers;
    float *vec; /* every vector (biases, norms, modulation tables) as f32, 64-byte aligned entries */
    int64_t n_vec, cap_vec;
    uint64_t weight_bytes;
    int n_runs;
};

/* Tensor `name` with n_elem elements (any stored shape whose first
 * dimension is ne0, when ne0 > 0), or NULL with err. */
static const ts_gguf_tensor *need(ts_wan *w, const char *name, int64_t ne0, int64_t n_elem, ts_err *err) {
    const ts_gguf_tensor *t = ts_gguf_find_tensor(w->g, name);
    if (!t) {
        ts_err_set(err, "missing tensor '%s' (not a Wan2.1 DiT file, or a variant tessera does not know)", name);
        return NULL;
    }
    if (t->n_elements != n_elem || (ne0 > 0 && t->ne[0] != ne0)) {
        char sh[96];
        ts_vm_fmt_shape(sh, sizeof sh, t);
        ts_err_set(err, "tensor '%s' has shape %s, expected %lld elements%s", name, sh, (long long)n_elem,
                   ne0 > 0 ? " in rows of the model width" : "");
        return NULL;
    }
    return t;
}

static int mat(ts_wan *w, const char *name, int64_t n_in, int64_t n_out, ts_wmat *out, ts_err *err) {
    const ts_gguf_tensor *t = need(w, name, n_in, n_in * n_out, err);
    if (!t)
        return -1;
    const ts_type_traits *tr = ts_type_info(t->type);
    const size_t rb = ts_row_size(t->type, n_in);
    if (!tr || !tr->can_dequant || !rb)
        return ts_err_set(err, "tensor '%s': type %s cannot be a matrix of rows of %lld", name,
                          tr ? tr->name : "unknown", (long long)n_in);
    *out = (ts_wmat){.type = t->type, .data = t->data, .n_in = n_in, .n_out = n_out, .row_bytes = rb};
    w->weight_bytes += t->nbytes;
    return 0;
}

/* Copies tensor `name` (n floats, any type that dequantizes) into the
 * vector arena; *off = its offset in floats. */
static int vec(ts_wan *w, const char *name, int64_t n, int64_t *off, ts_err *err) {
    const ts_gguf_tensor *t = need(w, name, 0, n, err);
    if (!t)
        return -1;
    const int64_t need_f = (n + 15) & ~(int64_t)15;
    if (w->n_vec + need_f > w->cap_vec)
        return ts_err_set(err, "vector arena overflow at '%s'", name); /* sized in open(): cannot happen */
    if (ts_dequant_row(t->type, t->data, w->vec + w->n_vec, n, err))
        return ts_err_prefix(err, "tensor '%s'", name);
    *off = w->n_vec;
    w->n_vec += need_f;
    w->weight_bytes += t->nbytes;
    return 0;
}

static int64_t count_layers(const ts_gguf *g) {
    int64_t n = 0;
    char name[64];
    for (;;) {
        snprintf(name, sizeof name, "blocks.%lld.self_attn.q.weight", (long long)n);
        if (!ts_gguf_find_tensor(g, name))
            return n;
        n++;
    }
}

static int read_config(ts_wan *w, ts_err *err) {
    ts_wan_config *c = &w->c;
    ts_gguf_str arch = {0};
    if (ts_gguf_opt_str(w->g, "general.architecture", &arch, err) < 0)
        return -1;
    if (arch.ptr && !(arch.len == 3 && !memcmp(arch.ptr, "wan", 3)))
        return ts_err_set(err, "general.architecture is '%.*s', expected 'wan' (a Wan2.1 DiT file)",
                          (int)(arch.len > 40 ? 40 : arch.len), arch.ptr);
    const ts_gguf_tensor *pb = ts_gguf_find_tensor(w->g, "patch_embedding.bias");
    const ts_gguf_tensor *pw = ts_gguf_find_tensor(w->g, "patch_embedding.weight");
    const ts_gguf_tensor *f0 = ts_gguf_find_tensor(w->g, "blocks.0.ffn.0.weight");
    const ts_gguf_tensor *te = ts_gguf_find_tensor(w->g, "text_embedding.0.weight");
    const ts_gguf_tensor *tm = ts_gguf_find_tensor(w->g, "time_embedding.0.weight");
    const ts_gguf_tensor *hd = ts_gguf_find_tensor(w->g, "head.head.weight");
    if (!pb || !pw || !f0 || !te || !tm || !hd)
        return ts_err_set(err, "missing tensor '%s' (not a Wan2.1 DiT file)",
                          !pb ? "patch_embedding.bias" : !pw ? "patch_embedding.weight" : !f0 ? "blocks.0.ffn.0.weight"
                          : !te ? "text_embedding.0.weight" : !tm ? "time_embedding.0.weight" : "head.head.weight");
    const int64_t lim = 1 << 20;
    c->dim = pb->n_dims == 1 && pb->ne[0] > 0 && pb->ne[0] <= lim ? (int32_t)pb->ne[0] : 0;
    if (!c->dim)
        return ts_err_set(err, "patch_embedding.bias must be one dimension of at most 2^20");
    c->ffn = f0->ne[0] == c->dim && f0->ne[1] > 0 && f0->ne[1] <= lim ? (int32_t)f0->ne[1] : 0;
    c->text_dim = te->ne[0] > 0 && te->ne[0] <= lim ? (int32_t)te->ne[0] : 0;
    c->freq_dim = tm->ne[0] > 1 && tm->ne[0] <= lim && tm->ne[0] % 2 == 0 ? (int32_t)tm->ne[0] : 0;
    if (!c->ffn || !c->text_dim || !c->freq_dim)
        return ts_err_set(err, "blocks.0.ffn.0.weight, text_embedding.0.weight or time_embedding.0.weight has a "
                               "shape that does not fit width %d", c->dim);
    /* the patch: from ComfyUI-GGUF's record of the 5-D shape, else (1, 2, 2) */
    c->patch[0] = 1, c->patch[1] = 2, c->patch[2] = 2;
    const ts_gguf_value *os = ts_gguf_find(w->g, "comfy.gguf.orig_shape.patch_embedding.weight");
    if (os) {
        const uint32_t et = os->arr.type;
        const bool ints = et <= TS_GGUF_INT32 || et == TS_GGUF_UINT64 || et == TS_GGUF_INT64;
        if (os->type != TS_GGUF_ARRAY || os->arr.n != 5 || !ints)
            return ts_err_set(err, "comfy.gguf.orig_shape.patch_embedding.weight must be an array of 5 sizes");
        for (int i = 0; i < 3; i++) {
            const int64_t p = ts_gguf_arr_i64(os, (uint64_t)(2 + i));
            if (p < 1 || p > 16)
                return ts_err_set(err, "patch size %lld out of range [1, 16] in comfy.gguf.orig_shape", (long long)p);
            c->patch[i] = (int32_t)p;
        }
        if (ts_gguf_arr_i64(os, 0) != c->dim)
            return ts_err_set(err, "comfy.gguf.orig_shape.patch_embedding.weight says %lld outputs, the width is %d",
                              (long long)ts_gguf_arr_i64(os, 0), c->dim);
    }
    const int64_t P = (int64_t)c->patch[0] * c->patch[1] * c->patch[2];
    if (pw->n_elements % ((int64_t)c->dim * P))
        return ts_err_set(err, "patch_embedding.weight has %lld elements, not width %d x channels x patch %lld",
                          (long long)pw->n_elements, c->dim, (long long)P);
    c->in_ch = (int32_t)(pw->n_elements / ((int64_t)c->dim * P));
    if (hd->ne[0] != c->dim || hd->ne[1] % P || hd->ne[1] < P)
        return ts_err_set(err, "head.head.weight does not map width %d to channels x patch %lld", c->dim,
                          (long long)P);
    c->out_ch = (int32_t)(hd->ne[1] / P);
    uint32_t nh = 0;
    if (ts_gguf_opt_u32(w->g, "wan.attention.head_count", &nh, err) < 0)
        return -1;
    if (!nh) {
        if (c->dim % 128)
            return ts_err_set(err, "width %d is not a multiple of 128 and the file has no wan.attention.head_count",
                              c->dim);
        nh = (uint32_t)(c->dim / 128);
    }
    if (nh > 4096 || c->dim % (int32_t)nh || (c->dim / (int32_t)nh) % 2 || c->dim / (int32_t)nh < 6)
        return ts_err_set(err, "wan.attention.head_count %u does not split width %d into even heads of >= 6", nh,
                          c->dim);
    c->n_head = (int32_t)nh;
    c->head_dim = c->dim / c->n_head;
    const int64_t nl = count_layers(w->g);
    if (nl < 1 || nl > 1024)
        return ts_err_set(err, "%lld blocks (blocks.N.self_attn.q.weight): expected 1 .. 1024", (long long)nl);
    c->n_layer = (int32_t)nl;
    c->eps = 1e-6f;
    return 0;
}

ts_wan *ts_wan_open(const char *path, ts_err *err) {
    ts_wan *w = calloc(1, sizeof *w);
    if (!w) {
        ts_err_set(err, "out of memory");
        return NULL;
    }
    if (!(w->g = ts_gguf_open(path, err))) { /* its message names the file */
        ts_wan_close(w);
        return NULL;
    }
    if (read_config(w, err))
        goto fail;
    const ts_wan_config *c = &w->c;
    const int64_t D = c->dim, F = c->ffn, P = (int64_t)c->patch[0] * c->patch[1] * c->patch[2];
    w->layers = calloc((size_t)c->n_layer, sizeof *w->layers);
    /* vectors: 8 outside the blocks (the largest 6d), 20 per block (one 6d) */
    w->cap_vec = (8 + 6 + 2 + (int64_t)c->out_ch * P / D + 2) * (D + 16) + (int64_t)c->n_layer * (25 * (D + 16) + F + 16);
    w->vec = aligned_alloc(64, (size_t)((w->cap_vec * 4 + 63) & ~63));
    if (!w->layers || !w->vec) {
        ts_err_set(err, "out of memory");
        goto fail;
    }
    if (mat(w, "patch_embedding.weight", (int64_t)c->in_ch * P, D, &w->patch, err) ||
        vec(w, "patch_embedding.bias", D, &w->patch_b, err) ||
        mat(w, "text_embedding.0.weight", c->text_dim, D, &w->te0, err) ||
        vec(w, "text_embedding.0.bias", D, &w->te0b, err) || mat(w, "text_embedding.2.weight", D, D, &w->te2, err) ||
        vec(w, "text_embedding.2.bias", D, &w->te2b, err) ||
        mat(w, "time_embedding.0.weight", c->freq_dim, D, &w->t0, err) ||
        vec(w, "time_embedding.0.bias", D, &w->t0b, err) || mat(w, "time_embedding.2.weight", D, D, &w->t2, err) ||
        vec(w, "time_embedding.2.bias", D, &w->t2b, err) ||
        mat(w, "time_projection.1.weight", D, 6 * D, &w->tp, err) ||
        vec(w, "time_projection.1.bias", 6 * D, &w->tpb, err) ||
        mat(w, "head.head.weight", D, (int64_t)c->out_ch * P, &w->head, err) ||
        vec(w, "head.head.bias", (int64_t)c->out_ch * P, &w->head_b, err) ||
        vec(w, "head.modulation", 2 * D, &w->head_mod, err))
        goto fail;
    for (int l = 0; l < c->n_layer; l++) {
        wan_layer *L = &w->layers[l];
        char n[96];
#define M_(suffix, ni, no, dst) (snprintf(n, sizeof n, "blocks.%d." suffix, l), mat(w, n, (ni), (no), (dst), err))
#define V_(suffix, len, dst) (snprintf(n, sizeof n, "blocks.%d." suffix, l), vec(w, n, (len), (dst), err))
        if (V_("modulation", 6 * D, &L->mod) || M_("self_attn.q.weight", D, D, &L->sq) ||
            M_("self_attn.k.weight", D, D, &L->sk) || M_("self_attn.v.weight", D, D, &L->sv) ||
            M_("self_attn.o.weight", D, D, &L->so) || V_("self_attn.q.bias", D, &L->sbq) ||
            V_("self_attn.k.bias", D, &L->sbk) || V_("self_attn.v.bias", D, &L->sbv) ||
            V_("self_attn.o.bias", D, &L->sbo) || V_("self_attn.norm_q.weight", D, &L->snq) ||
            V_("self_attn.norm_k.weight", D, &L->snk) || M_("cross_attn.q.weight", D, D, &L->cq) ||
            M_("cross_attn.k.weight", D, D, &L->ck) || M_("cross_attn.v.weight", D, D, &L->cv) ||
            M_("cross_attn.o.weight", D, D, &L->co) || V_("cross_attn.q.bias", D, &L->cbq) ||
            V_("cross_attn.k.bias", D, &L->cbk) || V_("cross_attn.v.bias", D, &L->cbv) ||
            V_("cross_attn.o.bias", D, &L->cbo) || V_("cross_attn.norm_q.weight", D, &L->cnq) ||
            V_("cross_attn.norm_k.weight", D, &L->cnk) || V_("norm3.weight", D, &L->n3w) ||
            V_("norm3.bias", D, &L->n3b) || M_("ffn.0.weight", D, F, &L->f0) || V_("ffn.0.bias", F, &L->f0b) ||
            M_("ffn.2.weight", F, D, &L->f2) || V_("ffn.2.bias", D, &L->f2b))
            goto fail;
#undef M_
#undef V_
    }
    return w;
fail:
    ts_err_prefix(err, "%s", path);
    ts_wan_close(w);
    return NULL;
}

void ts_wan_close(ts_wan *w) {
    if (!w)
        return;
    ts_gguf_close(w->g);
    free(w->layers);
    free(w->vec);
    free(w);
}

const ts_wan_config *ts_wan_cfg(const ts_wan *w) { return &w->c; }
uint64_t ts_wan_weight_bytes(const ts_wan *w) { return w->weight_bytes; }

/* ---- the detail expert's low-rank adapter ---------------------------------- */

enum { P_SQ = 0, P_SK, P_SV, P_SO, P_CQ, P_CK, P_CV, P_CO, P_N };
static const char *const proj_names[P_N] = {"self_attn.q",  "self_attn.k",  "self_attn.v",  "self_attn.o",
                                            "cross_attn.q", "cross_attn.k", "cross_attn.v", "cross_attn.o"};

struct ts_wan_lora {
    ts_gguf *g;
    int n_layer, rank;
    unsigned mask; /* bit p: projection p is adapted (in every block) */
    float scale;
    ts_wmat (*a)[P_N], (*b)[P_N]; /* [n_layer][P_N]: A [rank][d], B [d][rank] */
    uint64_t bytes;
};

void ts_wan_lora_close(ts_wan_lora *lo) {
    if (!lo)
        return;
    ts_gguf_close(lo->g);
    free(lo->a);
    free(lo->b);
    free(lo);
}

/* blocks.L.<projection>.lora_A.weight or .lora_B.weight: 0 with the parts, or -1 */
static int lora_name(const char *name, int *layer, int *proj, char *ab) {
    if (strncmp(name, "blocks.", 7))
        return -1;
    const char *p = name + 7;
    char *end;
    const long l = strtol(p, &end, 10);
    if (end == p || *end != '.' || l < 0 || l > 100000)
        return -1;
    p = end + 1;
    for (int k = 0; k < P_N; k++) {
        const size_t n = strlen(proj_names[k]);
        if (!strncmp(p, proj_names[k], n) && (!strcmp(p + n, ".lora_A.weight") || !strcmp(p + n, ".lora_B.weight"))) {
            *layer = (int)l, *proj = k, *ab = p[n + 6];
            return 0;
        }
    }
    return -1;
}

ts_wan_lora *ts_wan_lora_open(const ts_wan *w, const char *path, float scale, ts_err *err) {
    const ts_wan_config *c = &w->c;
    ts_wan_lora *lo = calloc(1, sizeof *lo);
    if (!lo || !(lo->a = calloc((size_t)c->n_layer, sizeof *lo->a)) ||
        !(lo->b = calloc((size_t)c->n_layer, sizeof *lo->b))) {
        ts_err_set(err, "out of memory");
        goto fail;
    }
    lo->n_layer = c->n_layer;
    if (!(lo->g = ts_gguf_open(path, err))) { /* its message names the file */
        ts_wan_lora_close(lo);
        return NULL;
    }
    const int64_t nt = ts_gguf_n_tensors(lo->g);
    for (int64_t i = 0; i < nt; i++) {
        const ts_gguf_tensor *t = ts_gguf_tensor_at(lo->g, i);
        int l = -1, pi = -1;
        char ab = 0;
        if (lora_name(t->name, &l, &pi, &ab) || l >= c->n_layer) {
            ts_err_set(err, "tensor '%s' is not blocks.N.{self,cross}_attn.{q,k,v,o}.lora_{A,B}.weight of a "
                            "%d-block model", t->name, c->n_layer);
            goto fail;
        }
        const ts_type_traits *tr = ts_type_info(t->type);
        const int64_t r = ab == 'A' ? t->ne[1] : t->ne[0], n_in = ab == 'A' ? c->dim : r;
        const int64_t want0 = ab == 'A' ? c->dim : r, want1 = ab == 'A' ? r : c->dim;
        if (t->n_dims != 2 || t->ne[0] != want0 || t->ne[1] != want1 || r < 1 || r > 4096 || !tr ||
            !tr->can_dequant || !ts_row_size(t->type, n_in)) {
            ts_err_set(err, "tensor '%s': shape [%lld, %lld] type %s: expected %s", t->name, (long long)t->ne[0],
                       (long long)t->ne[1], tr ? tr->name : "unknown",
                       ab == 'A' ? "[width, rank] (A: width -> rank)" : "[rank, width] (B: rank -> width)");
            goto fail;
        }
        if (lo->rank && r != lo->rank) {
            ts_err_set(err, "tensor '%s' has rank %lld, others %d: one rank for the adapter", t->name, (long long)r,
                       lo->rank);
            goto fail;
        }
        lo->rank = (int)r;
        ts_wmat *m = ab == 'A' ? &lo->a[l][pi] : &lo->b[l][pi];
        *m = (ts_wmat){.type = t->type, .data = t->data, .n_in = ab == 'A' ? c->dim : r,
                       .n_out = ab == 'A' ? r : c->dim, .row_bytes = ts_row_size(t->type, n_in)};
        lo->bytes += t->nbytes;
        if (!l)
            lo->mask |= 1u << pi;
    }
    if (!lo->mask) {
        ts_err_set(err, "no adapter tensors (blocks.0.*.lora_A.weight)");
        goto fail;
    }
    for (int l = 0; l < c->n_layer; l++)
        for (int k = 0; k < P_N; k++) {
            const bool want = lo->mask >> k & 1;
            if (want != (lo->a[l][k].data != NULL) || want != (lo->b[l][k].data != NULL)) {
                ts_err_set(err, "block %d: %s's lora_A and lora_B must both be present exactly when block 0 "
                                "adapts it", l, proj_names[k]);
                goto fail;
            }
        }
    float alpha = 0;
    if (ts_gguf_opt_f32(lo->g, "lora.alpha", &alpha, err) < 0)
        goto fail;
    lo->scale = (alpha > 0 ? alpha / (float)lo->rank : 1.0f) * (scale > 0 ? scale : 1.0f);
    return lo;
fail:
    ts_err_prefix(err, "%s", path);
    ts_wan_lora_close(lo);
    return NULL;
}


/* ---- a run: graphs over slots -------------------------------------------- */

enum {
    /* activations */
    S_X = 0, S_XN, S_Q, S_K, S_V, S_ATT, S_O, S_H, S_PATCH, S_OUT, S_TXT_IN, S_TXT_H, S_TXT,
    S_CK, S_CV,      /* a layer's text K/V (of one text) */
    S_MOD, S_HMOD,   /* the layer's modulation rows [6][d]; the head's [2][d] */
    S_ROPE,          /* [M][head_dim] (cos, sin) doubles */
    S_LR, S_LO,      /* the adapter's x A^T [rows][rank] and its (x A^T) B^T [rows][d] */
    S_LSCALE,        /* [rank] the adapter's scale, as a row */
    S_VEC,           /* the vector arena (biases, norms: at offsets) */
    /* matrices of the graph's layer */
    S_W0, S_W1, S_W2, S_W3, S_W4, S_W5, S_W6, S_W7,
    S_LA, /* S_LA + p: projection p's A; S_LA + P_N + p: its B */
    S_COUNT = S_LA + 2 * P_N
};

typedef ts_vm_placed placed;

typedef struct layer_w {
    placed sq, sk, sv, so, cq, ck, cv, co, f0, f2;
    placed la[P_N], lb[P_N]; /* the adapter's, where it has them */
} layer_w;

struct ts_wan_run {
    ts_wan *w;
    ts_engine *e;
    ts_eng_queue *q;
    int F, H, W, Fp, Hp, Wp; /* latent grid; in patches */
    int64_t M;               /* tokens */
    int64_t R;               /* tokens per graph: M, or a row chunk when M passes the engine's widest graph */
    int n_chunks;            /* ceil(M / R) */
    uint64_t rowb[S_VEC];    /* bytes per token of a per-token buffer (0: not per token) */
    int n_text, n_texts;
    const ts_wan_lora *lora; /* NULL: none */
    int n_kvsets;            /* text K/V sets per text: 2 when the adapter changes cross-attention's k or v */
    /* host memory mapped into the engine */
    float *act[S_VEC];
    size_t act_bytes[S_VEC];
    ts_eng_buf *abuf[S_VEC];
    ts_eng_buf *vbuf, *fbuf, *lbuf; /* the vector arena; the whole file (rows kept as stored); the adapter's */
    ts_vm_packs packs;       /* matrices repacked for the engine */
    placed patch, te0, te2, head;
    layer_w *lw;
    ts_eng_graph *g_embed, *g_block, *g_head, *g_text, *g_ctx, *g_block_lora, *g_ctx_lora;
    /* in row chunks (n_chunks > 1): the block up to its self-attention and
     * from it on (the attention's keys and values are every chunk's) */
    ts_eng_graph *g_pre, *g_post, *g_pre_lora, *g_post_lora;
    ts_eng_bindset **bs_block; /* [n_texts][n_layer] */
    ts_eng_bindset **bs_lora;  /* [n_texts][n_layer], with the adapter */
    ts_eng_bind base[S_COUNT];
    float *emb, *temb, *h1, *tproj, *scratch; /* time embedding on the host */
    double emb_t;  /* the timestep S_MOD / S_HMOD hold (emb_ok) */
    bool emb_ok;
    bool text_set[2];
    ts_wan_stats st;
};

/* m from the base file or the adapter's, placed for the run's engine */
static int place_from(ts_wan_run *r, const ts_wmat *m, bool lora, placed *out, ts_err *err) {
    return ts_vm_place(&r->packs, m, lora ? r->lbuf : r->fbuf, ts_gguf_base(lora ? r->lora->g : r->w->g), out, err);
}

static int place(ts_wan_run *r, const ts_wmat *m, placed *out, ts_err *err) {
    return place_from(r, m, false, out, err);
}

static ts_eng_bind wbind(const placed *p) { return ts_vm_bind(p); }

#define R(s) TS_ENG_REF((s), 0)
#define V(off) TS_ENG_REF(S_VEC, (uint64_t)(off) * 4)

/* nodes' helpers */
#define MM(ws, xs, ys, ni, no) \
    nd[k++] = (ts_eng_node) { .op = TS_OP_MATMUL, .matmul = {.w = R(ws), .x = R(xs), .y = R(ys), .n_in = (ni), .n_out = (no)} }
#define BIAS(ys, voff, len) \
    nd[k++] = (ts_eng_node) { .op = TS_OP_ADD_ROW, .add = {.y = R(ys), .x = V(voff), .n = (len)} }

/* The adapter of projection pi (when lo adapts it) after its base matmul
 * and bias, as peft adds it: y += scale * (x A^T) B^T. */
static int lora_nodes(const ts_wan_lora *lo, int pi, int xs, int ys, int64_t D, ts_eng_node *nd, int k) {
    if (!lo || !(lo->mask >> pi & 1))
        return k;
    const int64_t rk = lo->rank;
    MM(S_LA + pi, xs, S_LR, D, rk);
    nd[k++] = (ts_eng_node){.op = TS_OP_MUL, .mul = {.y = R(S_LR), .a = R(S_LR), .b = R(S_LSCALE), .n = rk, .b_row = true}};
    MM(S_LA + P_N + pi, S_LR, S_LO, rk, D);
    nd[k++] = (ts_eng_node){.op = TS_OP_ADD, .add = {.y = R(ys), .x = R(S_LO), .n = D}};
    return k;
}

/* The block graph's vector offsets are those of layer 0: every layer's
 * arena entries are laid out alike, so a layer binds S_VEC at its own
 * displacement from layer 0 (wan_layer offsets differ by a constant). */
static int block_nodes(const ts_wan_run *r, const ts_wan_lora *lo, ts_eng_node *nd, int *k_attn) {
    const ts_wan_config *c = &r->w->c;
    const wan_layer *L = &r->w->layers[0];
    const int64_t D = c->dim, F = c->ffn;
    const float scale = (float)(1.0 / sqrt((double)c->head_dim));
    int k = 0;
    const int32_t tps = (int32_t)r->M; /* one sample: one modulation row for every token */
#define MODULATE(shift_i, scale_i) \
    nd[k++] = (ts_eng_node){.op = TS_OP_MODULATE, \
                            .modulate = {.x = R(S_XN), .y = R(S_XN), .shift = TS_ENG_REF(S_MOD, (uint64_t)(shift_i) * D * 4), \
                                         .scale = TS_ENG_REF(S_MOD, (uint64_t)(scale_i) * D * 4), .n = D, \
                                         .mod_stride = 6 * D, .tok_per_sample = tps}}
#define GATED(ys, gate_i) \
    nd[k++] = (ts_eng_node){.op = TS_OP_GATED_ADD, \
                            .modulate = {.x = R(S_X), .y = R(ys), .shift = TS_ENG_NOREF, \
                                         .scale = TS_ENG_REF(S_MOD, (uint64_t)(gate_i) * D * 4), .n = D, \
                                         .mod_stride = 6 * D, .tok_per_sample = tps}}
#define LN(wo, bo) \
    nd[k++] = (ts_eng_node){.op = TS_OP_LAYERNORM, \
                            .layernorm = {.x = R(S_X), .y = R(S_XN), .w = (wo), .b = (bo), .n = D, .eps = c->eps}}
#define RMS(xs, voff) \
    nd[k++] = (ts_eng_node){.op = TS_OP_RMSNORM, \
                            .rmsnorm = {.x = R(xs), .y = R(xs), .w = V(voff), .n = D, .rows_per_tok = 1, .eps = c->eps}}
#define ATTN(ks, vs, nkv) \
    nd[k++] = (ts_eng_node){.op = TS_OP_CROSS_ATTN, \
                            .xattn = {.q = R(S_Q), .k = R(ks), .v = R(vs), .out = R(S_ATT), .n_head = c->n_head, \
                                      .n_head_kv = c->n_head, .head_dim = c->head_dim, .n_kv = (nkv), \
                                      .scale = scale, .fast = true}}
    /* self-attention */
    LN(TS_ENG_NOREF, TS_ENG_NOREF);
    MODULATE(0, 1);
    MM(S_W0, S_XN, S_Q, D, D);
    MM(S_W1, S_XN, S_K, D, D);
    MM(S_W2, S_XN, S_V, D, D);
    BIAS(S_Q, L->sbq, D);
    BIAS(S_K, L->sbk, D);
    BIAS(S_V, L->sbv, D);
    k = lora_nodes(lo, P_SQ, S_XN, S_Q, D, nd, k);
    k = lora_nodes(lo, P_SK, S_XN, S_K, D, nd, k);
    k = lora_nodes(lo, P_SV, S_XN, S_V, D, nd, k);
    RMS(S_Q, L->snq);
    RMS(S_K, L->snk);
    nd[k++] = (ts_eng_node){.op = TS_OP_ROPE_TAB,
                            .rope_tab = {.x = R(S_Q), .tab = R(S_ROPE), .n_head = c->n_head, .head_dim = c->head_dim}};
    nd[k++] = (ts_eng_node){.op = TS_OP_ROPE_TAB,
                            .rope_tab = {.x = R(S_K), .tab = R(S_ROPE), .n_head = c->n_head, .head_dim = c->head_dim}};
    *k_attn = k; /* a split block's second part starts at the self-attention */
    ATTN(S_K, S_V, (int32_t)r->M);
    MM(S_W3, S_ATT, S_O, D, D);
    BIAS(S_O, L->sbo, D);
    k = lora_nodes(lo, P_SO, S_ATT, S_O, D, nd, k);
    GATED(S_O, 2);
    /* cross-attention (K, V of the text made once per text) */
    LN(V(L->n3w), V(L->n3b));
    MM(S_W4, S_XN, S_Q, D, D);
    BIAS(S_Q, L->cbq, D);
    k = lora_nodes(lo, P_CQ, S_XN, S_Q, D, nd, k);
    RMS(S_Q, L->cnq);
    ATTN(S_CK, S_CV, r->n_text);
    MM(S_W5, S_ATT, S_O, D, D);
    BIAS(S_O, L->cbo, D);
    k = lora_nodes(lo, P_CO, S_ATT, S_O, D, nd, k);
    nd[k++] = (ts_eng_node){.op = TS_OP_ADD, .add = {.y = R(S_X), .x = R(S_O), .n = D}};
    /* feed-forward */
    LN(TS_ENG_NOREF, TS_ENG_NOREF);
    MODULATE(3, 4);
    MM(S_W6, S_XN, S_H, D, F);
    BIAS(S_H, L->f0b, F);
    nd[k++] = (ts_eng_node){.op = TS_OP_GELU, .act = {.x = R(S_H), .y = R(S_H), .n = F, .fast = true}};
    MM(S_W7, S_H, S_O, F, D);
    BIAS(S_O, L->f2b, D);
    GATED(S_O, 5);
#undef MODULATE
#undef GATED
#undef LN
#undef RMS
#undef ATTN
    return k;
}

/* Multiply-adds x 2 of one block run over M tokens and n_text text keys. */
static double block_flops(const ts_wan_config *c, int64_t M, int n_text) {
    const double D = c->dim, F = c->ffn, m = (double)M;
    return 2.0 * m * (6.0 * D * D + 2.0 * D * F) + 4.0 * m * (m + n_text) * D;
}

static int alloc_act(ts_wan_run *r, int s, size_t bytes, ts_err *err) {
    if (!(r->act[s] = ts_vm_map_alloc(r->e, bytes, &r->abuf[s], err)))
        return -1;
    r->act_bytes[s] = (bytes + 63) & ~(size_t)63;
    r->base[s] = (ts_eng_bind){.buf = r->abuf[s]};
    return 0;
}

/* The RoPE angles of every token: frame f, row h, column w; pairs of the
 * t axis first (hd - 4*(hd/6) values), then h, then w (2*(hd/6) each), pair
 * j of an axis of n values turning at theta^(-2j/n) per position. */
static void rope_table(const ts_wan_run *r, double *tab) {
    const int hd = r->w->c.head_dim, hw = 2 * (hd / 6), tdim = hd - 2 * hw;
    const int dims[3] = {tdim, hw, hw};
    for (int f = 0; f < r->Fp; f++)
        for (int h = 0; h < r->Hp; h++)
            for (int w = 0; w < r->Wp; w++) {
                double *t = tab + (((int64_t)f * r->Hp + h) * r->Wp + w) * hd;
                const int pos[3] = {f, h, w};
                int j0 = 0;
                for (int a = 0; a < 3; a++) {
                    for (int j = 0; j < dims[a] / 2; j++) {
                        const double freq = 1.0 / pow(10000.0, (double)(2 * j) / dims[a]);
                        const double ang = pos[a] * freq;
                        t[2 * (j0 + j)] = cos(ang);
                        t[2 * (j0 + j) + 1] = sin(ang);
                    }
                    j0 += dims[a] / 2;
                }
            }
}

/* Byte offset of text t's K/V set (0 base, 1 the detail expert's) of layer l. */
static uint64_t kv_off(const ts_wan_run *r, int t, int set, int l) {
    const uint64_t L = (uint64_t)r->w->c.n_layer;
    return ((((uint64_t)t * (uint64_t)r->n_kvsets + (uint64_t)set) * L + (uint64_t)l) * (uint64_t)r->n_text *
            (uint64_t)r->w->c.dim) * 4;
}

/* The run's base bindings with layer l's matrices (the adapter's too) and
 * its vectors. */
static void layer_binds(const ts_wan_run *r, int l, ts_eng_bind *b) {
    memcpy(b, r->base, sizeof(ts_eng_bind) * S_COUNT);
    const layer_w *o = &r->lw[l];
    b[S_VEC].off = (uint64_t)(r->w->layers[l].mod - r->w->layers[0].mod) * 4;
    b[S_W0] = wbind(&o->sq), b[S_W1] = wbind(&o->sk), b[S_W2] = wbind(&o->sv), b[S_W3] = wbind(&o->so);
    b[S_W4] = wbind(&o->cq), b[S_W5] = wbind(&o->co), b[S_W6] = wbind(&o->f0), b[S_W7] = wbind(&o->f2);
    for (int pi = 0; pi < P_N; pi++) {
        const bool has = r->lora && r->lora->mask >> pi & 1;
        b[S_LA + pi] = has ? wbind(&o->la[pi]) : b[S_W0];
        b[S_LA + P_N + pi] = has ? wbind(&o->lb[pi]) : b[S_W0];
    }
}

ts_wan_run *ts_wan_run_new(ts_wan *w, const ts_wan_run_params *p, ts_err *err) {
    const ts_wan_config *c = &w->c;
    const int pt = c->patch[0], ph = c->patch[1], pw = c->patch[2];
    if (p->frames < pt || p->height < ph || p->width < pw || p->frames % pt || p->height % ph || p->width % pw ||
        p->frames > 4096 || p->height > 8192 || p->width > 8192) {
        ts_err_set(err, "latent grid %dx%dx%d (frames x height x width) must be positive multiples of the patch "
                        "%dx%dx%d",
                   p->frames, p->height, p->width, pt, ph, pw);
        return NULL;
    }
    if (p->n_text < 1 || p->n_text > 65536 || p->n_texts < 1 || p->n_texts > 2) {
        ts_err_set(err, "text: %d tokens and %d texts (1 .. 65536 tokens, 1 or 2 texts)", p->n_text, p->n_texts);
        return NULL;
    }
    const int64_t M = (int64_t)(p->frames / pt) * (p->height / ph) * (p->width / pw);
    if (M > (1 << 22)) {
        ts_err_set(err, "%lld tokens per block is more than tessera takes (2^22)", (long long)M);
        return NULL;
    }
    ts_wan_run *r = calloc(1, sizeof *r);
    if (!r) {
        ts_err_set(err, "out of memory");
        return NULL;
    }
    r->w = w;
    w->n_runs++;
    r->F = p->frames, r->H = p->height, r->W = p->width;
    r->Fp = p->frames / pt, r->Hp = p->height / ph, r->Wp = p->width / pw;
    r->M = M;
    r->n_text = p->n_text, r->n_texts = p->n_texts;
    const int64_t D = c->dim, F = c->ffn, P = (int64_t)pt * ph * pw, L = c->n_layer, N = p->n_text;
    ts_eng_open_params op = {.threads = p->n_threads > 0 ? p->n_threads : 1};
    r->e = ts_eng_open_ex(p->engine ? p->engine : "cpu", &op, err);
    if (!r->e || !(r->q = ts_eng_queue_new(r->e, err)))
        goto fail;
    const size_t f4 = sizeof(float);
    const ts_wan_lora *lo = r->lora = p->lora;
    r->n_kvsets = lo && (lo->mask >> P_CK & 1 || lo->mask >> P_CV & 1) ? 2 : 1;
    const int64_t KS = r->n_kvsets, RK = lo ? lo->rank : 1;
    const size_t sizes[S_VEC] = {
        [S_X] = M * D * f4,          [S_XN] = M * D * f4,         [S_Q] = M * D * f4,
        [S_K] = M * D * f4,          [S_V] = M * D * f4,          [S_ATT] = M * D * f4,
        [S_O] = M * D * f4,          [S_H] = M * F * f4,          [S_PATCH] = M * c->in_ch * P * f4,
        [S_OUT] = M * c->out_ch * P * f4, [S_TXT_IN] = N * c->text_dim * f4, [S_TXT_H] = N * D * f4,
        [S_TXT] = N * D * f4,        [S_CK] = p->n_texts * KS * L * N * D * f4, [S_CV] = p->n_texts * KS * L * N * D * f4,
        [S_MOD] = L * 6 * D * f4,    [S_HMOD] = 2 * D * f4,       [S_ROPE] = M * c->head_dim * sizeof(double),
        [S_LR] = (M > N ? M : N) * RK * f4, [S_LO] = (M > N ? M : N) * D * f4, [S_LSCALE] = RK * f4,
    };
    for (int s = 0; s < S_VEC; s++)
        if (alloc_act(r, s, sizes[s], err))
            goto fail;
    /* the per-token buffers, which a row chunk's graph binds at its first row */
    static const int per_token[] = {S_X, S_XN, S_Q, S_K, S_V, S_ATT, S_O, S_H, S_PATCH, S_OUT, S_ROPE, S_LR, S_LO};
    for (size_t i = 0; i < sizeof per_token / sizeof per_token[0]; i++) {
        const int s = per_token[i];
        const int64_t rows = s == S_LR || s == S_LO ? (M > N ? M : N) : M; /* the adapter's scratch serves the text too */
        r->rowb[s] = (uint64_t)sizes[s] / (uint64_t)rows;
    }
    /* row chunks: as many as the engine's widest graph (or max_rows) asks
     * for, of equal size rounded up to 16 (the tiles' rows) */
    {
        int64_t cap = ts_eng_describe(r->e)->max_width;
        if (p->max_rows > 0 && (cap <= 0 || p->max_rows < cap))
            cap = p->max_rows;
        r->R = M, r->n_chunks = 1;
        if (cap > 0 && M > cap) {
            const int64_t nc = (M + cap - 1) / cap;
            int64_t R = ((M + nc - 1) / nc + 15) / 16 * 16;
            if (R > cap)
                R = cap;
            r->R = R, r->n_chunks = (int)((M + R - 1) / R);
        }
    }
    rope_table(r, (double *)(void *)r->act[S_ROPE]);
    for (int64_t i = 0; i < RK; i++)
        r->act[S_LSCALE][i] = lo ? lo->scale : 1.0f;
    if (!(r->vbuf = ts_eng_buf_map(r->e, w->vec, (size_t)((w->cap_vec * 4 + 63) & ~63), err)))
        goto fail;
    r->base[S_VEC] = (ts_eng_bind){.buf = r->vbuf};
    /* the file itself, for matrices kept in their rows (read only: the
     * engines never write a weight binding) */
    if (!(r->fbuf = ts_eng_buf_map(r->e, (void *)(uintptr_t)ts_gguf_base(w->g), (size_t)ts_gguf_file_size(w->g),
                                   err)))
        goto fail;
    if (lo && !(r->lbuf = ts_eng_buf_map(r->e, (void *)(uintptr_t)ts_gguf_base(lo->g),
                                         (size_t)ts_gguf_file_size(lo->g), err)))
        goto fail;
    r->packs.e = r->e;
    if (p->share) {
        if (p->share->w != w || p->share->lora != lo) {
            ts_err_set(err, "a run shares the weights of a run of the same model and adapter only");
            goto fail;
        }
        r->packs.peer = &p->share->packs;
    }
    r->lw = calloc((size_t)L, sizeof *r->lw);
    r->bs_block = calloc((size_t)(p->n_texts * L), sizeof *r->bs_block);
    r->bs_lora = calloc((size_t)(p->n_texts * L), sizeof *r->bs_lora);
    r->emb = malloc((size_t)c->freq_dim * f4);
    r->temb = malloc((size_t)D * f4);
    r->h1 = malloc((size_t)D * f4);
    r->tproj = malloc((size_t)6 * D * f4);
    const int64_t sc = (int64_t)c->freq_dim > D ? c->freq_dim : D;
    r->scratch = malloc((size_t)sc * f4);
    if (!r->lw || !r->bs_block || !r->bs_lora || !r->emb || !r->temb || !r->h1 || !r->tproj ||
        !r->scratch) {
        ts_err_set(err, "out of memory");
        goto fail;
    }
    if (place(r, &w->patch, &r->patch, err) || place(r, &w->te0, &r->te0, err) || place(r, &w->te2, &r->te2, err) ||
        place(r, &w->head, &r->head, err))
        goto fail;
    for (int l = 0; l < L; l++) {
        const wan_layer *Lw = &w->layers[l];
        layer_w *o = &r->lw[l];
        if (place(r, &Lw->sq, &o->sq, err) || place(r, &Lw->sk, &o->sk, err) || place(r, &Lw->sv, &o->sv, err) ||
            place(r, &Lw->so, &o->so, err) || place(r, &Lw->cq, &o->cq, err) || place(r, &Lw->ck, &o->ck, err) ||
            place(r, &Lw->cv, &o->cv, err) || place(r, &Lw->co, &o->co, err) || place(r, &Lw->f0, &o->f0, err) ||
            place(r, &Lw->f2, &o->f2, err))
            goto fail;
        for (int pi = 0; lo && pi < P_N; pi++)
            if (lo->mask >> pi & 1 && (place_from(r, &lo->a[l][pi], true, &o->la[pi], err) ||
                                       place_from(r, &lo->b[l][pi], true, &o->lb[pi], err)))
                goto fail;
    }
    /* graphs */
    ts_eng_node nd[40 + 4 * P_N];
    int k = 0;
    MM(S_W0, S_PATCH, S_X, (int64_t)c->in_ch * P, D);
    BIAS(S_X, w->patch_b, D);
    if (!(r->g_embed = ts_eng_graph_new(r->e, nd, k, S_COUNT, (int)r->R, err)))
        goto fail;
    for (int with = 0; with < (lo ? 2 : 1); with++) {
        int ka = 0;
        k = block_nodes(r, with ? lo : NULL, nd, &ka);
        if (r->n_chunks == 1) {
            if (!(*(with ? &r->g_block_lora : &r->g_block) = ts_eng_graph_new(r->e, nd, k, S_COUNT, (int)M, err)))
                goto fail;
        } else if (!(*(with ? &r->g_pre_lora : &r->g_pre) = ts_eng_graph_new(r->e, nd, ka, S_COUNT, (int)r->R, err)) ||
                   !(*(with ? &r->g_post_lora : &r->g_post) =
                         ts_eng_graph_new(r->e, nd + ka, k - ka, S_COUNT, (int)r->R, err))) {
            goto fail;
        }
    }
    k = 0;
    nd[k++] = (ts_eng_node){.op = TS_OP_LAYERNORM,
                            .layernorm = {.x = R(S_X), .y = R(S_XN), .w = TS_ENG_NOREF, .b = TS_ENG_NOREF, .n = D,
                                          .eps = c->eps}};
    nd[k++] = (ts_eng_node){.op = TS_OP_MODULATE,
                            .modulate = {.x = R(S_XN), .y = R(S_XN), .shift = R(S_HMOD),
                                         .scale = TS_ENG_REF(S_HMOD, (uint64_t)D * 4), .n = D, .mod_stride = 2 * D,
                                         .tok_per_sample = (int32_t)M}};
    MM(S_W0, S_XN, S_OUT, D, (int64_t)c->out_ch * P);
    BIAS(S_OUT, w->head_b, (int64_t)c->out_ch * P);
    if (!(r->g_head = ts_eng_graph_new(r->e, nd, k, S_COUNT, (int)r->R, err)))
        goto fail;
    k = 0;
    MM(S_W0, S_TXT_IN, S_TXT_H, c->text_dim, D);
    BIAS(S_TXT_H, w->te0b, D);
    nd[k++] = (ts_eng_node){.op = TS_OP_GELU, .act = {.x = R(S_TXT_H), .y = R(S_TXT_H), .n = D, .fast = true}};
    MM(S_W1, S_TXT_H, S_TXT, D, D);
    BIAS(S_TXT, w->te2b, D);
    if (!(r->g_text = ts_eng_graph_new(r->e, nd, k, S_COUNT, (int)N, err)))
        goto fail;
    /* each layer's text K and V, and with an adapter on cross-attention's k
     * or v a second set for the detail expert */
    for (int with = 0; with < r->n_kvsets; with++) {
        const wan_layer *L0 = &w->layers[0];
        k = 0;
        MM(S_W0, S_TXT, S_CK, D, D);
        MM(S_W1, S_TXT, S_CV, D, D);
        BIAS(S_CK, L0->cbk, D);
        BIAS(S_CV, L0->cbv, D);
        k = lora_nodes(with ? lo : NULL, P_CK, S_TXT, S_CK, D, nd, k);
        k = lora_nodes(with ? lo : NULL, P_CV, S_TXT, S_CV, D, nd, k);
        nd[k++] = (ts_eng_node){.op = TS_OP_RMSNORM,
                                .rmsnorm = {.x = R(S_CK), .y = R(S_CK), .w = V(L0->cnk), .n = D, .rows_per_tok = 1,
                                            .eps = c->eps}};
        if (!(*(with ? &r->g_ctx_lora : &r->g_ctx) = ts_eng_graph_new(r->e, nd, k, S_COUNT, (int)N, err)))
            goto fail;
    }
    /* a binding set per (text, layer), and with the adapter: the layer's
     * matrices, its vectors (S_VEC displaced to its entries), modulation
     * rows and text K/V (row chunks bind theirs at each run) */
    for (int with = 0; with < (r->n_chunks > 1 ? 0 : lo ? 2 : 1); with++)
        for (int t = 0; t < p->n_texts; t++)
            for (int l = 0; l < L; l++) {
                ts_eng_bind b[S_COUNT];
                layer_binds(r, l, b);
                b[S_MOD].off = (uint64_t)l * 6 * D * 4;
                b[S_CK].off = b[S_CV].off = kv_off(r, t, with && r->n_kvsets > 1, l);
                ts_eng_bindset **bs = with ? &r->bs_lora[t * L + l] : &r->bs_block[t * L + l];
                if (!(*bs = ts_eng_bindset_new(with ? r->g_block_lora : r->g_block, b, S_COUNT, err)))
                    goto fail;
            }
    r->st.block_flops = block_flops(c, M, p->n_text);
    return r;
fail:
    ts_err_prefix(err, "wan");
    ts_wan_run_free(r);
    return NULL;
}

void ts_wan_run_free(ts_wan_run *r) {
    if (!r)
        return;
    if (r->q)
        ts_eng_queue_finish(r->q, NULL);
    for (int i = 0; i < r->n_texts * r->w->c.n_layer; i++) {
        if (r->bs_block)
            ts_eng_bindset_free(r->bs_block[i]);
        if (r->bs_lora)
            ts_eng_bindset_free(r->bs_lora[i]);
    }
    free(r->bs_block);
    free(r->bs_lora);
    ts_eng_graph_free(r->g_block_lora);
    ts_eng_graph_free(r->g_pre);
    ts_eng_graph_free(r->g_post);
    ts_eng_graph_free(r->g_pre_lora);
    ts_eng_graph_free(r->g_post_lora);
    ts_eng_graph_free(r->g_ctx_lora);
    ts_eng_graph_free(r->g_embed);
    ts_eng_graph_free(r->g_block);
    ts_eng_graph_free(r->g_head);
    ts_eng_graph_free(r->g_text);
    ts_eng_graph_free(r->g_ctx);
    ts_vm_packs_free(&r->packs);
    free(r->lw);
    for (int s = 0; s < S_VEC; s++) {
        ts_eng_buf_free(r->abuf[s]);
        free(r->act[s]);
    }
    ts_eng_buf_free(r->vbuf);
    ts_eng_buf_free(r->fbuf);
    ts_eng_buf_free(r->lbuf);
    ts_eng_queue_free(r->q);
    ts_eng_close(r->e);
    free(r->emb), free(r->temb), free(r->h1), free(r->tproj), free(r->scratch);
    r->w->n_runs--;
    free(r);
}

int64_t ts_wan_run_tokens(const ts_wan_run *r) { return r->M; }

/* Enqueues g over every row chunk of the M tokens: b with each per-token
 * buffer moved to the chunk's first row (the self-attention's keys and
 * values left whole where keep_kv). */
static int enqueue_rows(ts_wan_run *r, ts_eng_graph *g, const ts_eng_bind *b, bool keep_kv, ts_err *err) {
    for (int64_t r0 = 0; r0 < r->M; r0 += r->R) {
        ts_eng_bind bc[S_COUNT];
        memcpy(bc, b, sizeof bc);
        for (int s = 0; s < S_VEC; s++)
            if (!(keep_kv && (s == S_K || s == S_V)))
                bc[s].off += (uint64_t)r0 * r->rowb[s];
        const int64_t n = r->M - r0 < r->R ? r->M - r0 : r->R;
        if (ts_eng_enqueue_graph(r->q, g, bc, S_COUNT, 0, (int)n, err))
            return -1;
    }
    return 0;
}

/* A graph over the run's base bindings with matrices w0, w1 in S_W0, S_W1:
 * over the N text tokens (rows false), or the M tokens in row chunks. */
static int run_graph(ts_wan_run *r, ts_eng_graph *g, const placed *w0, const placed *w1, int64_t ck_off, bool rows,
                     ts_err *err) {
    ts_eng_bind b[S_COUNT];
    memcpy(b, r->base, sizeof b);
    b[S_W0] = wbind(w0);
    b[S_W1] = wbind(w1 ? w1 : w0);
    b[S_CK].off = b[S_CV].off = (uint64_t)ck_off;
    for (int s = S_W2; s < S_COUNT; s++)
        b[s] = b[S_W0];
    return rows ? enqueue_rows(r, g, b, false, err) : ts_eng_enqueue_graph(r->q, g, b, S_COUNT, 0, r->n_text, err);
}

static int sync(ts_wan_run *r, int s, ts_eng_sync_dir dir, ts_err *err) {
    return ts_eng_enqueue_host_sync(r->q, r->abuf[s], 0, r->act_bytes[s], dir, err);
}

int ts_wan_run_set_text(ts_wan_run *r, int which, const float *text, ts_err *err) {
    if (which < 0 || which >= r->n_texts)
        return ts_err_set(err, "wan: text %d of %d", which, r->n_texts);
    const ts_wan_config *c = &r->w->c;
    const uint64_t t0 = ts_now_ns();
    const int64_t N = r->n_text;
    memcpy(r->act[S_TXT_IN], text, (size_t)N * (size_t)c->text_dim * sizeof(float));
    if (sync(r, S_TXT_IN, TS_SYNC_TO_DEVICE, err) || run_graph(r, r->g_text, &r->te0, &r->te2, 0, false, err))
        return ts_err_prefix(err, "wan: text embedding");
    for (int set = 0; set < r->n_kvsets; set++)
        for (int l = 0; l < c->n_layer; l++) {
            ts_eng_bind b[S_COUNT];
            layer_binds(r, l, b);
            b[S_CK].off = b[S_CV].off = kv_off(r, which, set, l);
            b[S_W0] = wbind(&r->lw[l].ck);
            b[S_W1] = wbind(&r->lw[l].cv);
            if (ts_eng_enqueue_graph(r->q, set ? r->g_ctx_lora : r->g_ctx, b, S_COUNT, 0, (int)N, err))
                return ts_err_prefix(err, "wan: layer %d text K/V", l);
        }
    if (ts_eng_queue_finish(r->q, err))
        return -1;
    r->text_set[which] = true;
    r->st.text_ns += ts_now_ns() - t0;
    return 0;
}

static void silu_vec(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        x[i] = ts_silu_f32(x[i]);
}

/* e = time MLP(sinusoid(t)); e0 = time projection; every layer's
 * modulation rows and the head's. */
static void time_embed(ts_wan_run *r, double t) {
    if (r->emb_ok && r->emb_t == t) /* a step resumed in pieces: the rows are this t's */
        return;
    r->emb_t = t, r->emb_ok = true;
    const ts_wan *w = r->w;
    const ts_wan_config *c = &w->c;
    const int64_t D = c->dim, half = c->freq_dim / 2;
    for (int64_t j = 0; j < half; j++) {
        const double a = t * exp(-log(10000.0) * (double)j / (double)half);
        r->emb[j] = (float)cos(a);
        r->emb[half + j] = (float)sin(a);
    }
    ts_matmul(NULL, &w->t0, r->emb, c->freq_dim, r->h1, D, 1, r->scratch, 0);
    for (int64_t i = 0; i < D; i++)
        r->h1[i] += w->vec[w->t0b + i];
    silu_vec(r->h1, D);
    ts_matmul(NULL, &w->t2, r->h1, D, r->temb, D, 1, r->scratch, 0);
    for (int64_t i = 0; i < D; i++)
        r->temb[i] += w->vec[w->t2b + i];
    memcpy(r->h1, r->temb, (size_t)D * sizeof(float));
    silu_vec(r->h1, D);
    ts_matmul(NULL, &w->tp, r->h1, D, r->tproj, 6 * D, 1, r->scratch, 0);
    for (int64_t i = 0; i < 6 * D; i++)
        r->tproj[i] += w->vec[w->tpb + i];
    float *mod = r->act[S_MOD];
    for (int l = 0; l < c->n_layer; l++)
        for (int64_t i = 0; i < 6 * D; i++)
            mod[(int64_t)l * 6 * D + i] = w->vec[w->layers[l].mod + i] + r->tproj[i];
    float *hm = r->act[S_HMOD];
    for (int64_t i = 0; i < 2 * D; i++)
        hm[i] = w->vec[w->head_mod + i] + r->temb[i % D];
}

int ts_wan_run_forward(ts_wan_run *r, const float *latents, double t, int which, bool detail, float *out,
                       ts_err *err) {
    return ts_wan_run_part(r, latents, t, which, detail, 0, r->w->c.n_layer, out, err);
}

float *ts_wan_run_hidden(ts_wan_run *r) { return r->act[S_X]; }

uint64_t ts_wan_run_shared_bytes(const ts_wan_run *r) { return r->packs.shared_bytes; }

int ts_wan_run_part(ts_wan_run *r, const float *latents, double t, int which, bool detail, int l0, int l1, float *out,
                    ts_err *err) {
    if (which < 0 || which >= r->n_texts || !r->text_set[which])
        return ts_err_set(err, "wan: text %d was not set", which);
    if (detail && !r->lora)
        return ts_err_set(err, "wan: the detail expert needs an adapter (none was given to the run)");
    if (!isfinite(t))
        return ts_err_set(err, "wan: timestep %g is not finite", t);
    const ts_wan_config *c = &r->w->c;
    if (l0 < 0 || l1 < l0 || l1 > c->n_layer)
        return ts_err_set(err, "wan: blocks [%d, %d) of %d", l0, l1, c->n_layer);
    const int pt = c->patch[0], ph = c->patch[1], pw = c->patch[2];
    const int64_t P = (int64_t)pt * ph * pw, HW = (int64_t)r->H * r->W;
    uint64_t t0 = ts_now_ns();
    time_embed(r, t);
    if (l0 == 0) {
        /* patchify: token (f, h, w), value (c, i, j, k) of the Conv3d's weight order */
        float *patch = r->act[S_PATCH];
        for (int f = 0; f < r->Fp; f++)
            for (int h = 0; h < r->Hp; h++)
                for (int w = 0; w < r->Wp; w++) {
                    float *dst = patch + (((int64_t)f * r->Hp + h) * r->Wp + w) * c->in_ch * P;
                    for (int ch = 0; ch < c->in_ch; ch++)
                        for (int i = 0; i < pt; i++)
                            for (int j = 0; j < ph; j++)
                                for (int k = 0; k < pw; k++)
                                    *dst++ = latents[(int64_t)ch * r->F * HW + (int64_t)(f * pt + i) * HW +
                                                     (int64_t)(h * ph + j) * r->W + (w * pw + k)];
                }
    }
    if (sync(r, S_MOD, TS_SYNC_TO_DEVICE, err) || sync(r, S_HMOD, TS_SYNC_TO_DEVICE, err) ||
        (l0 == 0 && (sync(r, S_PATCH, TS_SYNC_TO_DEVICE, err) ||
                     run_graph(r, r->g_embed, &r->patch, NULL, 0, true, err))) ||
        (l0 > 0 && sync(r, S_X, TS_SYNC_TO_DEVICE, err)) || ts_eng_queue_finish(r->q, err))
        return ts_err_prefix(err, "wan: embedding");
    uint64_t t1 = ts_now_ns();
    r->st.embed_ns += t1 - t0;
    for (int l = l0; l < l1; l++) {
        int rc;
        if (r->n_chunks == 1) {
            rc = ts_eng_enqueue_bound(r->q, (detail ? r->bs_lora : r->bs_block)[which * c->n_layer + l], 0,
                                      (int)r->M, 0, err);
        } else { /* every chunk's K and V before any chunk's attention */
            ts_eng_bind b[S_COUNT];
            layer_binds(r, l, b);
            b[S_MOD].off = (uint64_t)l * 6 * (uint64_t)c->dim * 4;
            b[S_CK].off = b[S_CV].off = kv_off(r, which, detail && r->n_kvsets > 1, l);
            rc = enqueue_rows(r, detail ? r->g_pre_lora : r->g_pre, b, false, err) ||
                 enqueue_rows(r, detail ? r->g_post_lora : r->g_post, b, true, err);
        }
        if (rc || ts_eng_queue_finish(r->q, err))
            return ts_err_prefix(err, "wan: block %d", l);
        r->st.block_runs++;
    }
    uint64_t t2 = ts_now_ns();
    r->st.block_ns += t2 - t1;
    if (l1 < c->n_layer) { /* stopped inside the forward: the hidden state for whoever resumes it */
        if (sync(r, S_X, TS_SYNC_TO_HOST, err) || ts_eng_queue_finish(r->q, err))
            return ts_err_prefix(err, "wan: hidden state");
        return 0;
    }
    if (run_graph(r, r->g_head, &r->head, NULL, 0, true, err) || sync(r, S_OUT, TS_SYNC_TO_HOST, err) ||
        ts_eng_queue_finish(r->q, err))
        return ts_err_prefix(err, "wan: head");
    /* unpatchify: token (f, h, w), value (i, j, k, c) */
    const float *o = r->act[S_OUT];
    for (int f = 0; f < r->Fp; f++)
        for (int h = 0; h < r->Hp; h++)
            for (int w = 0; w < r->Wp; w++) {
                const float *src = o + (((int64_t)f * r->Hp + h) * r->Wp + w) * c->out_ch * P;
                for (int i = 0; i < pt; i++)
                    for (int j = 0; j < ph; j++)
                        for (int k = 0; k < pw; k++)
                            for (int ch = 0; ch < c->out_ch; ch++)
                                out[(int64_t)ch * r->F * HW + (int64_t)(f * pt + i) * HW + (int64_t)(h * ph + j) * r->W +
                                    (w * pw + k)] = *src++;
            }
    r->st.head_ns += ts_now_ns() - t2;
    r->st.forwards++;
    return 0;
}

void ts_wan_run_stats(const ts_wan_run *r, ts_wan_stats *out) { *out = r->st; }
