/* layer_graph.h - one transformer block (the forward's per-layer stages) as
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
    TS_LS_GATE,  /* [n_ff] */
    TS_LS_UP,    /* [n_ff] */
    /* per layer */
    TS_LS_KC,        /* this layer's K cache [n_ctx][n_head_kv*head_dim] */
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
    TS_LS_COUNT
} ts_ls_slot;

typedef struct ts_rt_block_shape {
    int32_t n_embd, n_head, n_head_kv, head_dim, n_ff, n_rot;
    int32_t n_ctx;   /* KV capacity (rows) */
    int32_t n_swa;   /* 0 = full causal; a sliding-window layer is its own variant */
    bool neox;       /* rope layout */
    bool qkv_bias;   /* qwen2 */
    bool qk_norm;    /* qwen3, gemma3 */
    bool post_norms; /* gemma3 attn/ffn post norms */
    bool gelu;       /* GeGLU (gemma) instead of SwiGLU */
    bool kv_f16;
    bool fast_kernels; /* attention and SwiGLU on the forward's fast kernels (fastops.h), as
                          the CPU forward runs them when it is not on TS_KERNELS=ref */
    bool ref_matmul;   /* matmuls on the reference ts_matmul (TS_KERNELS=ref) instead of ts_linear */
    float eps, attn_scale, attn_softcap;
} ts_rt_block_shape;

#define TS_LS_MAX_NODES 32

/* Writes the layer's nodes into out[TS_LS_MAX_NODES]; returns the count. */
int ts_rt_block_nodes(const ts_rt_block_shape *s, ts_eng_node *out);

typedef struct ts_rt_segment {
    int first, count; /* nodes [first, first+count) */
    bool on_device;
} ts_rt_segment;

/* Cuts nodes into maximal runs that dev takes (on_device) or not. dev NULL:
 * one CPU segment. Returns the number of segments (<= n). */
int ts_rt_split_nodes(const ts_engine *dev, const ts_eng_node *nodes, int n, ts_rt_segment *segs);

#endif
