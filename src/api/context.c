/* context.c - the public ts_context: creation from parameters, evaluation of
 * tokens, sampling, the streaming generation loop (shared by every front end:
 * `tessera run`, `chat`, the future server), chat formatting, cancellation and
 * the run counters. A context is used by one thread at a time; only the
 * cancel flag is touched from other threads (atomically). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "api/api_internal.h"

/* ---- defaults ---- */

ts_sampling_params ts_sampling_default_params(void) {
    ts_sampler_params d = ts_sampler_default_params();
    ts_sampling_params p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.temp = d.temp;
    p.top_k = d.top_k;
    p.top_p = d.top_p;
    p.min_p = d.min_p;
    p.repeat_penalty = d.repeat_penalty;
    p.repeat_last_n = d.repeat_last_n;
    p.presence_penalty = d.presence_penalty;
    p.seed = d.seed;
    return p;
}

ts_context_params ts_context_default_params(void) {
    ts_context_params p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.decoder = TS_DECODER_AUTOREGRESSIVE;
    p.chunk = 256;
    p.prefill_min_tokens = 32;
    return p;
}

ts_generate_params ts_generate_default_params(void) {
    ts_generate_params p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.n_predict = 128;
    return p;
}

/* ---- sampler ---- */

/* NULL when the parameters are fine, else what is wrong (static text). */
static const char *bad_sampling(const ts_sampling_params *s) {
    if (isnan(s->temp)) return "temp is NaN";
    if (!(s->top_p >= 0.0f && s->top_p <= 1.0f)) return "top_p must be in [0, 1]";
    if (!(s->min_p >= 0.0f && s->min_p <= 1.0f)) return "min_p must be in [0, 1]";
    if (!(s->repeat_penalty > 0.0f) || isinf(s->repeat_penalty)) return "repeat_penalty must be finite and > 0";
    if (s->repeat_last_n < -1) return "repeat_last_n must be >= -1";
    if (!isfinite(s->presence_penalty)) return "presence_penalty must be finite";
    return NULL;
}

static ts_sampler *make_sampler(const ts_sampling_params *s, int32_t n_ctx, int32_t n_vocab) {
    ts_sampler_params p = ts_sampler_default_params();
    p.temp = s->temp;
    p.top_k = s->top_k;
    p.top_p = s->top_p;
    p.min_p = s->min_p;
    p.repeat_penalty = s->repeat_penalty;
    p.repeat_last_n = s->repeat_last_n < 0 ? n_ctx : s->repeat_last_n;
    p.presence_penalty = s->presence_penalty;
    p.seed = s->seed;
    return ts_sampler_new(&p, n_vocab);
}

/* ---- create / free ---- */

