/* block_ops_ref.c - scalar references of kernels/block_ops.h: LayerNorm,
 * the DiT adaLN modulation and gated residual, MoE routing, grouping, the
 * grouped expert matmul and the MoE FFN, and cross-attention. Reductions are
 * in double and each output is rounded to f32 once (the FFN's sum over
 * experts excepted: one rounding per expert); work split across a pool
 * never changes an output's arithmetic. */
#include <math.h>
#include <string.h>

#include "kernels/block_ops.h"

/* ---- LayerNorm ------------------------------------------------------- */

typedef struct {
    float *out;
    const float *x;
    const float *w;
    const float *b;
    int64_t n;
    float eps;
} ln_job;

static void ln_rows(void *ctx, int64_t t0, int64_t t1, int tid) {
    (void)tid;
    const ln_job *j = ctx;
    const int64_t n = j->n;
    for (int64_t t = t0; t < t1; t++) {
        const float *x = j->x + t * n;
        float *out = j->out + t * n;
        double sum = 0.0;
        for (int64_t i = 0; i < n; i++) sum += (double)x[i];
        const double mean = sum / (double)n;
        double ss = 0.0;
        for (int64_t i = 0; i < n; i++) {
            const double d = (double)x[i] - mean;
            ss += d * d;
        }
        const double inv = 1.0 / sqrt(ss / (double)n + (double)j->eps);
        /* every x[i] of the row has been read: out may alias x */
        for (int64_t i = 0; i < n; i++) {
            double v = ((double)x[i] - mean) * inv;
            if (j->w) v *= (double)j->w[i];
            if (j->b) v += (double)j->b[i];
            out[i] = (float)v;
        }
    }
}

void ts_layernorm_f32(ts_threadpool *pool, float *out, const float *x, const float *w, const float *b,
                      int64_t n_tok, int64_t n, float eps) {
    ln_job j = {out, x, w, b, n, eps};
    ts_parallel_for(pool, n_tok, ln_rows, &j);
}

/* ---- elementwise ----------------------------------------------------- */

void ts_mul_f32(float *y, const float *a, const float *b, bool b_row, int64_t n_tok, int64_t n) {
    for (int64_t t = 0; t < n_tok; t++) {
        const float *bt = b_row ? b : b + t * n;
        for (int64_t i = 0; i < n; i++) y[t * n + i] = a[t * n + i] * bt[i];
    }
}

void ts_modulate_f32(float *y, const float *x, const float *shift, const float *scale, int64_t mod_stride,
                     int64_t tok_per_sample, int64_t n_tok, int64_t n) {
    for (int64_t t = 0; t < n_tok; t++) {
        const int64_t s = t / tok_per_sample;
        const float *sh = shift ? shift + s * mod_stride : NULL;
        const float *sc = scale ? scale + s * mod_stride : NULL;
        for (int64_t i = 0; i < n; i++) {
            double v = (double)x[t * n + i];
            if (sc) v *= 1.0 + (double)sc[i];
            if (sh) v += (double)sh[i];
            y[t * n + i] = (float)v;
        }
    }
}

void ts_gated_residual_f32(float *x, const float *y, const float *gate, int64_t mod_stride, int64_t tok_per_sample,
                           int64_t n_tok, int64_t n) {
    for (int64_t t = 0; t < n_tok; t++) {
        const float *g = gate + (t / tok_per_sample) * mod_stride;
        for (int64_t i = 0; i < n; i++)
            x[t * n + i] = (float)((double)x[t * n + i] + (double)g[i] * (double)y[t * n + i]);
    }
}

/* ---- MoE routing and grouping ---------------------------------------- */

static bool chosen(const int32_t *id, int j, int32_t e) {
    for (int i = 0; i < j; i++)
        if (id[i] == e) return true;
    return false;
}

