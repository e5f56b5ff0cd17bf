/* denoiser_state.h - the ts_denoiser of a real model: window forwards over a
 * ts_state (see denoiser_state.c). */
#ifndef TS_DIFFUSION_DENOISER_STATE_H
#define TS_DIFFUSION_DENOISER_STATE_H

#include "diffusion/diffusion.h"
#include "model/model.h"

/* Fills out for state s of model m. The mask token, shift and causality
 * come from the model's hyper-parameters; mask_id_override >= 0 replaces
 * the mask token and allows a causal model (tests of the decoders on an
 * ordinary model). Fails for a model without a mask token or with causal
 * attention. out->max_window is the state's n_batch. */
int ts_state_denoiser(ts_state *s, const ts_mdl *m, int32_t mask_id_override, ts_denoiser *out, ts_err *err);

/* The sparse cache refresh's CPU path for a denoiser of state s: shadow is
 * a CPU-only state of the same model (one thread, no prefill device, s's
 * n_ctx and KV type, windows of 2) whose cache the refreshes write; merges
 * copy its rows back into s's (a device holding s's cache re-reads them). */
typedef struct ts_state_scr {
    ts_state *s, *shadow;
} ts_state_scr;

/* Makes pair->shadow for pair->s (of model m) and adds the path to d
 * (filled by ts_state_denoiser for pair->s); pair must outlive d. Free
 * with ts_state_scr_free (also after a failure). */
int ts_state_denoiser_scr(ts_denoiser *d, ts_state_scr *pair, const ts_mdl *m, ts_err *err);
void ts_state_scr_free(ts_state_scr *pair);

#endif
