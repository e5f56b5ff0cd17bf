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
    c.lookahead_trigger = 4;
    c.lookahead_slack = 0.05f;
    c.visible = 0.7f;
    c.stable = 0.9f;
    c.scr_max = 8;
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
    if (c->window < 0) return ts_err_set(err, "window %d must be >= 0", c->window);
    if (c->window > 0 && c->window < c->block)
        return ts_err_set(err, "window %d is shorter than the block (%d): the window must cover the current block",
                          c->window, c->block);
    if (c->window > 0 && (c->decoder != TS_DIFF_BLOCK || c->cache != TS_DIFF_CACHE_PREFIX))
        return ts_err_set(err, "a decoding window (multi-block speculative decoding) needs the block decoder with "
                          "the prefix cache");
    if (c->window > INT32_MAX / 8 || c->lookahead > INT32_MAX / 8)
        return ts_err_set(err, "window %d / lookahead %d is too large", c->window, c->lookahead);
    if (c->lookahead < -1) return ts_err_set(err, "lookahead %d is not -1 (auto), 0 (off) or a count", c->lookahead);
    if (c->lookahead != 0 && c->window == 0)
        return ts_err_set(err, "lookahead widens the decoding window: it needs a window (window >= block)");
    if (c->lookahead_trigger < 0) return ts_err_set(err, "lookahead trigger %d must be >= 0", c->lookahead_trigger);
    if (c->lookahead == -1) {
        if (c->n_lat < 1 || !c->lat_width || !c->lat_ms)
            return ts_err_set(err, "lookahead auto needs the engine's width -> latency table (none given)");
        if (!(c->lookahead_slack >= 0.0f) || isinf(c->lookahead_slack))
            return ts_err_set(err, "lookahead slack %g must be finite and >= 0", (double)c->lookahead_slack);
        for (int32_t i = 0; i < c->n_lat; i++)
            if (c->lat_width[i] < 1 || (i && c->lat_width[i] <= c->lat_width[i - 1]) || !(c->lat_ms[i] >= 0.0) ||
                isinf(c->lat_ms[i]))
                return ts_err_set(err, "latency table entry %d (width %d, %g ms): widths must increase from 1 and "
                                  "latencies be finite and >= 0", i, c->lat_width[i], c->lat_ms[i]);
    }
    if (c->sts) {
        if (c->decoder != TS_DIFF_BLOCK || c->cache != TS_DIFF_CACHE_PREFIX)
            return ts_err_set(err, "staged token stabilization needs the block decoder with the prefix cache");
        const bool ent = c->alg == TS_DIFF_ENTROPY; /* its confidence is <= 0 */
        if (ent ? !(isfinite(c->visible) && isfinite(c->stable))
                : !(c->visible >= 0.0f && c->visible <= 1.0f && c->stable >= 0.0f && c->stable <= 1.0f))
            return ts_err_set(err, "visible %g / stable %g must be %s", (double)c->visible, (double)c->stable,
                              ent ? "finite" : "in [0, 1]");
        if (c->stable < c->visible)
            return ts_err_set(err, "the stability threshold %g is below the visibility threshold %g",
                              (double)c->stable, (double)c->visible);
    }
    if (c->scr && !c->sts)
        return ts_err_set(err, "sparse cache refresh revises visible tokens: it needs staged token stabilization");
    if (c->scr && (c->scr_max < 1 || c->scr_max > 4096))
        return ts_err_set(err, "scr_max %d must be in [1, 4096]", c->scr_max);
    return 0;
}