void ts_moe_route(const float *logits, int64_t n_tok, int n_expert, int k, ts_moe_score score, bool norm_topk,
                  int32_t *ids, float *weights) {
    for (int64_t t = 0; t < n_tok; t++) {
        const float *l = logits + t * n_expert;
        int32_t *id = ids + t * k;
        float *w = weights + t * k;
        /* selection: the j-th pick is the first unpicked expert with the
         * largest logit (strict >, so the lowest index wins a tie) */
        for (int j = 0; j < k; j++) {
            int32_t best = -1;
            for (int32_t e = 0; e < n_expert; e++) {
                if (chosen(id, j, e)) continue;
                if (best < 0 || l[e] > l[best]) best = e;
            }
            id[j] = best;
        }
        if (score == TS_MOE_SIGMOID_TOPK) {
            double sum = 0.0;
            for (int j = 0; j < k; j++) sum += 1.0 / (1.0 + exp(-(double)l[id[j]]));
            for (int j = 0; j < k; j++) /* the same sigmoid again: the bits of the sum's terms */
                w[j] = (float)(1.0 / (1.0 + exp(-(double)l[id[j]])) / (norm_topk ? sum : 1.0));
            continue;
        }
        /* weights: exp(l - m) over the selection, divided by the sum over
         * the selection or over all experts; m is the largest logit (the
         * first pick, also the largest overall) */
        const double m = (double)l[id[0]];
        double sel = 0.0;
        for (int j = 0; j < k; j++) sel += exp((double)l[id[j]] - m);
        double denom = sel;
        if (score == TS_MOE_SOFTMAX_TOPK && !norm_topk) {
            denom = 0.0;
            for (int e = 0; e < n_expert; e++) denom += exp((double)l[e] - m);
        }
        for (int j = 0; j < k; j++) w[j] = (float)(exp((double)l[id[j]] - m) / denom);
    }
}

int ts_moe_group(const int32_t *ids, int64_t n_tok, int k, int n_expert, int64_t *offsets, ts_moe_pair *pairs,
                 ts_err *err) {
    if (k < 1) return ts_err_set(err, "moe group: k = %d, must be >= 1", k);
    if (n_expert < 1) return ts_err_set(err, "moe group: n_expert = %d, must be >= 1", n_expert);
    if (n_tok < 0) return ts_err_set(err, "moe group: n_tok = %lld, must be >= 0", (long long)n_tok);
    uint64_t n_pairs;
    if (ts_mul_overflow_u64((uint64_t)n_tok, (uint64_t)k, &n_pairs) || n_pairs > INT32_MAX)
        return ts_err_set(err, "moe group: n_tok %lld * k %d pairs exceed INT32_MAX", (long long)n_tok, k);
    /* offsets[e] counts expert e's pairs, then becomes its start; filling
     * moves it to its end (the next one's start); a shift by one restores
     * the starts. */
    memset(offsets, 0, ((size_t)n_expert + 1) * sizeof(int64_t));
    for (int64_t p = 0; p < (int64_t)n_pairs; p++) {
        const int32_t e = ids[p];
        if (e < 0 || e >= n_expert)
            return ts_err_set(err, "moe group: ids[%lld][%d] = %d, not in [0, %d)", (long long)(p / k),
                              (int)(p % k), (int)e, n_expert);
        offsets[e]++;
    }
    int64_t start = 0;
    for (int e = 0; e < n_expert; e++) {
        const int64_t c = offsets[e];
        offsets[e] = start;
        start += c;
    }
    offsets[n_expert] = start;
    for (int64_t p = 0; p < (int64_t)n_pairs; p++) {
        ts_moe_pair *q = &pairs[offsets[ids[p]]++];
        q->tok = (int32_t)(p / k);
        q->slot = (int32_t)(p % k);
    }
    for (int e = n_expert; e > 0; e--) offsets[e] = offsets[e - 1];
    offsets[0] = 0;
    return 0;
}

/* ---- grouped matmul and MoE FFN -------------------------------------- */

typedef struct {
    const ts_wmat *experts;
    int n_expert;
    const int64_t *offsets;
    const ts_moe_pair *pairs;
    const float *route_w;
    int k;
    const float *x;
    int64_t x_stride;
    bool x_by_pair;
    float *y;
    int64_t y_stride;
    bool y_by_pair;
    float *scratch;
    int64_t scratch_stride;
} moe_mm_job;

