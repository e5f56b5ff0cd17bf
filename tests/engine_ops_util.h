/* engine_ops_util.h - op-by-op harness of the engine tests: one node, its
 * operands uploaded into DEVICE buffers, run on an engine, every operand
 * read back; and the CPU reference of each op (the kernel the forward
 * calls). Included after engine_test_util.h. */
#ifndef TS_TEST_ENGINE_OPS_UTIL_H
#define TS_TEST_ENGINE_OPS_UTIL_H

#include "engine_test_util.h"

#define OP_MAX_SLOTS 6

typedef struct op_case {
    ts_eng_node node;
    int n_slots;
    uint8_t *in[OP_MAX_SLOTS];  /* host contents before the run */
    uint8_t *out[OP_MAX_SLOTS]; /* contents after (engine), filled by op_run */
    uint8_t *ref[OP_MAX_SLOTS]; /* contents after (reference), filled by the test */
    size_t bytes[OP_MAX_SLOTS];
    ts_eng_bind meta[OP_MAX_SLOTS]; /* wtype/row_bytes/layout for weight slots */
    int width, n_tok;
    int64_t pos0;
} op_case;

static int op_slot(op_case *c, size_t bytes) {
    const int s = c->n_slots++;
    c->bytes[s] = bytes;
    c->in[s] = t_alloc(bytes);
    c->out[s] = t_alloc(bytes);
    c->ref[s] = t_alloc(bytes);
    return s;
}

static int op_slot_f32(op_case *c, int64_t n, float scale) {
    const int s = op_slot(c, (size_t)n * sizeof(float));
    t_fill((float *)(void *)c->in[s], n, scale);
    memcpy(c->ref[s], c->in[s], c->bytes[s]);
    return s;
}

static void op_free(op_case *c) {
    for (int s = 0; s < c->n_slots; s++)
        free(c->in[s]), free(c->out[s]), free(c->ref[s]);
}

/* Runs c on e: DEVICE buffers (HOST where the engine has no DEVICE memory
 * semantics does not matter here), upload, graph (window mode n_kv, 0 for
 * none: ts_eng_enqueue_graph_window), download. 0 or -1. */
static int op_run_window(ts_engine *e, op_case *c, int64_t n_kv, ts_err *err) {
    ts_eng_buf *b[OP_MAX_SLOTS] = {0};
    ts_eng_bind binds[OP_MAX_SLOTS];
    int rc = -1;
    ts_eng_queue *q = ts_eng_queue_new(e, err);
    ts_eng_graph *g = NULL;
    if (!q)
        return -1;
    for (int s = 0; s < c->n_slots; s++) {
        b[s] = ts_eng_buf_alloc(e, TS_MEM_DEVICE, c->bytes[s], err);
        if (!b[s])
            goto done;
        binds[s] = c->meta[s];
        binds[s].buf = b[s];
        binds[s].off = 0;
        if (ts_eng_enqueue_write(q, b[s], 0, c->in[s], c->bytes[s], err))
            goto done;
    }
    g = ts_eng_graph_new(e, &c->node, 1, c->n_slots, c->width, err);
    if (!g)
        goto done;
    if (ts_eng_enqueue_graph_window(q, g, binds, c->n_slots, c->pos0, c->n_tok, n_kv, err))
        goto done;
    for (int s = 0; s < c->n_slots; s++)
        if (ts_eng_enqueue_read(q, b[s], 0, c->out[s], c->bytes[s], err))
            goto done;
    if (ts_eng_queue_finish(q, err))
        goto done;
    rc = 0;
done:
    ts_eng_queue_finish(q, NULL);
    ts_eng_graph_free(g);
    for (int s = 0; s < c->n_slots; s++)
        ts_eng_buf_free(b[s]);
    ts_eng_queue_free(q);
    return rc;
}

static int op_run(ts_engine *e, op_case *c, ts_err *err) { return op_run_window(e, c, 0, err); }

