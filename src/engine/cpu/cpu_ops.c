/* cpu_ops.c - graph nodes on the CPU kernels (see cpu_ops.h). */
#include "engine/cpu/cpu_ops.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/block_ops.h"
#include "kernels/fastops.h"
#include "kernels/linear.h"
#include "kernels/ops.h"
#include "kernels/relattn.h"
#include "quant/quant.h"

#define TS_CPU_MAX_FUSE 4

/* cos/sin tables of a run's positions for one set of rope angles: the two
 * rope nodes of a layer, and every layer run of a chunk whose angles are
 * bound to the same memory (a model has one or two sets), share them
 * instead of computing n_rot/2 double sin/cos per token per node. */
typedef struct rope_tab {
    const double *freq; /* the angles they were made for (the bound address); NULL: none */
    double *angles;     /* [max n_rot / 2] a copy: memory rebound to other angles is not mistaken */
    int n_rot;
    int64_t pos0;
    int n_tok;
    float *cs; /* [width][max n_rot] */
} rope_tab;

struct ts_cpu_exec {
    ts_linear_ws *lin;   /* NULL when the graph has no fast matmul */
    float *attn_scratch; /* [n_threads][attn_stride]: attention, and the reference matmul's rows */
    int64_t attn_stride;
    rope_tab rope[2]; /* most recent first */
    /* matmul nodes that start a run of consecutive matmuls reading the same
     * input: run_len[i] is the run's length at its first node, 0 for the
     * others (ts_linear quantizes that input once for all of them) */
    int *run_len;
    /* grouped expert matmuls: the grouping of a run's (token, slot) pairs
     * and the expert matrices; cross-attention's score rows */
    int64_t *moe_offsets; /* [max n_expert + 1] */
    ts_moe_pair *moe_pairs; /* [width * max k] */
    ts_wmat *moe_w;         /* [max n_expert] */
    float *moe_gx, *moe_gy; /* fast expert matmuls: an expert's gathered inputs [width][n_in] and outputs */
    double *xattn_scratch;  /* [n_threads][xattn_stride] */
    int64_t xattn_stride;
    ts_cpu_matmul_fn mm; /* own-layout matmuls (NULL: none taken) */
    void *mm_ctx;
    bool failed; /* a node could not run in this run */
};

void ts_cpu_exec_set_matmul(ts_cpu_exec *x, ts_cpu_matmul_fn fn, void *ctx) {
    x->mm = fn;
    x->mm_ctx = ctx;
}

/* What the block ops need: pairs (width * k), experts, cross-attention
 * doubles per thread (the expert matmul's weight rows are in needs()). */
static void needs_blocks(const ts_eng_node *nodes, int n_nodes, int width, int64_t *pairs, int64_t *experts,
                         int64_t *xattn_row) {
    *pairs = *experts = *xattn_row = 0;
    for (int i = 0; i < n_nodes; i++) {
        const ts_eng_node *n = &nodes[i];
        if (n->op == TS_OP_MOE_MATMUL) {
            if ((int64_t)width * n->moe.k > *pairs)
                *pairs = (int64_t)width * n->moe.k;
            if (n->moe.n_expert > *experts)
                *experts = n->moe.n_expert;
        }
        if (n->op == TS_OP_CROSS_ATTN && (int64_t)n->xattn.n_kv + n->xattn.head_dim > *xattn_row)
            *xattn_row = (int64_t)n->xattn.n_kv + n->xattn.head_dim;
        /* relative attention: its keys are the run's rows, at most the width */
        if (n->op == TS_OP_REL_ATTN && (int64_t)width + n->relattn.head_dim > *xattn_row)
            *xattn_row = (int64_t)width + n->relattn.head_dim;
    }
    *xattn_row = (*xattn_row + 7) & ~(int64_t)7; /* threads never share a cache line */
}

/* What the nodes need: widest matmul input, widest attention scratch row,
 * largest n_rot. */
