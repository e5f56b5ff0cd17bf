/* video.c - the public video diffusion API (tessera.h "video diffusion"):
 * the Wan DiT (video/wan.h) stepped by a flow-matching sampler
 * (video/flow.h), with classifier-free guidance. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "api/api_internal.h"
#include "core/clock.h"
#include "core/rng.h"
#include "core/threadpool.h"
#include "text/tokenizer.h"
#include "video/flow.h"
#include "video/umt5.h"
#include "video/wan.h"
#include "video/wan_vae.h"
#include "api/video_impl.h"

ts_video_params ts_video_default_params(void) { return (ts_video_params){0}; }

ts_video_gen_params ts_video_gen_default_params(void) {
    return (ts_video_gen_params){.frames = 17, .height = 480, .width = 832, .steps = 50, .sampler = TS_VIDEO_UNIPC,
                                 .shift = 3.0f, .cfg = 1.0f, .seed = 42};
}

ts_status ts_video_load(const char *dit_path, const ts_video_params *params, ts_video **out, ts_error *err) {
    const ts_video_params p = params ? *params : ts_video_default_params();
    const ts_logger lg = {p.log, p.log_user};
    if (!out || !dit_path)
        return ts_api_fail(err, &lg, TS_ERR_INVALID_ARG, "ts_video_load: path or out is NULL");
    *out = NULL;
    if (p.n_threads > TS_THREADS_MAX)
        return ts_api_fail(err, &lg, TS_ERR_INVALID_ARG, "n_threads %d exceeds %d", p.n_threads, TS_THREADS_MAX);
    if (p.engine && strlen(p.engine) >= sizeof ((ts_video *)0)->engine)
        return ts_api_fail(err, &lg, TS_ERR_INVALID_ARG, "engine name is too long");
    ts_video *v = calloc(1, sizeof *v);
    if (!v)
        return ts_api_fail(err, &lg, TS_ERR_NO_MEMORY, "out of memory");
    v->log = lg;
    snprintf(v->engine, sizeof v->engine, "%s", p.engine ? p.engine : "cpu");
    v->n_threads = p.n_threads > 0 ? p.n_threads : ts_physical_cores();
    ts_err e = {{0}};
    if (!(v->wan = ts_wan_open(dit_path, &e))) {
        free(v);
        return ts_api_fail(err, &lg, ts_api_load_status(dit_path, e.msg), "%s", e.msg);
    }
    const ts_wan_config *c = ts_wan_cfg(v->wan);
    if (p.lora_path && !(v->lora = ts_wan_lora_open(v->wan, p.lora_path, p.lora_scale, &e))) {
        ts_wan_close(v->wan);
        free(v);
        return ts_api_fail(err, &lg, ts_api_load_status(p.lora_path, e.msg), "%s", e.msg);
    }
    if (p.vae_path && !(v->vae = ts_wan_vae_open(p.vae_path, &e))) {
        const ts_status st = ts_api_load_status(p.vae_path, e.msg);
        ts_video_free(v);
        return ts_api_fail(err, &lg, st, "VAE %s: %s", p.vae_path, e.msg);
    }
    if (p.t5_path) {
        if (!(v->t5 = ts_umt5_open(p.t5_path, &e)) || !(v->tok = ts_tokenizer_load(ts_umt5_gguf(v->t5), &e))) {
            const ts_status st = ts_api_load_status(p.t5_path, e.msg);
            ts_video_free(v);
            return ts_api_fail(err, &lg, st, "text encoder %s: %s", p.t5_path, e.msg);
        }
        if (ts_umt5_cfg(v->t5)->d_model != c->text_dim) {
            ts_api_fail(err, &lg, TS_ERR_FORMAT,
                        "text encoder %s has width %d, the transformer %s takes text states of %d: not this "
                        "model's encoder",
                        p.t5_path, (int)ts_umt5_cfg(v->t5)->d_model, dit_path, c->text_dim);
            ts_video_free(v);
            return err ? err->status : TS_ERR_FORMAT;
        }
    }
    if (c->in_ch != LATENT_CH || c->out_ch != LATENT_CH) {
        ts_api_fail(err, &lg, TS_ERR_UNSUPPORTED,
                    "%s: %d input / %d output channels; the Wan2.1 text-to-video latent has %d (image-to-video "
                    "and other variants are not supported)",
                    dit_path, c->in_ch, c->out_ch, LATENT_CH);
        ts_video_free(v);
        return err ? err->status : TS_ERR_UNSUPPORTED;
    }
    ts_api_log(&lg, TS_LOG_INFO, "video: %s: Wan DiT d %d, %d blocks, %d heads, FFN %d, text %d", dit_path, c->dim,
               c->n_layer, c->n_head, c->ffn, c->text_dim);
    *out = v;
    return ts_api_ok(err);
}

void ts_video_free(ts_video *v) {
    if (!v)
        return;
    ts_wan_run_free(v->run);
    ts_umt5_run_free(v->t5run);
    ts_wan_vae_run_free(v->vae_run);
    ts_wan_vae_close(v->vae);
    ts_tokenizer_free(v->tok);
    ts_umt5_close(v->t5);
    ts_wan_lora_close(v->lora);
    ts_wan_close(v->wan);
    free(v);
}

ts_status ts_video_get_info(const ts_video *v, ts_video_info *out) {
    if (!v || !out)
        return TS_ERR_INVALID_ARG;
    const ts_wan_config *c = ts_wan_cfg(v->wan);
    *out = (ts_video_info){.dim = c->dim, .n_layer = c->n_layer, .n_head = c->n_head, .ffn = c->ffn,
                           .in_channels = c->in_ch, .out_channels = c->out_ch, .text_dim = c->text_dim,
                           .patch = {c->patch[0], c->patch[1], c->patch[2]},
                           .weight_bytes = (int64_t)ts_wan_weight_bytes(v->wan)};
    return TS_OK;
}

/* The Wan pipeline's prompt_clean, its whitespace part: runs of whitespace
 * become one space, both ends stripped (ftfy's and html.unescape's fixes
 * are not applied). */
