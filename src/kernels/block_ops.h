/* block_ops.h - scalar reference kernels of the blocks that the coming model
 * families need beyond ops.h: LayerNorm and the DiT adaLN modulation
 * (diffusion transformers, video diffusion), mixture-of-experts routing,
 * grouping and the grouped expert matmul (MoE LLMs), and attention whose
 * keys and values come from another sequence (cross-attention to a text
 * encoder's output). Nothing calls them yet; they are the definitions the
 * forward pass and every faster kernel will be tested against
 * (tests/test_block_ops.c).
 *
 * Conventions are those of ops.h: activations are f32, row-major, one row
 * per token; weight matrices stay in their stored type (ts_wmat, read
 * through ts_wmat_row so every stored or repacked type works); nothing here
 * allocates, and a caller passes scratch whose size is stated below (the
 * *_scratch helpers compute it with checked arithmetic and reject bad
 * shapes). Operations that take a ts_threadpool split their work across it
 * (NULL = the calling thread); every output element is computed by one
 * thread in an order that depends neither on the thread count nor on the
 * batch, so results are bit-identical for any pool.
 *
 * Shapes are written [rows][columns]; "n_tok" counts rows (tokens).
 * Reductions (means, dot products, softmax sums) are accumulated in double
 * and each output is rounded to f32 once, unless stated otherwise.
 */
#ifndef TS_KERNELS_BLOCK_OPS_H
#define TS_KERNELS_BLOCK_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/threadpool.h"
#include "kernels/ops.h"

/* ---- normalisation and elementwise ----------------------------------- */

/* LayerNorm of each of n_tok rows of n values (n >= 1):
 *   out[t][i] = (x[t][i] - mean_t) / sqrt(var_t + eps) * (w ? w[i] : 1) + (b ? b[i] : 0)
 * with mean_t and the biased variance var_t = mean((x - mean_t)^2) of row t
 * (two passes, in double).
 *   x:   [n_tok][n]
 *   w:   [n] or NULL (no scale)
 *   b:   [n] or NULL (no bias)
 *   out: [n_tok][n]; may alias x (exactly, not partially).
 * Rows are split across pool. */
void ts_layernorm_f32(ts_threadpool *pool, float *out, const float *x, const float *w, const float *b,
                      int64_t n_tok, int64_t n, float eps);

/* y[t][i] = a[t][i] * b[t][i], or a[t][i] * b[i] when b_row (b broadcast as
 * one row).
 *   a: [n_tok][n]
 *   b: [n_tok][n], or [n] when b_row
 *   y: [n_tok][n]; may alias a or (when !b_row) b. */
void ts_mul_f32(float *y, const float *a, const float *b, bool b_row, int64_t n_tok, int64_t n);

/* Per-sample modulation rows (DiT adaLN). A batch of n_tok rows holds
 * consecutive samples of tok_per_sample rows each (tok_per_sample >= 1; the
 * last sample may be shorter); row t belongs to sample s = t / tok_per_sample,
 * whose modulation row (shift, scale or gate) is base + s * mod_stride. With
 * one sample (tok_per_sample >= n_tok) mod_stride is not used. A typical
 * caller points shift/scale/gate into the adaLN projection's output
 * [n_sample][6 * n] with mod_stride = 6 * n. */

/* adaLN modulate: y[t][i] = x[t][i] * (1 + scale_s[i]) + shift_s[i].
 *   x:     [n_tok][n]
 *   shift: n_sample rows of [n], mod_stride floats apart; NULL = 0
 *   scale: n_sample rows of [n], mod_stride floats apart; NULL = 0 (factor 1)
 *   y:     [n_tok][n]; may alias x.
 * Computed in double, rounded once. */
void ts_modulate_f32(float *y, const float *x, const float *shift, const float *scale, int64_t mod_stride,
                     int64_t tok_per_sample, int64_t n_tok, int64_t n);

/* Gated residual: x[t][i] += gate_s[i] * y[t][i].
 *   x:    [n_tok][n], updated in place (the residual stream)
 *   y:    [n_tok][n] (the block's output); may alias x
 *   gate: n_sample rows of [n], mod_stride floats apart.
 * Computed in double, rounded once. */
void ts_gated_residual_f32(float *x, const float *y, const float *gate, int64_t mod_stride, int64_t tok_per_sample,
                           int64_t n_tok, int64_t n);

/* y[i] = gelu_tanh(x[i]) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 * in f32 (ts_gelu_tanh_f32, as torch's gelu(approximate="tanh")), n values;
 * y may alias x. Split across pool in fixed chunks. */
void ts_gelu_f32(ts_threadpool *pool, float *y, const float *x, int64_t n);

/* Rotary embedding from a table of angles per token (a video DiT's 3-D
 * RoPE: each pair's position is the token's frame, row or column). For
 * token t, head h and pair j < head_dim / 2, with (c, s) = tab[t][j]:
 *   (x[2j], x[2j+1]) <- (x0 c - x1 s, x0 s + x1 c)
 * computed in double and rounded once (the reference implementations
 * rotate in float64 complex numbers).
 *   x:   [n_tok][n_head * head_dim], in place; head_dim even
 *   tab: [n_tok][head_dim / 2][2] (cos, sin). */