static void needs(const ts_eng_node *nodes, int n_nodes, int64_t *max_in, int64_t *attn_row, int *max_rot) {
    *max_in = 0;
    *attn_row = 0;
    *max_rot = 0;
    for (int i = 0; i < n_nodes; i++) {
        const ts_eng_node *n = &nodes[i];
        if (n->op == TS_OP_MATMUL && n->matmul.n_in > *max_in)
            *max_in = n->matmul.n_in;
        /* the reference matmul and the grouped expert matmul dequantize one
         * weight row per thread */
        if (n->op == TS_OP_MATMUL && n->matmul.ref && n->matmul.n_in > *attn_row)
            *attn_row = n->matmul.n_in;
        if (n->op == TS_OP_MOE_MATMUL && n->moe.n_in > *attn_row)
            *attn_row = n->moe.n_in;
        if (n->op == TS_OP_MOE_MATMUL && n->moe.fast && n->moe.n_in > *max_in)
            *max_in = n->moe.n_in;
        if (n->op == TS_OP_ATTENTION) {
            /* ts_attention: (pos0 + n_tok) scores + 2 * head_dim per thread;
             * ts_attention_fast: its tile buffers */
            int64_t r = (int64_t)n->attention.n_ctx + 2 * (int64_t)n->attention.head_dim;
            if (n->attention.fast) {
                const ts_attn_params ap = {.n_head = n->attention.n_head,
                                           .n_head_kv = n->attention.n_head_kv,
                                           .head_dim = n->attention.head_dim};
                const int64_t f = ts_attention_fast_scratch(&ap);
                if (f > r)
                    r = f;
            }
            if (r > *attn_row)
                *attn_row = r;
        }
        if (n->op == TS_OP_CROSS_ATTN && n->xattn.fast) {
            const ts_attn_params ap = {.n_head = n->xattn.n_head,
                                       .n_head_kv = n->xattn.n_head_kv,
                                       .head_dim = n->xattn.head_dim};
            const int64_t f = ts_attention_fast_scratch(&ap);
            if (f > *attn_row)
                *attn_row = f;
        }
        if (n->op == TS_OP_ROPE && n->rope.n_rot > *max_rot)
            *max_rot = n->rope.n_rot;
    }
    *attn_row = (*attn_row + 15) & ~(int64_t)15; /* threads never share a cache line */
}

/* The widest input or output row of the fast expert matmuls (0: none). */
static int64_t moe_fast_row(const ts_eng_node *nodes, int n_nodes) {
    int64_t r = 0;
    for (int i = 0; i < n_nodes; i++)
        if (nodes[i].op == TS_OP_MOE_MATMUL && nodes[i].moe.fast) {
            if (nodes[i].moe.n_in > r) r = nodes[i].moe.n_in;
            if (nodes[i].moe.n_out > r) r = nodes[i].moe.n_out;
        }
    return r;
}

uint64_t ts_cpu_exec_bytes(const ts_eng_node *nodes, int n_nodes, int width, int n_threads) {
    int64_t max_in, attn_row;
    int max_rot;
    needs(nodes, n_nodes, &max_in, &attn_row, &max_rot);
    uint64_t b = 0;
    /* ts_linear_ws: activation rows (< 4 bytes per input value in all its
     * formats together) per token, plus one f32 row per thread */
    if (max_in)
        b += (uint64_t)max_in * 4 * ((uint64_t)width + (uint64_t)n_threads) + 4096;
    b += (uint64_t)attn_row * (uint64_t)n_threads * 4;
    b += 2 * ((uint64_t)max_rot * (uint64_t)width * 4 + (uint64_t)max_rot * 4 + 8);
    b += (uint64_t)n_nodes * sizeof(int);
    int64_t pairs, experts, xattn_row;
    needs_blocks(nodes, n_nodes, width, &pairs, &experts, &xattn_row);
    b += (uint64_t)(experts + 1) * 8 + (uint64_t)pairs * sizeof(ts_moe_pair) + (uint64_t)experts * sizeof(ts_wmat);
    b += (uint64_t)moe_fast_row(nodes, n_nodes) * 2 * (uint64_t)width * 4;
    b += (uint64_t)xattn_row * (uint64_t)n_threads * 8;
    return b;
}

