/* relattn.h - self-attention with a relative-position bias (T5 / umT5's
 * encoder): the scalar reference of the engine's TS_OP_REL_ATTN.
 *
 * T5 gives every (head, query, key) an additive score bias that depends
 * only on the key's offset from the query, r = key - query, through a
 * bucket table learned per head (per layer in umT5). Past some distance
 * every offset falls in the same bucket (T5: |r| >= max_distance), so the
 * bias is a table of 2 * max_rel + 1 values per head, r clamped to
 * [-max_rel, max_rel]; the caller builds it from the buckets
 * (video/umt5.c). No scaling is implied: T5 folds 1/sqrt(d) into its
 * weights, so its scale is 1.
 *
 * Keys are a prefix of the same sequence as the queries: query t (at
 * position t) sees keys 0 .. n_kv-1, which is how a padding mask of
 * right-padded text reads (masked keys contribute nothing; transformers
 * adds finfo.min to their scores, whose exp is exactly 0 in f32).
 */
#ifndef TS_KERNELS_RELATTN_H
#define TS_KERNELS_RELATTN_H

#include <stdint.h>

#include "core/err.h"
#include "core/threadpool.h"

typedef struct ts_relattn_params {
    int n_head;   /* heads of q, k and v (no GQA: T5 has none) */
    int head_dim;
    int max_rel;  /* the bias table covers offsets -max_rel .. max_rel */
    float scale;  /* multiplies q.k (T5: 1) */
} ts_relattn_params;

/* Doubles of per-thread scratch ts_rel_attention needs for up to n_kv
 * keys: n_kv + head_dim. 0 with *per_thread, or -1 with err when ap is
 * invalid (n_head, head_dim < 1, max_rel < 0), n_kv < 1, or the size
 * overflows. */
int ts_rel_attention_scratch(const ts_relattn_params *ap, int64_t n_kv, int64_t *per_thread, ts_err *err);

/* For query row t and head h, with r(i) = min(max(i - t, -max_rel), max_rel):
 *   s_i = scale * q[t][h] . k[i][h] + bias[h][r(i) + max_rel],  i < n_kv,
 *   p = softmax(s) (max subtracted), out[t][h] = sum_i p_i v[i][h],
 * all in double, rounded once per output.
 *   q, out: [n_q][n_head * head_dim]; out may alias q (exactly), not k or v
 *   k, v:   [n_kv][n_head * head_dim]
 *   bias:   [n_head][2 * max_rel + 1] f32
 *   scratch: per thread scratch_stride doubles (ts_rel_attention_scratch).
 * (query, head) pairs are split across pool (NULL: the caller's thread);
 * the split never changes an output's arithmetic. n_q >= 0, n_kv >= 1. */
void ts_rel_attention(ts_threadpool *pool, const ts_relattn_params *ap, const float *q, int64_t n_q, const float *k,
                      const float *v, int64_t n_kv, const float *bias, float *out, double *scratch,
                      int64_t scratch_stride);

#endif
