/* rope.c - reference rotary position embedding: the frequency table (with
 * linear, rope_freqs-factor and llama3 scaling) and the rotation itself in
 * both layouts (adjacent pairs as GGUF llama stores Q/K, and NeoX halves). */
#include <math.h>

#include "kernels/ops.h"

void ts_rope_inv_freq(double *inv_freq, int n_rot, double base, double freq_scale,
                      const float *factors, const ts_rope_llama3 *l3) {
    const int n_pairs = n_rot / 2;
    for (int i = 0; i < n_pairs; i++) {
        double f = pow(base, -2.0 * i / (double)n_rot);
        if (factors) f /= (double)factors[i];
        if (l3) {
            /* Long wavelengths are slowed by `factor`, short ones kept, and the
             * band in between blended linearly in 1/wavelength. */
            const double pi = 3.14159265358979323846;
            double wavelen = 2.0 * pi / f;
            double low_wavelen = l3->orig_ctx / l3->low_freq_factor;
            double high_wavelen = l3->orig_ctx / l3->high_freq_factor;
            if (wavelen > low_wavelen) {
                f = f / l3->factor;
            } else if (wavelen >= high_wavelen) {
                double smooth = (l3->orig_ctx / wavelen - l3->low_freq_factor) /
                                (l3->high_freq_factor - l3->low_freq_factor);
                f = (1.0 - smooth) * f / l3->factor + smooth * f;
            }
        }
        inv_freq[i] = f * freq_scale;
    }
}

void ts_rope_cs(const double *inv_freq, int n_rot, int64_t pos, float *cs) {
    for (int i = 0; i < n_rot / 2; i++) {
        double a = (double)pos * inv_freq[i];
        cs[2 * i] = (float)cos(a);
        cs[2 * i + 1] = (float)sin(a);
    }
}

void ts_rope_f32(float *x, int n_head, int head_dim, int n_rot, bool neox, const double *inv_freq,
                 int64_t pos, float *cs) {
    ts_rope_cs(inv_freq, n_rot, pos, cs);
    ts_rope_apply(x, n_head, head_dim, n_rot, neox, cs);
}

void ts_rope_apply(float *x, int n_head, int head_dim, int n_rot, bool neox, const float *cs) {
    const int n_pairs = n_rot / 2;
    for (int h = 0; h < n_head; h++) {
        float *xh = x + (int64_t)h * head_dim;
        for (int i = 0; i < n_pairs; i++) {
            const float c = cs[2 * i], s = cs[2 * i + 1];
            const int i0 = neox ? i : 2 * i;
            const int i1 = neox ? i + n_pairs : 2 * i + 1;
            const float x0 = xh[i0], x1 = xh[i1];
            xh[i0] = x0 * c - x1 * s;
            xh[i1] = x0 * s + x1 * c;
        }
    }
}
