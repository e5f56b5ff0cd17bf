/* prompt_pipe.c - a stream of prompts on two engines (tessera.h "streams on
 * two engines"): an AR prompt's prefill as pipe/pipe.h's work. Block
 * execution b of a prompt is layer b % L of chunk b / L. A slot is one
 * inference state (KV cache and activation buffers in host memory) with a
 * layer runner for each engine over those buffers, so at the cut nothing is
 * copied: the residual stream in the state's x is the one activation buffer
 * both engines address, and every K/V row either engine wrote is in the
 * state's cache, where the other reads it. The tail is the output work:
 * the last row's norm and logits (the next token's distribution).
 *
 * A diffusion LLM's request is the vanilla decoder (diffusion/diffusion.h)
 * on the prompt: steps forwards over the whole canvas, each L block
 * executions. The decoder is a loop with its own stack, so each slot runs it
 * on a thread of its own (dslot), and a stage's blocks(b0, b1) call grants
 * it blocks [b0, b1) on that stage's runner: the decoder's forward runs its
 * layers up to the grant, then waits for the next one (from the other
 * stage, after the cut, or the next request's start). A step's logits and
 * commit run inside the grant of the block before them, so at most two
 * threads (one per stage) compute at any time. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/stream_impl.h"
#include "diffusion/denoiser_state.h"
#include "model/model.h"

#define N_SLOTS 4 /* two per engine for the whole-request baselines; the pipeline uses two */

struct ts_prompt_pipe {
    const ts_model *model;
    ts_prompt_pipe_params pp;
    char engine_a[48], engine_b[48];
    ts_state *st[N_SLOTS];
    ts_runner on[TS_PIPE_STAGES]; /* each stage's runner in a state */
    int32_t *tokens;              /* the prompts, concatenated */
    int64_t *start;               /* [n_prompts] */
    int32_t *len;                 /* [n_prompts] */
    int32_t n_prompts, width, n_chunks, L, n_vocab;
    int32_t cur[N_SLOTS]; /* the prompt a slot holds */
    /* diffusion (NULL: prefill) */
    ts_diffusion_params dp;
    bool diffuse;
    int32_t n_gen, canvas;
    struct dslot *ds; /* [N_SLOTS] */
    ts_pipe_work work;
    int64_t pss, weight_bytes;
};

ts_prompt_pipe_params ts_prompt_pipe_default_params(void) { return (ts_prompt_pipe_params){0}; }

/* ---- a diffusion request's decoder on its slot's thread ---- */

typedef struct dslot {
    ts_prompt_pipe *p;
    int slot;
    pthread_t th;
    bool th_ok;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* under mu */
    bool start;          /* a request waits to be decoded (req) */
    bool busy;           /* a decode is running */
    bool abort, quit;    /* stop the running decode; end the thread */
    bool waiting;        /* the decoder is blocked on a block >= grant_end */
    int req, grant_stage, grant_end;
    int pos;             /* blocks done in the running decode */
    int rc;
    ts_err err;
    /* the decode's */
    ts_denoiser d;
    int32_t *gen; /* [n_gen] */
} dslot;

/* The denoiser's forward: the window's layers in grants, then its logits. */
static int d_forward(void *ctx, const int32_t *tokens, int32_t n, int32_t pos0, int32_t n_kv, float *logits,
                     ts_err *err) {
    dslot *S = ctx;
    ts_prompt_pipe *p = S->p;
    ts_state *st = p->st[S->slot];
    pthread_mutex_lock(&S->mu);
    const int base = S->pos;
    pthread_mutex_unlock(&S->mu);
    for (int l = 0; l < p->L;) {
        pthread_mutex_lock(&S->mu);
        while (!S->abort && base + l >= S->grant_end) {
            S->waiting = true;
            pthread_cond_broadcast(&S->cv);
            pthread_cond_wait(&S->cv, &S->mu);
        }
        S->waiting = false;
        const bool abort = S->abort;
        const int stage = S->grant_stage, end = S->grant_end;
        pthread_mutex_unlock(&S->mu);
        if (abort) return ts_err_set(err, "aborted");
        const int l1 = end - base < p->L ? end - base : p->L;
        if (ts_forward_layers(st, p->on[stage], tokens, n, pos0, n_kv, l, l1, err))
            return ts_err_prefix(err, "step %d, layers %d..%d on %s", base / p->L, l, l1 - 1,
                                 stage ? p->engine_b : p->engine_a);
        l = l1;
        pthread_mutex_lock(&S->mu);
        S->pos = base + l;
        pthread_mutex_unlock(&S->mu);
    }
    return ts_state_layers_logits(st, n, logits, err);
}