ts_cpu_exec *ts_cpu_exec_new(const ts_eng_node *nodes, int n_nodes, int width, int n_threads, int hi, ts_err *err) {
    int64_t max_in, attn_row;
    int max_rot;
    needs(nodes, n_nodes, &max_in, &attn_row, &max_rot);
    ts_cpu_exec *x = calloc(1, sizeof *x);
    if (!x)
        goto oom;
    if (max_in) {
        x->lin = ts_linear_ws_new(max_in, width, n_threads, err);
        if (!x->lin) {
            free(x);
            return NULL;
        }
        ts_linear_ws_set_hi(x->lin, hi);
    }
    if (attn_row) {
        x->attn_stride = attn_row;
        x->attn_scratch = calloc((size_t)attn_row * (size_t)n_threads, sizeof(float));
        if (!x->attn_scratch)
            goto oom;
    }
    int64_t pairs, experts, xattn_row;
    needs_blocks(nodes, n_nodes, width, &pairs, &experts, &xattn_row);
    if (experts && (!(x->moe_offsets = calloc((size_t)experts + 1, sizeof *x->moe_offsets)) ||
                    !(x->moe_pairs = calloc((size_t)pairs, sizeof *x->moe_pairs)) ||
                    !(x->moe_w = calloc((size_t)experts, sizeof *x->moe_w))))
        goto oom;
    const int64_t mrow = moe_fast_row(nodes, n_nodes);
    if (mrow && (!(x->moe_gx = calloc((size_t)mrow * (size_t)width, sizeof(float))) ||
                 !(x->moe_gy = calloc((size_t)mrow * (size_t)width, sizeof(float)))))
        goto oom;
    if (xattn_row) {
        x->xattn_stride = xattn_row;
        if (!(x->xattn_scratch = calloc((size_t)xattn_row * (size_t)n_threads, sizeof(double))))
            goto oom;
    }
    for (int j = 0; j < 2; j++)
        if (!(x->rope[j].cs = calloc((size_t)(max_rot ? max_rot : 1) * (size_t)width, sizeof(float))) ||
            !(x->rope[j].angles = calloc((size_t)(max_rot / 2 + 1), sizeof(double))))
            goto oom;
    if (!(x->run_len = calloc((size_t)(n_nodes ? n_nodes : 1), sizeof(int))))
        goto oom;
    /* runs of up to TS_CPU_MAX_FUSE consecutive fast matmuls over one input
     * (q, k, v; gate, up), none of them writing that input */
    for (int i = 0; i < n_nodes;) {
        const ts_eng_node *n = &nodes[i];
        if (n->op != TS_OP_MATMUL || n->matmul.ref) {
            i++;
            continue;
        }
        int k = 1;
        while (n->matmul.y.slot != n->matmul.x.slot && i + k < n_nodes && k < TS_CPU_MAX_FUSE) {
            const ts_eng_node *m = &nodes[i + k];
            if (m->op != TS_OP_MATMUL || m->matmul.ref || m->matmul.x.slot != n->matmul.x.slot ||
                m->matmul.x.off != n->matmul.x.off || m->matmul.n_in != n->matmul.n_in ||
                m->matmul.y.slot == n->matmul.x.slot)
                break;
            k++;
        }
        x->run_len[i] = k;
        i += k;
    }
    return x;
oom:
    ts_cpu_exec_free(x);
    ts_err_set(err, "out of memory allocating a graph's CPU work space");
    return NULL;
}