ts_status ts_context_create(const ts_model *model, const ts_context_params *params, ts_context **out, ts_error *err) {
    ts_context_params p = ts_context_default_params();
    const ts_logger *mlg = model ? &model->log : NULL;
    if (out) *out = NULL;
    if (!model || !out)
        return ts_api_fail(err, mlg, TS_ERR_INVALID_ARG, "ts_context_create: %s is NULL", model ? "out" : "model");
    if (params) {
        ts_status st = ts_params_in(&p, sizeof p, params, "ts_context_params", err, mlg);
        if (st != TS_OK) return st;
    }
    ts_logger lg = p.log ? (ts_logger){p.log, p.log_user_data} : model->log;
    if (!model->mdl)
        return ts_api_fail(err, &lg, TS_ERR_INVALID_ARG,
                           "the model was loaded with vocab_only: it has no weights to run a context on");
    if (p.n_ctx < 0 || p.n_ctx > (1 << 24))
        return ts_api_fail(err, &lg, TS_ERR_INVALID_ARG, "n_ctx %d is out of range [0, %d]", (int)p.n_ctx, 1 << 24);
    if (p.n_batch < 0)
        return ts_api_fail(err, &lg, TS_ERR_INVALID_ARG, "n_batch %d is negative", (int)p.n_batch);
    if (p.n_threads < 0 || p.n_threads > TS_THREADS_MAX)
        return ts_api_fail(err, &lg, TS_ERR_INVALID_ARG, "n_threads %d is out of range [0, %d]", (int)p.n_threads,
                           TS_THREADS_MAX);
    if (p.chunk < 0 || p.chunk > (1 << 16))
        return ts_api_fail(err, &lg, TS_ERR_INVALID_ARG, "chunk %d is out of range [0, %d]", (int)p.chunk, 1 << 16);
    if (p.prefill_min_tokens < -1)
        return ts_api_fail(err, &lg, TS_ERR_INVALID_ARG, "prefill_min_tokens %d is negative (-1: auto)",
                           (int)p.prefill_min_tokens);
    if (p.activations != TS_ACTIVATIONS_EXACT && p.activations != TS_ACTIVATIONS_Q8)
        return ts_api_fail(err, &lg, TS_ERR_INVALID_ARG, "activations %d is not one of exact (0) or q8 (1)",
                           (int)p.activations);
    if (p.decoder != TS_DECODER_AUTOREGRESSIVE && p.decoder != TS_DECODER_DIFFUSION) /* diffusion: api/diffusion.c */
        return ts_api_fail(err, &lg, TS_ERR_UNSUPPORTED, "decoder %d is not supported (autoregressive 0, diffusion 1)",
                           (int)p.decoder);
    ts_sampling_params sp = ts_sampling_default_params();
    if (p.sampling) {
        ts_status st = ts_params_in(&sp, sizeof sp, p.sampling, "ts_sampling_params", err, &lg);
        if (st != TS_OK) return st;
    }
    const char *why = bad_sampling(&sp);
    if (why) return ts_api_fail(err, &lg, TS_ERR_INVALID_ARG, "sampling: %s", why);
    ts_err e = {{0}};
    if (p.chat_template) {
        enum ts_chat_family f;
        if (ts_chat_family_parse(p.chat_template, &f, &e) < 0)
            return ts_api_fail(err, &lg, TS_ERR_INVALID_ARG, "chat_template: %s", e.msg);
    }

    ts_context *c = calloc(1, sizeof *c);
    if (!c) return ts_api_fail(err, &lg, TS_ERR_NO_MEMORY, "out of memory");
    c->model = model;
    c->log = lg;
    c->sp = sp;
    atomic_init(&c->cancel, false);
    c->n_vocab = ts_mdl_hparams(model->mdl)->n_vocab;
    ts_status st = TS_ERR_NO_MEMORY;
    if (p.chat_template && !(c->chat_override = strdup(p.chat_template))) goto oom;

    ts_state_params stp = ts_state_default_params();
    stp.n_ctx = p.n_ctx;
    if (p.n_batch > 0) stp.n_batch = p.n_batch;
    stp.n_threads = ts_api_threads(p.n_threads);
    stp.kv_f32 = p.kv_f32;
    /* the context's device, else the model's; "none" keeps it on the CPU */
    stp.prefill_device = p.prefill_device ? p.prefill_device : model->prefill_device;
    if (stp.prefill_device && !strcmp(stp.prefill_device, "none")) stp.prefill_device = NULL;
    stp.chunk = p.chunk;
    stp.prefill_min_tokens = p.prefill_min_tokens;
    stp.act_q8 = p.activations == TS_ACTIVATIONS_Q8;
    if (!(c->st = ts_state_new(model->mdl, &stp, &e))) {
        st = strstr(e.msg, "out of memory") ? TS_ERR_NO_MEMORY : TS_ERR_INTERNAL;
        ts_context_free(c);
        return ts_api_fail(err, &lg, st, "cannot create the inference state: %s", e.msg);
    }
    if (!(c->smpl = make_sampler(&sp, ts_state_n_ctx(c->st), c->n_vocab))) goto oom;
    c->piece_cap = 3 * ((size_t)ts_tok_max_piece(model->tok) + 3); /* enough for ts_detok_push (tokenizer.h) */
    if (!(c->piece = malloc(c->piece_cap))) goto oom;
    /* prefill device: a fallback is not an error (the CLI shows the line
     * from ts_stats.device_fallback; a log callback hears it too) */
    if (ts_state_dev_fallback(c->st)) ts_api_log(&lg, TS_LOG_INFO, "%s", ts_state_dev_fallback(c->st));
    if (ts_state_dev_info(c->st)) ts_api_log(&lg, TS_LOG_INFO, "%s", ts_state_dev_info(c->st));
    ts_api_log(&lg, TS_LOG_INFO, "context: n_ctx %d, n_batch %d, %d threads, %s KV cache, engine cpu, %s activations",
               (int)ts_state_n_ctx(c->st), (int)ts_context_n_batch(c), (int)stp.n_threads,
               p.kv_f32 ? "f32" : "f16", ts_state_act_q8(c->st) ? "q8" : "exact");
    *out = c;
    return ts_api_ok(err);
oom:
    ts_context_free(c);
    return ts_api_fail(err, &lg, st, "out of memory creating the context");
}

