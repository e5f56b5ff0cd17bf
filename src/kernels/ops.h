/* ops.h - the compute operations of a transformer forward pass, as scalar
 * reference kernels (src/kernels/ref/). Every faster kernel added later is
 * tested against these.
 *
 * Conventions: activations are f32, row-major, one row per token, with an
 * explicit row stride where a caller may want to write into a wider buffer.
 * Weight matrices stay in their stored GGUF type (ts_wmat). Operations that
 * take a ts_threadpool split their work across it; passing NULL runs them on
 * the calling thread. Nothing here allocates.
 */
#ifndef TS_KERNELS_OPS_H
#define TS_KERNELS_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/threadpool.h"

/* ---- weights --------------------------------------------------------- */

/* A weight matrix W[n_out][n_in] in its stored type: row r (one output
 * feature) is n_in elements at data + r * row_bytes. In GGUF terms ne[0] =
 * n_in, ne[1] = n_out. */
typedef struct ts_wmat {
    uint32_t type;        /* enum ts_type */
    const void *data;     /* NULL when the matrix is absent */
    int64_t n_in;
    int64_t n_out;
    size_t row_bytes;
    /* The same matrix repacked into 16-row panels (kernels/repack.h) for the
     * fast path, or NULL. When set, read the matrix through ts_wmat_row,
     * ts_matmul or ts_linear only: data may have been overwritten by the
     * panels (in-place repacking). */
    const uint8_t *packed;
} ts_wmat;

/* Dequantizes row r of w into dst[n_in] (from the panels when packed). */
void ts_wmat_row(const ts_wmat *w, int64_t r, float *dst);

/* ---- elementwise and row ops ----------------------------------------- */

/* out[i] = x[i] / sqrt(mean(x^2) + eps) * (w ? w[i] : 1). out may alias x. */
void ts_rmsnorm_f32(float *out, const float *x, const float *w, int64_t n, float eps);
/* ts_rmsnorm_f32 over rows rows of n (out[r], x[r] at r * n); rows are
 * independent, so large batches are split over pool (same bits). */
void ts_rmsnorm_rows(ts_threadpool *pool, float *out, const float *x, const float *w, int64_t n, int64_t rows,
                     float eps);

/* In place, numerically stable (max subtracted). n >= 1. */
void ts_softmax_f32(float *x, int64_t n);

float ts_silu_f32(float x);      /* x * sigmoid(x) */
float ts_gelu_tanh_f32(float x); /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */

/* Gated FFN activations: out[i] = act(gate[i]) * up[i]. out may alias gate. */
void ts_swiglu_f32(float *out, const float *gate, const float *up, int64_t n);
void ts_geglu_tanh_f32(float *out, const float *gate, const float *up, int64_t n);

/* x[i] = cap * tanh(x[i] / cap) (Gemma soft-capping); cap > 0. */
void ts_softcap_f32(float *x, int64_t n, float cap);

/* ---- rotary position embedding --------------------------------------- */

/* llama3-style frequency scaling (Llama 3.1+ "rope_scaling": llama3). */
typedef struct ts_rope_llama3 {
    double factor;
    double low_freq_factor;
    double high_freq_factor;
    double orig_ctx;          /* original_max_position_embeddings */
} ts_rope_llama3;

/* Fills inv_freq[n_rot/2] with the angle per position of each rotated pair:
 *   base^(-2i/n_rot) * freq_scale / (factors ? factors[i] : 1),
 * then, when l3 is non-NULL, the llama3 per-frequency rescaling.
 * freq_scale is the linear position scale (1/factor; 1 = none); factors is a
 * rope_freqs tensor as llama.cpp's converter writes it. Angles are kept in
 * double so that positions far into the context stay exact to f32 rounding. */
void ts_rope_inv_freq(double *inv_freq, int n_rot, double base, double freq_scale,
                      const float *factors, const ts_rope_llama3 *l3);

/* Rotates the first n_rot dims of each of n_head heads of x[n_head][head_dim]
 * at position pos. neox=false: pairs (2i, 2i+1) (GGUF llama layout); neox=true:
 * pairs (i, i + n_rot/2). cs is scratch for n_rot floats (cos/sin table). */
void ts_rope_f32(float *x, int n_head, int head_dim, int n_rot, bool neox, const double *inv_freq,
                 int64_t pos, float *cs);
/* The two halves of ts_rope_f32, for callers that rotate several tensors at
 * one position: the table cs[n_rot] (cos, sin of each pair's angle) and the
 * rotation by it. */
void ts_rope_cs(const double *inv_freq, int n_rot, int64_t pos, float *cs);
void ts_rope_apply(float *x, int n_head, int head_dim, int n_rot, bool neox, const float *cs);

/* ---- matmul ---------------------------------------------------------- */

/* Y[t][r] = sum_i X[t][i] * W[r][i] for t < n_tok, r < w->n_out.
 * X rows are x + t*x_stride (n_in floats), Y rows y + t*y_stride.
 * Each weight row is dequantized once (into the thread's scratch row of
 * w->n_in floats: scratch + tid * scratch_stride) and dotted with every token,
 * so a token's result does not depend on n_tok. Rows are split across pool. */
void ts_matmul(ts_threadpool *pool, const ts_wmat *w, const float *x, int64_t x_stride, float *y,
               int64_t y_stride, int n_tok, float *scratch, int64_t scratch_stride);

/* Dot product with 8 independent partial sums (fixed order, so results are
 * reproducible and vectorisable without -ffast-math). */
float ts_dot_f32(const float *a, const float *b, int64_t n);

/* ---- attention ------------------------------------------------------- */

typedef struct ts_attn_params {
    int n_head;
    int n_head_kv;        /* n_head % n_head_kv == 0 (GQA/MQA share kv heads) */
    int head_dim;
    float scale;          /* multiplies q.k */
    float softcap;        /* 0 = none, else s = cap * tanh(s / cap) */
    int32_t n_swa;        /* 0 = full causal; else attend to the last n_swa positions */
    bool kv_f16;          /* cache elements are f16 (uint16) instead of f32 */
    int64_t kv_stride;    /* elements per cache row (n_head_kv * head_dim) */
    /* 0: causal (as above). > 0: non-causal (bidirectional, diffusion LLMs):
     * every query sees cache positions 0 .. n_kv-1 whatever its own
     * position, n_swa is ignored, and the cache must hold those n_kv rows. */
    int64_t n_kv;
} ts_attn_params;

/* Attention for n_tok queries at positions pos0 .. pos0+n_tok-1.
 * q: [n_tok][n_head*head_dim]; k_cache, v_cache: [n_ctx][kv_stride] holding
 * every position up to pos0+n_tok-1 (n_kv > 0: up to n_kv-1);
 * out: [n_tok][n_head*head_dim].
 * Causal (n_kv = 0): query at position p sees cache positions
 * max(0, p-n_swa+1) .. p. Non-causal (n_kv > 0): every query sees 0 .. n_kv-1.
 * scratch: per thread scratch_stride floats, at least
 * max(pos0+n_tok, n_kv) + 2*head_dim. */
void ts_attention(ts_threadpool *pool, const ts_attn_params *ap, const float *q, const void *k_cache,
                  const void *v_cache, int64_t pos0, int n_tok, float *out, float *scratch,
                  int64_t scratch_stride);

#endif