static void moe_mm_rows(void *ctx, int64_t r0, int64_t r1, int tid) {
    const moe_mm_job *j = ctx;
    float *buf = j->scratch + (int64_t)tid * j->scratch_stride;
    for (int e = 0; e < j->n_expert; e++) {
        const int64_t p0 = j->offsets[e], p1 = j->offsets[e + 1];
        if (p0 == p1) continue;
        const ts_wmat *w = &j->experts[e];
        const int64_t n_in = w->n_in;
        for (int64_t r = r0; r < r1; r++) {
            ts_wmat_row(w, r, buf);
            for (int64_t p = p0; p < p1; p++) {
                const ts_moe_pair pr = j->pairs[p];
                const float *xr = j->x + (j->x_by_pair ? p : (int64_t)pr.tok) * j->x_stride;
                double acc = 0.0;
                for (int64_t i = 0; i < n_in; i++) acc += (double)xr[i] * (double)buf[i];
                const double rw = j->route_w ? (double)j->route_w[(int64_t)pr.tok * j->k + pr.slot] : 1.0;
                float *yr = j->y + (j->y_by_pair ? p : (int64_t)pr.tok) * j->y_stride;
                yr[r] = (float)((double)yr[r] + rw * acc);
            }
        }
    }
}

void ts_moe_matmul(ts_threadpool *pool, const ts_wmat *experts, int n_expert, const int64_t *offsets,
                   const ts_moe_pair *pairs, const float *route_w, int k, const float *x, int64_t x_stride,
                   bool x_by_pair, float *y, int64_t y_stride, bool y_by_pair, float *scratch,
                   int64_t scratch_stride) {
    if (n_expert < 1 || offsets[n_expert] == 0) return;
    moe_mm_job j = {experts, n_expert, offsets, pairs, route_w, k, x, x_stride, x_by_pair,
                    y, y_stride, y_by_pair, scratch, scratch_stride};
    ts_parallel_for(pool, experts[0].n_out, moe_mm_rows, &j);
}

int ts_moe_ffn_scratch(int64_t n_tok, int k, int n_expert, int64_t n_embd, int64_t n_ff, int n_threads,
                       size_t *n_floats, ts_err *err) {
    if (n_tok < 0) return ts_err_set(err, "moe ffn: n_tok = %lld, must be >= 0", (long long)n_tok);
    if (n_expert < 1) return ts_err_set(err, "moe ffn: n_expert = %d, must be >= 1", n_expert);
    if (k < 1 || k > n_expert) return ts_err_set(err, "moe ffn: k = %d, must be in [1, n_expert %d]", k, n_expert);
    if (n_embd < 1) return ts_err_set(err, "moe ffn: n_embd = %lld, must be >= 1", (long long)n_embd);
    if (n_ff < 1) return ts_err_set(err, "moe ffn: n_ff = %lld, must be >= 1", (long long)n_ff);
    if (n_threads < 1) return ts_err_set(err, "moe ffn: n_threads = %d, must be >= 1", n_threads);
    uint64_t n_pairs, glu, glu2, rows, total, bytes;
    if (ts_mul_overflow_u64((uint64_t)n_tok, (uint64_t)k, &n_pairs) || n_pairs > INT32_MAX)
        return ts_err_set(err, "moe ffn: n_tok %lld * k %d pairs exceed INT32_MAX", (long long)n_tok, k);
    const uint64_t row = (uint64_t)(n_embd > n_ff ? n_embd : n_ff);
    if (ts_mul_overflow_u64(n_pairs, (uint64_t)n_ff, &glu) || ts_mul_overflow_u64(glu, 2, &glu2) ||
        ts_mul_overflow_u64((uint64_t)n_threads, row, &rows) || ts_add_overflow_u64(glu2, rows, &total) ||
        ts_mul_overflow_u64(total, sizeof(float), &bytes) || bytes > SIZE_MAX)
        return ts_err_set(err, "moe ffn: scratch for %lld tokens * k %d, n_embd %lld, n_ff %lld, %d threads overflows",
                          (long long)n_tok, k, (long long)n_embd, (long long)n_ff, n_threads);
    *n_floats = (size_t)total;
    return 0;
}