static void *dslot_main(void *arg) {
    dslot *S = arg;
    ts_prompt_pipe *p = S->p;
    for (;;) {
        pthread_mutex_lock(&S->mu);
        while (!S->start && !S->quit) pthread_cond_wait(&S->cv, &S->mu);
        if (S->quit) {
            pthread_mutex_unlock(&S->mu);
            return NULL;
        }
        S->start = false;
        const int32_t i = (S->req > 0 ? S->req : 0) % p->n_prompts;
        pthread_mutex_unlock(&S->mu);
        ts_diff_cfg cfg = ts_api_diff_cfg(&p->dp);
        ts_err e = {{0}};
        ts_state_kv_truncate(p->st[S->slot], 0);
        const int rc = ts_diffuse(&S->d, p->tokens + p->start[i], p->len[i], &cfg, S->gen, NULL, &e);
        pthread_mutex_lock(&S->mu);
        S->rc = rc;
        S->err = e;
        S->busy = false;
        pthread_cond_broadcast(&S->cv);
        pthread_mutex_unlock(&S->mu);
    }
}

/* blocks [b0, b1) of slot's request on stage: granted to its decoder, which
 * runs them (b0 == 0: the request starts, a running one is dropped). */
static int d_blocks(ts_prompt_pipe *p, int stage, int slot, int req, int b0, int b1, ts_err *err) {
    dslot *S = &p->ds[slot];
    pthread_mutex_lock(&S->mu);
    if (b0 == 0) {
        if (S->busy) { /* a measurement's probe left it part-way */
            S->abort = true;
            pthread_cond_broadcast(&S->cv);
            while (S->busy) pthread_cond_wait(&S->cv, &S->mu);
            S->abort = false;
        }
        S->req = req, S->pos = 0, S->rc = 0;
        S->start = S->busy = true;
    } else if (!S->busy || S->pos != b0) {
        const int pos = S->pos, busy = S->busy;
        pthread_mutex_unlock(&S->mu);
        return ts_err_set(err, "diffusion stream: blocks from %d, the decoder %s at %d", b0,
                          busy ? "stands" : "finished", pos);
    }
    S->grant_stage = stage, S->grant_end = b1, S->waiting = false;
    pthread_cond_broadcast(&S->cv);
    while (S->busy && !S->waiting) pthread_cond_wait(&S->cv, &S->mu);
    const bool finished = !S->busy;
    const int rc = S->rc, pos = S->pos;
    const ts_err e = S->err;
    pthread_mutex_unlock(&S->mu);
    if (finished && rc) {
        *err = e;
        return -1;
    }
    if (finished != (b1 == p->work.n_blocks) || pos != b1)
        return ts_err_set(err, "diffusion stream: the decoder %s after %d of %d block executions (granted %d)",
                          finished ? "ended" : "waits", pos, p->work.n_blocks, b1);
    return 0;
}

static void dslots_free(ts_prompt_pipe *p) {
    for (int i = 0; p->ds && i < N_SLOTS; i++) {
        dslot *S = &p->ds[i];
        if (S->th_ok) {
            pthread_mutex_lock(&S->mu);
            S->quit = S->abort = true;
            pthread_cond_broadcast(&S->cv);
            pthread_mutex_unlock(&S->mu);
            pthread_join(S->th, NULL);
            pthread_mutex_destroy(&S->mu);
            pthread_cond_destroy(&S->cv);
        }
        free(S->gen);
    }
    free(p->ds);
    p->ds = NULL;
}

static int dslots_new(ts_prompt_pipe *p, ts_err *err) {
    if (!(p->ds = calloc(N_SLOTS, sizeof *p->ds))) return ts_err_set(err, "out of memory");
    for (int i = 0; i < N_SLOTS; i++) {
        dslot *S = &p->ds[i];
        S->p = p, S->slot = i;
        if (!(S->gen = malloc((size_t)p->n_gen * sizeof *S->gen))) return ts_err_set(err, "out of memory");
        if (ts_state_denoiser(p->st[i], p->model->mdl, -1, &S->d, err)) return -1;
        S->d.ctx = S; /* every forward through the grants; nothing else offered */
        S->d.forward = d_forward;
        S->d.set_prefix = NULL, S->d.submit = NULL, S->d.wait = NULL, S->d.set_rows = NULL;
        pthread_mutex_init(&S->mu, NULL);
        pthread_cond_init(&S->cv, NULL);
        if (pthread_create(&S->th, NULL, dslot_main, S)) {
            pthread_mutex_destroy(&S->mu);
            pthread_cond_destroy(&S->cv);
            return ts_err_set(err, "cannot start a decoder thread");
        }
        S->th_ok = true;
    }
    return 0;
}

