/* diffusion.h - decoders for masked-diffusion LLMs (LLaDA, Dream): the
 * denoiser interface they run on, the commit rules, the step schedules and
 * the counters. Internal; the public face is ts_context_diffuse in
 * include/tessera.h (src/api/diffusion.c).
 *
 * A diffusion LM turns a canvas of [MASK] tokens into text by repeated
 * bidirectional forwards: each forward predicts a token and a confidence for
 * every masked position, and the decoder commits (unmasks) some of them.
 *
 *   vanilla  LLaDA's generate(): canvas = prompt + n_gen masks, cut into
 *            semi-autoregressive blocks; every step is one forward over the
 *            whole canvas and commits a scheduled number of the block's most
 *            confident masked positions (LLaDA's even split, or Dream's
 *            timestep schedule when eps > 0).
 *   block    the prompt's K/V are computed once; each block is denoised by
 *            forwards over the block only (attending to the cached prefix);
 *            every step commits each masked position whose confidence is
 *            >= threshold, and at least the most confident one; a finished
 *            block's K/V are recomputed with its final tokens and become
 *            part of the prefix. Cache modes:
 *              PREFIX  as above;
 *              DUAL    the block's first step also evaluates the masked
 *                      suffix, whose K/V the later steps of the block reuse;
 *              NONE    every step re-evaluates prompt + finished blocks +
 *                      current block (the exact reference of PREFIX).
 *
 *   window  (multi-block speculative decoding, on the prefix cache; seed
 *            000 section 3.2): each step's forward runs from the first
 *            position whose input changed since it was last evaluated to
 *            frontier + window (the frontier: the current block's first
 *            masked position), so the window slides with the commits into
 *            the next blocks. Their masked positions are drafts: computed,
 *            never committed, never on the canvas, never in the prefix
 *            cache. When a block becomes current, the drafts of the last
 *            denoising forward whose confidence passes the threshold are
 *            committed without a forward of their own (accepted); the rest
 *            are decoded as usual. Lookahead widens the window once the
 *            current block has <= lookahead_trigger masked positions: by a
 *            fixed count, or (auto) to the widest width of the engine's
 *            latency table that costs at most (1 + lookahead_slack) x the
 *            latency bucket the window already falls in.
 *   sts     (staged token stabilization, on the prefix cache; seed 000
 *            section 3.3): each generated position is invisible (masked),
 *            visible or stable. A step's forward predicts every position of
 *            the current block that is not stable: a masked one whose
 *            confidence passes `visible` becomes visible (its token goes on
 *            the canvas: context for later steps), or stable if it passes
 *            `stable`; if none passes `visible`, the most confident becomes
 *            visible (at least one per step). A visible position is revised
 *            when a prediction of another token passes `visible`, and
 *            becomes stable when a prediction of its own token passes
 *            `stable`. The block ends when nothing in it is masked; its
 *            visible positions then stay as they are (counted:
 *            unstable_at_block_end) and are the refresh candidates of the
 *            sparse cache refresh. `threshold` is not used.
 *   scr     (sparse cache refresh with delayed merge, seed 000 section 3.3):
 *            at each step boundary the rows the last step refreshed are
 *            merged into the cache, the CPU path's cache becomes a copy of
 *            the cache, and up to scr_max visible positions of finished
 *            blocks (round robin) are chosen. The step's forward is
 *            submitted; while it runs, each chosen position is recomputed on
 *            the CPU path (its token at its position, attending to the
 *            prefix and the current block as they stood at the boundary),
 *            giving its confidence and prediction and new K/V rows in the
 *            CPU path's cache only. After the forward: a refreshed position
 *            is revised or made stable by the sts rules, and its row waits
 *            for the next boundary's merge. With scr the blocks' text is
 *            handed out when decoding ends (a refresh may still change a
 *            finished block).
 *
 * shift: with shift_logits (Dream) position p reads the logits of row p-1,
 * so a window whose first position p0 must be predicted starts at p0 - 1.
 *
 * Nothing is allocated inside the step loops: ts_diffuse allocates its
 * buffers once per call.
 */
#ifndef TS_DIFFUSION_H
#define TS_DIFFUSION_H

#include <stdbool.h>
#include <stdint.h>

#include "core/err.h"

/* ---- the denoiser: whatever produces logits for a window ---------------- */