/* The reference of c's node on the host (into c->ref), with the kernel the
 * CPU forward calls. exact_mm: matmuls use the f32 reference (ts_matmul:
 * exact dequantization, f32 dot) instead of ts_linear. */
static void op_reference(op_case *c, int exact_mm) {
    const ts_eng_node *n = &c->node;
    uint8_t **r = c->ref;
    const int T = c->n_tok;
    ts_err err = {{0}};
    ts_threadpool *pool = ts_threadpool_new(1, &err);
    NEED(pool, err);
#define P(ref) ((void *)(r[(ref).slot] + (ref).off))
    switch (n->op) {
    case TS_OP_MATMUL: {
        const ts_eng_bind *mb = &c->meta[n->matmul.w.slot];
        const ts_wmat w = {.type = mb->wtype,
                           .data = P(n->matmul.w),
                           .n_in = n->matmul.n_in,
                           .n_out = n->matmul.n_out,
                           .row_bytes = mb->row_bytes,
                           .packed = mb->layout == TS_WL_PANELS ? P(n->matmul.w) : NULL};
        if (exact_mm) {
            float *scratch = t_alloc((size_t)n->matmul.n_in * sizeof(float));
            ts_matmul(pool, &w, P(n->matmul.x), n->matmul.n_in, P(n->matmul.y), n->matmul.n_out, T, scratch,
                      n->matmul.n_in);
            free(scratch);
        } else {
            ts_linear_ws *ws = ts_linear_ws_new(n->matmul.n_in, T, 1, &err);
            NEED(ws, err);
            const ts_wmat *wl[1] = {&w};
            float *y[1] = {P(n->matmul.y)};
            ts_linear(pool, ws, 1, wl, y, P(n->matmul.x), T);
            ts_linear_ws_free(ws);
        }
        break;
    }
    case TS_OP_RMSNORM:
        t_ref_norm(P(n->rmsnorm.y), P(n->rmsnorm.x), n->rmsnorm.w.slot >= 0 ? P(n->rmsnorm.w) : NULL, n->rmsnorm.n,
                   (int64_t)T * n->rmsnorm.rows_per_tok, n->rmsnorm.eps);
        break;
    case TS_OP_ROPE: {
        float cs[512];
        const int64_t row = (int64_t)n->rope.n_head * n->rope.head_dim;
        for (int t = 0; t < T; t++)
            ts_rope_f32((float *)P(n->rope.x) + t * row, n->rope.n_head, n->rope.head_dim, n->rope.n_rot, n->rope.neox,
                        P(n->rope.freq), c->pos0 + t, cs);
        break;
    }
    case TS_OP_KV_STORE: {
        const int64_t D = n->kv_store.dim;
        for (int t = 0; t < T; t++)
            for (int64_t i = 0; i < D; i++) {
                const float k = ((float *)P(n->kv_store.k))[t * D + i], v = ((float *)P(n->kv_store.v))[t * D + i];
                const int64_t o = (c->pos0 + t) * D + i;
                if (n->kv_store.f16) {
                    ((uint16_t *)P(n->kv_store.kc))[o] = ts_f32_to_f16(k);
                    ((uint16_t *)P(n->kv_store.vc))[o] = ts_f32_to_f16(v);
                } else {
                    ((float *)P(n->kv_store.kc))[o] = k;
                    ((float *)P(n->kv_store.vc))[o] = v;
                }
            }
        break;
    }
    case TS_OP_ATTENTION: {
        const ts_attn_params ap = {.n_head = n->attention.n_head,
                                   .n_head_kv = n->attention.n_head_kv,
                                   .head_dim = n->attention.head_dim,
                                   .scale = n->attention.scale,
                                   .softcap = n->attention.softcap,
                                   .n_swa = n->attention.n_swa,
                                   .kv_f16 = n->attention.kv_f16,
                                   .kv_stride = (int64_t)n->attention.n_head_kv * n->attention.head_dim};
        const int64_t stride = n->attention.n_ctx + 2 * n->attention.head_dim;
        float *scratch = t_alloc((size_t)stride * sizeof(float));
        ts_attention(pool, &ap, P(n->attention.q), P(n->attention.kc), P(n->attention.vc), c->pos0, T,
                     P(n->attention.out), scratch, stride);
        free(scratch);
        break;
    }
    case TS_OP_SWIGLU: ts_swiglu_f32(P(n->glu.out), P(n->glu.gate), P(n->glu.up), (int64_t)T * n->glu.n); break;
    case TS_OP_GEGLU: ts_geglu_tanh_f32(P(n->glu.out), P(n->glu.gate), P(n->glu.up), (int64_t)T * n->glu.n); break;
    case TS_OP_ADD: {
        float *y = P(n->add.y);
        const float *x = P(n->add.x);
        for (int64_t i = 0; i < (int64_t)T * n->add.n; i++)
            y[i] += x[i];
        break;
    }
    case TS_OP_ADD_ROW: {
        float *y = P(n->add.y);
        const float *x = P(n->add.x);
        for (int t = 0; t < T; t++)
            for (int64_t i = 0; i < n->add.n; i++)
                y[t * n->add.n + i] += x[i];
        break;
    }
    default: break;
    }
#undef P
    ts_threadpool_free(pool);
}