void ts_rope_tab_f32(ts_threadpool *pool, float *x, const double *tab, int64_t n_tok, int n_head, int head_dim);

/* ---- mixture of experts: routing ------------------------------------- */

/* How router logits become expert weights. Both select the k largest
 * logits (softmax is monotonic, so these are the k largest probabilities)
 * and differ in the weights:
 *   TS_MOE_TOPK_SOFTMAX: softmax over the k selected logits (Mixtral; the
 *     weights sum to 1; norm_topk is ignored);
 *   TS_MOE_SOFTMAX_TOPK: softmax over all n_expert logits, the selected
 *     probabilities as they are (Qwen-MoE / DeepSeek with
 *     norm_topk_prob = false), or divided by their sum when norm_topk
 *     (norm_topk_prob = true; mathematically the weights of TS_MOE_TOPK_SOFTMAX,
 *     and the same bits in this reference);
 *   TS_MOE_SIGMOID_TOPK: each selected logit's sigmoid, as it is or divided
 *     by their sum when norm_topk (llama.cpp's expert_gating_func = 2). */
typedef enum ts_moe_score {
    TS_MOE_TOPK_SOFTMAX = 0,
    TS_MOE_SOFTMAX_TOPK = 1,
    TS_MOE_SIGMOID_TOPK = 2,
} ts_moe_score;

/* Top-k routing of n_tok tokens over n_expert experts (1 <= k <= n_expert).
 *   logits:  [n_tok][n_expert] router logits
 *   ids:     [n_tok][k] out: the selected experts in order of decreasing
 *            logit; equal logits are taken lowest index first, so the result
 *            is deterministic (all-equal logits select 0 .. k-1). The ids of a
 *            token are distinct and in [0, n_expert) whatever the logits
 *            (NaN included: a NaN logit then gives NaN weights).
 *   weights: [n_tok][k] out: ids[t][j]'s weight (see ts_moe_score), in
 *            double, rounded once. */
void ts_moe_route(const float *logits, int64_t n_tok, int n_expert, int k, ts_moe_score score, bool norm_topk,
                  int32_t *ids, float *weights);

/* One routed (token, slot) pair: token tok's slot-th choice (ids[tok][slot]). */
typedef struct ts_moe_pair {
    int32_t tok;
    int32_t slot;
} ts_moe_pair;

/* Groups the n_tok * k routed pairs by expert (a stable counting sort):
 * expert e's pairs are pairs[offsets[e] .. offsets[e+1]), in increasing
 * token order, so that an expert's matmul runs over its tokens as one batch.
 *   ids:     [n_tok][k], each in [0, n_expert)
 *   offsets: [n_expert + 1] out; offsets[0] = 0, offsets[n_expert] = n_tok * k
 *   pairs:   [n_tok * k] out
 * Returns 0, or -1 with err set (offsets and pairs then unspecified, pairs
 * never written) when an id is out of range, k < 1, n_expert < 1, n_tok < 0
 * or n_tok * k exceeds INT32_MAX. */
int ts_moe_group(const int32_t *ids, int64_t n_tok, int k, int n_expert, int64_t *offsets, ts_moe_pair *pairs,
                 ts_err *err);

/* ---- mixture of experts: grouped matmul and FFN ---------------------- */

/* Grouped (indexed) matmul over the pairs of ts_moe_group: for every expert
 * e and every pair p in [offsets[e], offsets[e+1]) with (tok, slot) =
 * pairs[p],
 *   Y_p[r] += w_p * sum_i X_p[i] * W_e[r][i]    for r < n_out
 * where w_p = route_w ? route_w[tok * k + slot] : 1, X_p is row
 * (x_by_pair ? p : tok) of x and Y_p row (y_by_pair ? p : tok) of y.
 * The dot is accumulated in double and y rounded once per pair; pairs of
 * different experts that share a y row (y by token) are added in increasing
 * expert order.
 *   experts:  [n_expert] matrices W_e[n_out][n_in], all of one shape (the
 *             type may differ); the data of an expert with no pairs is
 *             never read (it may be NULL)
 *   offsets:  [n_expert + 1], pairs: [offsets[n_expert]] (ts_moe_group)
 *   route_w:  [n_tok][k] routing weights, or NULL (w_p = 1)
 *   x:        rows of n_in floats, x_stride apart: [n_tok] rows (by token)
 *             or [offsets[n_expert]] rows (by pair)
 *   y:        rows of n_out floats, y_stride apart, likewise; accumulated
 *             into; must not overlap x
 *   scratch:  per thread scratch_stride >= n_in floats (one dequantized
 *             weight row), n_threads(pool) of them.
 * Each weight row is dequantized once per call and dotted with all of its
 * expert's pairs; rows are split across pool. */