/* ---- the work ---- */

static int w_blocks(void *ctx, int stage, int slot, int req, int b0, int b1, ts_err *err) {
    ts_prompt_pipe *p = ctx;
    if (p->diffuse) return d_blocks(p, stage, slot, req, b0, b1, err);
    ts_state *s = p->st[slot];
    if (b0 == 0) {
        p->cur[slot] = (req > 0 ? req : 0) % p->n_prompts; /* measuring probes (req < 0): the first prompt */
        ts_state_kv_truncate(s, 0);
    }
    const int32_t i = p->cur[slot];
    for (int b = b0; b < b1;) {
        const int c = b / p->L, l0 = b % p->L, l1 = l0 + (b1 - b) < p->L ? l0 + (b1 - b) : p->L;
        const int32_t pos0 = c * p->width, n = p->len[i] - pos0 < p->width ? p->len[i] - pos0 : p->width;
        if (ts_forward_layers(s, p->on[stage], p->tokens + p->start[i] + pos0, n, pos0, 0, l0, l1, err))
            return ts_err_prefix(err, "prompt %d, chunk %d, layers %d..%d on %s", (int)i, c, l0, l1 - 1,
                                 stage ? p->engine_b : p->engine_a);
        b += l1 - l0;
    }
    return 0;
}

static int w_tail(void *ctx, int stage, int slot, int req, ts_err *err) {
    (void)stage, (void)req;
    ts_prompt_pipe *p = ctx;
    const int32_t i = p->cur[slot], last = p->len[i] - (p->n_chunks - 1) * p->width;
    return ts_state_layers_logits(p->st[slot], last, NULL, err);
}

static int w_done(void *ctx, int slot, int req, ts_err *err) {
    ts_prompt_pipe *p = ctx;
    if (p->diffuse) {
        if (req >= 0 && p->pp.on_tokens && !p->pp.on_tokens(req, p->ds[slot].gen, p->n_gen, p->pp.user_data))
            return ts_err_set(err, "cancelled after request %d", req);
        return 0;
    }
    if (req >= 0 && p->pp.on_logits &&
        !p->pp.on_logits(req, ts_state_logits(p->st[slot]), p->n_vocab, p->pp.user_data))
        return ts_err_set(err, "cancelled after prompt %d", req);
    return 0;
}

void ts_prompt_pipe_free(ts_prompt_pipe *p) {
    if (!p) return;
    dslots_free(p); /* before the states its threads use */
    for (int i = 0; i < N_SLOTS; i++) ts_state_free(p->st[i]);
    free(p->tokens), free(p->start), free(p->len);
    free(p);
}

static bool is_cpu(const char *e) { return !strcmp(e, "cpu") || !strncmp(e, "cpu,", 4); }