int32_t ts_diff_max_window(const ts_diff_cfg *c, int32_t n_prompt, bool shift, ts_err *err) {
    if (!c) return ts_err_set(err, "config is NULL");
    if (check_cfg(c, n_prompt, err) < 0) return -1;
    const int32_t L = n_prompt + c->n_gen, sh = shift ? 1 : 0;
    if (c->decoder == TS_DIFF_VANILLA || c->cache == TS_DIFF_CACHE_NONE) return L;
    if (c->window > 0) {
        /* from the last step's frontier (< a block behind) to frontier + window,
         * plus a fixed lookahead; an auto lookahead is clipped to the denoiser */
        int64_t w = (int64_t)c->block + c->window + sh + (c->lookahead > 0 ? c->lookahead : 0);
        if (w > L + sh) w = L + sh;
        return (int32_t)(w > n_prompt ? w : n_prompt);
    }
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
    int32_t *draft_tok;    /* window: [L] each future position's latest draft */
    double *draft_conf;    /* [L] its confidence */
    int64_t *draft_at;     /* [L] denoise_forwards after the forward that computed it (0: none yet) */
    uint8_t *need;         /* skip_logits: [rows] the rows a forward computes */
    uint8_t *state;        /* sts: [L] ST_* of each position (the prompt's unused) */
    /* scr: this step's refreshes, and the rows waiting for the next merge */
    int32_t *ref_pos, *ref_tok; /* [scr_max] */
    double *ref_conf;           /* [scr_max] */
    float *ref_logits;          /* [2][n_vocab] one refresh's rows */
    int32_t n_ref;
    int32_t *pend;              /* [scr_max] */
    int32_t n_pend;
    int32_t scr_cursor;         /* round robin: where the next choice starts */
    int32_t rows;          /* rows of logits (and need): the widest window */
    int32_t ref_kv;        /* scr: the rows the refreshes attend to */
    uint64_t rng;
    bool eog_seen;         /* an end-of-generation token was handed out: emit nothing more */
} run;

enum { ST_INVISIBLE = 0, ST_VISIBLE = 1, ST_STABLE = 2 }; /* sts: a position's state */

/* A position whose identity can still change: masked, or visible under sts. */
static bool open_pos(const run *r, int32_t p) {
    return r->canvas[p] == r->d->mask_id || (r->state && r->state[p] == ST_VISIBLE);
}

/* STS: a masked position p just unmasked with confidence conf becomes
 * stable if that passes the stability threshold, else visible. */
static void sts_unmask(run *r, int32_t p, double conf) {
    const bool st = conf >= r->c->stable;
    r->state[p] = st ? ST_STABLE : ST_VISIBLE;
    r->st->sts_stable += st;
    r->st->sts_visible += !st;
}

/* STS: a visible position p predicted as tok at conf (with its own token
 * as input): revised by a prediction of another token that passes the
 * visibility threshold; stable once a prediction of its own token passes
 * the stability threshold. Returns 1 for a revision, 2 for stable (or'ed). */
static int sts_revise(run *r, int32_t p, int32_t tok, double conf) {
    int what = 0;
    if (conf >= r->c->visible && tok != r->canvas[p]) {
        r->canvas[p] = tok;
        r->st->revisions++;
        what |= 1;
    }
    if (conf >= r->c->stable && tok == r->canvas[p]) {
        r->state[p] = ST_STABLE;
        r->st->sts_stable++;
        what |= 2;
    }
    return what;
}

/* SCR: the chosen positions recomputed on the CPU path, each its token
 * at its position (with shift also the row before, which predicts it)
 * attending to [0, ref_kv); their candidates and confidences kept for
 * scr_apply. in_flight: a forward is submitted (its overlap is counted
 * until done() says it finished). */
static int refresh_all(run *r, bool in_flight, ts_err *err) {
    const ts_denoiser *d = r->d;
    const int32_t V = d->n_vocab;
    for (int32_t i = 0; i < r->n_ref; i++) {
        const int32_t p = r->ref_pos[i];
        const double t0 = ts_now_ms();
        if (d->refresh(d->scr_ctx, r->canvas + p - r->sh, 1 + r->sh, p - r->sh, r->ref_kv, r->ref_logits, err) < 0)
            return ts_err_prefix(err, "refreshing position %d", p);
        const double dt = ts_now_ms() - t0;
        r->st->scr_ms += dt;
        if (in_flight) {
            r->st->scr_overlap_ms += dt;
            /* once the forward is done the rest does not overlap (without
             * done() every refresh is counted as overlapping) */
            if (d->done && d->done(d->ctx)) in_flight = false;
        }
        const float *row = r->ref_logits; /* the window's first row predicts p (with shift, row p - 1) */
        r->ref_conf[i] = ts_diff_confidence(row, V, d->mask_id, r->c->alg, r->c->temp, &r->rng, &r->ref_tok[i]);
        r->st->scr_refreshed++;
    }
    return 0;
}

/* A forward of n positions from pos0 attending to [0, n_kv), with logits
 * for the positions [lo, hi) still to decide (lo == hi: K/V only; with
 * skip_logits the rows of the others are not computed). */
