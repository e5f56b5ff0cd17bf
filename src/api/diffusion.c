/* diffusion.c - the public face of the diffusion decoders
 * (ts_context_diffuse): parameter checks, the context's state as the
 * denoiser, streaming each finished block's text through the context's
 * detokenizer, cancellation, and the counters (ts_diffusion_stats and the
 * context's ts_stats). The decoders themselves are in src/diffusion. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "api/stream_impl.h"
#include "diffusion/denoiser_state.h"
#include "diffusion/diffusion.h"

ts_diffusion_params ts_diffusion_default_params(void) {
    ts_diff_cfg d = ts_diff_default_cfg();
    ts_diffusion_params p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.decoder = TS_DIFFUSION_BLOCK;
    p.cache = TS_DIFFUSION_CACHE_PREFIX;
    p.alg = TS_DIFFUSION_LOW_CONFIDENCE;
    p.n_gen = d.n_gen;
    p.block = d.block;
    p.steps = 0;
    p.threshold = d.threshold;
    p.eps = 0.0f;
    p.temp = 0.0f;
    p.seed = d.seed;
    p.early_stop = true;
    p.lookahead_trigger = d.lookahead_trigger;
    p.lookahead_slack = d.lookahead_slack;
    p.visible = d.visible;
    p.stable = d.stable;
    p.scr_max = d.scr_max;
    return p;
}

_Static_assert((int)TS_DIFFUSION_BLOCK == (int)TS_DIFF_BLOCK && (int)TS_DIFFUSION_VANILLA == (int)TS_DIFF_VANILLA &&
                   (int)TS_DIFFUSION_CACHE_DUAL == (int)TS_DIFF_CACHE_DUAL &&
                   (int)TS_DIFFUSION_CACHE_NONE == (int)TS_DIFF_CACHE_NONE &&
                   (int)TS_DIFFUSION_ENTROPY == (int)TS_DIFF_ENTROPY && TS_DIFFUSION_HIST_LEN == TS_DIFF_HIST_LEN,
               "public and internal diffusion enums differ");

ts_diff_cfg ts_api_diff_cfg(const ts_diffusion_params *p) {
    ts_diff_cfg c = ts_diff_default_cfg();
    c.decoder = (enum ts_diff_decoder)p->decoder;
    c.cache = (enum ts_diff_cache)p->cache;
    c.alg = (enum ts_diff_alg)p->alg;
    c.n_gen = p->n_gen;
    c.block = p->block;
    c.steps = p->steps > 0 ? p->steps : p->n_gen;
    c.threshold = p->threshold;
    c.eps = p->eps;
    c.temp = p->temp;
    c.seed = p->seed;
    c.early_stop = p->early_stop;
    c.window = p->window;
    c.lookahead = p->lookahead;
    c.lookahead_trigger = p->lookahead_trigger;
    c.lookahead_slack = p->lookahead_slack;
    c.lat_width = p->latency_widths;
    c.lat_ms = p->latency_ms;
    c.n_lat = p->n_latency;
    c.skip_logits = p->skip_logits;
    c.sts = p->sts;
    c.visible = p->visible;
    c.stable = p->stable;
    c.scr = p->scr;
    c.scr_max = p->scr_max;
    return c;
}

/* The model's shift flag, or -1 (with why) when it is not a diffusion LLM. */
static int model_shift(const ts_model *m, const char **why) {
    if (!m || !m->mdl) {
        *why = "the model has no weights (vocab_only)";
        return -1;
    }
    const ts_hparams *hp = ts_mdl_hparams(m->mdl);
    if (hp->mask_token_id < 0 || hp->causal) {
        *why = hp->mask_token_id < 0 ? "it has no mask token (tokenizer.ggml.mask_token_id)" : "its attention is causal";
        return -1;
    }
    return hp->shift_logits != 0;
}

int32_t ts_diffusion_n_batch(const ts_model *model, const ts_diffusion_params *params, int32_t n_prompt) {
    ts_diffusion_params p = ts_diffusion_default_params();
    if (params && ts_params_in(&p, sizeof p, params, "ts_diffusion_params", NULL, NULL) != TS_OK) return -1;
    const char *why = NULL;
    int shift = model_shift(model, &why);
    if (shift < 0) return -1;
    ts_diff_cfg c = ts_api_diff_cfg(&p);
    return ts_diff_max_window(&c, n_prompt, shift != 0, NULL);
}

/* What the decoder's callbacks need. */
typedef struct diffuse_io {
    ts_context *c;
    const ts_diffusion_params *p;
    ts_detok dt;
    int32_t *out;
    int32_t cap, n_out;
} diffuse_io;

static bool io_is_eog(void *ud, int32_t token) {
    diffuse_io *io = ud;
    return ts_tok_is_eog(io->c->model->tok, token);
}