/* ---- the op cases, shared by both test programs ---- */

/* builders fill c (slots + node); the caller runs and compares */
static void case_matmul(op_case *c, uint32_t type, int64_t n_in, int64_t n_out, int width, int n_tok, int panels) {
    memset(c, 0, sizeof *c);
    c->width = width, c->n_tok = n_tok;
    t_mat m = t_mat_new(type, n_in, n_out, 0.5f, panels);
    const int ws = op_slot(c, m.panels ? ts_rp_matrix_bytes(type, n_in, n_out) : m.rb * (size_t)n_out);
    memcpy(c->in[ws], m.panels ? m.panels : m.rows, c->bytes[ws]);
    memcpy(c->ref[ws], c->in[ws], c->bytes[ws]);
    c->meta[ws] = (ts_eng_bind){.wtype = type, .row_bytes = m.rb, .layout = m.panels ? TS_WL_PANELS : TS_WL_ROWS};
    t_mat_free(&m);
    const int xs = op_slot_f32(c, (int64_t)width * n_in, 1.0f);
    const int ys = op_slot_f32(c, (int64_t)width * n_out, 0.0f);
    c->node = (ts_eng_node){
        .op = TS_OP_MATMUL,
        .matmul = {
            .w = TS_ENG_REF(ws, 0), .x = TS_ENG_REF(xs, 0), .y = TS_ENG_REF(ys, 0), .n_in = n_in, .n_out = n_out}};
}

static void case_rmsnorm(op_case *c, int64_t n, int rpt, int with_w, int in_place, int n_tok) {
    memset(c, 0, sizeof *c);
    c->width = c->n_tok = n_tok;
    const int xs = op_slot_f32(c, (int64_t)n_tok * rpt * n, 2.0f);
    const int ys = in_place ? xs : op_slot_f32(c, (int64_t)n_tok * rpt * n, 0.0f);
    const int wsl = with_w ? op_slot_f32(c, n, 1.5f) : -1;
    c->node = (ts_eng_node){.op = TS_OP_RMSNORM,
                            .rmsnorm = {.x = TS_ENG_REF(xs, 0),
                                        .y = TS_ENG_REF(ys, 0),
                                        .w = wsl >= 0 ? TS_ENG_REF(wsl, 0) : TS_ENG_NOREF,
                                        .n = n,
                                        .rows_per_tok = rpt,
                                        .eps = 1e-5f}};
}