static int forward(run *r, int32_t pos0, int32_t n, int32_t n_kv, int32_t lo, int32_t hi, ts_err *err) {
    if (n > r->d->max_window)
        return ts_err_set(err, "a window of %d tokens exceeds the denoiser's %d (raise n_batch)", n, r->d->max_window);
    if (lo < hi && r->c->skip_logits && r->d->set_rows) {
        int32_t skipped = 0;
        for (int32_t i = 0; i < n; i++) {
            const int32_t p = pos0 + i + r->sh;
            r->need[i] = p >= lo && p < hi && open_pos(r, p);
            skipped += !r->need[i];
        }
        if (r->d->set_rows(r->d->ctx, r->need, n, err) < 0) return ts_err_prefix(err, "selecting logit rows");
        r->st->logits_skipped += skipped;
    }
    const ts_denoiser *d = r->d;
    float *lg = lo < hi ? r->logits : NULL;
    if (r->n_ref > 0 && d->submit && d->wait) {
        /* the refreshes run on the CPU path while the device computes */
        if (d->submit(d->ctx, r->canvas + pos0, n, pos0, n_kv, lg, err) < 0)
            return ts_err_prefix(err, "forward at positions [%d, %d)", pos0, pos0 + n);
        const int rc = refresh_all(r, true, err);
        const int rw = d->wait(d->ctx, rc < 0 ? NULL : err); /* always: the forward must not stay in flight */
        if (rc < 0) return ts_err_prefix(err, "sparse cache refresh");
        if (rw < 0) return ts_err_prefix(err, "forward at positions [%d, %d)", pos0, pos0 + n);
    } else {
        if (d->forward(d->ctx, r->canvas + pos0, n, pos0, n_kv, lg, err) < 0)
            return ts_err_prefix(err, "forward at positions [%d, %d)", pos0, pos0 + n);
        if (r->n_ref > 0 && refresh_all(r, false, err) < 0) return ts_err_prefix(err, "sparse cache refresh");
    }
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

/* STS: one step of the block [s, e) from the logits of a window starting
 * at pos0: revisions and stabilizations of its visible positions, then the
 * masked ones made visible (or stable) by ts_diff_select at the visibility
 * threshold (so at least one). Returns the masked positions left. */
static int32_t sts_step(run *r, int32_t s, int32_t e, int32_t pos0) {
    const ts_diff_cfg *c = r->c;
    const int32_t V = r->d->n_vocab, mask = r->d->mask_id;
    const double tv = c->visible;
    int32_t n = 0;
    for (int32_t p = s; p < e; p++) {
        if (r->state[p] == ST_STABLE) continue;
        const float *row = r->logits + (size_t)(p - pos0 - r->sh) * (size_t)V;
        int32_t tok;
        const double conf = ts_diff_confidence(row, V, mask, c->alg, c->temp, &r->rng, &tok);
        if (r->canvas[p] == mask) {
            r->cand_pos[n] = p;
            r->cand_tok[n] = tok;
            r->cand_conf[n] = conf;
            n++;
            continue;
        }
        (void)sts_revise(r, p, tok, conf); /* visible */
    }
    const int32_t m = ts_diff_select(r->cand_conf, n, 0, tv, r->order, r->pick);
    for (int32_t i = 0; i < m; i++) sts_unmask(r, r->cand_pos[r->pick[i]], r->cand_conf[r->pick[i]]);
    if (m == 1 && !(r->cand_conf[r->pick[0]] >= tv)) r->st->sts_forced++;
    commit(r, m);
    return n - m;
}

/* SCR at a step boundary of the block [s, e) (nothing in flight): the
 * rows the last step refreshed are merged; up to scr_max visible positions
 * of the finished blocks are chosen (round robin from the cursor) and the
 * CPU path's cache becomes a copy of rows [0, n_kv) (n_kv: e once the
 * block's rows have been computed, else s). */
static int scr_boundary(run *r, int32_t s, int32_t n_kv, ts_err *err) {
    const ts_denoiser *d = r->d;
    for (int32_t i = 0; i < r->n_pend; i++) {
        if (d->merge(d->scr_ctx, r->pend[i], r->pend[i] + 1, err) < 0)
            return ts_err_prefix(err, "merging the refreshed row %d", r->pend[i]);
        r->st->scr_merged++;
    }
    r->n_pend = 0;
    r->n_ref = 0;
    const int32_t n = s - r->np; /* the finished blocks' positions */
    if (n <= 0) return 0;
    int32_t q = r->scr_cursor >= r->np && r->scr_cursor < s ? r->scr_cursor : r->np;
    for (int32_t k = 0; k < n && r->n_ref < r->c->scr_max; k++) {
        if (r->state[q] == ST_VISIBLE) {
            r->ref_pos[r->n_ref++] = q;
            r->scr_cursor = q + 1;
        }
        q = q + 1 < s ? q + 1 : r->np;
    }
    if (r->n_ref == 0) return 0;
    r->ref_kv = n_kv;
    if (d->snapshot(d->scr_ctx, n_kv, err) < 0) return ts_err_prefix(err, "copying the cache to the CPU path");
    return 0;
}

/* SCR after the step's forward: each refreshed position revised or made
 * stable by the sts rules; its row merged at the next boundary. */
static void scr_apply(run *r) {
    for (int32_t i = 0; i < r->n_ref; i++) {
        const int what = sts_revise(r, r->ref_pos[i], r->ref_tok[i], r->ref_conf[i]);
        r->st->scr_revisions += what & 1;
        r->st->scr_stabilized += what >> 1;
        r->pend[r->n_pend++] = r->ref_pos[i];
    }
    r->n_ref = 0;
}

static bool cancelled(run *r) { return r->c->cancelled && r->c->cancelled(r->c->ud); }

/* The first end-of-generation token in [s, e), or -1. */
static int32_t first_eog(const run *r, int32_t s, int32_t e) {
    for (int32_t p = s; p < e && r->c->is_eog; p++)
        if (r->c->is_eog(r->c->ud, r->canvas[p])) return p;
    return -1;
}

/* A block [s, e) is final: hand its text-bearing tokens out (up to the first
 * end-of-generation token) and say whether decoding goes on. */
static bool block_done(run *r, int32_t s, int32_t e) {
    r->st->n_blocks_done++;
    for (int32_t p = s; r->state && p < e; p++) r->st->unstable_at_block_end += r->state[p] == ST_VISIBLE;
    if (r->eog_seen) return !r->c->early_stop;
    int32_t n = e - s;
    const int32_t eog = first_eog(r, s, e);
    if (eog >= 0) {
        n = eog - s;
        r->eog_seen = true;
        if (r->c->early_stop) {
            r->st->early_stop_at = eog - r->np;
            r->st->end = TS_DIFF_END_EOG;
        }
    }
    if (r->c->on_block && !r->c->scr && n > 0 && !r->c->on_block(r->c->ud, r->canvas + s, s - r->np, n)) {
        r->st->end = TS_DIFF_END_CANCELLED;
        return false;
    }
    return !(r->eog_seen && r->c->early_stop);
}

/* SCR: the finished blocks handed out when decoding ends, from the final
 * canvas, up to the first end-of-generation token. */
static void emit_deferred(run *r) {
    for (int32_t b = 0; b < r->st->n_blocks_done && r->c->on_block; b++) {
        const int32_t s = r->np + b * r->c->block, e = block_end(s, r->c->block, r->L);
        const int32_t eog = first_eog(r, s, e), n = (eog >= 0 ? eog : e) - s;
        if (n > 0 && !r->c->on_block(r->c->ud, r->canvas + s, s - r->np, n)) {
            r->st->end = TS_DIFF_END_CANCELLED;
            return;
        }
        if (eog >= 0) return;
    }
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
            if (forward(r, 0, r->L, r->L, s, e, err) < 0) return -1;
            int32_t n = candidates(r, s, e, 0);
            int32_t k = ts_diff_schedule(e - s, n, steps, i, c->eps);
            commit(r, ts_diff_select(r->cand_conf, n, k, NAN, r->order, r->pick));
        }
        if (!block_done(r, s, e)) return 0;
    }
    return 0;
}