void ts_context_free(ts_context *c) {
    if (!c) return;
    ts_state_free(c->st);
    ts_sampler_free(c->smpl);
    ts_chat_template_free(c->tmpl);
    ts_constraint_free(c->cons);
    free(c->chat_override);
    free(c->piece);
    free(c);
}

/* ---- small accessors ---- */

const char *ts_last_error(const ts_context *c) { return c ? c->msg : "context is NULL"; }
ts_status ts_last_status(const ts_context *c) { return c ? c->status : TS_ERR_INVALID_ARG; }
void ts_context_cancel(ts_context *c) {
    if (c) atomic_store(&c->cancel, true);
}
int32_t ts_context_n_ctx(const ts_context *c) { return c ? ts_state_n_ctx(c->st) : 0; }
int32_t ts_context_n_past(const ts_context *c) { return c ? ts_state_n_past(c->st) : 0; }
int32_t ts_context_n_batch(const ts_context *c) { return c ? ts_state_n_batch(c->st) : 0; }
int32_t ts_context_n_threads(const ts_context *c) { return c ? ts_state_n_threads(c->st) : 0; }
const ts_model *ts_context_model(const ts_context *c) { return c ? c->model : NULL; }

ts_status ts_context_reset(ts_context *c) {
    if (!c) return TS_ERR_INVALID_ARG;
    ts_ctx_ok(c);
    ts_state_kv_truncate(c->st, 0);
    ts_sampler_reset(c->smpl);
    memset(&c->run, 0, sizeof c->run);
    c->has_logits = false;
    atomic_store(&c->cancel, false);
    return TS_OK;
}

ts_status ts_context_kv_truncate(ts_context *c, int32_t n) {
    if (!c) return TS_ERR_INVALID_ARG;
    ts_ctx_ok(c);
    int32_t past = ts_state_n_past(c->st);
    if (n < 0 || n > past)
        return ts_ctx_fail(c, TS_ERR_INVALID_ARG, "kv_truncate: %d is outside [0, n_past %d]", (int)n, (int)past);
    if (n < past) c->has_logits = false; /* they belonged to a dropped position */
    ts_state_kv_truncate(c->st, n);
    return TS_OK;
}

ts_status ts_context_set_sampling(ts_context *c, const ts_sampling_params *params) {
    if (!c) return TS_ERR_INVALID_ARG;
    ts_ctx_ok(c);
    if (!params) return ts_ctx_fail(c, TS_ERR_INVALID_ARG, "set_sampling: params is NULL");
    ts_sampling_params sp = ts_sampling_default_params();
    ts_error e;
    if (ts_params_in(&sp, sizeof sp, params, "ts_sampling_params", &e, NULL) != TS_OK)
        return ts_ctx_fail(c, e.status, "%s", e.message);
    const char *why = bad_sampling(&sp);
    if (why) return ts_ctx_fail(c, TS_ERR_INVALID_ARG, "sampling: %s", why);
    ts_sampler *s = make_sampler(&sp, ts_state_n_ctx(c->st), c->n_vocab);
    if (!s) return ts_ctx_fail(c, TS_ERR_NO_MEMORY, "out of memory creating the sampler");
    ts_sampler_free(c->smpl);
    c->smpl = s;
    c->sp = sp;
    return TS_OK;
}

ts_status ts_context_set_grammar(ts_context *c, const char *gbnf, const char *root) {
    if (!c) return TS_ERR_INVALID_ARG;
    ts_ctx_ok(c);
    ts_err e = {{0}};
    if (ts_constraint_set(&c->cons, c->model->tok, gbnf, root, &e) < 0)
        return ts_ctx_fail(c, strstr(e.msg, "out of memory") ? TS_ERR_NO_MEMORY : TS_ERR_INVALID_ARG, "%s", e.msg);
    return TS_OK;
}