static char *clean_prompt(const char *p) {
    const size_t n = strlen(p);
    char *o = malloc(n + 1);
    if (!o)
        return NULL;
    size_t k = 0;
    bool space = false;
    for (size_t i = 0; i < n; i++) {
        const char ch = p[i];
        if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v') {
            space = k > 0;
            continue;
        }
        if (space)
            o[k++] = ' ';
        space = false;
        o[k++] = ch;
    }
    o[k] = 0;
    return o;
}

ts_status ts_video_encode_text(ts_video *v, const char *prompt, float *out, int32_t *n_tokens, ts_error *err) {
    const ts_logger *lg = v ? &v->log : NULL;
    if (!v || !prompt || !out)
        return ts_api_fail(err, lg, TS_ERR_INVALID_ARG, "ts_video_encode_text: video, prompt or out is NULL");
    if (!v->t5)
        return ts_api_fail(err, lg, TS_ERR_INVALID_STATE,
                           "no text encoder: load the umT5 encoder (t5_path, --t5) or give the text states");
    ts_err e = {{0}};
    if (!v->t5run) {
        const ts_umt5_run_params rp = {.engine = v->engine, .n_threads = v->n_threads, .max_tokens = TS_VIDEO_TEXT_LEN};
        if (!(v->t5run = ts_umt5_run_new(v->t5, &rp, &e)))
            return ts_api_fail(err, lg, TS_ERR_UNSUPPORTED, "text encoder: %s", e.msg);
    }
    char *clean = clean_prompt(prompt);
    int32_t *ids = clean ? malloc(sizeof(int32_t) * (TS_VIDEO_TEXT_LEN + 1)) : NULL;
    int64_t n = ids ? ts_tokenize(v->tok, clean, strlen(clean), true, false, ids, TS_VIDEO_TEXT_LEN + 1, &e) : -2;
    if (n > TS_VIDEO_TEXT_LEN) {
        /* truncated as the pipeline's tokenizer does: the first 511 tokens, then EOS */
        int32_t *all = realloc(ids, sizeof(int32_t) * (size_t)n);
        if (all) {
            ids = all;
            ts_tokenize(v->tok, clean, strlen(clean), true, false, ids, n, &e);
            ids[TS_VIDEO_TEXT_LEN - 1] = ids[n - 1];
            n = TS_VIDEO_TEXT_LEN;
        } else {
            n = -2;
        }
    }
    free(clean);
    if (n < 0) {
        free(ids);
        return n == -2 ? ts_api_fail(err, lg, TS_ERR_NO_MEMORY, "out of memory")
                       : ts_api_fail(err, lg, TS_ERR_INVALID_ARG, "prompt: %s", e.msg);
    }
    const int rc = ts_umt5_encode_padded(v->t5run, ids, (int)n, TS_VIDEO_TEXT_LEN, out, &e);
    free(ids);
    if (rc)
        return ts_api_fail(err, lg, TS_ERR_INTERNAL, "text encoder: %s", e.msg);
    if (n_tokens)
        *n_tokens = (int32_t)n;
    return ts_api_ok(err);
}

