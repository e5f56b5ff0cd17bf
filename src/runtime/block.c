/* layer_graph.c - a transformer block as engine nodes (see layer_graph.h). */
#include "runtime/block.h"

#define R(s) TS_ENG_REF((s), 0)

int ts_rt_block_nodes(const ts_rt_block_shape *s, ts_eng_node *out) {
    int k = 0;
    const int64_t E = s->n_embd, F = s->n_ff, QD = (int64_t)s->n_head * s->head_dim,
                  KD = (int64_t)s->n_head_kv * s->head_dim;
#define NORM(xs, ys, ws, len, rpt) \
    out[k++] = (ts_eng_node) { \
        .op = TS_OP_RMSNORM, .rmsnorm = { \
            .x = R(xs), \
            .y = R(ys), \
            .w = R(ws), \
            .n = (len), \
            .rows_per_tok = (rpt), \
            .eps = s->eps \
        } \
    }
#define MM(ws, xs, ys, ni, no) \
    out[k++] = (ts_eng_node) { \
        .op = TS_OP_MATMUL, .matmul = {.w = R(ws), .x = R(xs), .y = R(ys), .n_in = (ni), .n_out = (no), .ref = s->ref_matmul } \
    }
#define ADD(op_, ys, xs, len) \
    out[k++] = (ts_eng_node) { \
        .op = (op_), .add = {.y = R(ys), .x = R(xs), .n = (len) } \
    }
    /* attention block */
    NORM(TS_LS_X, TS_LS_XN, TS_LS_ATTN_NORM, E, 1);
    MM(TS_LS_WQ, TS_LS_XN, TS_LS_Q, E, QD);
    MM(TS_LS_WK, TS_LS_XN, TS_LS_K, E, KD);
    MM(TS_LS_WV, TS_LS_XN, TS_LS_V, E, KD);
    if (s->qkv_bias) {
        ADD(TS_OP_ADD_ROW, TS_LS_Q, TS_LS_BQ, QD);
        ADD(TS_OP_ADD_ROW, TS_LS_K, TS_LS_BK, KD);
        ADD(TS_OP_ADD_ROW, TS_LS_V, TS_LS_BV, KD);
    }
    if (s->qk_norm) {
        NORM(TS_LS_Q, TS_LS_Q, TS_LS_Q_NORM, s->head_dim, s->n_head);
        NORM(TS_LS_K, TS_LS_K, TS_LS_K_NORM, s->head_dim, s->n_head_kv);
    }
    out[k++] = (ts_eng_node){.op = TS_OP_ROPE,
                             .rope = {.x = R(TS_LS_Q),
                                      .freq = R(TS_LS_ROPE_FREQ),
                                      .n_head = s->n_head,
                                      .head_dim = s->head_dim,
                                      .n_rot = s->n_rot,
                                      .neox = s->neox}};
    out[k++] = (ts_eng_node){.op = TS_OP_ROPE,
                             .rope = {.x = R(TS_LS_K),
                                      .freq = R(TS_LS_ROPE_FREQ),
                                      .n_head = s->n_head_kv,
                                      .head_dim = s->head_dim,
                                      .n_rot = s->n_rot,
                                      .neox = s->neox}};
    out[k++] = (ts_eng_node){.op = TS_OP_KV_STORE,
                             .kv_store = {.k = R(TS_LS_K),
                                          .v = R(TS_LS_V),
                                          .kc = R(TS_LS_KC),
                                          .vc = R(TS_LS_VC),
                                          .dim = KD,
                                          .n_ctx = s->n_ctx,
                                          .f16 = s->kv_f16}};
    out[k++] = (ts_eng_node){.op = TS_OP_ATTENTION,
                             .attention = {.q = R(TS_LS_Q),
                                           .kc = R(TS_LS_KC),
                                           .vc = R(TS_LS_VC),
                                           .out = R(TS_LS_ATTN),
                                           .n_head = s->n_head,
                                           .n_head_kv = s->n_head_kv,
                                           .head_dim = s->head_dim,
                                           .n_swa = s->n_swa,
                                           .n_ctx = s->n_ctx,
                                           .scale = s->attn_scale,
                                           .softcap = s->attn_softcap,
                                           .kv_f16 = s->kv_f16,
                                           .fast = s->fast_kernels}};
    MM(TS_LS_WO, TS_LS_ATTN, TS_LS_O, QD, E);
    if (s->post_norms)
        NORM(TS_LS_O, TS_LS_O, TS_LS_ATTN_POST_NORM, E, 1);
    ADD(TS_OP_ADD, TS_LS_X, TS_LS_O, E);
    /* feed-forward block */
    NORM(TS_LS_X, TS_LS_XN, TS_LS_FFN_NORM, E, 1);
    MM(TS_LS_W_GATE, TS_LS_XN, TS_LS_GATE, E, F);
    MM(TS_LS_W_UP, TS_LS_XN, TS_LS_UP, E, F);
    out[k++] = (ts_eng_node){.op = s->gelu ? TS_OP_GEGLU : TS_OP_SWIGLU,
                             .glu = {.gate = R(TS_LS_GATE),
                                     .up = R(TS_LS_UP),
                                     .out = R(TS_LS_GATE),
                                     .n = F,
                                     .fast = s->fast_kernels}};
    MM(TS_LS_W_DOWN, TS_LS_GATE, TS_LS_O, F, E);
    if (s->post_norms)
        NORM(TS_LS_O, TS_LS_O, TS_LS_FFN_POST_NORM, E, 1);
    ADD(TS_OP_ADD, TS_LS_X, TS_LS_O, E);
#undef NORM
#undef MM
#undef ADD
    return k;
}

int ts_rt_split_nodes(const ts_engine *dev, const ts_eng_node *nodes, int n, ts_rt_segment *segs) {
    int ns = 0;
    for (int i = 0; i < n; i++) {
        const bool d = dev && ts_eng_supports_op(dev, nodes[i].op, TS_ENG_ANY_WTYPE);
        if (ns && segs[ns - 1].on_device == d) {
            segs[ns - 1].count++;
        } else {
            segs[ns++] = (ts_rt_segment){.first = i, .count = 1, .on_device = d};
        }
    }
    return ns;
}
