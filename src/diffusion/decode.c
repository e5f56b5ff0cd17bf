/* decode.c - the diffusion decoders' loops (vanilla LLaDA, block-wise with
 * prefix / dual / no cache), over any ts_denoiser, with their counters.
 * See diffusion.h for the algorithms; everything a call needs is allocated
 * once at its start. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "diffusion/diffusion.h"
#include "core/clock.h"

ts_diff_cfg ts_diff_default_cfg(void) {
    ts_diff_cfg c;
    memset(&c, 0, sizeof c);
    c.decoder = TS_DIFF_BLOCK;
    c.cache = TS_DIFF_CACHE_PREFIX;
    c.alg = TS_DIFF_LOW_CONFIDENCE;
    c.n_gen = 128;
    c.block = 32;
    c.steps = 128;
    c.threshold = 0.9f;
    c.seed = 0xC0FFEE;
    c.early_stop = true;
    return c;
}

static int32_t n_blocks_of(const ts_diff_cfg *c) { return (int32_t)(((int64_t)c->n_gen + c->block - 1) / c->block); }

/* End of the block starting at s (the last block may be shorter). */
static int32_t block_end(int32_t s, int32_t block, int32_t L) { return (int64_t)s + block < L ? s + block : L; }

static int check_cfg(const ts_diff_cfg *c, int32_t n_prompt, ts_err *err) {
    if (n_prompt < 1) return ts_err_set(err, "the prompt must hold at least one token (got %d)", n_prompt);
    if (c->n_gen < 1) return ts_err_set(err, "n_gen %d must be >= 1", c->n_gen);
    if ((int64_t)n_prompt + c->n_gen > INT32_MAX / 2)
        return ts_err_set(err, "prompt %d + n_gen %d tokens is too long", n_prompt, c->n_gen);
    if (c->block < 1) return ts_err_set(err, "block %d must be >= 1", c->block);
    if (c->decoder != TS_DIFF_BLOCK && c->decoder != TS_DIFF_VANILLA)
        return ts_err_set(err, "decoder %d is not block (0) or vanilla (1)", (int)c->decoder);
    if (c->cache != TS_DIFF_CACHE_PREFIX && c->cache != TS_DIFF_CACHE_DUAL && c->cache != TS_DIFF_CACHE_NONE)
        return ts_err_set(err, "cache mode %d is not prefix (0), dual (1) or none (2)", (int)c->cache);
    if ((int)c->alg < 0 || (int)c->alg > (int)TS_DIFF_ENTROPY)
        return ts_err_set(err, "confidence algorithm %d is not one of 0..3", (int)c->alg);
    if (!(c->temp >= 0.0f) || isinf(c->temp)) return ts_err_set(err, "temp %g must be finite and >= 0", (double)c->temp);
    if (c->decoder == TS_DIFF_VANILLA) {
        int32_t nb = n_blocks_of(c);
        if (c->steps < nb)
            return ts_err_set(err, "steps %d is fewer than the %d blocks (each block needs at least one step)",
                              c->steps, nb);
        if (!(c->eps >= 0.0f && c->eps < 1.0f)) return ts_err_set(err, "eps %g must be in [0, 1)", (double)c->eps);
    } else if (c->alg == TS_DIFF_ENTROPY ? !isfinite(c->threshold) : !(c->threshold >= 0.0f && c->threshold <= 1.0f)) {
        /* the entropy confidence is <= 0; the others are probabilities */
        return ts_err_set(err, "threshold %g must be %s", (double)c->threshold,
                          c->alg == TS_DIFF_ENTROPY ? "finite" : "in [0, 1]");
    }
    return 0;
}

int32_t ts_diff_max_window(const ts_diff_cfg *c, int32_t n_prompt, bool shift, ts_err *err) {
    if (!c) return ts_err_set(err, "config is NULL");
    if (check_cfg(c, n_prompt, err) < 0) return -1;
    const int32_t L = n_prompt + c->n_gen, sh = shift ? 1 : 0;
    if (c->decoder == TS_DIFF_VANILLA || c->cache == TS_DIFF_CACHE_NONE) return L;
    int32_t w = c->cache == TS_DIFF_CACHE_DUAL ? c->n_gen + sh : (c->block < c->n_gen ? c->block : c->n_gen) + sh;
    return w > n_prompt ? w : n_prompt;
}

/* Per-call working memory and bookkeeping. */
typedef struct run {
    const ts_denoiser *d;
    const ts_diff_cfg *c;
    ts_diff_stats *st;
    int32_t np, L, sh;
    int32_t *canvas;       /* [L] prompt, then the generated positions (mask_id = still masked) */
    float *logits;         /* [max_window][n_vocab] */
    int32_t *cand_pos;     /* [block] masked positions of the current block */
    int32_t *cand_tok;     /* [block] their candidate tokens */
    double *cand_conf;     /* [block] and confidences */
    int32_t *order, *pick; /* [block] selection scratch */
    uint64_t rng;
    bool eog_seen;         /* an end-of-generation token was handed out: emit nothing more */
} run;

