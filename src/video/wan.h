/* wan.h - the Wan2.1 video diffusion transformer (DiT) on an engine.
 *
 * The model as the reference implementation defines it (wan/modules/
 * model.py; diffusers' transformer_wan.py computes the same with norm2 and
 * norm3 named the other way round), read from a GGUF file with the original
 * tensor names (city96's conversions):
 *   patch embedding   Conv3d with kernel = stride = patch (pt, ph, pw): a
 *                     matmul over each patch's C*pt*ph*pw values
 *                     (patch_embedding.weight, stored [d][C*pt*ph*pw] with
 *                     its 5-D shape in comfy.gguf.orig_shape.*)
 *   time              sinusoid(t) [freq_dim] (cos half first) -> Linear,
 *                     SiLU, Linear = e [d] (time_embedding.0/.2); SiLU,
 *                     Linear = e0 [6][d] (time_projection.1)
 *   text              Linear, GELU-tanh, Linear over the text tokens
 *                     (text_embedding.0/.2) = context [n_text][d]
 *   block l           mod = blocks.l.modulation [6][d] + e0
 *                     x += mod[2] * SelfAttn(LN(x) * (1 + mod[1]) + mod[0])
 *                     x += CrossAttn(LN_affine(x), context)      (norm3)
 *                     x += mod[5] * FFN(LN(x) * (1 + mod[4]) + mod[3])
 *                     attention: q, k, v, o with biases, RMSNorm over the
 *                     whole width on q and k, heads of head_dim, softmax
 *                     scale 1/sqrt(head_dim), unmasked; self-attention
 *                     rotates q and k by the 3-D RoPE (head dim split
 *                     t = hd - 4*(hd/6), h = w = 2*(hd/6) pairs of
 *                     adjacent values, theta 10000, positions = the
 *                     token's frame, row and column); FFN: Linear,
 *                     GELU-tanh, Linear (ffn.0/.2)
 *   head              LN(x) * (1 + (m[1] + e)) + (m[0] + e), m =
 *                     head.modulation [2][d]; Linear to pt*ph*pw*C_out;
 *                     unpatchify
 * LayerNorms have eps 1e-6 and no affine except the cross-attention's.
 *
 * Hyper-parameters come from the tensor shapes; the head count from
 * wan.attention.head_count when present, else d / 128 (every Wan2.1 model
 * has heads of 128).
 *
 * A run (ts_wan_run) is the DiT set up for one latent grid: the engine, its
 * graphs (patch embedding, one block graph run per layer, head; the text
 * MLP and each layer's cross-attention K/V, run once per text), the
 * activation buffers for M = (F/pt)(H/ph)(W/pw) tokens, the RoPE table. The
 * text K/V of each layer are computed once per text (they do not depend on
 * the step) for one or two texts (classifier-free guidance). Nothing is
 * allocated per step.
 *
 * Tensor layouts: latents [C][F][H][W] f32 (one video, no batch); text
 * [n_text][text_dim] f32.
 */
#ifndef TS_VIDEO_WAN_H
#define TS_VIDEO_WAN_H

#include <stdbool.h>
#include <stdint.h>

#include "core/err.h"

typedef struct ts_wan_config {
    int32_t dim, ffn, n_head, head_dim, n_layer;
    int32_t in_ch, out_ch, text_dim, freq_dim;
    int32_t patch[3]; /* t, h, w */
    float eps;
} ts_wan_config;

typedef struct ts_wan ts_wan;

/* Opens and validates a Wan DiT GGUF (every tensor present with its shape,
 * a type the kernels read). NULL with err naming the file and the tensor. */
ts_wan *ts_wan_open(const char *path, ts_err *err);
void ts_wan_close(ts_wan *w); /* every run over w must have been freed */
const ts_wan_config *ts_wan_cfg(const ts_wan *w);
/* Bytes of the weights in the file (what a resident copy takes). */
uint64_t ts_wan_weight_bytes(const ts_wan *w);

/* DCM's detail expert: a low-rank adapter on the blocks' attention
 * projections (any of self_attn / cross_attn .q .k .v .o, the same set in
 * every block, one rank), from a GGUF whose tensors are
 *   blocks.N.<projection>.lora_A.weight  [rank][d]   (GGUF ne [d, rank])
 *   blocks.N.<projection>.lora_B.weight  [d][rank]
 * and optionally lora.alpha (scale = alpha / rank, else 1), times `scale`
 * (<= 0: 1). Applied as peft does, y = x W^T + b + scale (x A^T) B^T, by
 * two extra matmuls: the base weights stay one copy, and a run holds the
 * base graphs and the adapted ones side by side (tools/wan_lora_to_gguf.py
 * converts a safetensors adapter). */
