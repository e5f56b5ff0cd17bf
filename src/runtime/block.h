/* block.h - one transformer block (the forward's per-layer stages) as
 * engine graph nodes, and its split between a device and the CPU.
 *
 * The nodes are the forward's stages in the forward's order, op for op:
 *   attn_norm -> q,k,v matmuls (+bias) -> q/k norm -> rope q, rope k ->
 *   kv_store -> attention -> o matmul (-> post norm) -> x += o ->
 *   ffn_norm -> gate, up matmuls -> swiglu|geglu -> down matmul
 *   (-> post norm) -> x += o
 * over fixed slots (ts_ls_slot): the activation buffers, which stay bound
 * for every layer, and the layer's weights, KV cache rows and rope angles,
 * which are bound anew for each layer's run. One graph per (width, layer
 * variant) is built once and run n_layer times per chunk.
 *
 * A device that does not take every op gets the layer cut into segments:
 * maximal runs of consecutive nodes it takes run there, the rest on the
 * CPU engine, both over memory both address (the forward's buffers,
 * mapped). Each segment boundary costs a crossing.
 */
#ifndef TS_RUNTIME_BLOCK_H
#define TS_RUNTIME_BLOCK_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"

typedef enum ts_ls_slot {
    /* activations [width][...] f32, bound once */
    TS_LS_X = 0, /* [n_embd] residual stream */
    TS_LS_XN,    /* [n_embd] normed input */
    TS_LS_Q,     /* [n_head*head_dim] */
    TS_LS_K,     /* [n_head_kv*head_dim] */
    TS_LS_V,     /* [n_head_kv*head_dim] */
    TS_LS_ATTN,  /* [n_head*head_dim] */
    TS_LS_O,     /* [n_embd] */
    TS_LS_GATE,  /* [n_ff], or [k][n_ff_exp] by (token, slot) pair in a MoE block */
    TS_LS_UP,    /* likewise */
    TS_LS_ROUTER, /* [n_expert] router logits (MoE) */
    TS_LS_EXP_IDS, /* [k] int32: the token's experts (MoE) */
    TS_LS_EXP_W,   /* [k] their routing weights (MoE) */
    TS_LS_N_ACT,   /* (the activation slots are 0 .. TS_LS_N_ACT - 1) */
    /* per layer */
    TS_LS_KC = TS_LS_N_ACT, /* this layer's K cache [n_ctx][n_head_kv*head_dim] */
    TS_LS_VC,        /* this layer's V cache */
    TS_LS_ROPE_FREQ, /* ts_eng_rope_freq_pack of the layer's angles */
    TS_LS_ATTN_NORM,
    TS_LS_WQ,
    TS_LS_WK,
    TS_LS_WV,
    TS_LS_BQ,
    TS_LS_BK,
    TS_LS_BV,
    TS_LS_Q_NORM,
    TS_LS_K_NORM,
    TS_LS_WO,
    TS_LS_ATTN_POST_NORM,
    TS_LS_FFN_NORM,
    TS_LS_W_GATE,
    TS_LS_W_UP,
    TS_LS_W_DOWN,
    TS_LS_FFN_POST_NORM,
    /* a MoE block's FFN: the router [n_expert][n_embd] and the expert
     * arrays (a slot holding n_expert matrices, ts_eng_bind.n_expert) */
    TS_LS_W_ROUTER,
    TS_LS_W_GATE_EXPS, /* [n_expert] x [n_ff_exp][n_embd] */
    TS_LS_W_UP_EXPS,   /* [n_expert] x [n_ff_exp][n_embd] */
    TS_LS_W_DOWN_EXPS, /* [n_expert] x [n_embd][n_ff_exp] */
    /* the layer's clip records (engine.h ts_eng_clip), one per matmul
     * input, at ts_rt_block_clip_layout's offsets; bound when the shape
     * has clips */
    TS_LS_CALIB,
    TS_LS_COUNT
} ts_ls_slot;