/* The finished block [s, e)'s K/V from its final tokens join the prefix
 * (attending to the prefix and the block only: no draft enters it). */
static int refresh_block(run *r, int32_t pos0, int32_t e, ts_err *err) {
    if (forward(r, pos0, e - pos0, e, 0, 0, err) < 0) return -1;
    if (r->d->set_prefix && r->d->set_prefix(r->d->ctx, e, err) < 0) return -1;
    return 0;
}

/* Window: the end of the next forward starting at `start` for the block
 * [s, e): frontier + window, widened by the lookahead once the block has
 * <= lookahead_trigger masked positions; never past the canvas or the
 * denoiser's widest window. */
static int32_t window_end(run *r, int32_t s, int32_t e, int32_t start) {
    const ts_diff_cfg *c = r->c;
    const int32_t mask = r->d->mask_id;
    int32_t f = s, n_masked = 0;
    while (f < e && r->canvas[f] != mask) f++;
    for (int32_t p = f; p < e; p++) n_masked += r->canvas[p] == mask;
    int64_t end = (int64_t)f + c->window;
    const int64_t cap = (int64_t)start + r->rows < r->L ? (int64_t)start + r->rows : r->L;
    if (end > cap) end = cap;
    if (c->lookahead != 0 && n_masked <= c->lookahead_trigger) {
        int64_t wide = end;
        if (c->lookahead > 0) {
            wide = end + c->lookahead;
        } else {
            /* the latency bucket the window falls in (the narrowest width of
             * the table that holds it), then wider ones while they cost at
             * most 1 + slack times that bucket */
            const int64_t n = end - start;
            int32_t i = 0;
            while (i < c->n_lat && c->lat_width[i] < n) i++;
            if (i < c->n_lat) {
                const double limit = c->lat_ms[i] * (1.0 + (double)c->lookahead_slack);
                while (i + 1 < c->n_lat && c->lat_ms[i + 1] <= limit) i++;
                wide = (int64_t)start + c->lat_width[i];
            }
        }
        if (wide > cap) wide = cap;
        if (wide > end) {
            r->st->lookahead_tokens += wide - end;
            end = wide;
        }
    }
    return (int32_t)(end > e ? end : e);
}