ts_status ts_grammar_check(const char *gbnf, const char *root, ts_error *err) {
    if (!gbnf) return ts_api_fail(err, NULL, TS_ERR_INVALID_ARG, "grammar: the text is NULL");
    ts_err e = {{0}};
    ts_grammar *g = ts_grammar_compile(gbnf, strlen(gbnf), root, &e);
    if (!g)
        return ts_api_fail(err, NULL, strstr(e.msg, "out of memory") ? TS_ERR_NO_MEMORY : TS_ERR_INVALID_ARG, "%s",
                           e.msg);
    ts_gmatch *m = ts_gmatch_new(g, &e); /* its start must be within the matcher's limits */
    const bool over = m && ts_gmatch_overflow(m);
    ts_gmatch_free(m);
    ts_grammar_free(g);
    if (!m) return ts_api_fail(err, NULL, TS_ERR_NO_MEMORY, "%s", e.msg);
    if (over)
        return ts_api_fail(err, NULL, TS_ERR_INVALID_ARG,
                           "grammar: too ambiguous at its start (more than 1024 ways to begin, or 2^18 expansion "
                           "steps); simplify it");
    return ts_api_ok(err);
}

ts_status ts_context_embed(ts_context *c, const int32_t *tokens, int32_t n, ts_pooling pooling, bool normalize,
                           float *out) {
    if (!c) return TS_ERR_INVALID_ARG;
    ts_ctx_ok(c);
    if (!tokens || !out || n < 1) return ts_ctx_fail(c, TS_ERR_INVALID_ARG, "embed: no tokens, or out is NULL");
    if (pooling != TS_POOLING_MEAN && pooling != TS_POOLING_LAST)
        return ts_ctx_fail(c, TS_ERR_INVALID_ARG, "embed: pooling %d is not MEAN (0) or LAST (1)", (int)pooling);
    const ts_hparams *hp = ts_mdl_hparams(c->model->mdl);
    if (hp->arch == TS_ARCH_LLADA || hp->arch == TS_ARCH_DREAM)
        return ts_ctx_fail(c, TS_ERR_UNSUPPORTED, "embed: not for a diffusion model (its forward is bidirectional "
                                                  "over a masked canvas; the causal pass here would not be its own)");
    const int64_t E = hp->n_embd;
    float *sum = calloc((size_t)E, sizeof *sum), *last = malloc((size_t)E * sizeof *last);
    if (!sum || !last) {
        free(sum), free(last);
        return ts_ctx_fail(c, TS_ERR_NO_MEMORY, "out of memory");
    }
    ts_status st = ts_context_reset(c);
    if (st == TS_OK) {
        ts_state_set_embd_sink(c->st, sum, last);
        st = ts_context_eval(c, tokens, n, NULL);
        ts_state_set_embd_sink(c->st, NULL, NULL);
    }
    if (st == TS_OK) {
        double norm = 0;
        for (int64_t e = 0; e < E; e++) {
            out[e] = pooling == TS_POOLING_MEAN ? sum[e] / (float)n : last[e];
            norm += (double)out[e] * out[e];
        }
        if (normalize && norm > 0)
            for (int64_t e = 0; e < E; e++) out[e] = (float)(out[e] / sqrt(norm));
    }
    free(sum), free(last);
    return st;
}

/* ---- evaluation ---- */

/* A ts_context_eval starts a new run when the previous one ended. */
static void run_begin(ts_context *c) {
    if (c->run.done) memset(&c->run, 0, sizeof c->run);
}

static ts_status check_tokens(ts_context *c, const int32_t *tokens, int64_t n) {
    if (n < 0) return ts_ctx_fail(c, TS_ERR_INVALID_ARG, "eval: token count %lld is negative", (long long)n);
    if (n > 0 && !tokens) return ts_ctx_fail(c, TS_ERR_INVALID_ARG, "eval: tokens is NULL");
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->n_vocab)
            return ts_ctx_fail(c, TS_ERR_INVALID_ARG, "eval: token %d at index %lld is outside the vocabulary [0, %d)",
                               (int)tokens[i], (long long)i, (int)c->n_vocab);
    int64_t past = ts_state_n_past(c->st), n_ctx = ts_state_n_ctx(c->st);
    if (past + n > n_ctx)
        return ts_ctx_fail(c, TS_ERR_CONTEXT_FULL,
                           "context full: %lld cached + %lld new tokens exceed the context of %lld tokens",
                           (long long)past, (long long)n, (long long)n_ctx);
    return TS_OK;
}

/* Prompt evaluation in micro-batches (cancellable between them); the tokens
 * join the sampler's penalty history. */
