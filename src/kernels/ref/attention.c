/* attention.c - reference attention over the KV cache: causal with optional
 * sliding window, or non-causal over the first n_kv cache rows (diffusion
 * LLMs); optional soft-capping. One work item is one (token, head) pair;
 * items are split across the pool. Keys and values are read from the cache
 * (f16 or f32), so a batched prefill and a token-by-token decode see exactly
 * the same values. */
#include <math.h>
#include <string.h>

#include "kernels/ops.h"
#include "quant/quant.h"

typedef struct {
    const ts_attn_params *ap;
    const float *q;
    const void *k_cache;
    const void *v_cache;
    int64_t pos0;
    float *out;
    float *scratch;
    int64_t scratch_stride;
} attn_job;

/* Copies kv-head `kvh` of cache row `pos` into dst[head_dim] as f32. */
static void load_kv(const ts_attn_params *ap, const void *cache, int64_t pos, int kvh, float *dst) {
    const int64_t off = pos * ap->kv_stride + (int64_t)kvh * ap->head_dim;
    if (ap->kv_f16) {
        const uint16_t *src = (const uint16_t *)cache + off;
        for (int d = 0; d < ap->head_dim; d++) dst[d] = ts_f16_to_f32(src[d]);
    } else {
        memcpy(dst, (const float *)cache + off, (size_t)ap->head_dim * sizeof(float));
    }
}

static void attn_items(void *ctx, int64_t i0, int64_t i1, int tid) {
    const attn_job *j = ctx;
    const ts_attn_params *ap = j->ap;
    const int hd = ap->head_dim;
    const int group = ap->n_head / ap->n_head_kv;
    float *kbuf = j->scratch + (int64_t)tid * j->scratch_stride;
    float *acc = kbuf + hd;
    float *scores = acc + hd;
    for (int64_t it = i0; it < i1; it++) {
        const int64_t t = it / ap->n_head;
        const int h = (int)(it % ap->n_head);
        const int kvh = h / group;
        const int64_t p = j->pos0 + t;
        /* keys [lo, lo + n_kv): causal (window) range, or all n_kv keys */
        const int64_t lo = ap->n_kv == 0 && ap->n_swa > 0 && p - ap->n_swa + 1 > 0 ? p - ap->n_swa + 1 : 0;
        const int64_t n_kv = ap->n_kv > 0 ? ap->n_kv : p - lo + 1;
        const float *qh = j->q + t * (int64_t)ap->n_head * hd + (int64_t)h * hd;

        for (int64_t i = 0; i < n_kv; i++) {
            load_kv(ap, j->k_cache, lo + i, kvh, kbuf);
            float s = ts_dot_f32(qh, kbuf, hd) * ap->scale;
            if (ap->softcap > 0.0f) s = ap->softcap * tanhf(s / ap->softcap);
            scores[i] = s;
        }
        ts_softmax_f32(scores, n_kv);

        memset(acc, 0, (size_t)hd * sizeof(float));
        for (int64_t i = 0; i < n_kv; i++) {
            load_kv(ap, j->v_cache, lo + i, kvh, kbuf);
            const float w = scores[i];
            for (int d = 0; d < hd; d++) acc[d] += w * kbuf[d];
        }
        memcpy(j->out + t * (int64_t)ap->n_head * hd + (int64_t)h * hd, acc, (size_t)hd * sizeof(float));
    }
}

void ts_attention(ts_threadpool *pool, const ts_attn_params *ap, const float *q, const void *k_cache,
                  const void *v_cache, int64_t pos0, int n_tok, float *out, float *scratch,
                  int64_t scratch_stride) {
    attn_job j = {ap, q, k_cache, v_cache, pos0, out, scratch, scratch_stride};
    ts_parallel_for(pool, (int64_t)n_tok * ap->n_head, attn_items, &j);
}
