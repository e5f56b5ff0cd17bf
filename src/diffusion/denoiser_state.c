/* denoiser_state.c - the real denoiser: bidirectional window forwards of a
 * diffusion model (llada, dream) over a ts_state's KV cache
 * (ts_forward_window), the prefix made permanent with ts_state_set_n_past;
 * and the sparse cache refresh's CPU path: window forwards on a shadow
 * state (the same weights, a KV cache of its own) whose cache is copied
 * from and merged into the state's (ts_state_kv_copy). */
#include <string.h>

#include "diffusion/denoiser_state.h"

static int state_forward(void *ctx, const int32_t *tokens, int32_t n, int32_t pos0, int32_t n_kv, float *logits,
                         ts_err *err) {
    return ts_forward_window(ctx, tokens, n, pos0, n_kv, logits, err);
}

static int state_set_prefix(void *ctx, int32_t n, ts_err *err) { return ts_state_set_n_past(ctx, n, err); }

static int state_submit(void *ctx, const int32_t *tokens, int32_t n, int32_t pos0, int32_t n_kv, float *logits,
                        ts_err *err) {
    return ts_forward_window_submit(ctx, tokens, n, pos0, n_kv, logits, err);
}

static int state_wait(void *ctx, ts_err *err) { return ts_forward_window_wait(ctx, err); }

static int state_set_rows(void *ctx, const uint8_t *need, int32_t n, ts_err *err) {
    return ts_state_set_logit_rows(ctx, need, n, err);
}

static bool state_done(void *ctx) { return ts_forward_window_done(ctx); }

static int scr_snapshot(void *ctx, int32_t n, ts_err *err) {
    ts_state_scr *p = ctx;
    return ts_state_kv_copy(p->shadow, p->s, 0, n, err);
}

static int scr_refresh(void *ctx, const int32_t *tokens, int32_t n, int32_t pos0, int32_t n_kv, float *logits,
                       ts_err *err) {
    ts_state_scr *p = ctx;
    return ts_forward_window(p->shadow, tokens, n, pos0, n_kv, logits, err);
}

static int scr_merge(void *ctx, int32_t a, int32_t b, ts_err *err) {
    ts_state_scr *p = ctx;
    return ts_state_kv_copy(p->s, p->shadow, a, b, err);
}

int ts_state_denoiser_scr(ts_denoiser *d, ts_state_scr *pair, const ts_mdl *m, ts_err *err) {
    if (!d || !pair || !pair->s || d->ctx != pair->s)
        return ts_err_set(err, "sparse cache refresh: the CPU path needs the denoiser's state");
    /* one thread beside the device's; windows of 2 (a shifted refresh);
     * the state's context and KV type, so rows copy as they are */
    ts_state_params sp = ts_state_default_params();
    sp.n_ctx = ts_state_n_ctx(pair->s);
    sp.n_batch = 2;
    sp.n_threads = 1;
    sp.kv_f32 = ts_state_kv_f32(pair->s);
    pair->shadow = ts_state_new(m, &sp, err);
    if (!pair->shadow) return ts_err_prefix(err, "sparse cache refresh: the CPU path's state");
    d->scr_ctx = pair;
    d->snapshot = scr_snapshot;
    d->refresh = scr_refresh;
    d->merge = scr_merge;
    d->done = state_done;
    return 0;
}

void ts_state_scr_free(ts_state_scr *pair) {
    if (!pair) return;
    ts_state_free(pair->shadow);
    pair->shadow = NULL;
}

int ts_state_denoiser(ts_state *s, const ts_mdl *m, int32_t mask_id_override, ts_denoiser *out, ts_err *err) {
    const ts_hparams *hp = ts_mdl_hparams(m);
    int32_t mask = mask_id_override >= 0 ? mask_id_override : hp->mask_token_id;
    if (mask < 0)
        return ts_err_set(err, "the model (%s) has no mask token (tokenizer.ggml.mask_token_id): it is not a "
                          "diffusion LLM", hp->arch_name);
    if (mask >= hp->n_vocab) return ts_err_set(err, "mask token %d is outside the vocabulary [0, %d)", mask, hp->n_vocab);
    if (hp->causal && mask_id_override < 0)
        return ts_err_set(err, "the model (%s) has causal attention: it is not a diffusion LLM", hp->arch_name);
    memset(out, 0, sizeof *out);
    out->ctx = s;
    out->n_vocab = hp->n_vocab;
    out->mask_id = mask;
    out->shift = hp->shift_logits != 0;
    out->max_window = ts_state_n_batch(s);
    out->forward = state_forward;
    out->set_prefix = state_set_prefix;
    out->submit = state_submit;
    out->wait = state_wait;
    out->set_rows = state_set_rows;
    return 0;
}
