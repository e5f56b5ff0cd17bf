/* act.c - reference softmax, activations and soft-capping. */
#include <math.h>

#include "kernels/ops.h"

void ts_softmax_f32(float *x, int64_t n) {
    float mx = x[0];
    for (int64_t i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

float ts_silu_f32(float x) { return x / (1.0f + expf(-x)); }

float ts_gelu_tanh_f32(float x) {
    /* sqrt(2/pi) */
    const float k = 0.7978845608028654f;
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

void ts_swiglu_f32(float *out, const float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = ts_silu_f32(gate[i]) * up[i];
}

void ts_geglu_tanh_f32(float *out, const float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = ts_gelu_tanh_f32(gate[i]) * up[i];
}

void ts_softcap_f32(float *x, int64_t n, float cap) {
    for (int64_t i = 0; i < n; i++) x[i] = cap * tanhf(x[i] / cap);
}
