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
