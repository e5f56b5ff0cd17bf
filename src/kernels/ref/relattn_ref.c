/* relattn_ref.c - the scalar reference of kernels/relattn.h: self-attention
 * with a clamped relative-position bias, reduced in double. */
#include <math.h>

#include "kernels/block_ops.h"
#include "kernels/relattn.h"

int ts_rel_attention_scratch(const ts_relattn_params *ap, int64_t n_kv, int64_t *per_thread, ts_err *err) {
    if (ap->n_head < 1 || ap->head_dim < 1 || ap->max_rel < 0)
        return ts_err_set(err, "relative attention: n_head %d, head_dim %d, max_rel %d: need n_head, head_dim >= 1 "
                               "and max_rel >= 0",
                          ap->n_head, ap->head_dim, ap->max_rel);
    return ts_attn_row_scratch(n_kv, ap->head_dim, "relative attention", per_thread, err);
}

typedef struct {
    const ts_relattn_params *ap;
    const float *q, *k, *v, *bias;
    int64_t n_kv;
    float *out;
    double *scratch;
    int64_t scratch_stride;
} relattn_job;

static void relattn_items(void *ctx, int64_t i0, int64_t i1, int tid) {
    const relattn_job *j = ctx;
    const ts_relattn_params *ap = j->ap;
    const int hd = ap->head_dim, mr = ap->max_rel;
    const int64_t row = (int64_t)ap->n_head * hd;
    double *s = j->scratch + (int64_t)tid * j->scratch_stride;
    double *acc = s + j->n_kv;
    for (int64_t it = i0; it < i1; it++) {
        const int64_t t = it / ap->n_head;
        const int h = (int)(it % ap->n_head);
        const float *qh = j->q + t * row + (int64_t)h * hd;
        const float *bh = j->bias + (int64_t)h * (2 * mr + 1) + mr; /* bh[r], r in [-mr, mr] */
        double m = -INFINITY;
        for (int64_t i = 0; i < j->n_kv; i++) {
            const float *kh = j->k + i * row + (int64_t)h * hd;
            double d = 0.0;
            for (int c = 0; c < hd; c++) d += (double)qh[c] * (double)kh[c];
            int64_t r = i - t;
            r = r < -mr ? -mr : r > mr ? mr : r;
            s[i] = d * (double)ap->scale + (double)bh[r];
            if (s[i] > m) m = s[i];
        }
        double sum = 0.0;
        for (int64_t i = 0; i < j->n_kv; i++) {
            s[i] = exp(s[i] - m);
            sum += s[i];
        }
        for (int c = 0; c < hd; c++) acc[c] = 0.0;
        for (int64_t i = 0; i < j->n_kv; i++) {
            const float *vh = j->v + i * row + (int64_t)h * hd;
            for (int c = 0; c < hd; c++) acc[c] += s[i] * (double)vh[c];
        }
        /* qh has been read in full: out may alias q */
        float *oh = j->out + t * row + (int64_t)h * hd;
        for (int c = 0; c < hd; c++) oh[c] = (float)(acc[c] / sum);
    }
}

void ts_rel_attention(ts_threadpool *pool, const ts_relattn_params *ap, const float *q, int64_t n_q, const float *k,
                      const float *v, int64_t n_kv, const float *bias, float *out, double *scratch,
                      int64_t scratch_stride) {
    relattn_job j = {ap, q, k, v, bias, n_kv, out, scratch, scratch_stride};
    ts_parallel_for(pool, n_q * ap->n_head, relattn_items, &j);
}