int ts_video_grid(const ts_video *v, int32_t frames, int32_t height, int32_t width, int *T, int *h, int *w, char *msg,
                size_t cap) {
    const ts_wan_config *c = ts_wan_cfg(v->wan);
    const int sh = VAE_S * c->patch[1], sw = VAE_S * c->patch[2];
    if (frames < 1 || frames > 16384 || (frames - 1) % VAE_T) {
        snprintf(msg, cap, "frames %d: must be 4k + 1 (1, 5, 9, 17, ..., 81)", frames);
        return -1;
    }
    if (height < sh || width < sw || height % sh || width % sw || height > 65536 || width > 65536) {
        snprintf(msg, cap, "size %dx%d (height x width): both must be positive multiples of %d x %d (the VAE's 8 "
                 "times the patch)", height, width, sh, sw);
        return -1;
    }
    *T = (frames - 1) / VAE_T + 1, *h = height / VAE_S, *w = width / VAE_S;
    if ((*T) % c->patch[0]) {
        snprintf(msg, cap, "frames %d give %d latent frames, not a multiple of the temporal patch %d", frames, *T,
                 c->patch[0]);
        return -1;
    }
    return 0;
}

int64_t ts_video_latent_count(const ts_video *v, int32_t frames, int32_t height, int32_t width) {
    int T, h, w;
    char msg[160];
    if (!v || ts_video_grid(v, frames, height, width, &T, &h, &w, msg, sizeof msg))
        return -1;
    return (int64_t)LATENT_CH * T * h * w;
}

void ts_video_noise(float *x, int64_t n, uint64_t seed) {
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i += 2) {
        const double u1 = ((double)(ts_splitmix64(&s) >> 11) + 1.0) * 0x1.0p-53;
        const double u2 = (double)(ts_splitmix64(&s) >> 11) * 0x1.0p-53;
        const double r = sqrt(-2.0 * log(u1)), a = 2.0 * 3.14159265358979323846 * u2;
        x[i] = (float)(r * cos(a));
        if (i + 1 < n)
            x[i + 1] = (float)(r * sin(a));
    }
}

ts_status ts_video_check_gen(const ts_video *v, const ts_video_gen_params *p, int *T, int *h, int *w,
                             double *custom, ts_error *err) {
    const ts_logger *lg = &v->log;
    const ts_wan_config *c = ts_wan_cfg(v->wan);
    char msg[200];
    if (ts_video_grid(v, p->frames, p->height, p->width, T, h, w, msg, sizeof msg))
        return ts_api_fail(err, lg, TS_ERR_INVALID_ARG, "%s", msg);
    if (!p->text && !(p->prompt && v->t5))
        return ts_api_fail(err, lg, TS_ERR_INVALID_ARG,
                           p->prompt ? "a prompt needs the text encoder (t5_path, --t5), or give its states"
                                     : "no text: give a prompt (with the text encoder) or the text states");
    if (p->text && (p->n_text < 1 || p->n_text > 65536))
        return ts_api_fail(err, lg, TS_ERR_INVALID_ARG, "text: %d rows of %d values (1 .. 65536 rows)", p->n_text,
                           c->text_dim);
    if (!isfinite(p->cfg) || p->cfg > 100.0f)
        return ts_api_fail(err, lg, TS_ERR_INVALID_ARG, "cfg %g out of range (<= 1 off, up to 100)", (double)p->cfg);
    if (p->video && !v->vae)
        return ts_api_fail(err, lg, TS_ERR_INVALID_STATE,
                           "decoding frames needs the Wan VAE (vae_path, --vae); the latents are available without it");
    const int32_t n_text = p->text ? p->n_text : TS_VIDEO_TEXT_LEN;
    if (p->cfg > 1.0f && p->text && p->neg_text && p->n_neg_text != n_text)
        return ts_api_fail(err, lg, TS_ERR_INVALID_ARG,
                           "the negative text has %d rows and the text %d: pad both to one length (Wan pads to 512)",
                           p->n_neg_text, n_text);
    if (p->detail_below > 0 && !v->lora)
        return ts_api_fail(err, lg, TS_ERR_INVALID_ARG,
                           "detail_below %g needs the detail expert's adapter (ts_video_params.lora_path)",
                           (double)p->detail_below);
    if (p->timesteps) {
        if (p->n_timesteps < 1 || p->n_timesteps > TS_FLOW_MAX_STEPS)
            return ts_api_fail(err, lg, TS_ERR_INVALID_ARG, "%d custom timesteps (1 .. %d)", p->n_timesteps,
                               TS_FLOW_MAX_STEPS);
        for (int i = 0; i < p->n_timesteps; i++)
            custom[i] = p->timesteps[i];
    }
    return TS_OK;
}