/* forward: evaluates n tokens at positions pos0 .. pos0+n-1 in one batch,
 * storing their K/V at those positions; every query attends to cache
 * positions [0, n_kv) (n_kv >= pos0 + n; rows past the window were written
 * by an earlier call). logits: n rows of n_vocab, or NULL (K/V only).
 * set_prefix (may be NULL): rows [0, n) are final (the prefix cache). */
typedef struct ts_denoiser {
    void *ctx;
    int32_t n_vocab;
    int32_t mask_id;      /* the [MASK] token */
    bool shift;           /* position p reads row p-1's logits (Dream) */
    int32_t max_window;   /* most tokens one forward takes (n_batch) */
    int (*forward)(void *ctx, const int32_t *tokens, int32_t n, int32_t pos0, int32_t n_kv, float *logits,
                   ts_err *err);
    int (*set_prefix)(void *ctx, int32_t n, ts_err *err);
    /* Optional (NULL: not offered): forward in two halves, so a CPU path can
     * run while the device computes. submit takes forward's arguments and
     * returns once the work is handed over; wait blocks until logits are
     * written. One forward in flight; forward = submit + wait. */
    int (*submit)(void *ctx, const int32_t *tokens, int32_t n, int32_t pos0, int32_t n_kv, float *logits,
                  ts_err *err);
    int (*wait)(void *ctx, ts_err *err);
    /* Optional (NULL: every row always computed): the next forward computes
     * logits only for rows i < n with need[i] (selective logits skipping);
     * the others are left unspecified. need stays valid until it returns. */
    int (*set_rows)(void *ctx, const uint8_t *need, int32_t n, ts_err *err);
    /* Optional (NULL: no sparse cache refresh): a CPU path beside the
     * forward's, with a cache of its own (scr_ctx). snapshot: its cache
     * rows [0, n) := the cache's (nothing in flight). refresh: forward's
     * arguments, on the CPU path's cache only (the cache forward uses is
     * untouched), and callable while a submitted forward is in flight.
     * merge: the cache's rows [a, b) := the CPU path's (nothing in flight).
     * done (may be NULL): the submitted forward has finished (non-blocking). */
    void *scr_ctx;
    int (*snapshot)(void *scr_ctx, int32_t n, ts_err *err);
    int (*refresh)(void *scr_ctx, const int32_t *tokens, int32_t n, int32_t pos0, int32_t n_kv, float *logits,
                   ts_err *err);
    int (*merge)(void *scr_ctx, int32_t a, int32_t b, ts_err *err);
    bool (*done)(void *ctx);
} ts_denoiser;

/* ---- configuration ------------------------------------------------------ */

enum ts_diff_decoder { TS_DIFF_BLOCK = 0, TS_DIFF_VANILLA = 1 };
enum ts_diff_cache { TS_DIFF_CACHE_PREFIX = 0, TS_DIFF_CACHE_DUAL = 1, TS_DIFF_CACHE_NONE = 2 };
/* Confidence of a masked position's candidate (higher commits first):
 *   LOW_CONFIDENCE  LLaDA: softmax(logits)[x0] (untempered)
 *   MASKGIT_PLUS    Dream: softmax(logits / temp)[x0]
 *   TOPK_MARGIN     Dream: top-1 minus top-2 probability
 *   ENTROPY         Dream: negative entropy sum p log(p + 1e-10)  */
enum ts_diff_alg { TS_DIFF_LOW_CONFIDENCE = 0, TS_DIFF_MASKGIT_PLUS, TS_DIFF_TOPK_MARGIN, TS_DIFF_ENTROPY };