static int forward(run *r, int32_t pos0, int32_t n, int32_t n_kv, bool want_logits, ts_err *err) {
    if (n > r->d->max_window)
        return ts_err_set(err, "a window of %d tokens exceeds the denoiser's %d (raise n_batch)", n, r->d->max_window);
    if (r->d->forward(r->d->ctx, r->canvas + pos0, n, pos0, n_kv, want_logits ? r->logits : NULL, err) < 0)
        return ts_err_prefix(err, "forward at positions [%d, %d)", pos0, pos0 + n);
    r->st->forwards++;
    r->st->tokens_evaluated += n;
    return 0;
}

/* Candidates of the block [s, e) from the logits of a window starting at
 * pos0: position p reads row p - pos0 - shift. Returns how many. */
static int32_t candidates(run *r, int32_t s, int32_t e, int32_t pos0) {
    const int32_t V = r->d->n_vocab, mask = r->d->mask_id;
    int32_t n = 0;
    for (int32_t p = s; p < e; p++) {
        if (r->canvas[p] != mask) continue;
        const float *row = r->logits + (size_t)(p - pos0 - r->sh) * (size_t)V;
        r->cand_pos[n] = p;
        r->cand_conf[n] = ts_diff_confidence(row, V, mask, r->c->alg, r->c->temp, &r->rng, &r->cand_tok[n]);
        n++;
    }
    return n;
}

static void commit(run *r, int32_t n_pick) {
    for (int32_t i = 0; i < n_pick; i++) {
        int32_t j = r->pick[i];
        r->canvas[r->cand_pos[j]] = r->cand_tok[j];
    }
    r->st->tokens_committed += n_pick;
    r->st->denoise_forwards++;
    r->st->commit_hist[n_pick < TS_DIFF_HIST_LEN - 1 ? n_pick : TS_DIFF_HIST_LEN - 1]++;
}

static bool cancelled(run *r) { return r->c->cancelled && r->c->cancelled(r->c->ud); }

/* A block [s, e) is final: hand its text-bearing tokens out (up to the first
 * end-of-generation token) and say whether decoding goes on. */
static bool block_done(run *r, int32_t s, int32_t e) {
    r->st->n_blocks_done++;
    if (r->eog_seen) return !r->c->early_stop;
    int32_t n = e - s, eog = -1;
    for (int32_t p = s; p < e && r->c->is_eog; p++)
        if (r->c->is_eog(r->c->ud, r->canvas[p])) {
            eog = p;
            break;
        }
    if (eog >= 0) {
        n = eog - s;
        r->eog_seen = true;
        if (r->c->early_stop) {
            r->st->early_stop_at = eog - r->np;
            r->st->end = TS_DIFF_END_EOG;
        }
    }
    if (r->c->on_block && n > 0 && !r->c->on_block(r->c->ud, r->canvas + s, s - r->np, n)) {
        r->st->end = TS_DIFF_END_CANCELLED;
        return false;
    }
    return !(r->eog_seen && r->c->early_stop);
}

/* LLaDA generate(): every step a forward over the whole canvas, committing
 * the scheduled number of the current block's most confident positions. */
static int run_vanilla(run *r, ts_err *err) {
    const ts_diff_cfg *c = r->c;
    const int32_t nb = n_blocks_of(c), base = c->steps / nb, rem = c->steps % nb;
    for (int32_t b = 0; b < nb; b++) {
        const int32_t s = r->np + b * c->block, e = block_end(s, c->block, r->L);
        const int32_t steps = base + (b < rem ? 1 : 0);
        for (int32_t i = 0; i < steps; i++) {
            if (cancelled(r)) {
                r->st->end = TS_DIFF_END_CANCELLED;
                return 0;
            }
            if (forward(r, 0, r->L, r->L, true, err) < 0) return -1;
            int32_t n = candidates(r, s, e, 0);
            int32_t k = ts_diff_schedule(e - s, n, steps, i, c->eps);
            commit(r, ts_diff_select(r->cand_conf, n, k, NAN, r->order, r->pick));
        }
        if (!block_done(r, s, e)) return 0;
    }
    return 0;
}

/* Block-wise threshold decoding over a prefix (and optionally dual) cache,
 * or with no cache at all. */