ts_status ts_prompt_pipe_open(const ts_model *model, const int32_t *tokens, const int32_t *n_tokens,
                              int32_t n_prompts, const ts_prompt_pipe_params *pp, ts_prompt_pipe **out,
                              ts_error *err) {
    const ts_logger *lg = model ? &model->log : NULL;
    if (!model || !tokens || !n_tokens || !pp || !out || n_prompts < 1)
        return ts_api_fail(err, lg, TS_ERR_INVALID_ARG, "ts_prompt_pipe_open: model, prompts, params or out missing");
    *out = NULL;
    if (!model->mdl) return ts_api_fail(err, lg, TS_ERR_INVALID_STATE, "the model was opened vocab-only");
    if (!pp->engine_a || !pp->engine_b || !pp->engine_a[0] || !pp->engine_b[0])
        return ts_api_fail(err, lg, TS_ERR_INVALID_ARG, "a stream needs two engines (engine_a, engine_b: 'cpu', "
                                                        "'amx,act=int8', 'vnni', 'loop', ...)");
    if (strlen(pp->engine_a) >= 48 || strlen(pp->engine_b) >= 48)
        return ts_api_fail(err, lg, TS_ERR_INVALID_ARG, "engine names longer than 47 bytes");
    /* a diffusion decode: the vanilla decoder, a fixed number of forwards */
    ts_diffusion_params dp = ts_diffusion_default_params();
    if (pp->diffusion) {
        ts_status st = ts_params_in(&dp, sizeof dp, pp->diffusion, "ts_diffusion_params", err, lg);
        if (st != TS_OK) return st;
        if (dp.decoder != TS_DIFFUSION_VANILLA || dp.sts || dp.scr || dp.window || dp.skip_logits)
            return ts_api_fail(err, lg, TS_ERR_UNSUPPORTED,
                               "a diffusion stream runs the vanilla decoder alone (steps forwards of steps x layers "
                               "block executions, fixed before it runs); the block decoder's forwards, and sts, scr, "
                               "window and skip_logits, depend on its commits");
        dp.early_stop = false;
        dp.on_token = NULL;
    }
    int32_t longest = 0;
    for (int32_t i = 0; i < n_prompts; i++) longest = n_tokens[i] > longest ? n_tokens[i] : longest;
    /* a diffusion forward is one window over the whole canvas: one chunk */
    const int32_t width = pp->diffusion ? longest + dp.n_gen : pp->chunk > 0 ? pp->chunk : 256;
    int64_t total = 0;
    int32_t n_chunks = -1;
    for (int32_t i = 0; i < n_prompts; i++) {
        if (n_tokens[i] < 1)
            return ts_api_fail(err, lg, TS_ERR_INVALID_ARG, "prompt %d is empty", (int)i);
        const int32_t c = (n_tokens[i] + width - 1) / width;
        if (n_chunks >= 0 && c != n_chunks)
            return ts_api_fail(err, lg, TS_ERR_INVALID_ARG,
                               "prompt %d fills %d chunks of %d tokens, prompt 0 %d: a stream's requests must have "
                               "the same number of block executions (give prompts of one length)",
                               (int)i, (int)c, (int)width, (int)n_chunks);
        n_chunks = c;
        total += n_tokens[i];
    }
    ts_prompt_pipe *p = calloc(1, sizeof *p);
    if (!p) return ts_api_fail(err, lg, TS_ERR_NO_MEMORY, "out of memory");
    p->model = model;
    p->pp = *pp;
    snprintf(p->engine_a, sizeof p->engine_a, "%s", pp->engine_a);
    snprintf(p->engine_b, sizeof p->engine_b, "%s", pp->engine_b);
    p->pp.engine_a = p->engine_a, p->pp.engine_b = p->engine_b;
    p->n_prompts = n_prompts, p->width = width, p->n_chunks = n_chunks;
    p->dp = dp, p->diffuse = pp->diffusion != NULL, p->n_gen = dp.n_gen;
    p->pp.diffusion = NULL;
    p->L = ts_mdl_hparams(model->mdl)->n_layer;
    p->n_vocab = ts_mdl_hparams(model->mdl)->n_vocab;
    p->weight_bytes = (int64_t)ts_mdl_size_bytes(model->mdl);
    ts_status st = TS_ERR_NO_MEMORY;
    ts_err e = {{0}};
    p->tokens = malloc((size_t)total * sizeof *p->tokens);
    p->start = malloc((size_t)n_prompts * sizeof *p->start);
    p->len = malloc((size_t)n_prompts * sizeof *p->len);
    if (!p->tokens || !p->start || !p->len) {
        st = ts_api_fail(err, lg, TS_ERR_NO_MEMORY, "out of memory");
        goto fail;
    }
    memcpy(p->tokens, tokens, (size_t)total * sizeof *p->tokens);
    for (int32_t i = 0, at = 0; i < n_prompts; at += n_tokens[i], i++) p->start[i] = at, p->len[i] = n_tokens[i];
    /* the states: the first device as the prefill device, a second one
     * beside it; a cpu stage runs the model's own CPU layers */
    const bool cpu_a = is_cpu(p->engine_a), cpu_b = is_cpu(p->engine_b);
    const char *dev1 = !cpu_a ? p->engine_a : !cpu_b ? p->engine_b : NULL;
    p->on[0] = cpu_a ? TS_RUN_CPU : TS_RUN_DEVICE;
    p->on[1] = cpu_b ? TS_RUN_CPU : cpu_a ? TS_RUN_DEVICE : TS_RUN_DEVICE_B;
    for (int i = 0; i < N_SLOTS; i++) {
        ts_state_params sp = ts_state_default_params();
        sp.n_ctx = p->diffuse ? width : longest;
        sp.n_batch = width;
        sp.n_threads = 1; /* one core per engine */
        sp.prefill_device = dev1;
        sp.chunk = width;
        sp.prefill_min_tokens = 1;
        sp.act_q8 = pp->activations == TS_ACTIVATIONS_Q8;
        if (!(p->st[i] = ts_state_new(model->mdl, &sp, &e))) {
            st = ts_api_fail(err, lg, TS_ERR_INTERNAL, "cannot create the stream's state %d: %s", i, e.msg);
            goto fail;
        }
        if (dev1 && ts_state_dev_fallback(p->st[i])) {
            st = ts_api_fail(err, lg, TS_ERR_UNSUPPORTED, "%s", ts_state_dev_fallback(p->st[i]));
            goto fail;
        }
        if (!cpu_a && !cpu_b && ts_state_attach_device_b(p->st[i], p->engine_b, pp->own_copies, &e)) {
            st = ts_api_fail(err, lg, TS_ERR_UNSUPPORTED, "engine %s: %s", p->engine_b, e.msg);
            goto fail;
        }
    }
    if (p->diffuse && dslots_new(p, &e)) {
        st = ts_api_fail(err, lg, TS_ERR_UNSUPPORTED, "diffusion stream: %s", e.msg);
        goto fail;
    }
    const int32_t steps = dp.steps > 0 ? dp.steps : dp.n_gen;
    p->work = (ts_pipe_work){.n_blocks = (p->diffuse ? steps : n_chunks) * p->L, .step_blocks = p->L,
                             .n_slots = N_SLOTS, .ctx = p, .blocks = w_blocks, .tail = p->diffuse ? NULL : w_tail,
                             .done = w_done};
    p->pss = ts_pss_bytes();
    ts_api_log(lg, TS_LOG_INFO, "%s stream: %s -> %s, %d block executions per request (%d %s x %d layers)",
               p->diffuse ? "diffusion" : "prompt", p->engine_a, p->engine_b, (int)p->work.n_blocks,
               (int)(p->work.n_blocks / p->L), p->diffuse ? "steps" : "chunks", (int)p->L);
    *out = p;
    return ts_api_ok(err);
fail:
    ts_prompt_pipe_free(p);
    return st;
}