static ts_status prefill(ts_context *c, const int32_t *tokens, int32_t n, float *logits) {
    ts_status st = check_tokens(c, tokens, n);
    if (st != TS_OK) return st;
    run_begin(c);
    const int32_t nb = ts_state_n_batch(c->st);
    double t0 = ts_now_ms();
    for (int32_t i = 0; i < n; i += nb) {
        if (atomic_exchange(&c->cancel, false)) {
            c->run.prefill_ms += ts_now_ms() - t0;
            return ts_ctx_fail(c, TS_ERR_CANCELLED, "evaluation cancelled after %d of %d tokens", (int)i, (int)n);
        }
        int32_t k = n - i < nb ? n - i : nb;
        ts_err e = {{0}};
        ts_state_dev_stats d0, d1; /* the device path's share of this run */
        ts_state_dev_stats_get(c->st, &d0);
        const int frc = ts_forward(c->st, tokens + i, k, logits ? logits + (size_t)i * (size_t)c->n_vocab : NULL, &e);
        ts_state_dev_stats_get(c->st, &d1);
        c->run.dev_tokens += (int64_t)(d1.dev_tokens - d0.dev_tokens);
        c->run.dev_nodes += (int64_t)(d1.dev_nodes - d0.dev_nodes);
        c->run.crossings += (int64_t)(d1.crossings - d0.crossings);
        c->run.stall_ns += d1.stall_ns - d0.stall_ns;
        c->run.busy_ns += d1.busy_ns - d0.busy_ns;
        c->run.ooo_chunks += (int64_t)(d1.ooo_chunks - d0.ooo_chunks);
        c->run.host_wait_ns += d1.ooo_host_wait_ns - d0.ooo_host_wait_ns;
        if (frc < 0) {
            c->run.prefill_ms += ts_now_ms() - t0;
            return ts_ctx_fail(c, TS_ERR_INTERNAL, "eval: %s", e.msg);
        }
        for (int32_t j = 0; j < k; j++) ts_sampler_accept(c->smpl, tokens[i + j]);
        c->has_logits = true;
        c->run.n_prompt += k;
    }
    c->run.prefill_ms += ts_now_ms() - t0;
    return TS_OK;
}

ts_status ts_context_eval(ts_context *c, const int32_t *tokens, int32_t n, float *logits) {
    if (!c) return TS_ERR_INVALID_ARG;
    ts_ctx_ok(c);
    atomic_store(&c->cancel, false); /* a cancel issued before this call does not apply to it */
    return prefill(c, tokens, n, logits);
}

const float *ts_context_logits(const ts_context *c) {
    return c && c->has_logits ? ts_state_logits(c->st) : NULL;
}

ts_status ts_context_sample(ts_context *c, int32_t *token) {
    if (!c) return TS_ERR_INVALID_ARG;
    ts_ctx_ok(c);
    if (!token) return ts_ctx_fail(c, TS_ERR_INVALID_ARG, "sample: token is NULL");
    if (!c->has_logits) return ts_ctx_fail(c, TS_ERR_INVALID_STATE, "sample: no logits (evaluate tokens first)");
    *token = ts_sampler_sample(c->smpl, ts_state_logits(c->st));
    return TS_OK;
}

/* ---- chat ---- */

const char *ts_chat_template_name(int i) {
    static const enum ts_chat_family all[] = {TS_CHAT_CHATML, TS_CHAT_GEMMA, TS_CHAT_LLAMA3};
    return i >= 0 && i < (int)(sizeof all / sizeof all[0]) ? ts_chat_family_name(all[i]) : NULL;
}

static ts_chat_template *chat_template(ts_context *c) {
    if (c->tmpl) return c->tmpl;
    ts_err e = {{0}};
    c->tmpl = ts_chat_template_new(c->model->chat_jinja, c->chat_override, &e);
    if (!c->tmpl)
        ts_ctx_fail(c, strstr(e.msg, "out of memory") ? TS_ERR_NO_MEMORY : TS_ERR_UNSUPPORTED, "%s", e.msg);
    return c->tmpl;
}

const char *ts_context_chat_template(ts_context *c) {
    if (!c) return NULL;
    ts_ctx_ok(c);
    ts_chat_template *t = chat_template(c);
    return t ? ts_chat_family_name(ts_chat_template_family(t)) : NULL;
}