/* The block forms a builder exists for. An architecture picks one and
 * describes the rest as data (its shape); a new form (the MoE FFN, a DiT
 * block with adaLN and cross-attention) is a new builder in block.c and a
 * line in its table. */
typedef enum ts_rt_block_kind {
    TS_BLOCK_DECODER = 0, /* attention + gated FFN: llama, qwen2/3, gemma3, llada, dream */
    TS_BLOCK_MOE,         /* attention + routed experts: the FFN is top-k of n_expert gated FFNs */
    TS_BLOCK_KIND_COUNT
} ts_rt_block_kind;

typedef struct ts_rt_block_shape {
    ts_rt_block_kind kind;
    int32_t n_embd, n_head, n_head_kv, head_dim, n_ff, n_rot;
    int32_t n_ctx;   /* KV capacity (rows) */
    int32_t n_swa;   /* 0 = full causal; a sliding-window layer is its own variant */
    bool neox;       /* rope layout */
    bool qkv_bias;   /* qwen2 */
    bool qk_norm;    /* qwen3, gemma3: per head */
    bool qk_norm_full; /* olmoe: the Q/K norms over the whole projection */
    bool post_norms; /* gemma3 attn/ffn post norms */
    bool gelu;       /* GeGLU (gemma) instead of SwiGLU */
    bool kv_f16;
    bool fast_kernels; /* attention and SwiGLU on the forward's fast kernels (fastops.h), as
                          the CPU forward runs them when it is not on TS_KERNELS=ref */
    bool ref_matmul;   /* matmuls on the reference ts_matmul (TS_KERNELS=ref) instead of ts_linear */
    bool clips;        /* every matmul carries its input's clip record (TS_LS_CALIB) */
    float eps, attn_scale, attn_softcap;
    /* TS_BLOCK_MOE */
    int32_t n_expert, n_expert_used; /* experts, and k of them per token */
    int32_t n_ff_exp;                /* one expert's FFN width */
    uint8_t moe_score;               /* ts_moe_score (kernels/block_ops.h) */
    bool moe_norm_topk;
} ts_rt_block_shape;

/* Bytes per token of each activation slot for blocks of shape s
 * ([TS_LS_N_ACT]; the slots a block does not use get 4 bytes). */
void ts_rt_block_act_rows(const ts_rt_block_shape *s, uint64_t rows[TS_LS_N_ACT]);

/* The matmul inputs a clip record is kept for, in the block's order. */
typedef enum ts_rt_clip_input {
    TS_CLIP_IN_ATTN = 0, /* the normed input of q, k, v [n_embd] */
    TS_CLIP_IN_O,        /* the attention output, o's input [n_head * head_dim] */
    TS_CLIP_IN_FFN,      /* the normed input of gate, up (and a MoE router) [n_embd] */
    TS_CLIP_IN_DOWN,     /* the activation, down's input [n_ff] */
    TS_CLIP_N_IN
} ts_rt_clip_input;
/* n_in[i] of each input, off[i] of its record in the layer's TS_LS_CALIB
 * buffer; returns the buffer's bytes. A MoE block's expert matmuls carry
 * no records (0: its down input). */
uint64_t ts_rt_block_clip_layout(const ts_rt_block_shape *s, int64_t n_in[TS_CLIP_N_IN], uint64_t off[TS_CLIP_N_IN]);

#define TS_LS_MAX_NODES 32

/* Writes the layer's nodes into out[TS_LS_MAX_NODES] with the builder of
 * s->kind; returns the count (0 for an unknown kind). */
int ts_rt_block_nodes(const ts_rt_block_shape *s, ts_eng_node *out);

typedef struct ts_rt_segment {
    int first, count; /* nodes [first, first+count) */
    bool on_device;
} ts_rt_segment;

/* Cuts nodes into maximal runs that dev takes (on_device) or not. dev NULL:
 * one CPU segment. Returns the number of segments (<= n). */
int ts_rt_split_nodes(const ts_engine *dev, const ts_eng_node *nodes, int n, ts_rt_segment *segs);

#endif
