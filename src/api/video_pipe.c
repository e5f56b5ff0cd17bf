/* video_pipe.c - a stream of videos on two engines (tessera.h "streams on
 * two engines"): the Wan DiT's trajectory as pipe/pipe.h's work. Block
 * execution b of a video is DiT block b % L of step b / L; a call that
 * starts a step embeds the latents first, one that ends it runs the head
 * and the sampler's update. A slot holds a video's whole state in host
 * memory (latents, sampler, the hand-off buffer), so at the cut only the
 * hidden state crosses: copied out of A's run into the slot, and into B's
 * run when B resumes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/video_impl.h"
#include "api/stream_impl.h"
#include "pipe/pipe.h"
#include "video/flow.h"

#define N_SLOTS 4 /* two per engine for the whole-video baselines; the pipeline uses two */

typedef struct vslot {
    float *lat, *vel, *x, *frames; /* latents, velocity (and VAE input), hand-off [M][d], decoded video */
    ts_flow fl;
    bool fl_ok;
    bool load_x; /* B resumes from x */
} vslot;

struct ts_video_pipe {
    ts_video *v;
    ts_video_pipe_params pp;
    ts_wan_run *run[TS_PIPE_STAGES];
    ts_wan_vae_run *vae[TS_PIPE_STAGES]; /* B's; A's for the whole-video baseline (made on first use) */
    int T, h, w;
    int64_t len, hidden; /* latent values; hidden-state values */
    int L, steps;
    ts_flow_kind kind;
    double shift, custom[TS_FLOW_MAX_STEPS];
    int n_custom;
    float detail_below;
    uint64_t seed;
    bool decode;
    int64_t frame_values;
    vslot slot[N_SLOTS];
    ts_pipe_work work;
    int64_t pss;
};

ts_video_pipe_params ts_video_pipe_default_params(void) { return (ts_video_pipe_params){0}; }

/* ---- the work ---- */

static int start_video(ts_video_pipe *p, vslot *S, int req, ts_err *err) {
    if (S->fl_ok)
        ts_flow_free(&S->fl);
    S->fl_ok = false;
    if (ts_flow_init(&S->fl, p->kind, p->steps, p->shift, p->n_custom ? p->custom : NULL, p->n_custom, p->len, err))
        return -1;
    S->fl_ok = true;
    /* measuring probes (req < 0) use the first video's noise */
    ts_video_noise(S->lat, p->len, p->seed + (uint64_t)(req > 0 ? req : 0));
    S->load_x = false;
    return 0;
}

static int w_blocks(void *ctx, int stage, int slot, int req, int b0, int b1, ts_err *err) {
    ts_video_pipe *p = ctx;
    vslot *S = &p->slot[slot];
    ts_wan_run *r = p->run[stage];
    if (b0 == 0 && start_video(p, S, req, err))
        return -1;
    for (int b = b0; b < b1;) {
        const int s = b / p->L, l0 = b % p->L, l1 = l0 + (b1 - b) < p->L ? l0 + (b1 - b) : p->L;
        if (l0 > 0 && S->load_x) { /* resuming the other engine's step */
            memcpy(ts_wan_run_hidden(r), S->x, (size_t)p->hidden * sizeof(float));
            S->load_x = false;
        }
        const double t = S->fl.t[s];
        if (ts_wan_run_part(r, S->lat, t, 0, t < p->detail_below, l0, l1, S->vel, err))
            return ts_err_prefix(err, "step %d", s);
        if (l1 == p->L)
            ts_flow_step(&S->fl, S->vel, S->lat);
        b += l1 - l0;
    }
    return 0;
}

static int w_handoff(void *ctx, int slot, int b, ts_err *err) {
    (void)err;
    ts_video_pipe *p = ctx;
    vslot *S = &p->slot[slot];
    if (b % p->L) { /* inside a step: the hidden state crosses (at a step boundary nothing does) */
        memcpy(S->x, ts_wan_run_hidden(p->run[0]), (size_t)p->hidden * sizeof(float));
        S->load_x = true;
    }
    return 0;
}

static int w_tail(void *ctx, int stage, int slot, int req, ts_err *err) {
    (void)req;
    ts_video_pipe *p = ctx;
    vslot *S = &p->slot[slot];
    if (!p->vae[stage] &&
        !(p->vae[stage] = ts_wan_vae_run_new(p->v->vae, stage ? p->pp.engine_b : p->pp.engine_a,
                                             stage ? p->pp.threads_b : p->pp.threads_a, p->T, p->h, p->w, err)))
        return -1;
    /* the pipeline's de-normalisation on a copy (vel is free after the last step) */
    memcpy(S->vel, S->lat, (size_t)p->len * sizeof(float));
    ts_wan_vae_denormalize(p->v->vae, S->vel, (int64_t)p->T * p->h * p->w);
    return ts_wan_vae_decode(p->vae[stage], S->vel, S->frames, NULL, NULL, err);
}