void ts_cpu_exec_free(ts_cpu_exec *x) {
    if (!x)
        return;
    ts_linear_ws_free(x->lin);
    free(x->attn_scratch);
    for (int j = 0; j < 2; j++) {
        free(x->rope[j].cs);
        free(x->rope[j].angles);
    }
    free(x->run_len);
    free(x->moe_offsets);
    free(x->moe_pairs);
    free(x->moe_w);
    free(x->moe_gx);
    free(x->moe_gy);
    free(x->xattn_scratch);
    free(x);
}

static void *at(uint8_t *const *base, ts_eng_ref r) { return r.slot < 0 ? NULL : base[r.slot] + r.off; }

static ts_wmat node_wmat(const ts_eng_node *n, const ts_eng_bind *binds, uint8_t *const *base) {
    const ts_eng_bind *b = &binds[n->matmul.w.slot];
    const uint8_t *wp = at(base, n->matmul.w);
    return (ts_wmat){
        .type = b->wtype,
        .data = wp,
        .n_in = n->matmul.n_in,
        .n_out = n->matmul.n_out,
        .row_bytes = (size_t)b->row_bytes,
        .packed = b->layout == TS_WL_PANELS ? wp : NULL,
    };
}

/* The cos/sin table of positions pos0 .. pos0 + n_tok - 1 for the angles
 * at freq: made once, then reused while the same angles and positions come
 * back (the k rope after the q rope, the next layers of the run). */
static const float *rope_table(ts_cpu_exec *x, const double *freq, int n_rot, int64_t pos0, int n_tok) {
    for (int j = 0; j < 2; j++) {
        rope_tab *t = &x->rope[j];
        if (t->freq == freq && t->n_rot == n_rot && t->pos0 == pos0 && t->n_tok >= n_tok &&
            !memcmp(t->angles, freq, (size_t)(n_rot / 2) * sizeof(double)))
            return t->cs;
    }
    /* replace the older one */
    rope_tab tmp = x->rope[1];
    x->rope[1] = x->rope[0];
    x->rope[0] = tmp;
    rope_tab *t = &x->rope[0];
    for (int i = 0; i < n_tok; i++)
        ts_rope_cs(freq, n_rot, pos0 + i, t->cs + (int64_t)i * n_rot);
    memcpy(t->angles, freq, (size_t)(n_rot / 2) * sizeof(double));
    t->freq = freq, t->n_rot = n_rot, t->pos0 = pos0, t->n_tok = n_tok;
    return t->cs;
}