void ts_moe_matmul(ts_threadpool *pool, const ts_wmat *experts, int n_expert, const int64_t *offsets,
                   const ts_moe_pair *pairs, const float *route_w, int k, const float *x, int64_t x_stride,
                   bool x_by_pair, float *y, int64_t y_stride, bool y_by_pair, float *scratch,
                   int64_t scratch_stride);

/* Floats of scratch ts_moe_ffn needs for n_tok tokens routed to k of
 * n_expert experts, model width n_embd, expert width n_ff, a pool of
 * n_threads:
 *   2 * n_tok * k * n_ff + n_threads * max(n_embd, n_ff).
 * Returns 0 with *n_floats set, or -1 with err set when a size is not
 * positive (n_tok may be 0), k > n_expert, n_tok * k exceeds INT32_MAX or
 * the size overflows. */
int ts_moe_ffn_scratch(int64_t n_tok, int k, int n_expert, int64_t n_embd, int64_t n_ff, int n_threads,
                       size_t *n_floats, ts_err *err);

/* MoE feed-forward, the reference composition of the kernels above:
 *   out[t] = sum_{j<k} weights[t][j] * down_e(act(gate_e x[t]) * up_e x[t]),
 *            e = ids[t][j]
 * with act = SiLU (SwiGLU, ts_swiglu_f32) or, when gelu, tanh-GELU (GeGLU,
 * ts_geglu_tanh_f32). Stages: gate and up of every pair (ts_moe_matmul, x
 * by token into scratch rows by pair), the activation per pair, then out
 * zeroed and down accumulated by token with the routing weights.
 *   gate, up: [n_expert] matrices [n_ff][n_embd]
 *   down:     [n_expert] matrices [n_embd][n_ff]
 *             (data of experts with no pairs never read, may be NULL)
 *   offsets, pairs: the grouping of ids (ts_moe_group) for n_tok tokens, k slots
 *   weights:  [n_tok][k] routing weights (ts_moe_route)
 *   x:        [n_tok][n_embd]
 *   out:      [n_tok][n_embd]; may alias x (x is read in full before out is
 *             written)
 *   scratch:  ts_moe_ffn_scratch(n_tok, k, n_expert, n_embd, n_ff,
 *             ts_threadpool_n_threads(pool)) floats, laid out as the gate
 *             rows [n_tok * k][n_ff], the up rows [n_tok * k][n_ff], then one
 *             max(n_embd, n_ff) row per thread. */
void ts_moe_ffn(ts_threadpool *pool, const ts_wmat *gate, const ts_wmat *up, const ts_wmat *down, int n_expert,
                bool gelu, const int64_t *offsets, const ts_moe_pair *pairs, const float *weights, int64_t n_tok,
                int k, const float *x, float *out, float *scratch);

/* ---- cross-attention ------------------------------------------------- */

/* Attention of one sequence's queries over keys and values from another
 * (a DiT's text conditioning): no cache, no positions, no mask. */
typedef struct ts_xattn_params {
    int n_head;    /* query heads */
    int n_head_kv; /* key/value heads; n_head % n_head_kv == 0 (GQA/MQA) */
    int head_dim;
    float scale;   /* multiplies q.k (usually 1/sqrt(head_dim)) */
} ts_xattn_params;

/* The per-thread scratch of an attention row over n_kv keys of head_dim
 * values (scores, then one output row), in doubles: n_kv + head_dim; -1
 * with err (naming `what`) when n_kv < 1 or the size overflows. Shared by
 * the cross- and relative-attention references. */
int ts_attn_row_scratch(int64_t n_kv, int head_dim, const char *what, int64_t *per_thread, ts_err *err);

/* Doubles of per-thread scratch ts_cross_attention needs for n_kv keys:
 * n_kv + head_dim. Returns 0 with *per_thread set, or -1 with err set when
 * ap is invalid (n_head, n_head_kv, head_dim < 1; n_head % n_head_kv != 0),
 * n_kv < 1, or the size overflows. */
int ts_cross_attention_scratch(const ts_xattn_params *ap, int64_t n_kv, int64_t *per_thread, ts_err *err);

/* For query row t and head h (kv head g = h / (n_head / n_head_kv)):
 *   s_i = scale * q[t][h] . k[i][g],  p = softmax(s) (max subtracted),
 *   out[t][h] = sum_i p_i v[i][g],   i < n_kv,
 * all in double, rounded once per output.
 *   q:   [n_q][n_head * head_dim]
 *   k:   [n_kv][n_head_kv * head_dim]
 *   v:   [n_kv][n_head_kv * head_dim]
 *   out: [n_q][n_head * head_dim]; may alias q (exactly), not k or v
 *   scratch: per thread scratch_stride doubles (ts_cross_attention_scratch).
 * (query, head) pairs are split across pool. n_q >= 0, n_kv >= 1. */
void ts_cross_attention(ts_threadpool *pool, const ts_xattn_params *ap, const float *q, int64_t n_q, const float *k,
                        const float *v, int64_t n_kv, float *out, double *scratch, int64_t scratch_stride);

#endif