static void case_rope(op_case *c, int n_head, int hd, int n_rot, int neox, int64_t pos0, int n_tok) {
    memset(c, 0, sizeof *c);
    c->width = c->n_tok = n_tok;
    c->pos0 = pos0;
    const int xs = op_slot_f32(c, (int64_t)n_tok * n_head * hd, 1.0f);
    const int fs = op_slot(c, ts_eng_rope_freq_bytes(n_rot));
    double inv[256];
    ts_rope_inv_freq(inv, n_rot, 10000.0, 1.0, NULL, NULL);
    ts_eng_rope_freq_pack(inv, n_rot, c->in[fs]);
    memcpy(c->ref[fs], c->in[fs], c->bytes[fs]);
    c->node = (ts_eng_node){.op = TS_OP_ROPE,
                            .rope = {.x = TS_ENG_REF(xs, 0),
                                     .freq = TS_ENG_REF(fs, 0),
                                     .n_head = n_head,
                                     .head_dim = hd,
                                     .n_rot = n_rot,
                                     .neox = neox}};
}

static void case_kv_store(op_case *c, int64_t dim, int n_ctx, int f16, int64_t pos0, int n_tok) {
    memset(c, 0, sizeof *c);
    c->width = c->n_tok = n_tok;
    c->pos0 = pos0;
    const int ks = op_slot_f32(c, (int64_t)n_tok * dim, 3.0f);
    const int vs = op_slot_f32(c, (int64_t)n_tok * dim, 3.0f);
    const size_t es = f16 ? 2 : 4;
    const int kcs = op_slot(c, (size_t)n_ctx * (size_t)dim * es), vcs = op_slot(c, (size_t)n_ctx * (size_t)dim * es);
    c->node = (ts_eng_node){.op = TS_OP_KV_STORE,
                            .kv_store = {.k = TS_ENG_REF(ks, 0),
                                         .v = TS_ENG_REF(vs, 0),
                                         .kc = TS_ENG_REF(kcs, 0),
                                         .vc = TS_ENG_REF(vcs, 0),
                                         .dim = dim,
                                         .n_ctx = n_ctx,
                                         .f16 = f16}};
}

static void case_attention(op_case *c, int nh, int nkv, int hd, int n_swa, float softcap, int f16, int64_t pos0,
                           int n_tok, int n_ctx) {
    memset(c, 0, sizeof *c);
    c->width = c->n_tok = n_tok;
    c->pos0 = pos0;
    const int qs = op_slot_f32(c, (int64_t)n_tok * nh * hd, 1.0f);
    const int64_t cn = (int64_t)n_ctx * nkv * hd;
    const size_t es = f16 ? 2 : 4;
    const int kcs = op_slot(c, (size_t)cn * es), vcs = op_slot(c, (size_t)cn * es);
    for (int64_t i = 0; i < cn; i++) {
        const float k = t_unif() * 2.0f, v = t_unif();
        if (f16) {
            ((uint16_t *)(void *)c->in[kcs])[i] = ts_f32_to_f16(k);
            ((uint16_t *)(void *)c->in[vcs])[i] = ts_f32_to_f16(v);
        } else {
            ((float *)(void *)c->in[kcs])[i] = k;
            ((float *)(void *)c->in[vcs])[i] = v;
        }
    }
    memcpy(c->ref[kcs], c->in[kcs], c->bytes[kcs]);
    memcpy(c->ref[vcs], c->in[vcs], c->bytes[vcs]);
    const int os = op_slot_f32(c, (int64_t)n_tok * nh * hd, 0.0f);
    c->node = (ts_eng_node){.op = TS_OP_ATTENTION,
                            .attention = {.q = TS_ENG_REF(qs, 0),
                                          .kc = TS_ENG_REF(kcs, 0),
                                          .vc = TS_ENG_REF(vcs, 0),
                                          .out = TS_ENG_REF(os, 0),
                                          .n_head = nh,
                                          .n_head_kv = nkv,
                                          .head_dim = hd,
                                          .n_swa = n_swa,
                                          .n_ctx = n_ctx,
                                          .scale = 1.0f / sqrtf((float)hd),
                                          .softcap = softcap,
                                          .kv_f16 = f16}};
}