ts_status ts_context_chat_format(ts_context *c, const ts_chat_message *msgs, size_t n, bool add_generation_prompt,
                                 char **out, size_t *out_len) {
    if (!c) return TS_ERR_INVALID_ARG;
    ts_ctx_ok(c);
    if (out) *out = NULL;
    if (out_len) *out_len = 0;
    if (!out || (!msgs && n)) return ts_ctx_fail(c, TS_ERR_INVALID_ARG, "chat_format: %s is NULL", out ? "messages" : "out");
    ts_chat_template *t = chat_template(c);
    if (!t) return c->status;
    /* BOS text only when the template wants it and tokenization will not add
     * it, so that BOS appears exactly once */
    const ts_tokenizer *tok = c->model->tok;
    const char *bos_text = NULL;
    if (ts_chat_template_wants_bos(t) && !ts_tok_add_bos(tok) && ts_tok_bos(tok) >= 0)
        bos_text = ts_tok_text(tok, ts_tok_bos(tok));
    _Static_assert(sizeof(ts_chat_message) == sizeof(ts_chat_msg), "chat message layouts differ");
    ts_chat_msg *im = malloc((n ? n : 1) * sizeof *im);
    if (!im) return ts_ctx_fail(c, TS_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < n; i++) im[i] = (ts_chat_msg){msgs[i].role, msgs[i].content};
    ts_err e = {{0}};
    size_t len = 0;
    char *s = ts_chat_render(t, im, n, add_generation_prompt, bos_text, &len, &e);
    free(im);
    if (!s) return ts_ctx_fail(c, strstr(e.msg, "out of memory") ? TS_ERR_NO_MEMORY : TS_ERR_INVALID_ARG, "%s", e.msg);
    *out = s;
    if (out_len) *out_len = len;
    return TS_OK;
}

/* ---- generation ---- */

static bool emit(const ts_generate_params *gp, const char *p, size_t n, int32_t id) {
    return gp->on_token ? gp->on_token(p, n, id, gp->user_data) : true;
}

/* The loop: sample from the current logits, stop on end-of-generation, hand
 * out the completed text, evaluate the token, repeat. */
static ts_status generate(ts_context *c, const ts_generate_params *gp) {
    const ts_tokenizer *tok = c->model->tok;
    int32_t stop_id = -1;
    if (gp->stop_at_end_of_turn) {
        ts_chat_template *t = chat_template(c);
        if (!t) return c->status;
        stop_id = ts_chat_end_of_turn_id(t, tok);
    }
    if (!c->has_logits)
        return ts_ctx_fail(c, TS_ERR_INVALID_STATE, "generate: no logits to sample from (evaluate a prompt first)");
    if (c->run.done) memset(&c->run, 0, sizeof c->run); /* generation without a new prompt */
    const bool constrained = ts_constraint_active(c->cons);
    if (constrained) ts_constraint_reset(c->cons); /* each generation starts at the grammar's start */
    memset(&c->cons_run, 0, sizeof c->cons_run);
    const int32_t n_predict = gp->n_predict;
    ts_stop_reason stop = TS_STOP_LENGTH;
    ts_status status = TS_OK;
    int64_t n_gen = 0;
    ts_detok dt;
    ts_detok_init(&dt);
    double t0 = ts_now_ms();
    for (;;) {
        if (atomic_exchange(&c->cancel, false)) {
            stop = TS_STOP_CANCELLED;
            break;
        }
        if (n_predict >= 0 && n_gen >= n_predict) break;
        int32_t id;
        if (constrained) {
            if (ts_constraint_done(c->cons)) { /* the grammar allows nothing more */
                stop = TS_STOP_EOS;
                break;
            }
            id = ts_constraint_sample(c->cons, c->smpl, ts_state_logits(c->st), tok, stop_id, &c->cons_run);
            if (id < 0) {
                status = ts_constraint_overflow(c->cons)
                             ? ts_ctx_fail(c, TS_ERR_INVALID_ARG,
                                           "generate: the grammar is too ambiguous to follow (more than 1024 ways to "
                                           "continue at once, or 2^18 expansion steps for one character); simplify it")
                             : ts_ctx_fail(c, TS_ERR_INTERNAL,
                                           "generate: the grammar allows no token here (no token of the vocabulary "
                                           "continues the text it accepted so far)");
                stop = TS_STOP_ERROR;
                break;
            }
        } else {
            id = ts_sampler_sample(c->smpl, ts_state_logits(c->st));
        }
        if (ts_tok_is_eog(tok, id) || id == stop_id) {
            stop = TS_STOP_EOS;
            break;
        }
        if (constrained && !ts_constraint_accept(c->cons, id)) {
            status = ts_ctx_fail(c, TS_ERR_INTERNAL, "generate: token %d does not fit the grammar", (int)id);
            stop = TS_STOP_ERROR;
            break;
        }
        ts_sampler_accept(c->smpl, id);
        int64_t np = ts_detok_push(&dt, tok, id, false, c->piece, c->piece_cap);
        if (np < 0) {
            status = ts_ctx_fail(c, TS_ERR_INTERNAL, "generate: sampled token %d is not in the vocabulary", (int)id);
            stop = TS_STOP_ERROR;
            break;
        }
        n_gen++;
        if (!emit(gp, c->piece, (size_t)np, id)) {
            stop = TS_STOP_CANCELLED;
            break;
        }
        bool last = n_predict >= 0 && n_gen >= n_predict;
        if (last && !gp->eval_last) break;
        if (ts_state_n_past(c->st) >= ts_state_n_ctx(c->st)) {
            stop = last ? TS_STOP_LENGTH : TS_STOP_CONTEXT_FULL;
            break;
        }
        ts_err e = {{0}};
        if (ts_forward(c->st, &id, 1, NULL, &e) < 0) {
            status = ts_ctx_fail(c, TS_ERR_INTERNAL, "generate: %s", e.msg);
            stop = TS_STOP_ERROR;
            break;
        }
        if (gp->on_logits && !gp->on_logits(ts_state_logits(c->st), c->n_vocab, gp->user_data)) {
            stop = TS_STOP_CANCELLED;
            break;
        }
        if (last) break;
    }
    int64_t nf = ts_detok_flush(&dt, c->piece, c->piece_cap);
    if (nf > 0) emit(gp, c->piece, (size_t)nf, -1);
    c->run.n_gen = n_gen;
    c->run.decode_ms = ts_now_ms() - t0;
    c->run.stop = stop;
    c->run.done = true;
    if (stop == TS_STOP_CONTEXT_FULL)
        ts_api_log(&c->log, TS_LOG_INFO, "context full (%d tokens): generation stopped", (int)ts_state_n_ctx(c->st));
    return status;
}