static int run_block(run *r, ts_err *err) {
    const ts_diff_cfg *c = r->c;
    const ts_denoiser *d = r->d;
    const bool cached = c->cache != TS_DIFF_CACHE_NONE;
    const int32_t nb = n_blocks_of(c);
    const double thr = c->threshold;
    if (cached) { /* the prompt's K/V, once */
        double t0 = ts_now_ms();
        if (forward(r, 0, r->np, r->np, false, err) < 0) return -1;
        if (d->set_prefix && d->set_prefix(d->ctx, r->np, err) < 0) return -1;
        r->st->prefill_ms = ts_now_ms() - t0;
    }
    for (int32_t b = 0; b < nb; b++) {
        const int32_t s = r->np + b * c->block, e = block_end(s, c->block, r->L);
        /* with shift the window starts one earlier: position s reads row s-1 */
        const int32_t pos0 = cached ? s - r->sh : 0;
        for (int32_t step = 0;; step++) {
            if (cancelled(r)) {
                r->st->end = TS_DIFF_END_CANCELLED;
                return 0;
            }
            int32_t end = e, n_kv = e;
            if (c->cache == TS_DIFF_CACHE_DUAL) {
                n_kv = r->L;
                if (step == 0) end = r->L; /* the masked suffix's K/V, reused by the later steps */
            }
            if (forward(r, pos0, end - pos0, n_kv, true, err) < 0) return -1;
            int32_t n = candidates(r, s, e, pos0);
            if (n == 0) break; /* cannot happen: the loop ends when the block is full */
            int32_t m = ts_diff_select(r->cand_conf, n, 0, thr, r->order, r->pick);
            commit(r, m);
            if (m == n) break;
        }
        if (!block_done(r, s, e)) return 0;
        if (cached && b + 1 < nb) {
            /* the finished block's K/V from its final tokens join the prefix */
            if (forward(r, pos0, e - pos0, e, false, err) < 0) return -1;
            if (d->set_prefix && d->set_prefix(d->ctx, e, err) < 0) return -1;
        }
    }
    return 0;
}

int ts_diffuse(const ts_denoiser *d, const int32_t *prompt, int32_t n_prompt, const ts_diff_cfg *c, int32_t *gen,
               ts_diff_stats *stats, ts_err *err) {
    ts_diff_stats local;
    if (!stats) stats = &local;
    memset(stats, 0, sizeof *stats);
    stats->early_stop_at = -1;
    if (!d || !c || !gen || (!prompt && n_prompt > 0))
        return ts_err_set(err, "ts_diffuse: %s is NULL", !d ? "denoiser" : !c ? "config" : !gen ? "gen" : "prompt");
    if (check_cfg(c, n_prompt, err) < 0) return -1;
    if (d->n_vocab < 2 || d->mask_id < 0 || d->mask_id >= d->n_vocab)
        return ts_err_set(err, "mask token %d is outside the vocabulary [0, %d)", d->mask_id, d->n_vocab);
    if (!d->forward) return ts_err_set(err, "the denoiser has no forward function");
    const int32_t sh = d->shift ? 1 : 0;
    const int32_t maxw = ts_diff_max_window(c, n_prompt, d->shift, err);
    if (maxw > d->max_window)
        return ts_err_set(err, "%s decoding of %d + %d tokens needs windows of %d tokens but the denoiser takes %d "
                          "(raise n_batch)", c->decoder == TS_DIFF_VANILLA ? "vanilla" : "block", n_prompt, c->n_gen,
                          maxw, d->max_window);

    run r;
    memset(&r, 0, sizeof r);
    r.d = d;
    r.c = c;
    r.st = stats;
    r.np = n_prompt;
    r.L = n_prompt + c->n_gen;
    r.sh = sh;
    r.rng = c->seed;
    const int32_t cand_cap = c->block < c->n_gen ? c->block : c->n_gen; /* masked positions of one block */
    const uint64_t logit_elems = (uint64_t)maxw * (uint64_t)d->n_vocab;
    r.canvas = malloc((size_t)r.L * sizeof *r.canvas);
    r.logits = logit_elems <= SIZE_MAX / sizeof(float) ? malloc((size_t)logit_elems * sizeof(float)) : NULL;
    r.cand_pos = malloc((size_t)cand_cap * sizeof(int32_t));
    r.cand_tok = malloc((size_t)cand_cap * sizeof(int32_t));
    r.cand_conf = malloc((size_t)cand_cap * sizeof(double));
    r.order = malloc((size_t)cand_cap * sizeof(int32_t));
    r.pick = malloc((size_t)cand_cap * sizeof(int32_t));
    int rc = -1;
    if (!r.canvas || !r.logits || !r.cand_pos || !r.cand_tok || !r.cand_conf || !r.order || !r.pick) {
        ts_err_set(err, "out of memory for diffusion buffers (%d windows rows of %d logits)", maxw, d->n_vocab);
        goto done;
    }
    memcpy(r.canvas, prompt, (size_t)n_prompt * sizeof *r.canvas);
    for (int32_t p = n_prompt; p < r.L; p++) r.canvas[p] = d->mask_id;

    double t0 = ts_now_ms();
    rc = c->decoder == TS_DIFF_VANILLA ? run_vanilla(&r, err) : run_block(&r, err);
    stats->denoise_ms = ts_now_ms() - t0 - stats->prefill_ms;
    memcpy(gen, r.canvas + n_prompt, (size_t)c->n_gen * sizeof *gen);
done:
    free(r.canvas);
    free(r.logits);
    free(r.cand_pos);
    free(r.cand_tok);
    free(r.cand_conf);
    free(r.order);
    free(r.pick);
    return rc;
}