static int w_done(void *ctx, int slot, int req, ts_err *err) {
    ts_video_pipe *p = ctx;
    const vslot *S = &p->slot[slot];
    if (req >= 0 && p->pp.on_video && !p->pp.on_video(req, S->lat, p->decode ? S->frames : NULL, p->pp.user_data))
        return ts_err_set(err, "cancelled after video %d", req);
    return 0;
}

/* ---- setup ---- */

void ts_video_pipe_free(ts_video_pipe *p) {
    if (!p)
        return;
    /* B's run maps A's weights: it goes first */
    for (int s = TS_PIPE_STAGES - 1; s >= 0; s--) {
        ts_wan_run_free(p->run[s]);
        ts_wan_vae_run_free(p->vae[s]);
    }
    for (int i = 0; i < N_SLOTS; i++) {
        vslot *S = &p->slot[i];
        free(S->lat), free(S->vel), free(S->x), free(S->frames);
        if (S->fl_ok)
            ts_flow_free(&S->fl);
    }
    free(p);
}

ts_status ts_video_pipe_open(ts_video *v, const ts_video_gen_params *gen, const ts_video_pipe_params *pp,
                             ts_video_pipe **out, ts_error *err) {
    const ts_logger *lg = v ? &v->log : NULL;
    if (!v || !gen || !pp || !out)
        return ts_api_fail(err, lg, TS_ERR_INVALID_ARG, "ts_video_pipe_open: video, params or out is NULL");
    *out = NULL;
    if (!pp->engine_a || !pp->engine_b || !pp->engine_a[0] || !pp->engine_b[0])
        return ts_api_fail(err, lg, TS_ERR_INVALID_ARG, "a stream needs two engines (engine_a, engine_b: 'vnni', "
                                                        "'amx,act=int8', 'cpu', 'loop', ...)");
    if (gen->cfg > 1.0f)
        return ts_api_fail(err, lg, TS_ERR_UNSUPPORTED,
                           "cfg %g: the stream runs one forward per step (guidance off, as DCM runs); "
                           "use ts_video_generate for classifier-free guidance",
                           (double)gen->cfg);
    const ts_wan_config *c = ts_wan_cfg(v->wan);
    ts_video_pipe *p = calloc(1, sizeof *p);
    if (!p)
        return ts_api_fail(err, lg, TS_ERR_NO_MEMORY, "out of memory");
    p->v = v;
    p->pp = *pp;
    p->pp.threads_a = pp->threads_a > 0 ? pp->threads_a : 1;
    p->pp.threads_b = pp->threads_b > 0 ? pp->threads_b : 1;
    ts_status st = TS_OK;
    ts_err e = {{0}};
    float *enc = NULL;
    if ((st = ts_video_check_gen(v, gen, &p->T, &p->h, &p->w, p->custom, err)) != TS_OK)
        goto fail;
    p->n_custom = gen->timesteps ? gen->n_timesteps : 0;
    p->len = (int64_t)LATENT_CH * p->T * p->h * p->w;
    p->L = c->n_layer;
    p->kind = gen->sampler == TS_VIDEO_EULER ? TS_FLOW_EULER : TS_FLOW_UNIPC;
    p->shift = gen->shift;
    p->detail_below = gen->detail_below;
    p->seed = gen->seed;
    p->decode = pp->decode;
    if (p->decode && !v->vae) {
        st = ts_api_fail(err, lg, TS_ERR_INVALID_STATE, "decoding frames needs the Wan VAE (vae_path, --vae)");
        goto fail;
    }
    p->frame_values = (int64_t)3 * gen->frames * gen->height * gen->width;
    /* the schedule checked once (each video re-creates its sampler state) */
    ts_flow probe;
    if (ts_flow_init(&probe, p->kind, gen->steps, p->shift, p->n_custom ? p->custom : NULL, p->n_custom, 1, &e)) {
        st = ts_api_fail(err, lg, TS_ERR_INVALID_ARG, "sampler: %s", e.msg);
        goto fail;
    }
    p->steps = probe.n;
    ts_flow_free(&probe);
    /* the text: given, or the prompt encoded once for the whole stream */
    const int32_t n_text = gen->text ? gen->n_text : TS_VIDEO_TEXT_LEN;
    const float *text = gen->text;
    if (!text) {
        if (!(enc = malloc(sizeof(float) * (size_t)n_text * (size_t)c->text_dim))) {
            st = ts_api_fail(err, lg, TS_ERR_NO_MEMORY, "out of memory");
            goto fail;
        }
        if ((st = ts_video_encode_text(v, gen->prompt, enc, NULL, err)) != TS_OK)
            goto fail;
        text = enc;
    }
    /* the runs: A packs, B maps what it reads as A stored it */
    for (int s = 0; s < TS_PIPE_STAGES; s++) {
        const ts_wan_run_params rp = {.engine = s ? p->pp.engine_b : p->pp.engine_a,
                                      .n_threads = s ? p->pp.threads_b : p->pp.threads_a,
                                      .frames = p->T, .height = p->h, .width = p->w, .n_text = n_text, .n_texts = 1,
                                      .lora = v->lora, .share = s && !pp->own_copies ? p->run[0] : NULL};
        if (!(p->run[s] = ts_wan_run_new(v->wan, &rp, &e)) || ts_wan_run_set_text(p->run[s], 0, text, &e)) {
            st = ts_api_fail(err, lg, TS_ERR_UNSUPPORTED, "engine %s: %s", rp.engine, e.msg);
            goto fail;
        }
    }
    p->hidden = ts_wan_run_tokens(p->run[0]) * c->dim;
    for (int i = 0; i < N_SLOTS; i++) {
        vslot *S = &p->slot[i];
        S->lat = malloc((size_t)p->len * sizeof(float));
        S->vel = malloc((size_t)p->len * sizeof(float));
        S->x = malloc((size_t)p->hidden * sizeof(float));
        S->frames = p->decode ? malloc((size_t)p->frame_values * sizeof(float)) : NULL;
        if (!S->lat || !S->vel || !S->x || (p->decode && !S->frames)) {
            st = ts_api_fail(err, lg, TS_ERR_NO_MEMORY, "out of memory (the stream's video states)");
            goto fail;
        }
    }
    if (p->decode && !(p->vae[1] = ts_wan_vae_run_new(v->vae, p->pp.engine_b, p->pp.threads_b, p->T, p->h, p->w, &e))) {
        st = ts_api_fail(err, lg, TS_ERR_UNSUPPORTED, "VAE on %s: %s", p->pp.engine_b, e.msg);
        goto fail;
    }
    p->work = (ts_pipe_work){.n_blocks = p->steps * p->L, .step_blocks = p->L, .n_slots = N_SLOTS, .ctx = p,
                             .blocks = w_blocks, .handoff = w_handoff, .tail = p->decode ? w_tail : NULL,
                             .done = w_done};
    p->pss = ts_pss_bytes();
    free(enc);
    ts_api_log(lg, TS_LOG_INFO, "video stream: %s -> %s, %d block executions per video, %.1f MiB of packed weights "
               "shared", pp->engine_a, pp->engine_b, p->work.n_blocks,
               (double)ts_wan_run_shared_bytes(p->run[1]) / 1048576.0);
    *out = p;
    return ts_api_ok(err);
fail:
    free(enc);
    ts_video_pipe_free(p);
    return st;
}

