/* fastops.h - the fast attention and element-wise kernels of the forward
 * pass, beside the scalar references of ops.h.
 *
 * Attention (ts_attention_fast): tiled over the KV cache. A work item is
 * one KV head and a block of up to TS_ATTN_QB consecutive query tokens: all
 * n_head / n_head_kv query heads of that KV head for those tokens ("rows")
 * go through the cache in tiles of TS_ATTN_KT positions aligned to absolute
 * position 0. Each tile's K and V are converted to f32 once (K transposed,
 * so a row's scores are plain vector FMAs over the tile) and used by every
 * row; each row keeps an online softmax (running max m, sum l, and an f32
 * accumulator rescaled by exp(m_old - m_new) when the max grows). A
 * token's rows see the same keys, so they are scored and accumulated up to
 * TS_ATTN_G at a time: each K or V vector loaded feeds G rows' FMA chains
 * (AVX-512: 1.06-2.0x the one-row schedule on the real models' head shapes,
 * docs/PERFORMANCE.md; every row's sequence, hence every bit, unchanged;
 * AVX2: the same schedule in ymm, x86/fastops_avx2.c).
 *
 * Non-causal mode (ap->n_kv > 0, diffusion LLMs): every row visits the
 * tiles of positions 0 .. n_kv-1 and uses all their keys, so a row's result
 * depends on n_kv but not on its position or its block.
 *
 * A row's arithmetic depends only on its own position: the tiles it visits,
 * the keys it uses in each (its causal / sliding-window range, skipping
 * masked keys entirely) and the order of every sum are the same whether it
 * is computed alone (decode) or inside a prefill block, so decode and
 * prefill give bit-identical outputs. exp is ts_fast_expf below (relative
 * error < 2e-7 against expf).
 *
 * The per-item kernel is compiled once per ISA level (kernels/fastops_impl.h
 * included by ref/fastops_generic.c and x86/fastops_avx*.c with their
 * flags) and chosen through the dispatch table (cpu.h: attn_block, swiglu, geglu).
 */
#ifndef TS_KERNELS_FASTOPS_H
#define TS_KERNELS_FASTOPS_H

#include <stdint.h>

#include "core/threadpool.h"
#include "kernels/ops.h"

#define TS_ATTN_KT 64 /* cache positions per tile */
#define TS_ATTN_QB 16 /* query tokens per work item */
#define TS_ATTN_QB_FULL 256 /* ... non-causal with one query head per KV head (a DiT): every item
                              reads all keys, so wider items convert each K/V tile for more rows */
#define TS_ATTN_G 4   /* query heads of one token scored together (one K / V load serves them) */

/* The shared description of one attention call. */
typedef struct ts_attn_job {
    const ts_attn_params *ap;
    const float *q;          /* [n_tok][n_head * head_dim] */
    const void *k_cache;     /* [n_ctx][kv_stride] f16 or f32 */
    const void *v_cache;
    int64_t pos0;
    int n_tok;
    float *out;              /* [n_tok][n_head * head_dim] */
} ts_attn_job;

/* Rows of KV head kvh for tokens [t0, t1) (t1 - t0 <= TS_ATTN_QB, or TS_ATTN_QB_FULL), with
 * per-thread scratch of ts_attention_fast_scratch floats. */
typedef void (*ts_attn_block_fn)(const ts_attn_job *j, int kvh, int t0, int t1, float *scratch);

/* The gated activations, element-wise (out may alias gate), with the
 * polynomial exp below:
 *   swiglu: out[i] = silu(gate[i]) * up[i]
 *   geglu:  out[i] = gelu_tanh(gate[i]) * up[i], computed as
 *           g * sigmoid(2z), z = sqrt(2/pi) (g + 0.044715 g^3), which is
 *           0.5 g (1 + tanh z) without tanh's cancellation near -1 */
typedef void (*ts_glu_fn)(float *out, const float *gate, const float *up, int64_t n);

/* y[i] = fmaf(a, x[i], y[i]) for i < n: the same bits at every level. */
typedef void (*ts_axpy_fn)(float *y, float a, const float *x, int64_t n);

/* Floats of per-thread scratch ts_attention_fast needs for ap. */
int64_t ts_attention_fast_scratch(const ts_attn_params *ap);

/* Same contract as ts_attention (ops.h), scratch_stride floats per thread
 * of at least ts_attention_fast_scratch(ap). */
void ts_attention_fast(ts_threadpool *pool, const ts_attn_params *ap, const float *q, const void *k_cache,
                       const void *v_cache, int64_t pos0, int n_tok, float *out, float *scratch,
                       int64_t scratch_stride);

/* Element-wise SwiGLU / GeGLU of the active level, split over the pool for
 * large n. */
void ts_swiglu_fast(ts_threadpool *pool, float *out, const float *gate, const float *up, int64_t n);
void ts_geglu_fast(ts_threadpool *pool, float *out, const float *gate, const float *up, int64_t n);

/* GELU-tanh alone (a DiT's FFN): out[i] = gelu_tanh(x[i]) by the GeGLU
 * kernel of the active level with up = 1 (an exact product), so its bound
 * is GeGLU's; out may alias x. */
void ts_gelu_fast(ts_threadpool *pool, float *out, const float *x, int64_t n);

/* The feed-forward's gated activation as the forward pass picks it: GeGLU
 * (gelu) or SwiGLU, the fast kernels above (fast) or the f32 references of
 * ops.h. */
void ts_glu(ts_threadpool *pool, bool gelu, bool fast, float *out, const float *gate, const float *up, int64_t n);

/* The portable versions (the fallback of levels without their own). */
void ts_attn_block_generic(const ts_attn_job *j, int kvh, int t0, int t1, float *scratch);
void ts_swiglu_generic(float *out, const float *gate, const float *up, int64_t n);
void ts_geglu_generic(float *out, const float *gate, const float *up, int64_t n);
void ts_axpy_generic(float *y, float a, const float *x, int64_t n);

#endif
