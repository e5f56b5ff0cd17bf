/* norm.c - reference RMSNorm. The mean of squares is accumulated in double:
 * cheap next to the matmuls and it keeps the norm independent of summation
 * order to well below f32 rounding. */
#include <math.h>

#include "kernels/ops.h"

void ts_rmsnorm_f32(float *out, const float *x, const float *w, int64_t n, float eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
    const float inv = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    if (w) {
        for (int64_t i = 0; i < n; i++) out[i] = x[i] * inv * w[i];
    } else {
        for (int64_t i = 0; i < n; i++) out[i] = x[i] * inv;
    }
}

typedef struct {
    float *dst;
    const float *src, *w;
    int64_t n;
    float eps;
} norm_job;

static void norm_rows(void *ctx, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    const norm_job *j = ctx;
    for (int64_t r = r0; r < r1; r++)
        ts_rmsnorm_f32(j->dst + r * j->n, j->src + r * j->n, j->w, j->n, j->eps);
}

void ts_rmsnorm_rows(ts_threadpool *pool, float *out, const float *x, const float *w, int64_t n, int64_t rows,
                     float eps) {
    norm_job j = {out, x, w, n, eps};
    if (rows * n < 32768 || !pool)
        norm_rows(&j, 0, rows, 0);
    else
        ts_parallel_for_grain(pool, rows, 8, norm_rows, &j);
}
