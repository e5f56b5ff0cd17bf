/* flow.h - flow-matching samplers of the Wan family, as diffusers implements
 * them (the Wan pipelines' schedulers), over a flat latent vector.
 *
 * The model predicts the velocity v at noise level sigma (x_sigma =
 * (1 - sigma) x0 + sigma noise, v = noise - x0), so x0 = x - sigma v.
 *   Euler  (FlowMatchEulerDiscreteScheduler): x <- x + (sigma_{i+1} - sigma_i) v.
 *          Schedule: timesteps linspace(1000, 1000 s(1/1000), n) where
 *          s(u) = shift u / (1 + (shift - 1) u), then sigma = s(t / 1000)
 *          (diffusers shifts the end points twice: kept, so the schedules
 *          agree); the model gets t = 1000 sigma.
 *   UniPC  (UniPCMultistepScheduler, use_flow_sigmas, prediction
 *          flow_prediction, predict_x0, bh2, solver order 2,
 *          lower_order_final): predictor-corrector on x0 predictions in
 *          lambda = log((1 - sigma) / sigma). Schedule: sigma =
 *          s(linspace(1, 1/1000, n + 1)[:n]) (the first nudged 1e-6 below
 *          1), the model gets t = floor(1000 sigma) (integer timesteps),
 *          sigma_n = 0.
 *   Custom timesteps (DCM's fixed ones): Euler over sigma = s(t / 1000),
 *          the model getting t as given.
 * Sigmas are rounded to f32 as diffusers stores them; the per-step
 * coefficients are computed in double, the element-wise updates in f32.
 */
#ifndef TS_VIDEO_FLOW_H
#define TS_VIDEO_FLOW_H

#include <stdint.h>

#include "core/err.h"

typedef enum ts_flow_kind { TS_FLOW_UNIPC = 0, TS_FLOW_EULER = 1 } ts_flow_kind;

#define TS_FLOW_MAX_STEPS 1000

typedef struct ts_flow {
    ts_flow_kind kind;
    int n;                                 /* steps */
    double sigma[TS_FLOW_MAX_STEPS + 1];   /* [n + 1], sigma[n] = 0 */
    double t[TS_FLOW_MAX_STEPS];           /* the timestep the model gets at step i */
    int64_t len;                           /* latent values */
    int step;                              /* steps taken */
    /* UniPC: the last two x0 predictions, the sample before the last
     * predictor, the warm-up count and the last step's order */
    float *m_prev, *m_last, *last_sample, *x0;
    int lower_order_nums, this_order;
} ts_flow;

/* Sets up n steps (1 .. TS_FLOW_MAX_STEPS) with the given shift (> 0), or
 * the n_custom timesteps (Euler, strictly decreasing, in (0, 1000]) when
 * custom is not NULL. len: latent values per step. 0, or -1 with err. */
int ts_flow_init(ts_flow *f, ts_flow_kind kind, int n, double shift, const double *custom, int n_custom, int64_t len,
                 ts_err *err);
void ts_flow_free(ts_flow *f);
/* x [len] <- the next sample, from the model's velocity v [len] at step
 * f->step (then f->step + 1). */
void ts_flow_step(ts_flow *f, const float *v, float *x);

#endif