typedef struct ts_wan_lora ts_wan_lora;
ts_wan_lora *ts_wan_lora_open(const ts_wan *w, const char *path, float scale, ts_err *err);
void ts_wan_lora_close(ts_wan_lora *lo); /* after every run using it */

typedef struct ts_wan_run_params {
    const char *engine; /* engine spec (engine.h), NULL = "cpu" */
    int n_threads;      /* engine threads (<= 0: 1) */
    int frames, height, width; /* latent grid, multiples of the patch */
    int n_text;         /* text tokens per text (>= 1) */
    int n_texts;        /* texts held: 1, or 2 for classifier-free guidance */
    const ts_wan_lora *lora; /* the detail expert's adapter (NULL: none) */
    /* a run of the same model (and adapter) whose packed matrices this run
     * maps wherever its engine reads their layout (vmem.h: the same
     * desc.layout, or both on the CPU's panels): two engines, one weight
     * copy. It must outlive this run. NULL: the run packs its own. */
    const struct ts_wan_run *share;
    /* tokens per graph: the engine's widest graph (desc.max_width: 2048 on
     * amx) or fewer (0: the engine's). A grid of more tokens runs each
     * graph over row chunks of equal size (the block in two parts around
     * its self-attention, whose keys are every chunk's): every token's
     * arithmetic is the unsplit run's. Tests set it to check the split. */
    int max_rows;
} ts_wan_run_params;

typedef struct ts_wan_run ts_wan_run;

/* Builds the run; refuses a share of another model or adapter. */
ts_wan_run *ts_wan_run_new(ts_wan *w, const ts_wan_run_params *p, ts_err *err);
void ts_wan_run_free(ts_wan_run *r);
/* Tokens per block run (M). */
int64_t ts_wan_run_tokens(const ts_wan_run *r);

/* Text `which` (< n_texts): its embedding MLP and every layer's
 * cross-attention K and V. text [n_text][text_dim]. */
int ts_wan_run_set_text(ts_wan_run *r, int which, const float *text, ts_err *err);

/* One DiT forward at timestep t against text `which`, with the adapter
 * when detail (the run must have one): latents [in_ch][F][H][W] -> out
 * [out_ch][F][H][W] (the model's flow prediction). out may not alias
 * latents. */
int ts_wan_run_forward(ts_wan_run *r, const float *latents, double t, int which, bool detail, float *out,
                       ts_err *err);

/* The forward in pieces, for a pipeline that cuts the trajectory at a
 * block boundary, perhaps inside a step: blocks [l0, l1) of the forward at
 * t (0 <= l0 <= l1 <= n_layer). l0 == 0 starts from latents (patchify and
 * patch embedding); l0 > 0 resumes from the hidden state in
 * ts_wan_run_hidden (handed over by another run, or left by this one).
 * l1 == n_layer ends with the head into out; l1 < n_layer leaves the
 * hidden state there. The time embedding comes from t on each run (host
 * work, bit for bit the same on every run; kept while t stays).
 * ts_wan_run_forward is ts_wan_run_part(r, latents, t, which, detail, 0,
 * n_layer, out). */
int ts_wan_run_part(ts_wan_run *r, const float *latents, double t, int which, bool detail, int l0, int l1, float *out,
                    ts_err *err);
/* The hidden state between blocks, [M][d] f32 host memory: read it after
 * a part that stopped before the head, write it before one that resumes. */
float *ts_wan_run_hidden(ts_wan_run *r);
/* Bytes of packed matrices this run maps from its share instead of
 * holding a copy of its own. */
uint64_t ts_wan_run_shared_bytes(const ts_wan_run *r);

typedef struct ts_wan_stats {
    uint64_t forwards;
    uint64_t block_runs;  /* block graphs run (forwards x layers) */
    uint64_t block_ns;    /* wall time in the block graphs (each finished before the next is timed) */
    uint64_t embed_ns;    /* patchify, time embedding, patch embedding */
    uint64_t head_ns;     /* head and unpatchify */
    uint64_t text_ns;     /* text MLP and cross K/V (per text) */
    double block_flops;   /* multiply-adds x 2 of one block run (matmuls and attention) */
} ts_wan_stats;
void ts_wan_run_stats(const ts_wan_run *r, ts_wan_stats *out);

#endif