static ts_status gen_params(ts_context *c, const ts_generate_params *params, ts_generate_params *gp) {
    *gp = ts_generate_default_params();
    if (!params) return TS_OK;
    ts_error e;
    if (ts_params_in(gp, sizeof *gp, params, "ts_generate_params", &e, NULL) != TS_OK)
        return ts_ctx_fail(c, e.status, "%s", e.message);
    if (gp->n_predict < -1) return ts_ctx_fail(c, TS_ERR_INVALID_ARG, "n_predict %d must be >= -1", (int)gp->n_predict);
    return TS_OK;
}

ts_status ts_context_generate(ts_context *c, const ts_generate_params *params) {
    if (!c) return TS_ERR_INVALID_ARG;
    ts_ctx_ok(c);
    atomic_store(&c->cancel, false);
    ts_generate_params gp;
    ts_status st = gen_params(c, params, &gp);
    return st != TS_OK ? st : generate(c, &gp);
}

ts_status ts_generate(ts_context *c, const char *prompt, const ts_generate_params *params) {
    if (!c) return TS_ERR_INVALID_ARG;
    ts_ctx_ok(c);
    atomic_store(&c->cancel, false);
    ts_generate_params gp;
    ts_status st = gen_params(c, params, &gp);
    if (st != TS_OK) return st;
    if (!prompt) return ts_ctx_fail(c, TS_ERR_INVALID_ARG, "generate: prompt is NULL");
    size_t len = strlen(prompt);
    bool add_special = ts_state_n_past(c->st) == 0; /* BOS only at the start of the sequence */
    ts_err e = {{0}};
    int64_t n = ts_tokenize(c->model->tok, prompt, len, add_special, true, NULL, 0, &e);
    if (n < 0) return ts_ctx_fail(c, TS_ERR_INVALID_ARG, "tokenize: %s", e.msg);
    if (n == 0) return ts_ctx_fail(c, TS_ERR_INVALID_ARG, "the prompt is empty (0 tokens)");
    int64_t room = (int64_t)ts_state_n_ctx(c->st) - ts_state_n_past(c->st);
    if (n > room)
        return ts_ctx_fail(c, TS_ERR_CONTEXT_FULL,
                           "the prompt is %lld tokens but the context has room for %lld (of %d)", (long long)n,
                           (long long)room, (int)ts_state_n_ctx(c->st));
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    if (!ids) return ts_ctx_fail(c, TS_ERR_NO_MEMORY, "out of memory tokenizing the prompt");
    if (ts_tokenize(c->model->tok, prompt, len, add_special, true, ids, n, &e) != n) {
        free(ids);
        return ts_ctx_fail(c, TS_ERR_INTERNAL, "tokenize: inconsistent token count");
    }
    st = prefill(c, ids, (int32_t)n, NULL);
    free(ids);
    if (st != TS_OK) {
        if (st == TS_ERR_CANCELLED) { /* report it like a generation cancelled at once */
            c->run.stop = TS_STOP_CANCELLED;
            c->run.done = true;
            return ts_ctx_ok(c);
        }
        return st;
    }
    return generate(c, &gp);
}