static void case_glu(op_case *c, ts_op op, int64_t n, int n_tok, int in_place) {
    memset(c, 0, sizeof *c);
    c->width = c->n_tok = n_tok;
    const int gs = op_slot_f32(c, (int64_t)n_tok * n, 4.0f);
    const int us = op_slot_f32(c, (int64_t)n_tok * n, 2.0f);
    const int os = in_place ? gs : op_slot_f32(c, (int64_t)n_tok * n, 0.0f);
    c->node = (ts_eng_node){
        .op = op, .glu = {.gate = TS_ENG_REF(gs, 0), .up = TS_ENG_REF(us, 0), .out = TS_ENG_REF(os, 0), .n = n}};
}

static void case_add(op_case *c, ts_op op, int64_t n, int n_tok) {
    memset(c, 0, sizeof *c);
    c->width = c->n_tok = n_tok;
    const int ys = op_slot_f32(c, (int64_t)n_tok * n, 1.0f);
    const int xs = op_slot_f32(c, (op == TS_OP_ADD ? (int64_t)n_tok : 1) * n, 1.0f);
    c->node = (ts_eng_node){.op = op, .add = {.y = TS_ENG_REF(ys, 0), .x = TS_ENG_REF(xs, 0), .n = n}};
}

/* Every op case the tests run: calls fn(c, label) for each. */
typedef void (*case_fn)(op_case *c, const char *label, void *ctx);

static void for_each_case(case_fn fn, void *ctx, int include_matmul) {
    op_case c;
    char label[96];
    if (include_matmul) {
        const uint32_t types[] = {TS_TYPE_F32, TS_TYPE_F16, TS_TYPE_Q8_0, TS_TYPE_Q4_0, TS_TYPE_Q4_1};
        const int toks[] = {1, 5, 13};
        for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
            for (size_t k = 0; k < sizeof toks / sizeof *toks; k++) {
                case_matmul(&c, types[ti], 256, 40, 16, toks[k], 0);
                snprintf(label, sizeof label, "matmul %s n_tok %d", ts_type_info(types[ti])->name, toks[k]);
                fn(&c, label, ctx);
                op_free(&c);
            }
    }
    case_rmsnorm(&c, 96, 1, 1, 0, 7);
    fn(&c, "rmsnorm w", ctx);
    op_free(&c);
    case_rmsnorm(&c, 16, 4, 1, 1, 5);
    fn(&c, "rmsnorm per-head in place", ctx);
    op_free(&c);
    case_rmsnorm(&c, 64, 1, 0, 0, 3);
    fn(&c, "rmsnorm no w", ctx);
    op_free(&c);
    case_rope(&c, 4, 16, 16, 0, 0, 6);
    fn(&c, "rope norm pos0 0", ctx);
    op_free(&c);
    case_rope(&c, 2, 32, 24, 1, 3000, 5);
    fn(&c, "rope neox partial pos0 3000", ctx);
    op_free(&c);
    case_kv_store(&c, 48, 32, 1, 5, 7);
    fn(&c, "kv_store f16", ctx);
    op_free(&c);
    case_kv_store(&c, 48, 32, 0, 0, 4);
    fn(&c, "kv_store f32", ctx);
    op_free(&c);
    case_attention(&c, 4, 2, 16, 0, 0.0f, 1, 9, 6, 32);
    fn(&c, "attention gqa f16", ctx);
    op_free(&c);
    case_attention(&c, 4, 4, 32, 5, 0.0f, 0, 20, 4, 32);
    fn(&c, "attention swa f32", ctx);
    op_free(&c);
    case_attention(&c, 6, 2, 8, 0, 20.0f, 1, 0, 8, 16);
    fn(&c, "attention softcap", ctx);
    op_free(&c);
    case_glu(&c, TS_OP_SWIGLU, 40, 3, 1);
    fn(&c, "swiglu in place", ctx);
    op_free(&c);
    case_glu(&c, TS_OP_GEGLU, 40, 3, 0);
    fn(&c, "geglu", ctx);
    op_free(&c);
    case_add(&c, TS_OP_ADD, 50, 4);
    fn(&c, "add", ctx);
    op_free(&c);
    case_add(&c, TS_OP_ADD_ROW, 50, 4);
    fn(&c, "add_row", ctx);
    op_free(&c);
}

#endif