ts_status ts_video_generate(ts_video *v, const ts_video_gen_params *params, float *latents, ts_video_stats *stats,
                            ts_error *err) {
    const ts_logger *lg = v ? &v->log : NULL;
    if (!v || !params || !latents)
        return ts_api_fail(err, lg, TS_ERR_INVALID_ARG, "ts_video_generate: video, params or latents is NULL");
    const ts_video_gen_params *p = params;
    const ts_wan_config *c = ts_wan_cfg(v->wan);
    const uint64_t t_start = ts_now_ns();
    if (stats) {
        const size_t sz = stats->struct_size;
        memset(stats, 0, sizeof *stats);
        stats->struct_size = sz;
    }
    int T, h, w;
    double custom[TS_FLOW_MAX_STEPS];
    const ts_status chk = ts_video_check_gen(v, p, &T, &h, &w, custom, err);
    if (chk != TS_OK)
        return chk;
    const bool cfg = p->cfg > 1.0f;
    const int64_t len = (int64_t)LATENT_CH * T * h * w;
    const int32_t n_text = p->text ? p->n_text : TS_VIDEO_TEXT_LEN;
    ts_flow fl;
    ts_err e = {{0}};
    if (ts_flow_init(&fl, p->sampler == TS_VIDEO_EULER ? TS_FLOW_EULER : TS_FLOW_UNIPC, p->steps, p->shift,
                     p->timesteps ? custom : NULL, p->n_timesteps, len, &e))
        return ts_api_fail(err, lg, TS_ERR_INVALID_ARG, "sampler: %s", e.msg);
    /* the run for this grid (reused by the next call with the same one) */
    const ts_wan_run_params rp = {.engine = v->engine, .n_threads = v->n_threads, .frames = T, .height = h,
                                  .width = w, .n_text = n_text, .n_texts = cfg ? 2 : 1, .lora = v->lora};
    if (!v->run || memcmp(&rp.frames, &v->rp.frames, sizeof(int) * 5) || strcmp(v->rp.engine, rp.engine)) {
        ts_wan_run_free(v->run);
        v->run = NULL;
        if (!(v->run = ts_wan_run_new(v->wan, &rp, &e))) {
            ts_flow_free(&fl);
            return ts_api_fail(err, lg, TS_ERR_UNSUPPORTED, "%s", e.msg);
        }
        v->rp = rp;
        v->rp.engine = v->engine;
    }
    ts_wan_stats ws0;
    ts_wan_run_stats(v->run, &ws0); /* the run's counters are cumulative: report this call's */
    ts_status st = TS_OK;
    double sampler_ms = 0, encoder_ms = 0, vae_ms = 0, vae_flops = 0;
    int32_t prompt_tokens = 0;
    const size_t rows = (size_t)n_text * (size_t)c->text_dim;
    float *vel = malloc((size_t)len * sizeof(float));
    float *vu = cfg ? malloc((size_t)len * sizeof(float)) : NULL;
    /* the texts: given, or the prompts encoded (the negative one, or zeros) */
    float *enc = !p->text ? malloc(sizeof(float) * rows * (cfg ? 2 : 1)) : NULL;
    float *zeros = cfg && p->text && !p->neg_text ? calloc(rows, sizeof(float)) : NULL;
    if (!vel || (cfg && !vu) || (!p->text && !enc) || (cfg && p->text && !p->neg_text && !zeros)) {
        st = ts_api_fail(err, lg, TS_ERR_NO_MEMORY, "out of memory (%lld latent values)", (long long)len);
        goto done;
    }
    const float *text = p->text, *neg_text = p->text ? (p->neg_text ? p->neg_text : zeros) : enc + rows;
    if (!text) {
        const uint64_t t0 = ts_now_ns();
        st = ts_video_encode_text(v, p->prompt, enc, &prompt_tokens, err);
        if (st == TS_OK && cfg)
            st = ts_video_encode_text(v, p->negative_prompt ? p->negative_prompt : "", enc + rows, NULL, err);
        if (st != TS_OK)
            goto done;
        text = enc;
        encoder_ms = (double)(ts_now_ns() - t0) * 1e-6;
    }
    if (ts_wan_run_set_text(v->run, 0, text, &e) || (cfg && ts_wan_run_set_text(v->run, 1, neg_text, &e))) {
        st = ts_api_fail(err, lg, TS_ERR_INTERNAL, "%s", e.msg);
        goto done;
    }
    if (p->init_latents)
        memcpy(latents, p->init_latents, (size_t)len * sizeof(float));
    else
        ts_video_noise(latents, len, p->seed);
    for (int i = 0; i < fl.n; i++) {
        const uint64_t t0 = ts_now_ns();
        const bool detail = fl.t[i] < p->detail_below;
        if (ts_wan_run_forward(v->run, latents, fl.t[i], 0, detail, vel, &e) ||
            (cfg && ts_wan_run_forward(v->run, latents, fl.t[i], 1, detail, vu, &e))) {
            st = ts_api_fail(err, lg, TS_ERR_INTERNAL, "step %d: %s", i, e.msg);
            goto done;
        }
        const uint64_t t1 = ts_now_ns();
        if (cfg)
            for (int64_t k = 0; k < len; k++)
                vel[k] = vu[k] + p->cfg * (vel[k] - vu[k]);
        ts_flow_step(&fl, vel, latents);
        if (p->trajectory)
            memcpy(p->trajectory + (int64_t)i * len, latents, (size_t)len * sizeof(float));
        const uint64_t t2 = ts_now_ns();
        sampler_ms += (double)(t2 - t1) * 1e-6;
        if (stats) {
            stats->steps = i + 1;
            stats->detail_steps += detail;
        }
        if (p->on_step && !p->on_step(i + 1, fl.n, (double)(t2 - t0) * 1e-6, p->user_data)) {
            st = ts_api_fail(err, lg, TS_ERR_CANCELLED, "cancelled after step %d of %d", i + 1, fl.n);
            goto done;
        }
    }
    if (p->video) {
        const uint64_t t0 = ts_now_ns();
        if (!v->vae_run || v->vae_grid[0] != T || v->vae_grid[1] != h || v->vae_grid[2] != w) {
            ts_wan_vae_run_free(v->vae_run);
            if (!(v->vae_run = ts_wan_vae_run_new(v->vae, v->engine, v->n_threads, T, h, w, &e))) {
                st = ts_api_fail(err, lg, TS_ERR_NO_MEMORY, "%s", e.msg);
                goto done;
            }
            v->vae_grid[0] = T, v->vae_grid[1] = h, v->vae_grid[2] = w;
        }
        /* the pipeline's de-normalisation on a copy: latents stay the DiT's */
        memcpy(vel, latents, (size_t)len * sizeof(float));
        ts_wan_vae_denormalize(v->vae, vel, (int64_t)T * h * w);
        ts_wan_vae_stats vs0, vs1;
        ts_wan_vae_run_stats(v->vae_run, &vs0);
        if (ts_wan_vae_decode(v->vae_run, vel, p->video, NULL, NULL, &e)) {
            st = ts_api_fail(err, lg, TS_ERR_INTERNAL, "%s", e.msg);
            goto done;
        }
        ts_wan_vae_run_stats(v->vae_run, &vs1);
        vae_ms = (double)(ts_now_ns() - t0) * 1e-6;
        vae_flops = vs1.flops - vs0.flops;
    }
    st = ts_api_ok(err);
done:
    if (stats && v->run) {
        ts_wan_stats ws;
        ts_wan_run_stats(v->run, &ws);
        ws.forwards -= ws0.forwards, ws.block_ns -= ws0.block_ns, ws.embed_ns -= ws0.embed_ns;
        ws.head_ns -= ws0.head_ns, ws.text_ns -= ws0.text_ns;
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        stats->forwards = (int32_t)ws.forwards;
        stats->tokens = ts_wan_run_tokens(v->run);
        stats->block_ms = (double)ws.block_ns * 1e-6;
        stats->embed_ms = (double)ws.embed_ns * 1e-6;
        stats->head_ms = (double)ws.head_ns * 1e-6;
        stats->text_ms = (double)ws.text_ns * 1e-6;
        stats->dit_ms = stats->block_ms + stats->embed_ms + stats->head_ms;
        stats->sampler_ms = sampler_ms;
        stats->encoder_ms = encoder_ms;
        stats->vae_ms = vae_ms;
        stats->vae_flops = vae_flops;
        stats->prompt_tokens = prompt_tokens;
        stats->block_flops = ws.block_flops;
        stats->peak_rss_bytes = (int64_t)ru.ru_maxrss * 1024;
        stats->total_ms = (double)(ts_now_ns() - t_start) * 1e-6;
    }
    free(vel);
    free(vu);
    free(zeros);
    free(enc);
    ts_flow_free(&fl);
    return st;
}