/* ---- counters ---- */

static double per_s(double n, double ms) { return ms > 0.0 ? n * 1000.0 / ms : 0.0; }

ts_status ts_context_get_stats(const ts_context *c, ts_stats *out) {
    if (!c || !out) return TS_ERR_INVALID_ARG;
    ts_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    s.n_prompt_tokens = c->run.n_prompt;
    s.n_gen_tokens = c->run.n_gen;
    s.prefill_ms = c->run.prefill_ms;
    s.decode_ms = c->run.decode_ms;
    s.prefill_tps = per_s((double)s.n_prompt_tokens, s.prefill_ms);
    s.decode_tps = per_s((double)s.n_gen_tokens, s.decode_ms);
    s.stop_reason = c->run.stop;
    s.n_past = ts_state_n_past(c->st);
    s.n_ctx = ts_state_n_ctx(c->st);
    s.n_batch = ts_state_n_batch(c->st);
    s.n_threads = ts_state_n_threads(c->st);
    s.activations = ts_state_act_q8(c->st) ? TS_ACTIVATIONS_Q8 : TS_ACTIVATIONS_EXACT;
    s.seed = c->sp.seed;
    struct rusage ru;
    s.peak_rss_mib = getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss / 1024.0 : 0.0; /* Linux: KiB */
    s.engine = "cpu";
    ts_state_dev_stats ds;
    ts_state_dev_stats_get(c->st, &ds);
    s.device = ds.device;
    s.device_fallback = ts_state_dev_fallback(c->st);
    s.prefill_dev_tokens = c->run.dev_tokens;
    s.prefill_cpu_tokens = c->run.n_prompt - c->run.dev_tokens;
    s.prefill_dev_nodes = c->run.dev_nodes;
    s.dev_upload_mib = (double)ds.upload_bytes / 1048576.0;
    s.dev_stall_ms = (double)c->run.stall_ns / 1e6;
    s.graph_builds = (int64_t)ds.graph_builds;
    s.crossings = c->run.crossings;
    s.dev_window_bytes = ds.window_bytes;
    s.dev_window_peak = ds.window_peak;
    s.dev_weight_mib = (double)ds.weight_bytes / 1048576.0;
    s.dev_sharing = ds.weight_users;
    s.dev_outliers = (int64_t)ds.outliers;
    s.dev_outliers_unprofiled = (int64_t)ds.outliers_unprofiled;
    s.dev_outliers_pruned = (int64_t)ds.outliers_pruned;
    s.dev_outlier_ms = (double)ds.outlier_ns / 1e6;
    s.dev_busy_ms = (double)c->run.busy_ns / 1e6;
    s.dev_ooo_chunks = c->run.ooo_chunks;
    s.dev_host_wait_ms = (double)c->run.host_wait_ns / 1e6;
    s.grammar_checks = c->cons_run.checks;
    s.grammar_masks = c->cons_run.masks;
    s.grammar_ms = c->cons_run.ms;
    ts_state_stream_stats ss;
    ts_state_stream_stats_get(c->st, &ss);
    s.stream_layers = ss.layers;
    s.stream_loaders = ss.loaders;
    s.stream_slot_mib = (double)ss.slot_bytes / 1048576.0;
    s.stream_read_mib = (double)ss.read_bytes / 1048576.0;
    s.stream_fills = (int64_t)ss.fills;
    s.stream_stall_ms = (double)ss.stall_ns / 1e6;
    s.stream_experts_ahead = (int64_t)ss.ahead;
    s.stream_experts_demand = (int64_t)ss.demand;
    s.stream_experts_routed = (int64_t)ss.routed;
    s.stream_predict_hit_rate = ss.predict_n ? (double)ss.predicted / (double)ss.predict_n : 0.0;
    s.stream_whole_layers = (int64_t)ss.whole;
    s.stream_cache_hits = (int64_t)ss.cache_hits;
    s.stream_cache_misses = (int64_t)ss.cache_misses;
    s.stream_cache_mib = (double)ss.cache_bytes / 1048576.0;
    return ts_struct_out(out, &s, sizeof s);
}
