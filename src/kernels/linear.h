/* linear.h - the fast matmul driver of the forward pass: Y = X W^T for one
 * or several weight matrices that read the same input (Q, K and V; gate and
 * up), on the quantized-activation kernels (qdot.h) and the repacked panel
 * GEMM (repack.h).
 *
 * One call:
 *   1. converts the n_tok input rows once into every activation format the
 *      matrices need (panel tiles; TS_ACT_Q8 / Q8K rows; f32 weights read X
 *      directly), split over the pool by token;
 *   2. runs the rows of all the matrices in one parallel region, handed out
 *      in chunks of 16-row items by an atomic counter. Each matrix goes to
 *      the first matmul variant of linear.c's registry that is available
 *      (the features it needs usable at the active level) and supports it:
 *        - "panels": repacked matrix (w->packed): panel x tiles of up to 8
 *          tokens, in token blocks of 32 so that the block's tiles stay
 *          in cache beside the panel (one panel read per 32 tokens);
 *        - "rows": F32 / F16 weights: ts_qgemm on f32 activations (4-token
 *          register tiles; for one token, a GEMV); other types with a dot
 *          kernel (Q5_0, K-quants, ...): ts_qgemm on 8-bit activations at
 *          the lo precision (at the hi precision they go to "ref": their
 *          kernels only take 8-bit activations);
 *        - "ref": anything else (BF16, odd row lengths): the reference
 *          ts_matmul, in its own parallel region.
 *      (A slot is marked for INT8 weights with outliers; AMX tiles are
 *      the `amx` engine's, kernels/amx/amx.h.)
 *      Every entry names what it is tested against and the stated bound.
 *
 * Precision (repack.h): hi (default) = 16-bit activations as two int8
 * planes, the logits stay within ~1e-3 of the f32 reference; TS_ACT=q8 in
 * the environment (read when the work space is made) = lo, one int8 plane
 * per value as ggml's Q8_0 activations, about twice the prefill throughput
 * and up to ~7% logit error on the real models (docs/FIDELITY.md). There
 * a call whose panel matrices are all K-quants takes lo256 instead
 * (scales powers of two apart within each 256 values; ~6% faster on
 * Qwen2.5 1.5B, 1.2-1.5x the KL divergence of arbitrary per-32 scales,
 * under half of llama.cpp's; TS_ACT_K256=0 turns it off), so a matrix's
 * lo result depends on which matrices share its call.
 * A token's result never depends on n_tok, the thread count or the chunking
 * (each kernel's per-(row, token) arithmetic is fixed), so decode and
 * prefill give bit-identical rows.
 */
#ifndef TS_KERNELS_LINEAR_H
#define TS_KERNELS_LINEAR_H

#include <stdbool.h>
#include <stdint.h>

#include "core/err.h"
#include "core/threadpool.h"
#include "kernels/ops.h"

typedef struct ts_linear_ws ts_linear_ws;

/* Work space for inputs of up to max_n_in values and max_tok tokens, for a
 * pool of n_threads. NULL with err on allocation failure. */
ts_linear_ws *ts_linear_ws_new(int64_t max_n_in, int max_tok, int n_threads, ts_err *err);
void ts_linear_ws_free(ts_linear_ws *ws); /* NULL is a no-op */
int ts_linear_ws_hi(const ts_linear_ws *ws); /* 1: hi precision, 0: lo (TS_ACT=q8) */
/* Sets the precision (1 hi, 0 lo) unless the environment names one:
 * TS_ACT=q8 (lo) or TS_ACT=exact (hi) override it, for debugging. */
void ts_linear_ws_set_hi(ts_linear_ws *ws, int hi);

/* y[i][t * w[i]->n_out + r] = sum_k x[t * n_in + k] * W_i[r][k] for i < n_mat
 * (<= 4), t < n_tok (<= max_tok), r < w[i]->n_out. Every w[i] has the same
 * n_in (<= max_n_in). */
void ts_linear(ts_threadpool *pool, ts_linear_ws *ws, int n_mat, const ts_wmat *const *w, float *const *y,
               const float *x, int n_tok);

/* The grouped expert matmul of block_ops.h's ts_moe_matmul (same
 * arguments and sums) on the fast kernels: for each expert with pairs, its
 * pairs' rows of x gathered into gx ([n_pairs_e][n_in]), one ts_linear
 * into gy ([n_pairs_e][n_out]), then added into y times the routing weight
 * (in float), experts in increasing order. An expert's pairs must number
 * at most ws's max_tok (a token routes to an expert once: n_tok <= max_tok
 * is enough). Each weight matrix is read once per call; a token's result
 * never depends on the other tokens (ts_linear's promise), so decode and
 * prefill agree bit for bit. Accuracy: ts_linear's (tests/test_block_ops.c:
 * within 1e-4 of the sum of |terms| of each dot, measured 1.2e-5). */
struct ts_moe_pair;
void ts_moe_linear(ts_threadpool *pool, ts_linear_ws *ws, const ts_wmat *experts, int n_expert,
                   const int64_t *offsets, const struct ts_moe_pair *pairs, const float *route_w, int k,
                   const float *x, int64_t x_stride, bool x_by_pair, float *y, int64_t y_stride, bool y_by_pair,
                   float *gx, float *gy);

/* ---- the matmul variants (for tests and device listings) ---- */

/* Writes the names of the variants, in the order ts_linear tries them, and
 * whether each is available here (the features it needs usable at the
 * active level) into names[i] / available[i] for i < cap (either may be
 * NULL). Returns the number of variants. */
int ts_linear_variants(const char **names, bool *available, int cap);
/* What variant i is tested against and its stated bound (static strings).
 * 0, or -1 when there is no variant i. */
int ts_linear_variant_doc(int i, const char **reference, const char **bound);
/* The name of the variant ts_linear(.., ws, ..) would run w on now. */
const char *ts_linear_variant_for(const ts_linear_ws *ws, const ts_wmat *w);

/* Packs w (type supported by repack.h and with a fast panel kernel at the
 * active level) into dst (ts_rp_matrix_bytes). Returns 0, or -1 when this
 * matrix should stay in its stored layout. dst may equal w->data (in-place
 * repacking, through a bounce buffer: the only allocation) when
 * ts_linear_can_pack_in_place(w). */
int ts_linear_pack(const ts_wmat *w, uint8_t *dst, ts_err *err);

/* true when ts_linear_pack would pack w at the active kernel level */
int ts_linear_wants_pack(const ts_wmat *w);
/* ... and its panels fit in its own bytes (same size: every type but Q4_K,
 * whose panels are 148/144 of the rows; whole panels) */
int ts_linear_can_pack_in_place(const ts_wmat *w);

#endif