static void exec_node(ts_cpu_exec *x, ts_threadpool *pool, const ts_eng_node *nodes, int ni, const ts_eng_bind *binds,
                      uint8_t *const *base, int64_t pos0, int n_tok, int64_t n_kv) {
    const ts_eng_node *n = &nodes[ni];
    switch (n->op) {
    case TS_OP_MATMUL: {
        if (n->matmul.ref) {
            /* the reference path (TS_KERNELS=ref), as the CPU forward ran it */
            const ts_wmat w = node_wmat(n, binds, base);
            ts_matmul(pool, &w, at(base, n->matmul.x), n->matmul.n_in, at(base, n->matmul.y), n->matmul.n_out, n_tok,
                      x->attn_scratch, x->attn_stride);
            break;
        }
        const int k = x->run_len[ni];
        if (!k)
            break; /* computed with the first matmul of its run */
        ts_eng_clip *clip = n->matmul.clipped ? at(base, n->matmul.clip) : NULL;
        if (clip && (clip->flags & TS_CLIP_COLLECT) && clip->n_in == (uint32_t)n->matmul.n_in)
            ts_eng_clip_collect(clip, at(base, n->matmul.x), n_tok);
        ts_wmat w[TS_CPU_MAX_FUSE];
        const ts_wmat *wl[TS_CPU_MAX_FUSE];
        const void *wo[TS_CPU_MAX_FUSE];
        float *y[TS_CPU_MAX_FUSE], *yo[TS_CPU_MAX_FUSE];
        int n_lin = 0, n_own = 0;
        for (int i = 0; i < k; i++) {
            const ts_eng_node *m = &nodes[ni + i];
            if (binds[m->matmul.w.slot].layout == TS_WL_ENGINE) { /* the engine's own kernels */
                wo[n_own] = at(base, m->matmul.w);
                yo[n_own++] = at(base, m->matmul.y);
                continue;
            }
            w[n_lin] = node_wmat(m, binds, base);
            wl[n_lin] = &w[n_lin];
            y[n_lin++] = at(base, m->matmul.y);
        }
        if (n_lin)
            ts_linear(pool, x->lin, n_lin, wl, y, at(base, n->matmul.x), n_tok);
        if (n_own && (!x->mm || x->mm(x->mm_ctx, pool, n_own, wo, yo, at(base, n->matmul.x), n_tok, clip)))
            x->failed = true;
        break;
    }
    case TS_OP_RMSNORM: {
        /* rows are independent: large batches split over the pool (same bits) */
        ts_rmsnorm_rows(pool, at(base, n->rmsnorm.y), at(base, n->rmsnorm.x), at(base, n->rmsnorm.w), n->rmsnorm.n,
                        (int64_t)n_tok * n->rmsnorm.rows_per_tok, n->rmsnorm.eps);
        break;
    }
    case TS_OP_ROPE: {
        float *xs = at(base, n->rope.x);
        const int n_rot = n->rope.n_rot;
        const float *cs = rope_table(x, at(base, n->rope.freq), n_rot, pos0, n_tok);
        const int64_t row = (int64_t)n->rope.n_head * n->rope.head_dim;
        for (int t = 0; t < n_tok; t++)
            ts_rope_apply(xs + t * row, n->rope.n_head, n->rope.head_dim, n_rot, n->rope.neox, cs + (int64_t)t * n_rot);
        break;
    }
    case TS_OP_KV_STORE: {
        const int64_t D = n->kv_store.dim;
        const float *k = at(base, n->kv_store.k), *v = at(base, n->kv_store.v);
        uint8_t *kc = at(base, n->kv_store.kc), *vc = at(base, n->kv_store.vc);
        for (int t = 0; t < n_tok; t++) {
            const size_t off = (size_t)(pos0 + t) * (size_t)D;
            const float *kt = k + (int64_t)t * D, *vt = v + (int64_t)t * D;
            if (!n->kv_store.f16) {
                memcpy((float *)(void *)kc + off, kt, (size_t)D * sizeof(float));
                memcpy((float *)(void *)vc + off, vt, (size_t)D * sizeof(float));
            } else {
                uint16_t *kd = (uint16_t *)(void *)kc + off, *vd = (uint16_t *)(void *)vc + off;
                for (int64_t i = 0; i < D; i++) {
                    kd[i] = ts_f32_to_f16(kt[i]);
                    vd[i] = ts_f32_to_f16(vt[i]);
                }
            }
        }
        break;
    }
    case TS_OP_ATTENTION: {
        const ts_attn_params ap = {
            .n_head = n->attention.n_head,
            .n_head_kv = n->attention.n_head_kv,
            .head_dim = n->attention.head_dim,
            .scale = n->attention.scale,
            .softcap = n->attention.softcap,
            .n_swa = n->attention.n_swa,
            .kv_f16 = n->attention.kv_f16,
            .kv_stride = (int64_t)n->attention.n_head_kv * n->attention.head_dim,
            .n_kv = n_kv, /* 0 causal; > 0 the window mode of ts_forward_window */
        };
        /* the forward's own choice of kernel, so that a position computes
         * bit for bit what the CPU forward computes */
        if (n->attention.fast)
            ts_attention_fast(pool, &ap, at(base, n->attention.q), at(base, n->attention.kc),
                              at(base, n->attention.vc), pos0, n_tok, at(base, n->attention.out), x->attn_scratch,
                              x->attn_stride);
        else
            ts_attention(pool, &ap, at(base, n->attention.q), at(base, n->attention.kc), at(base, n->attention.vc),
                         pos0, n_tok, at(base, n->attention.out), x->attn_scratch, x->attn_stride);
        break;
    }
    case TS_OP_SWIGLU:
    case TS_OP_GEGLU:
        ts_glu(pool, n->op == TS_OP_GEGLU, n->glu.fast, at(base, n->glu.out), at(base, n->glu.gate),
               at(base, n->glu.up), (int64_t)n_tok * n->glu.n);
        break;
    case TS_OP_ADD: {
        float *y = at(base, n->add.y);
        const float *a = at(base, n->add.x);
        const int64_t len = (int64_t)n_tok * n->add.n;
        for (int64_t i = 0; i < len; i++)
            y[i] += a[i];
        break;
    }
    case TS_OP_ADD_ROW: {
        float *y = at(base, n->add.y);
        const float *b = at(base, n->add.x);
        for (int t = 0; t < n_tok; t++)
            for (int64_t i = 0; i < n->add.n; i++)
                y[(int64_t)t * n->add.n + i] += b[i];
        break;
    }
    case TS_OP_LAYERNORM:
        ts_layernorm_f32(pool, at(base, n->layernorm.y), at(base, n->layernorm.x), at(base, n->layernorm.w),
                         at(base, n->layernorm.b), n_tok, n->layernorm.n, n->layernorm.eps);
        break;
    case TS_OP_MUL:
        ts_mul_f32(at(base, n->mul.y), at(base, n->mul.a), at(base, n->mul.b), n->mul.b_row, n_tok, n->mul.n);
        break;
    case TS_OP_MODULATE:
        ts_modulate_f32(at(base, n->modulate.y), at(base, n->modulate.x), at(base, n->modulate.shift),
                        at(base, n->modulate.scale), n->modulate.mod_stride, n->modulate.tok_per_sample, n_tok,
                        n->modulate.n);
        break;
    case TS_OP_GATED_ADD:
        ts_gated_residual_f32(at(base, n->modulate.x), at(base, n->modulate.y), at(base, n->modulate.scale),
                              n->modulate.mod_stride, n->modulate.tok_per_sample, n_tok, n->modulate.n);
        break;
    case TS_OP_MOE_ROUTE:
        ts_moe_route(at(base, n->route.logits), n_tok, n->route.n_expert, n->route.k, (ts_moe_score)n->route.score,
                     n->route.norm_topk, at(base, n->route.ids), at(base, n->route.weights));
        break;
    case TS_OP_MOE_MATMUL: {
        const int32_t *ids = at(base, n->moe.ids);
        /* the ids come from a route node of this graph: in range by
         * construction, but a bad one must not index past the experts */
        if (ts_moe_group(ids, n_tok, n->moe.k, n->moe.n_expert, x->moe_offsets, x->moe_pairs, NULL))
            break;
        const ts_eng_bind *b = &binds[n->moe.w.slot];
        const uint8_t *w0 = at(base, n->moe.w);
        for (int e = 0; e < n->moe.n_expert; e++) {
            const uint8_t *we = w0 + (size_t)e * b->expert_bytes;
            x->moe_w[e] = (ts_wmat){.type = b->wtype,
                                    .data = we,
                                    .n_in = n->moe.n_in,
                                    .n_out = n->moe.n_out,
                                    .row_bytes = (size_t)b->row_bytes,
                                    .packed = b->layout == TS_WL_PANELS ? we : NULL};
        }
        float *y = at(base, n->moe.y);
        if (!n->moe.accumulate)
            memset(y, 0, (size_t)(n->moe.y_by_pair ? n_tok * n->moe.k : n_tok) * (size_t)n->moe.n_out * sizeof(float));
        if (n->moe.fast && x->lin && x->moe_gx)
            ts_moe_linear(pool, x->lin, x->moe_w, n->moe.n_expert, x->moe_offsets, x->moe_pairs,
                          at(base, n->moe.weights), n->moe.k, at(base, n->moe.x), n->moe.n_in, n->moe.x_by_pair, y,
                          n->moe.n_out, n->moe.y_by_pair, x->moe_gx, x->moe_gy);
        else
            ts_moe_matmul(pool, x->moe_w, n->moe.n_expert, x->moe_offsets, x->moe_pairs, at(base, n->moe.weights),
                          n->moe.k, at(base, n->moe.x), n->moe.n_in, n->moe.x_by_pair, y, n->moe.n_out,
                          n->moe.y_by_pair, x->attn_scratch, x->attn_stride);
        break;
    }
    case TS_OP_CROSS_ATTN: {
        const ts_xattn_params ap = {.n_head = n->xattn.n_head,
                                    .n_head_kv = n->xattn.n_head_kv,
                                    .head_dim = n->xattn.head_dim,
                                    .scale = n->xattn.scale};
        if (n->xattn.fast) {
            /* the tiled kernel's non-causal mode over f32 rows: every query
             * sees keys 0 .. n_kv-1 whatever its position */
            const ts_attn_params fp = {.n_head = n->xattn.n_head,
                                       .n_head_kv = n->xattn.n_head_kv,
                                       .head_dim = n->xattn.head_dim,
                                       .scale = n->xattn.scale,
                                       .kv_stride = (int64_t)n->xattn.n_head_kv * n->xattn.head_dim,
                                       .n_kv = n->xattn.n_kv};
            ts_attention_fast(pool, &fp, at(base, n->xattn.q), at(base, n->xattn.k), at(base, n->xattn.v), 0,
                              n_tok, at(base, n->xattn.out), x->attn_scratch, x->attn_stride);
            break;
        }
        ts_cross_attention(pool, &ap, at(base, n->xattn.q), n_tok, at(base, n->xattn.k), at(base, n->xattn.v),
                           n->xattn.n_kv, at(base, n->xattn.out), x->xattn_scratch, x->xattn_stride);
        break;
    }
    case TS_OP_GELU:
        if (n->act.fast)
            ts_gelu_fast(pool, at(base, n->act.y), at(base, n->act.x), (int64_t)n_tok * n->act.n);
        else
            ts_gelu_f32(pool, at(base, n->act.y), at(base, n->act.x), (int64_t)n_tok * n->act.n);
        break;
    case TS_OP_ROPE_TAB:
        ts_rope_tab_f32(pool, at(base, n->rope_tab.x), at(base, n->rope_tab.tab), n_tok, n->rope_tab.n_head,
                        n->rope_tab.head_dim);
        break;
    case TS_OP_REL_ATTN: {
        const ts_relattn_params ap = {.n_head = n->relattn.n_head,
                                      .head_dim = n->relattn.head_dim,
                                      .max_rel = n->relattn.max_rel,
                                      .scale = n->relattn.scale};
        /* the run's n_kv is the key count (a padding mask); 0: every row */
        const int64_t keys = n_kv > 0 && n_kv < n_tok ? n_kv : n_tok;
        ts_rel_attention(pool, &ap, at(base, n->relattn.q), n_tok, at(base, n->relattn.k), at(base, n->relattn.v),
                         keys, at(base, n->relattn.bias), at(base, n->relattn.out), x->xattn_scratch,
                         x->xattn_stride);
        break;
    }
    default: break;
    }
}

int ts_cpu_exec_run(ts_cpu_exec *x, ts_threadpool *pool, const ts_eng_node *nodes, int n_nodes,
                    const ts_eng_bind *binds, uint8_t *const *base, int64_t pos0, int n_tok, int64_t n_kv) {
    x->failed = false;
    for (int i = 0; i < n_nodes && !x->failed; i++)
        exec_node(x, pool, nodes, i, binds, base, pos0, n_tok, n_kv);
    return x->failed ? -1 : 0;
}
