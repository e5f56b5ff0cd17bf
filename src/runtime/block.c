/* block.c - transformer blocks as engine nodes, one builder per block form (see block.h). */
#include "runtime/block.h"
#include "runtime/calib.h"

#define R(s) TS_ENG_REF((s), 0)

/* TS_BLOCK_DECODER: the forward's stages, op for op (block.h); and
 * TS_BLOCK_MOE: the same attention, the routed experts as the FFN. */
uint64_t ts_rt_block_clip_layout(const ts_rt_block_shape *s, int64_t n_in[TS_CLIP_N_IN], uint64_t off[TS_CLIP_N_IN]) {
    const int64_t E = s->n_embd, QD = (int64_t)s->n_head * s->head_dim;
    const int64_t n[TS_CLIP_N_IN] = {E, QD, E, s->kind == TS_BLOCK_MOE ? 0 : s->n_ff};
    for (int i = 0; i < TS_CLIP_N_IN; i++)
        n_in[i] = n[i];
    return ts_rt_clip_offsets(n_in, off);
}

static int decoder_nodes(const ts_rt_block_shape *s, ts_eng_node *out) {
    int k = 0;
    int64_t clip_n[TS_CLIP_N_IN];
    uint64_t clip_off[TS_CLIP_N_IN];
    ts_rt_block_clip_layout(s, clip_n, clip_off);
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
#define MM(ws, xs, ys, ni, no, ci) \
    out[k++] = (ts_eng_node) { \
        .op = TS_OP_MATMUL, .matmul = {.w = R(ws), .x = R(xs), .y = R(ys), .n_in = (ni), .n_out = (no), \
                                       .ref = s->ref_matmul, .clipped = s->clips, \
                                       .clip = s->clips ? TS_ENG_REF(TS_LS_CALIB, clip_off[ci]) : TS_ENG_NOREF } \
    }
#define ADD(op_, ys, xs, len) \
    out[k++] = (ts_eng_node) { \
        .op = (op_), .add = {.y = R(ys), .x = R(xs), .n = (len) } \
    }
    /* attention block */
    NORM(TS_LS_X, TS_LS_XN, TS_LS_ATTN_NORM, E, 1);
    MM(TS_LS_WQ, TS_LS_XN, TS_LS_Q, E, QD, TS_CLIP_IN_ATTN);
    MM(TS_LS_WK, TS_LS_XN, TS_LS_K, E, KD, TS_CLIP_IN_ATTN);
    MM(TS_LS_WV, TS_LS_XN, TS_LS_V, E, KD, TS_CLIP_IN_ATTN);
    if (s->qkv_bias) {
        ADD(TS_OP_ADD_ROW, TS_LS_Q, TS_LS_BQ, QD);
        ADD(TS_OP_ADD_ROW, TS_LS_K, TS_LS_BK, KD);
        ADD(TS_OP_ADD_ROW, TS_LS_V, TS_LS_BV, KD);
    }
    if (s->qk_norm && s->qk_norm_full) {
        NORM(TS_LS_Q, TS_LS_Q, TS_LS_Q_NORM, QD, 1);
        NORM(TS_LS_K, TS_LS_K, TS_LS_K_NORM, KD, 1);
    } else if (s->qk_norm) {
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
    MM(TS_LS_WO, TS_LS_ATTN, TS_LS_O, QD, E, TS_CLIP_IN_O);
    if (s->post_norms)
        NORM(TS_LS_O, TS_LS_O, TS_LS_ATTN_POST_NORM, E, 1);
    ADD(TS_OP_ADD, TS_LS_X, TS_LS_O, E);
    /* feed-forward block */
    NORM(TS_LS_X, TS_LS_XN, TS_LS_FFN_NORM, E, 1);
    if (s->kind == TS_BLOCK_MOE) {
        /* router, top-k, then the experts over (token, slot) pairs: gate and
         * up by pair, the activation over each token's k pair rows, down
         * back by token weighted by the routing weights */
        const int32_t NE = s->n_expert, KE = s->n_expert_used;
        const int64_t FE = s->n_ff_exp;
        MM(TS_LS_W_ROUTER, TS_LS_XN, TS_LS_ROUTER, E, NE, TS_CLIP_IN_FFN);
        out[k++] = (ts_eng_node){.op = TS_OP_MOE_ROUTE,
                                 .route = {.logits = R(TS_LS_ROUTER),
                                           .ids = R(TS_LS_EXP_IDS),
                                           .weights = R(TS_LS_EXP_W),
                                           .n_expert = NE,
                                           .k = KE,
                                           .score = s->moe_score,
                                           .norm_topk = s->moe_norm_topk}};
#define MOE(ws, xs, ys, ni, no, xp, yp, wt) \
    out[k++] = (ts_eng_node) { \
        .op = TS_OP_MOE_MATMUL, .moe = { \
            .w = R(ws), .x = R(xs), .y = R(ys), .ids = R(TS_LS_EXP_IDS), .weights = (wt), .n_in = (ni), \
            .n_out = (no), .n_expert = NE, .k = KE, .x_by_pair = (xp), .y_by_pair = (yp), .fast = s->fast_kernels \
        } \
    }
        MOE(TS_LS_W_GATE_EXPS, TS_LS_XN, TS_LS_GATE, E, FE, false, true, TS_ENG_NOREF);
        MOE(TS_LS_W_UP_EXPS, TS_LS_XN, TS_LS_UP, E, FE, false, true, TS_ENG_NOREF);
        out[k++] = (ts_eng_node){.op = s->gelu ? TS_OP_GEGLU : TS_OP_SWIGLU,
                                 .glu = {.gate = R(TS_LS_GATE),
                                         .up = R(TS_LS_UP),
                                         .out = R(TS_LS_GATE),
                                         .n = (int64_t)KE * FE,
                                         .fast = s->fast_kernels}};
        MOE(TS_LS_W_DOWN_EXPS, TS_LS_GATE, TS_LS_O, FE, E, true, false, R(TS_LS_EXP_W));
#undef MOE
    } else {
        MM(TS_LS_W_GATE, TS_LS_XN, TS_LS_GATE, E, F, TS_CLIP_IN_FFN);
        MM(TS_LS_W_UP, TS_LS_XN, TS_LS_UP, E, F, TS_CLIP_IN_FFN);
        out[k++] = (ts_eng_node){.op = s->gelu ? TS_OP_GEGLU : TS_OP_SWIGLU,
                                 .glu = {.gate = R(TS_LS_GATE),
                                         .up = R(TS_LS_UP),
                                         .out = R(TS_LS_GATE),
                                         .n = F,
                                         .fast = s->fast_kernels}};
        MM(TS_LS_W_DOWN, TS_LS_GATE, TS_LS_O, F, E, TS_CLIP_IN_DOWN);
    }
    if (s->post_norms)
        NORM(TS_LS_O, TS_LS_O, TS_LS_FFN_POST_NORM, E, 1);
    ADD(TS_OP_ADD, TS_LS_X, TS_LS_O, E);
#undef NORM
#undef MM
#undef ADD
    return k;
}

typedef int (*block_builder)(const ts_rt_block_shape *s, ts_eng_node *out);
static const block_builder builders[TS_BLOCK_KIND_COUNT] = {
    [TS_BLOCK_DECODER] = decoder_nodes,
    [TS_BLOCK_MOE] = decoder_nodes,
};

void ts_rt_block_act_rows(const ts_rt_block_shape *s, uint64_t rows[TS_LS_N_ACT]) {
    const uint64_t E = (uint64_t)s->n_embd * 4, QD = (uint64_t)s->n_head * (uint64_t)s->head_dim * 4,
                   KD = (uint64_t)s->n_head_kv * (uint64_t)s->head_dim * 4;
    uint64_t F = (uint64_t)s->n_ff * 4;
    const bool moe = s->kind == TS_BLOCK_MOE;
    const uint64_t pairs_f = moe ? (uint64_t)s->n_expert_used * (uint64_t)s->n_ff_exp * 4 : 0;
    if (pairs_f > F)
        F = pairs_f;
    const uint64_t r[TS_LS_N_ACT] = {
        [TS_LS_X] = E,      [TS_LS_XN] = E,    [TS_LS_Q] = QD,   [TS_LS_K] = KD,  [TS_LS_V] = KD,
        [TS_LS_ATTN] = QD,  [TS_LS_O] = E,     [TS_LS_GATE] = F, [TS_LS_UP] = F,
        [TS_LS_ROUTER] = moe ? (uint64_t)s->n_expert * 4 : 4,
        [TS_LS_EXP_IDS] = moe ? (uint64_t)s->n_expert_used * 4 : 4,
        [TS_LS_EXP_W] = moe ? (uint64_t)s->n_expert_used * 4 : 4,
    };
    for (int i = 0; i < TS_LS_N_ACT; i++)
        rows[i] = r[i];
}

int ts_rt_block_nodes(const ts_rt_block_shape *s, ts_eng_node *out) {
    return (unsigned)s->kind < TS_BLOCK_KIND_COUNT && builders[s->kind] ? builders[s->kind](s, out) : 0;
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