ts_status ts_video_pipe_get_info(const ts_video_pipe *p, ts_video_pipe_info *out) {
    if (!p || !out)
        return TS_ERR_INVALID_ARG;
    memset(out, 0, sizeof *out);
    out->n_blocks = p->work.n_blocks;
    out->step_blocks = p->L;
    out->tokens = ts_wan_run_tokens(p->run[0]);
    out->weight_bytes = (int64_t)ts_wan_weight_bytes(p->v->wan);
    out->shared_bytes = (int64_t)ts_wan_run_shared_bytes(p->run[1]);
    out->pss_bytes = p->pss;
    snprintf(out->engine_a, sizeof out->engine_a, "%s", p->pp.engine_a);
    snprintf(out->engine_b, sizeof out->engine_b, "%s", p->pp.engine_b);
    return TS_OK;
}

/* ---- measuring and running ---- */

ts_status ts_video_pipe_measure(ts_video_pipe *p, int32_t probe_blocks, ts_stream_rates *solo, ts_stream_rates *corun,
                                ts_error *err) {
    return ts_api_stream_measure(p ? &p->work : NULL, p ? &p->v->log : NULL, probe_blocks, solo, corun, err);
}

ts_status ts_video_pipe_run(ts_video_pipe *p, int32_t cut, int32_t n_videos, const ts_stream_rates *pace,
                            double slo_s, ts_stream_result *res, ts_error *err) {
    return ts_api_stream_run(p ? &p->work : NULL, p ? &p->v->log : NULL, cut, n_videos, pace, slo_s, res, err);
}

ts_status ts_video_pipe_run_whole(ts_video_pipe *p, uint32_t stages, int32_t n_videos, ts_stream_result *res,
                                  ts_error *err) {
    return ts_api_stream_run_whole(p ? &p->work : NULL, p ? &p->v->log : NULL, stages, n_videos, res, err);
}