ts_status ts_prompt_pipe_get_info(const ts_prompt_pipe *p, ts_stream_info *out) {
    if (!p || !out) return TS_ERR_INVALID_ARG;
    memset(out, 0, sizeof *out);
    out->n_blocks = p->work.n_blocks;
    out->step_blocks = p->L;
    out->tokens = p->width;
    out->weight_bytes = p->weight_bytes;
    out->shared_bytes = (int64_t)ts_state_device_b_shared_bytes(p->st[0]);
    out->pss_bytes = p->pss;
    snprintf(out->engine_a, sizeof out->engine_a, "%s", p->engine_a);
    snprintf(out->engine_b, sizeof out->engine_b, "%s", p->engine_b);
    return TS_OK;
}

ts_status ts_prompt_pipe_measure(ts_prompt_pipe *p, int32_t probe_blocks, ts_stream_rates *solo,
                                 ts_stream_rates *corun, ts_error *err) {
    /* a prompt's later chunks attend to more keys: a whole request by default */
    if (p && probe_blocks <= 0 && !p->diffuse) probe_blocks = p->work.n_blocks;
    return ts_api_stream_measure(p ? &p->work : NULL, p ? &p->model->log : NULL, probe_blocks, solo, corun, err);
}

ts_status ts_prompt_pipe_run(ts_prompt_pipe *p, int32_t cut, int32_t n_requests, const ts_stream_rates *pace,
                             double slo_s, ts_stream_result *res, ts_error *err) {
    return ts_api_stream_run(p ? &p->work : NULL, p ? &p->model->log : NULL, cut, n_requests, pace, slo_s, res, err);
}

ts_status ts_prompt_pipe_run_whole(ts_prompt_pipe *p, uint32_t stages, int32_t n_requests, ts_stream_result *res,
                                   ts_error *err) {
    return ts_api_stream_run_whole(p ? &p->work : NULL, p ? &p->model->log : NULL, stages, n_requests, res, err);
}