/* Window: the future-block positions [e, end) of the forward that started
 * at pos0 become drafts (they are all masked: drafts never reach the canvas). */
static void drafts(run *r, int32_t e, int32_t end, int32_t pos0) {
    const int32_t V = r->d->n_vocab, mask = r->d->mask_id;
    for (int32_t p = e; p < end; p++) {
        const float *row = r->logits + (size_t)(p - pos0 - r->sh) * (size_t)V;
        r->draft_conf[p] = ts_diff_confidence(row, V, mask, r->c->alg, r->c->temp, &r->rng, &r->draft_tok[p]);
        r->draft_at[p] = r->st->denoise_forwards;
        r->st->draft_evals++;
    }
}

/* Window: the block [s, e) became current. Its drafts from the last
 * denoising forward that pass the threshold are committed (no forward of
 * their own; no at-least-one rule). True when that completes the block. */
static bool accept_drafts(run *r, int32_t s, int32_t e) {
    int32_t n = 0, left = 0;
    const double thr = r->c->sts ? r->c->visible : r->c->threshold;
    for (int32_t p = s; p < e; p++) {
        if (r->canvas[p] != r->d->mask_id) continue;
        /* computed by the last denoising forward (there was one: block 0's) */
        if (r->draft_at[p] == r->st->denoise_forwards && r->draft_conf[p] >= thr) {
            r->canvas[p] = r->draft_tok[p];
            n++;
            if (r->state) sts_unmask(r, p, r->draft_conf[p]);
        } else {
            left++;
        }
    }
    r->st->draft_accepted += n;
    r->st->tokens_committed += n;
    return left == 0;
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
        if (forward(r, 0, r->np, r->np, 0, 0, err) < 0) return -1;
        if (d->set_prefix && d->set_prefix(d->ctx, r->np, err) < 0) return -1;
        r->st->prefill_ms = ts_now_ms() - t0;
    }
    for (int32_t b = 0; b < nb; b++) {
        const int32_t s = r->np + b * c->block, e = block_end(s, c->block, r->L);
        /* with shift the window starts one earlier: position s reads row s-1 */
        const int32_t pos0 = cached ? s - r->sh : 0;
        if (c->window > 0 && b > 0 && accept_drafts(r, s, e)) {
            if (!block_done(r, s, e)) return 0;
            if (b + 1 < nb && refresh_block(r, pos0, e, err) < 0) return -1;
            continue;
        }
        int32_t from = s; /* the first position whose input changed since its last evaluation */
        for (int32_t step = 0;; step++) {
            if (cancelled(r)) {
                r->st->end = TS_DIFF_END_CANCELLED;
                return 0;
            }
            int32_t start = pos0, end = e, n_kv = e;
            if (c->cache == TS_DIFF_CACHE_DUAL) {
                n_kv = r->L;
                if (step == 0) end = r->L; /* the masked suffix's K/V, reused by the later steps */
            }
            if (c->window > 0) {
                start = from - r->sh;
                end = n_kv = window_end(r, s, e, start);
            }
            /* SCR: merge, choose, copy, before the forward (which the refreshes overlap) */
            if (c->scr && scr_boundary(r, s, step > 0 ? e : s, err) < 0) return -1;
            if (forward(r, start, end - start, n_kv, s, c->window > 0 ? end : e, err) < 0) return -1;
            if (end - start > r->st->window_max) r->st->window_max = end - start;
            if (c->sts) {
                /* the next window starts at the first position not stable
                 * before this step: everything after it may change */
                from = s;
                while (from < e && r->state[from] == ST_STABLE) from++;
                const int32_t left = sts_step(r, s, e, start);
                if (c->window > 0) drafts(r, e, end, start);
                if (c->scr) scr_apply(r);
                if (left == 0) break;
                continue;
            }
            int32_t n = candidates(r, s, e, start);
            if (n == 0) break; /* cannot happen: the loop ends when the block is full */
            int32_t m = ts_diff_select(r->cand_conf, n, 0, thr, r->order, r->pick);
            from = r->cand_pos[0]; /* the frontier before this step's commits */
            commit(r, m);
            if (c->window > 0) drafts(r, e, end, start);
            if (m == n) break;
        }
        if (!block_done(r, s, e)) return 0;
        if (cached && b + 1 < nb && refresh_block(r, pos0, e, err) < 0) return -1;
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
    if (c->scr && (!d->snapshot || !d->refresh || !d->merge))
        return ts_err_set(err, "sparse cache refresh needs the denoiser's CPU refresh path (none offered)");
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
    /* an auto lookahead widens windows up to what the denoiser takes */
    r.rows = c->window > 0 && c->lookahead == -1 ? d->max_window : maxw;
    const uint64_t logit_elems = (uint64_t)r.rows * (uint64_t)d->n_vocab;
    r.canvas = malloc((size_t)r.L * sizeof *r.canvas);
    r.logits = logit_elems <= SIZE_MAX / sizeof(float) ? malloc((size_t)logit_elems * sizeof(float)) : NULL;
    r.cand_pos = malloc((size_t)cand_cap * sizeof(int32_t));
    r.cand_tok = malloc((size_t)cand_cap * sizeof(int32_t));
    r.cand_conf = malloc((size_t)cand_cap * sizeof(double));
    r.order = malloc((size_t)cand_cap * sizeof(int32_t));
    r.pick = malloc((size_t)cand_cap * sizeof(int32_t));
    if (c->window > 0) {
        r.draft_tok = malloc((size_t)r.L * sizeof(int32_t));
        r.draft_conf = malloc((size_t)r.L * sizeof(double));
        r.draft_at = calloc((size_t)r.L, sizeof(int64_t));
    }
    if (c->skip_logits) r.need = malloc((size_t)r.rows);
    if (c->sts) r.state = calloc((size_t)r.L, 1);
    if (c->scr) {
        r.ref_pos = malloc((size_t)c->scr_max * sizeof(int32_t));
        r.ref_tok = malloc((size_t)c->scr_max * sizeof(int32_t));
        r.ref_conf = malloc((size_t)c->scr_max * sizeof(double));
        r.pend = malloc((size_t)c->scr_max * sizeof(int32_t));
        r.ref_logits = malloc((size_t)2 * (size_t)d->n_vocab * sizeof(float));
    }
    int rc = -1;
    if (!r.canvas || !r.logits || !r.cand_pos || !r.cand_tok || !r.cand_conf || !r.order || !r.pick ||
        (c->window > 0 && (!r.draft_tok || !r.draft_conf || !r.draft_at)) || (c->skip_logits && !r.need) || (c->sts && !r.state) ||
        (c->scr && (!r.ref_pos || !r.ref_tok || !r.ref_conf || !r.pend || !r.ref_logits))) {
        ts_err_set(err, "out of memory for diffusion buffers (%d windows rows of %d logits)", maxw, d->n_vocab);
        goto done;
    }
    memcpy(r.canvas, prompt, (size_t)n_prompt * sizeof *r.canvas);
    for (int32_t p = n_prompt; p < r.L; p++) r.canvas[p] = d->mask_id;

    double t0 = ts_now_ms();
    rc = c->decoder == TS_DIFF_VANILLA ? run_vanilla(&r, err) : run_block(&r, err);
    if (rc == 0 && c->scr) emit_deferred(&r);
    for (int32_t p = n_prompt; r.state && p < r.L; p++) stats->visible_at_end += r.state[p] == ST_VISIBLE;
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
    free(r.draft_tok);
    free(r.draft_conf);
    free(r.draft_at);
    free(r.need);
    free(r.state);
    free(r.ref_pos);
    free(r.ref_tok);
    free(r.ref_conf);
    free(r.pend);
    free(r.ref_logits);
    return rc;
}