static bool io_cancelled(void *ud) {
    diffuse_io *io = ud;
    return atomic_exchange(&io->c->cancel, false);
}

static bool io_block(void *ud, const int32_t *tokens, int32_t first, int32_t n) {
    diffuse_io *io = ud;
    (void)first;
    for (int32_t i = 0; i < n; i++) {
        if (io->n_out < io->cap) io->out[io->n_out] = tokens[i];
        io->n_out++;
        int64_t np = ts_detok_push(&io->dt, io->c->model->tok, tokens[i], false, io->c->piece, io->c->piece_cap);
        if (np < 0) continue; /* cannot happen: ids come from the vocabulary */
        if (io->p->on_token && !io->p->on_token(io->c->piece, (size_t)np, tokens[i], io->p->user_data)) return false;
    }
    return true;
}

ts_status ts_context_diffuse(ts_context *c, const int32_t *prompt, int32_t n_prompt, const ts_diffusion_params *params,
                             int32_t *tokens, int32_t cap, int32_t *n_tokens, ts_diffusion_stats *stats) {
    if (!c) return TS_ERR_INVALID_ARG;
    ts_ctx_ok(c);
    atomic_store(&c->cancel, false);
    if (n_tokens) *n_tokens = 0;
    ts_diffusion_params p = ts_diffusion_default_params();
    if (params) {
        ts_error e;
        if (ts_params_in(&p, sizeof p, params, "ts_diffusion_params", &e, NULL) != TS_OK)
            return ts_ctx_fail(c, e.status, "%s", e.message);
    }
    if (stats && stats->struct_size < sizeof(size_t))
        return ts_ctx_fail(c, TS_ERR_INVALID_ARG, "diffuse: stats->struct_size %zu is too small", stats->struct_size);
    if (cap < 0 || (cap > 0 && !tokens))
        return ts_ctx_fail(c, TS_ERR_INVALID_ARG, "diffuse: %s", cap < 0 ? "cap is negative" : "tokens is NULL");
    if (n_prompt < 1 || !prompt)
        return ts_ctx_fail(c, TS_ERR_INVALID_ARG, "diffuse: the prompt is %s", !prompt ? "NULL" : "empty (0 tokens)");
    for (int32_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= c->n_vocab)
            return ts_ctx_fail(c, TS_ERR_INVALID_ARG, "diffuse: prompt token %d at index %d is outside the vocabulary [0, %d)",
                               (int)prompt[i], (int)i, (int)c->n_vocab);
    const char *why = NULL;
    if (model_shift(c->model, &why) < 0)
        return ts_ctx_fail(c, TS_ERR_UNSUPPORTED, "diffuse: the model (%s) is not a diffusion LLM: %s", c->model->arch,
                           why);

    ts_diff_cfg cfg = ts_api_diff_cfg(&p);
    ts_err e = {{0}};
    ts_denoiser d;
    if (ts_state_denoiser(c->st, c->model->mdl, -1, &d, &e) < 0)
        return ts_ctx_fail(c, TS_ERR_UNSUPPORTED, "diffuse: %s", e.msg);
    int32_t need = ts_diff_max_window(&cfg, n_prompt, d.shift, &e);
    if (need < 0) return ts_ctx_fail(c, TS_ERR_INVALID_ARG, "diffuse: %s", e.msg);
    int64_t L = (int64_t)n_prompt + p.n_gen, n_ctx = ts_state_n_ctx(c->st);
    if (L > n_ctx)
        return ts_ctx_fail(c, TS_ERR_CONTEXT_FULL, "diffuse: prompt %d + n_gen %d tokens exceed the context of %lld",
                           (int)n_prompt, (int)p.n_gen, (long long)n_ctx);
    if (need > ts_state_n_batch(c->st))
        return ts_ctx_fail(c, TS_ERR_INVALID_ARG,
                           "diffuse: the %s decoder needs windows of %d tokens but n_batch is %d (create the context "
                           "with n_batch >= ts_diffusion_n_batch())",
                           p.decoder == TS_DIFFUSION_VANILLA ? "vanilla" : "block", (int)need,
                           (int)ts_state_n_batch(c->st));

    diffuse_io io;
    memset(&io, 0, sizeof io);
    io.c = c;
    io.p = &p;
    io.out = tokens;
    io.cap = cap;
    ts_detok_init(&io.dt);
    cfg.is_eog = io_is_eog;
    cfg.on_block = io_block;
    cfg.cancelled = io_cancelled;
    cfg.ud = &io;

    int32_t *gen = malloc((size_t)p.n_gen * sizeof *gen);
    if (!gen) return ts_ctx_fail(c, TS_ERR_NO_MEMORY, "diffuse: out of memory");
    /* sparse cache refresh: the CPU path's state (the same weights, its own
     * KV cache), made for this call */
    ts_state_scr scr = {c->st, NULL};
    if (p.scr && ts_state_denoiser_scr(&d, &scr, c->model->mdl, &e) < 0) {
        ts_state_scr_free(&scr);
        free(gen);
        return ts_ctx_fail(c, TS_ERR_NO_MEMORY, "diffuse: %s", e.msg);
    }
    ts_state_kv_truncate(c->st, 0); /* the canvas starts at position 0 */
    c->has_logits = false;
    memset(&c->run, 0, sizeof c->run);
    ts_diff_stats ds;
    ts_state_dev_stats dv0, dv1; /* the window forwards the prefill device ran */
    ts_state_dev_stats_get(c->st, &dv0);
    int rc = ts_diffuse(&d, prompt, n_prompt, &cfg, gen, &ds, &e);
    ts_state_dev_stats_get(c->st, &dv1);
    free(gen);
    ts_state_scr_free(&scr);
    int64_t nf = ts_detok_flush(&io.dt, c->piece, c->piece_cap);
    if (nf > 0 && p.on_token) p.on_token(c->piece, (size_t)nf, -1, p.user_data);

    ts_stop_reason stop = rc < 0                         ? TS_STOP_ERROR
                          : ds.end == TS_DIFF_END_EOG       ? TS_STOP_EOS
                          : ds.end == TS_DIFF_END_CANCELLED ? TS_STOP_CANCELLED
                                                            : TS_STOP_LENGTH;
    c->run.n_prompt = n_prompt;
    c->run.n_gen = io.n_out;
    c->run.prefill_ms = ds.prefill_ms;
    c->run.decode_ms = ds.denoise_ms;
    c->run.stop = stop;
    c->run.done = true;
    /* the device's window forwards are counted in ts_diffusion_stats only:
     * ts_stats' prefill_dev/cpu_tokens split the causal prompt's tokens */
    if (n_tokens) *n_tokens = io.n_out;
    if (stats) {
        ts_diffusion_stats s;
        memset(&s, 0, sizeof s);
        s.struct_size = sizeof s;
        s.forwards = ds.forwards;
        s.denoise_forwards = ds.denoise_forwards;
        s.tokens_evaluated = ds.tokens_evaluated;
        s.tokens_committed = ds.tokens_committed;
        memcpy(s.commit_per_forward_hist, ds.commit_hist, sizeof s.commit_per_forward_hist);
        s.prefill_ms = ds.prefill_ms;
        s.denoise_ms = ds.denoise_ms;
        s.early_stop_at = ds.early_stop_at;
        s.n_prompt_tokens = n_prompt;
        s.n_gen_tokens = io.n_out;
        s.n_blocks = ds.n_blocks_done;
        s.stop_reason = stop;
        s.dev_forwards = (int64_t)(dv1.dev_runs - dv0.dev_runs);
        s.dev_pad_tokens = (int64_t)(dv1.dev_pad_tokens - dv0.dev_pad_tokens);
        s.dev_tokens = (int64_t)(dv1.dev_tokens - dv0.dev_tokens) - s.dev_pad_tokens;
        s.window_max = ds.window_max;
        s.draft_evals = ds.draft_evals;
        s.draft_accepted = ds.draft_accepted;
        s.lookahead_tokens = ds.lookahead_tokens;
        s.logits_skipped = ds.logits_skipped;
        s.sts_visible = ds.sts_visible;
        s.sts_forced = ds.sts_forced;
        s.sts_stable = ds.sts_stable;
        s.revisions = ds.revisions;
        s.unstable_at_block_end = ds.unstable_at_block_end;
        s.visible_at_end = ds.visible_at_end;
        s.scr_refreshed = ds.scr_refreshed;
        s.scr_revisions = ds.scr_revisions;
        s.scr_stabilized = ds.scr_stabilized;
        s.scr_merged = ds.scr_merged;
        s.scr_ms = ds.scr_ms;
        s.scr_overlap_ms = ds.scr_overlap_ms;
        s.dev_upload_bytes = (int64_t)(dv1.upload_bytes - dv0.upload_bytes);
        s.dev_stall_ms = (double)(dv1.stall_ns - dv0.stall_ns) / 1e6;
        s.dev_resident_layers = dv1.resident_layers;
        s.dev_streamed_layers = dv1.streamed_layers;
        ts_struct_out(stats, &s, sizeof s);
    }
    if (rc < 0)
        return ts_ctx_fail(c, strstr(e.msg, "out of memory") ? TS_ERR_NO_MEMORY : TS_ERR_INTERNAL, "diffuse: %s", e.msg);
    return TS_OK;
}