typedef struct ts_diff_cfg {
    enum ts_diff_decoder decoder;
    enum ts_diff_cache cache;    /* block decoder only */
    enum ts_diff_alg alg;
    int32_t n_gen;               /* canvas positions after the prompt (>= 1) */
    int32_t block;               /* block length (>= 1); the last block may be shorter */
    int32_t steps;               /* vanilla: total steps, spread evenly over the blocks (>= 1) */
    float threshold;             /* block: commit every masked position with confidence >= this */
    float eps;                   /* vanilla: 0 = LLaDA's even split; in (0, 1): Dream's schedule */
    float temp;                  /* 0: argmax; > 0: Gumbel-max sampling at this temperature */
    uint64_t seed;
    bool early_stop;             /* stop after a finished block holding an end-of-generation token */
    /* multi-block speculative decoding (block decoder, prefix cache): */
    int32_t window;              /* 0: off (the block is the window); >= block: the decoding window */
    int32_t lookahead;           /* 0: off; K > 0: K more positions; -1: auto, from the latency table */
    int32_t lookahead_trigger;   /* lookahead once the current block has <= this many masked (default 4) */
    float lookahead_slack;       /* auto: the next width may cost this much more (default 0.05) */
    const int32_t *lat_width;    /* auto: the engine's width -> latency table, widths increasing */
    const double *lat_ms;
    int32_t n_lat;
    /* selective logits skipping: a forward's output projection only for the
     * rows that predict a position still to decide (masked, in the current
     * block or a draft; with sts also the block's visible ones); needs the denoiser's set_rows */
    bool skip_logits;
    /* staged token stabilization (block decoder, prefix cache): */
    bool sts;
    float visible;               /* masked -> visible at a confidence >= this (default 0.7) */
    float stable;                /* -> stable at >= this (>= visible; default 0.9) */
    /* sparse cache refresh (needs sts and the denoiser's CPU path): */
    bool scr;
    int32_t scr_max;             /* visible prefix positions refreshed per step (default 8) */
    /* end-of-generation test (EOS, EoT); NULL: none */
    bool (*is_eog)(void *ud, int32_t token);
    /* a block is final: its tokens (gen positions first .. first+n-1); return false to stop */
    bool (*on_block)(void *ud, const int32_t *tokens, int32_t first, int32_t n);
    /* polled before each forward; true stops the call (cancellation) */
    bool (*cancelled)(void *ud);
    void *ud;
} ts_diff_cfg;

/* ts_diff_cfg with the defaults of `tessera diffuse` (block decoder, prefix
 * cache, n_gen 128, block 32, steps = n_gen, threshold 0.9, greedy). */
ts_diff_cfg ts_diff_default_cfg(void);

/* ---- counters ----------------------------------------------------------- */

#define TS_DIFF_HIST_LEN 129 /* forwards committing k tokens, k = 0..127; the last bucket >= 128 */

typedef enum ts_diff_end { TS_DIFF_END_LENGTH = 0, TS_DIFF_END_EOG, TS_DIFF_END_CANCELLED } ts_diff_end;

typedef struct ts_diff_stats {
    int64_t forwards;            /* every forward: prefill, denoising steps, block K/V refreshes */
    int64_t denoise_forwards;    /* the forwards whose logits were used to commit */
    int64_t tokens_evaluated;    /* window positions computed, summed over all forwards */
    int64_t tokens_committed;    /* canvas positions unmasked */
    int64_t commit_hist[TS_DIFF_HIST_LEN];
    double prefill_ms;           /* block decoder: the prompt's forward */
    double denoise_ms;           /* everything after it */
    int32_t early_stop_at;       /* gen index of the end-of-generation token that stopped it, or -1 */
    int32_t n_blocks_done;
    /* multi-block speculative decoding */
    int64_t window_max;          /* the widest denoising forward (positions) */
    int64_t draft_evals;         /* future-block positions evaluated (drafts computed) */
    int64_t draft_accepted;      /* drafts committed when their block became current */
    int64_t lookahead_tokens;    /* positions the lookahead added to windows */
    int64_t logits_skipped;      /* rows of denoising forwards whose logits were not computed */
    /* staged token stabilization */
    int64_t sts_visible;         /* masked positions made visible (forced ones included) */
    int64_t sts_forced;          /* of those, made visible by the at-least-one rule */
    int64_t sts_stable;          /* positions that became stable (from masked or visible) */
    int64_t revisions;           /* visible positions whose token a later prediction changed */
    int64_t unstable_at_block_end; /* positions still visible when their block finished */
    int64_t visible_at_end;      /* positions still visible when decoding ended */
    /* sparse cache refresh */
    int64_t scr_refreshed;       /* prefix positions recomputed on the CPU path */
    int64_t scr_revisions;       /* of revisions, those a refresh made */
    int64_t scr_stabilized;      /* positions a refresh made stable */
    int64_t scr_merged;          /* cache rows merged at step boundaries */
    double scr_ms;               /* time in the CPU path's refresh forwards */
    double scr_overlap_ms;       /* of it, while a submitted forward was still in flight */
    ts_diff_end end;
} ts_diff_stats;

/* Decodes n_gen tokens after the prompt. gen (n_gen ids) receives the
 * decoded canvas after the prompt (positions never decoded, after an early
 * stop or a cancel, hold mask_id). 0, or -1 with err (invalid configuration,
 * window larger than the denoiser takes, a failed forward, out of memory).
 * stats may be NULL. */