void ts_moe_ffn(ts_threadpool *pool, const ts_wmat *gate, const ts_wmat *up, const ts_wmat *down, int n_expert,
                bool gelu, const int64_t *offsets, const ts_moe_pair *pairs, const float *weights, int64_t n_tok,
                int k, const float *x, float *out, float *scratch) {
    const int64_t n_embd = gate[0].n_in, n_ff = gate[0].n_out;
    const int64_t n_pairs = offsets[n_expert];
    const int64_t row = n_embd > n_ff ? n_embd : n_ff;
    float *g = scratch;
    float *u = g + n_pairs * n_ff;
    float *rows = u + n_pairs * n_ff;
    memset(g, 0, (size_t)(2 * n_pairs * n_ff) * sizeof(float));
    ts_moe_matmul(pool, gate, n_expert, offsets, pairs, NULL, k, x, n_embd, false, g, n_ff, true, rows, row);
    ts_moe_matmul(pool, up, n_expert, offsets, pairs, NULL, k, x, n_embd, false, u, n_ff, true, rows, row);
    for (int64_t p = 0; p < n_pairs; p++) {
        if (gelu)
            ts_geglu_tanh_f32(g + p * n_ff, g + p * n_ff, u + p * n_ff, n_ff);
        else
            ts_swiglu_f32(g + p * n_ff, g + p * n_ff, u + p * n_ff, n_ff);
    }
    /* x has been read in full: out may alias it */
    memset(out, 0, (size_t)(n_tok * n_embd) * sizeof(float));
    ts_moe_matmul(pool, down, n_expert, offsets, pairs, weights, k, g, n_ff, true, out, n_embd, false, rows, row);
}

/* ---- cross-attention ------------------------------------------------- */

int ts_cross_attention_scratch(const ts_xattn_params *ap, int64_t n_kv, int64_t *per_thread, ts_err *err) {
    if (ap->n_head < 1 || ap->n_head_kv < 1 || ap->head_dim < 1 || ap->n_head % ap->n_head_kv != 0)
        return ts_err_set(err, "cross attention: n_head %d, n_head_kv %d, head_dim %d: need positive values and "
                               "n_head a multiple of n_head_kv",
                          ap->n_head, ap->n_head_kv, ap->head_dim);
    return ts_attn_row_scratch(n_kv, ap->head_dim, "cross attention", per_thread, err);
}

int ts_attn_row_scratch(int64_t n_kv, int head_dim, const char *what, int64_t *per_thread, ts_err *err) {
    if (n_kv < 1) return ts_err_set(err, "%s: n_kv = %lld, must be >= 1", what, (long long)n_kv);
    uint64_t total, bytes;
    if (ts_add_overflow_u64((uint64_t)n_kv, (uint64_t)head_dim, &total) || total > INT64_MAX ||
        ts_mul_overflow_u64(total, sizeof(double), &bytes) || bytes > SIZE_MAX)
        return ts_err_set(err, "%s: scratch for n_kv %lld overflows", what, (long long)n_kv);
    *per_thread = (int64_t)total;
    return 0;
}

typedef struct {
    const ts_xattn_params *ap;
    const float *q;
    const float *k;
    const float *v;
    int64_t n_kv;
    float *out;
    double *scratch;
    int64_t scratch_stride;
} xattn_job;

static void xattn_items(void *ctx, int64_t i0, int64_t i1, int tid) {
    const xattn_job *j = ctx;
    const ts_xattn_params *ap = j->ap;
    const int hd = ap->head_dim;
    const int group = ap->n_head / ap->n_head_kv;
    const int64_t q_row = (int64_t)ap->n_head * hd, kv_row = (int64_t)ap->n_head_kv * hd;
    double *s = j->scratch + (int64_t)tid * j->scratch_stride;
    double *acc = s + j->n_kv;
    for (int64_t it = i0; it < i1; it++) {
        const int64_t t = it / ap->n_head;
        const int h = (int)(it % ap->n_head);
        const int64_t off_kv = (int64_t)(h / group) * hd;
        const float *qh = j->q + t * q_row + (int64_t)h * hd;
        double m = -INFINITY;
        for (int64_t i = 0; i < j->n_kv; i++) {
            const float *kh = j->k + i * kv_row + off_kv;
            double d = 0.0;
            for (int c = 0; c < hd; c++) d += (double)qh[c] * (double)kh[c];
            s[i] = d * (double)ap->scale;
            if (s[i] > m) m = s[i];
        }
        double sum = 0.0;
        for (int64_t i = 0; i < j->n_kv; i++) {
            s[i] = exp(s[i] - m);
            sum += s[i];
        }
        for (int c = 0; c < hd; c++) acc[c] = 0.0;
        for (int64_t i = 0; i < j->n_kv; i++) {
            const float *vh = j->v + i * kv_row + off_kv;
            for (int c = 0; c < hd; c++) acc[c] += s[i] * (double)vh[c];
        }
        /* qh has been read in full: out may alias q */
        float *oh = j->out + t * q_row + (int64_t)h * hd;
        for (int c = 0; c < hd; c++) oh[c] = (float)(acc[c] / sum);
    }
}

void ts_cross_attention(ts_threadpool *pool, const ts_xattn_params *ap, const float *q, int64_t n_q, const float *k,
                        const float *v, int64_t n_kv, float *out, double *scratch, int64_t scratch_stride) {
    xattn_job j = {ap, q, k, v, n_kv, out, scratch, scratch_stride};
    ts_parallel_for(pool, n_q * ap->n_head, xattn_items, &j);
}

/* ---- DiT element-wise ops -------------------------------------------- */

typedef struct {
    float *y;
    const float *x;
    int64_t n;
} gelu_job;

#define GELU_CHUNK 4096

static void gelu_chunks(void *arg, int64_t c0, int64_t c1, int tid) {
    (void)tid;
    const gelu_job *j = arg;
    for (int64_t c = c0; c < c1; c++) {
        const int64_t a = c * GELU_CHUNK, b = a + GELU_CHUNK < j->n ? a + GELU_CHUNK : j->n;
        for (int64_t i = a; i < b; i++)
            j->y[i] = ts_gelu_tanh_f32(j->x[i]);
    }
}

void ts_gelu_f32(ts_threadpool *pool, float *y, const float *x, int64_t n) {
    gelu_job j = {y, x, n};
    ts_parallel_for(pool, (n + GELU_CHUNK - 1) / GELU_CHUNK, gelu_chunks, &j);
}

typedef struct {
    float *x;
    const double *tab;
    int n_head, head_dim;
} rope_tab_job;

static void rope_tab_rows(void *arg, int64_t t0, int64_t t1, int tid) {
    (void)tid;
    const rope_tab_job *j = arg;
    const int64_t row = (int64_t)j->n_head * j->head_dim;
    const int half = j->head_dim / 2;
    for (int64_t t = t0; t < t1; t++) {
        const double *cs = j->tab + t * j->head_dim;
        for (int h = 0; h < j->n_head; h++) {
            float *p = j->x + t * row + (int64_t)h * j->head_dim;
            for (int k = 0; k < half; k++) {
                const double x0 = p[2 * k], x1 = p[2 * k + 1], c = cs[2 * k], s = cs[2 * k + 1];
                p[2 * k] = (float)(x0 * c - x1 * s);
                p[2 * k + 1] = (float)(x0 * s + x1 * c);
            }
        }
    }
}

void ts_rope_tab_f32(ts_threadpool *pool, float *x, const double *tab, int64_t n_tok, int n_head, int head_dim) {
    rope_tab_job j = {x, tab, n_head, head_dim};
    ts_parallel_for(pool, n_tok, rope_tab_rows, &j);
}