int ts_diffuse(const ts_denoiser *d, const int32_t *prompt, int32_t n_prompt, const ts_diff_cfg *cfg, int32_t *gen,
               ts_diff_stats *stats, ts_err *err);

/* Largest window ts_diffuse will ask of the denoiser for this configuration
 * (to size n_batch), or -1 with err for an invalid one. */
int32_t ts_diff_max_window(const ts_diff_cfg *cfg, int32_t n_prompt, bool shift, ts_err *err);

/* ---- the pieces, exposed for the tests ---------------------------------- */

/* Tokens the vanilla decoder commits at step i (0-based) of a block with
 * n_mask masked positions and `steps` steps: LLaDA's even split
 * (n_mask / steps, the first n_mask % steps steps one more) when eps == 0,
 * else Dream's floor(n_mask_left * (1 - s/t)) over t = linspace(1, eps,
 * steps + 1), all remaining at the last step. n_left: masked now. */
int32_t ts_diff_schedule(int32_t n_mask, int32_t n_left, int32_t steps, int32_t i, float eps);

/* The candidate token and confidence of one logits row. mask_id is never a
 * candidate. rng: state of the Gumbel noise (used when temp > 0). */
double ts_diff_confidence(const float *row, int32_t n_vocab, int32_t mask_id, enum ts_diff_alg alg, float temp,
                          uint64_t *rng, int32_t *token);

/* Chooses which of n candidates (confidences conf[0..n)) to commit:
 * top-k (k >= 0) when threshold is NaN, else every one >= threshold and at
 * least the best. Ties go to the lower index. Writes the chosen indices,
 * in increasing index order, to out (n entries of room; order[] is n
 * entries of scratch) and returns their count. */
int32_t ts_diff_select(const double *conf, int32_t n, int32_t k, double threshold, int32_t *order, int32_t *out);

/* ---- denoisers ---------------------------------------------------------- */

/* Scripted denoiser for tests and forward-count predictions: for each
 * predicted position it asks script() for a (token, confidence) pair and
 * writes a logits row whose softmax gives that: the token holds conf, up to
 * 8 filler ids (the highest ones other than the mask) share 1 - conf, every
 * other id is -1e30 (so conf must be > 1/9 for the token to be the argmax,
 * and script tokens below the fillers tie exactly). It records every call. */
typedef struct ts_scripted_call {
    int32_t pos0, n, n_kv;
} ts_scripted_call;

/* scr: the log of every denoiser call in order: 'F' forward or submit,
 * 'W' wait, 'S' snapshot (n_kv = n), 'R' refresh, 'M' merge [pos0, pos0 + n). */
typedef struct ts_scripted_event {
    char kind;
    int32_t pos0, n, n_kv;
} ts_scripted_event;

typedef struct ts_scripted {
    int32_t n_vocab, mask_id;
    bool shift;
    int32_t max_window;
    /* call: index of this forward; pos: the position predicted (the row's
     * position + shift); canvas: the denoiser's view of the whole canvas
     * (the window's tokens written at their positions; length n_ctx) */
    void (*script)(void *ud, int64_t call, int32_t pos, const int32_t *canvas, int32_t *token, float *conf);
    void *ud;
    int32_t n_ctx;               /* canvas size */
    bool rows_nan;               /* set_rows: the rows not asked for are written as NaN (a test that they are never read) */
    const uint8_t *need;         /* set_rows' selection for the next forward */
    int32_t need_n;
    int32_t *canvas;             /* [n_ctx], starts as mask_id (ts_scripted_init) */
    ts_scripted_call *calls;     /* log of the first cap_calls forwards */
    int64_t n_calls, cap_calls;
    /* scr (set before ts_scripted_init): offer submit / wait and the CPU
     * refresh path. Its view of the canvas is `shadow`; script() is called
     * for a refresh's rows with call = -1 - (the refresh's index) and the
     * shadow as canvas. */
    bool scr;
    int32_t *shadow;             /* [n_ctx] */
    ts_scripted_event *events;   /* [cap_calls] the first cap_calls calls of any kind */
    int64_t n_events, n_refresh;
    bool in_flight;              /* a submitted forward not yet waited for */
} ts_scripted;

/* Allocates canvas and the call log; -1 on out of memory. */
int ts_scripted_init(ts_scripted *s, int32_t n_ctx, int64_t cap_calls, ts_err *err);
void ts_scripted_free(ts_scripted *s);
ts_denoiser ts_scripted_denoiser(ts_scripted *s);

#endif
