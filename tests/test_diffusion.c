/* test_diffusion.c - the diffusion decoders' commit logic, driven by the
 * scripted denoiser (a fake model returning designed confidences): the
 * vanilla schedules, the confidence variants, top-k and threshold selection
 * with the at-least-one rule, block completion and the windows of each cache
 * mode, early stop at an end-of-generation token, shift handling, cancel,
 * staged token stabilization (state transitions, revisions, the
 * at-least-one rule, its window start and drafts), the sparse cache
 * refresh (its order against the forwards, delayed merge, revisions and
 * deferred hand-out), bad configurations, and
 * that the step loop allocates nothing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "diffusion/diffusion.h"

/* ---- malloc counting (the test links with -Wl,--wrap=malloc) ---- */
void *__real_malloc(size_t n);
void *__wrap_malloc(size_t n);
static long n_mallocs;
void *__wrap_malloc(size_t n) {
    n_mallocs++;
    return __real_malloc(n);
}

#define V 64
#define MASK 63
#define EOG 1

/* ---- a table-driven script ---- */
typedef struct entry {
    int64_t call;
    int32_t pos;
    float conf;
    int32_t token; /* 0: the default token */
} entry;

typedef struct table {
    const entry *e;
    int n;
    float dflt;
} table;

static int32_t tok_of(int32_t pos) { return 10 + pos % 40; } /* below the scripted fillers (55..62) */

static void table_script(void *ud, int64_t call, int32_t pos, const int32_t *canvas, int32_t *token, float *conf) {
    (void)canvas;
    const table *t = ud;
    *token = tok_of(pos);
    *conf = t->dflt;
    for (int i = 0; i < t->n; i++)
        if (t->e[i].call == call && t->e[i].pos == pos) {
            *conf = t->e[i].conf;
            if (t->e[i].token) *token = t->e[i].token;
        }
}

static bool is_eog(void *ud, int32_t t) {
    (void)ud;
    return t == EOG;
}

typedef struct blocks_seen {
    int n_blocks;
    int32_t first[16], n[16];
    int32_t tokens[256];
    int n_tokens;
    int cancel_after; /* polls before cancelling; <0 never */
    int polls;
} blocks_seen;

static bool on_block(void *ud, const int32_t *tokens, int32_t first, int32_t n) {
    blocks_seen *b = ud;
    if (b->n_blocks < 16) {
        b->first[b->n_blocks] = first;
        b->n[b->n_blocks] = n;
    }
    b->n_blocks++;
    for (int32_t i = 0; i < n && b->n_tokens < 256; i++) b->tokens[b->n_tokens++] = tokens[i];
    return true;
}

static bool poll_cancel(void *ud) {
    blocks_seen *b = ud;
    return b->cancel_after >= 0 && b->polls++ >= b->cancel_after;
}

typedef struct fixture {
    ts_scripted s;
    ts_denoiser d;
    ts_diff_cfg c;
    ts_diff_stats st;
    blocks_seen seen;
    int32_t gen[256];
    ts_err err;
} fixture;

static void fx_init(fixture *f, const table *t, bool shift, int32_t n_ctx) {
    memset(f, 0, sizeof *f);
    f->s.n_vocab = V;
    f->s.mask_id = MASK;
    f->s.shift = shift;
    f->s.script = table_script;
    f->s.ud = (void *)t;
    if (ts_scripted_init(&f->s, n_ctx, 256, &f->err) < 0) {
        fprintf(stderr, "%s\n", f->err.msg);
        exit(1);
    }
    f->d = ts_scripted_denoiser(&f->s);
    f->c = ts_diff_default_cfg();
    f->c.is_eog = is_eog;
    f->c.on_block = on_block;
    f->c.cancelled = poll_cancel;
    f->seen.cancel_after = -1;
    f->c.ud = &f->seen;
}

static int fx_run(fixture *f, const int32_t *prompt, int32_t np) {
    return ts_diffuse(&f->d, prompt, np, &f->c, f->gen, &f->st, &f->err);
}

static bool call_is(const fixture *f, int64_t i, int32_t pos0, int32_t n, int32_t n_kv) {
    if (i >= f->s.n_calls) return false;
    const ts_scripted_call *c = &f->s.calls[i];
    return c->pos0 == pos0 && c->n == n && c->n_kv == n_kv;
}

static void print_calls(const fixture *f) {
    for (int64_t i = 0; i < f->s.n_calls && i < f->s.cap_calls; i++)
        fprintf(stderr, "  call %lld: pos0 %d n %d n_kv %d\n", (long long)i, f->s.calls[i].pos0, f->s.calls[i].n,
                f->s.calls[i].n_kv);
}

/* ---- schedule, confidence, selection ---- */

static void test_schedule(void) {
    /* LLaDA: 10 masks over 4 steps -> 3 3 2 2 */
    int32_t want[4] = {3, 3, 2, 2}, left = 10;
    for (int i = 0; i < 4; i++) {
        int32_t k = ts_diff_schedule(10, left, 4, i, 0.0f);
        CHECK(k == want[i], "llada step %d: %d, want %d", i, k, want[i]);
        left -= k;
    }
    /* Dream, 32 masks, 4 steps, eps 1e-3: t = 1, .75025, .5005, .25075, .001
     * -> floor(32*.24975)=7, floor(25*(1-.5005/.75025))=8, floor(17*.499)=8, rest 9 */
    int32_t wd[4] = {7, 8, 8, 9};
    left = 32;
    for (int i = 0; i < 4; i++) {
        int32_t k = ts_diff_schedule(32, left, 4, i, 1e-3f);
        CHECK(k == wd[i], "dream step %d: %d, want %d", i, k, wd[i]);
        left -= k;
    }
    CHECK(left == 0, "dream left %d", left);
    CHECK(ts_diff_schedule(4, 4, 8, 5, 0.0f) == 0, "more steps than masks: idle steps commit 0");
    CHECK(ts_diff_schedule(4, 1, 8, 7, 0.0f) == 1, "last step commits what is left");
}

static void test_confidence(void) {
    /* probabilities .5 .3 .2 (+ the mask token, which must be ignored) */
    float row[4] = {logf(0.3f), logf(0.5f), logf(0.2f), 10.0f};
    int32_t tok = -1;
    uint64_t rng_s = 1;
    double c = ts_diff_confidence(row, 4, 3, TS_DIFF_LOW_CONFIDENCE, 0.0f, &rng_s, &tok);
    CHECK(tok == 1 && fabs(c - 0.5) < 1e-6, "low confidence: token %d conf %g (the mask's logit is highest)", tok, c);
    c = ts_diff_confidence(row, 4, 3, TS_DIFF_MASKGIT_PLUS, 0.0f, &rng_s, &tok);
    CHECK(tok == 1 && fabs(c - 0.5) < 1e-6, "maskgit_plus: %d %g", tok, c);
    c = ts_diff_confidence(row, 4, 3, TS_DIFF_TOPK_MARGIN, 0.0f, &rng_s, &tok);
    CHECK(fabs(c - 0.2) < 1e-6, "margin %g, want .2", c);
    c = ts_diff_confidence(row, 4, 3, TS_DIFF_ENTROPY, 0.0f, &rng_s, &tok);
    double h = 0.5 * log(0.5 + 1e-10) + 0.3 * log(0.3 + 1e-10) + 0.2 * log(0.2 + 1e-10);
    CHECK(fabs(c - h) < 1e-6, "entropy %g, want %g", c, h);
    /* ranking the right way round: a peaked row beats a flat one in every variant */
    float flat[4] = {0, 0.1f, 0, 0}, peak[4] = {0, 3, 0, 0};
    for (int a = 0; a < 4; a++) {
        double cf = ts_diff_confidence(flat, 4, 3, (enum ts_diff_alg)a, 0.0f, &rng_s, &tok);
        double cp = ts_diff_confidence(peak, 4, 3, (enum ts_diff_alg)a, 0.0f, &rng_s, &tok);
        CHECK(cp > cf, "alg %d: peaked %g must rank above flat %g", a, cp, cf);
    }
    /* Gumbel-max at temperature 1 samples the softmax: token 1 about half the time */
    float r2[4] = {logf(0.3f), logf(0.5f), logf(0.2f), 0};
    int hits[4] = {0};
    uint64_t st = 42;
    for (int i = 0; i < 20000; i++) {
        ts_diff_confidence(r2, 4, 3, TS_DIFF_LOW_CONFIDENCE, 1.0f, &st, &tok);
        if (tok >= 0 && tok < 4) hits[tok]++;
    }
    CHECK(hits[3] == 0, "the mask token was sampled %d times", hits[3]);
    CHECK(abs(hits[1] - 10000) < 400 && abs(hits[0] - 6000) < 400 && abs(hits[2] - 4000) < 400,
          "gumbel frequencies %d %d %d, want about 6000 10000 4000", hits[0], hits[1], hits[2]);
    /* at temperature 0 the noise is not used */
    uint64_t s0 = 7;
    ts_diff_confidence(r2, 4, 3, TS_DIFF_LOW_CONFIDENCE, 0.0f, &s0, &tok);
    CHECK(s0 == 7, "greedy consumed randomness");
}

static void test_select(void) {
    int32_t order[8], out[8];
    double c1[4] = {0.5, 0.95, 0.91, 0.2};
    int32_t m = ts_diff_select(c1, 4, 0, 0.9, order, out);
    CHECK(m == 2 && out[0] == 1 && out[1] == 2, "threshold: %d picks (%d %d)", m, out[0], out[1]);
    double c2[4] = {0.5, 0.6, 0.3, 0.6};
    m = ts_diff_select(c2, 4, 0, 0.9, order, out);
    CHECK(m == 1 && out[0] == 1, "at least one, the most confident, ties to the lower index: %d picks, first %d", m,
          out[0]);
    double c3[4] = {0.3, 0.8, 0.8, 0.9};
    m = ts_diff_select(c3, 4, 2, NAN, order, out);
    CHECK(m == 2 && out[0] == 1 && out[1] == 3, "top-2: %d picks (%d %d)", m, out[0], out[1]);
    m = ts_diff_select(c3, 4, 3, NAN, order, out);
    CHECK(m == 3 && out[0] == 1 && out[1] == 2 && out[2] == 3, "top-3 in position order: (%d %d %d)", out[0], out[1],
          out[2]);
    m = ts_diff_select(c3, 4, 0, NAN, order, out);
    CHECK(m == 0, "top-0 commits nothing: %d", m);
    double c4[3] = {NAN, 0.1, NAN};
    m = ts_diff_select(c4, 3, 0, 0.9, order, out);
    CHECK(m == 1 && out[0] == 1, "NaN ranks last: %d", out[0]);
    double c5[3] = {0.95, 0.95, 0.95};
    m = ts_diff_select(c5, 3, 0, 0.95, order, out);
    CHECK(m == 3, "threshold is inclusive: %d", m);
}

/* ---- the block decoder ---- */

/* prompt 3 tokens, n_gen 8, block 4: block 0 = positions 3..6, block 1 = 7..10.
 * Prefix cache: call 0 prefill; block 0 steps are calls 1, 2, 3:
 *   call 1: .95 .5 .92 .3 -> commits 3 and 5
 *   call 2: 4: .4, 6: .6  -> none >= .9, commits the best (6)
 *   call 3: 4             -> commits 4 (block complete)
 * call 4 recomputes block 0's K/V; block 1: call 5 commits all four (.99). */
static const entry block_script[] = {
    {1, 3, 0.95f, 0}, {1, 4, 0.5f, 0}, {1, 5, 0.92f, 0}, {1, 6, 0.3f, 0},
    {2, 4, 0.4f, 0},  {2, 6, 0.6f, 0}, {3, 4, 0.2f, 0},
    {5, 7, 0.99f, 0}, {5, 8, 0.99f, 0}, {5, 9, 0.99f, 0}, {5, 10, 0.99f, 0},
};

static void test_block_prefix(void) {
    table t = {block_script, (int)(sizeof block_script / sizeof block_script[0]), 0.2f};
    fixture f;
    fx_init(&f, &t, false, 16);
    f.c.n_gen = 8;
    f.c.block = 4;
    const int32_t prompt[3] = {5, 6, 7};
    int rc = fx_run(&f, prompt, 3);
    CHECK(rc == 0, "block prefix: %s", f.err.msg);
    bool ok = f.s.n_calls == 6 && call_is(&f, 0, 0, 3, 3) && call_is(&f, 1, 3, 4, 7) && call_is(&f, 2, 3, 4, 7) &&
              call_is(&f, 3, 3, 4, 7) && call_is(&f, 4, 3, 4, 7) && call_is(&f, 5, 7, 4, 11);
    CHECK(ok, "prefix windows wrong (%lld calls)", (long long)f.s.n_calls);
    if (!ok) print_calls(&f);
    CHECK(f.st.forwards == 6 && f.st.denoise_forwards == 4, "forwards %lld denoise %lld", (long long)f.st.forwards,
          (long long)f.st.denoise_forwards);
    CHECK(f.st.commit_hist[2] == 1 && f.st.commit_hist[1] == 2 && f.st.commit_hist[4] == 1,
          "hist: 1:%lld 2:%lld 4:%lld", (long long)f.st.commit_hist[1], (long long)f.st.commit_hist[2],
          (long long)f.st.commit_hist[4]);
    CHECK(f.st.tokens_committed == 8 && f.st.tokens_evaluated == 3 + 4 * 5, "committed %lld evaluated %lld",
          (long long)f.st.tokens_committed, (long long)f.st.tokens_evaluated);
    for (int i = 0; i < 8; i++) CHECK(f.gen[i] == tok_of(3 + i), "gen[%d] = %d", i, f.gen[i]);
    CHECK(f.seen.n_blocks == 2 && f.seen.first[0] == 0 && f.seen.n[0] == 4 && f.seen.first[1] == 4,
          "blocks handed out: %d", f.seen.n_blocks);
    CHECK(f.st.early_stop_at == -1 && f.st.end == TS_DIFF_END_LENGTH && f.st.n_blocks_done == 2, "end %d",
          (int)f.st.end);
    ts_scripted_free(&f.s);

    /* threshold 0.96: nothing ever reaches it, so every step commits only
     * the most confident position (ties to the lower one): block 0 takes 4
     * steps (3, then 6, then 4, then 5), block 1 four more */
    fx_init(&f, &t, false, 16);
    f.c.n_gen = 8;
    f.c.block = 4;
    f.c.threshold = 0.96f;
    CHECK(fx_run(&f, prompt, 3) == 0, "%s", f.err.msg);
    CHECK(f.st.denoise_forwards == 8 && f.st.commit_hist[1] == 8 && f.st.forwards == 10,
          "at-least-one: denoise %lld, hist[1] %lld, forwards %lld", (long long)f.st.denoise_forwards,
          (long long)f.st.commit_hist[1], (long long)f.st.forwards);
    for (int i = 0; i < 8; i++) CHECK(f.gen[i] == tok_of(3 + i), "gen[%d] = %d", i, f.gen[i]);
    ts_scripted_free(&f.s);
}

/* The same script through the dual cache and without a cache: the windows. */
static void test_block_windows(void) {
    table t = {block_script, (int)(sizeof block_script / sizeof block_script[0]), 0.2f};
    const int32_t prompt[3] = {5, 6, 7};
    fixture f;
    fx_init(&f, &t, false, 16);
    f.c.n_gen = 8;
    f.c.block = 4;
    f.c.cache = TS_DIFF_CACHE_DUAL;
    CHECK(fx_run(&f, prompt, 3) == 0, "dual: %s", f.err.msg);
    /* first step of a block: block + masked suffix; later steps: block only,
     * attending to the whole canvas (the cached suffix) */
    bool ok = f.s.n_calls == 6 && call_is(&f, 0, 0, 3, 3) && call_is(&f, 1, 3, 8, 11) && call_is(&f, 2, 3, 4, 11) &&
              call_is(&f, 3, 3, 4, 11) && call_is(&f, 4, 3, 4, 7) && call_is(&f, 5, 7, 4, 11);
    CHECK(ok, "dual windows wrong");
    if (!ok) print_calls(&f);
    CHECK(f.st.tokens_evaluated == 3 + 8 + 4 + 4 + 4 + 4, "dual evaluated %lld", (long long)f.st.tokens_evaluated);
    ts_scripted_free(&f.s);

    fx_init(&f, &t, false, 16);
    f.c.n_gen = 8;
    f.c.block = 4;
    f.c.cache = TS_DIFF_CACHE_NONE;
    CHECK(fx_run(&f, prompt, 3) == 0, "no cache: %s", f.err.msg);
    /* every step: prompt + finished blocks + current block; no prefill, no refresh.
     * The script's calls are one earlier (no prefill): call 0 commits 3 (all
     * at the default), 1 commits 5, 2 commits 6, 3 commits 4; block 1: call 4
     * commits 7, call 5 (.99 everywhere) the other three */
    ok = f.s.n_calls == 6 && call_is(&f, 0, 0, 7, 7) && call_is(&f, 3, 0, 7, 7) && call_is(&f, 4, 0, 11, 11) &&
         call_is(&f, 5, 0, 11, 11);
    CHECK(ok, "no-cache windows wrong");
    if (!ok) print_calls(&f);
    CHECK(f.st.prefill_ms == 0.0 && f.st.forwards == 6 && f.st.commit_hist[3] == 1, "no-cache forwards %lld",
          (long long)f.st.forwards);
    ts_scripted_free(&f.s);
}

/* Early stop: block 0 commits EOG at position 5 (gen index 2). */
static void test_early_stop(void) {
    static const entry e[] = {{1, 3, 0.99f, 0}, {1, 4, 0.99f, 0}, {1, 5, 0.99f, EOG}, {1, 6, 0.99f, 0}};
    table t = {e, 4, 0.2f};
    const int32_t prompt[3] = {5, 6, 7};
    fixture f;
    fx_init(&f, &t, false, 16);
    f.c.n_gen = 8;
    f.c.block = 4;
    CHECK(fx_run(&f, prompt, 3) == 0, "early stop: %s", f.err.msg);
    CHECK(f.st.end == TS_DIFF_END_EOG && f.st.early_stop_at == 2, "end %d at %d", (int)f.st.end, f.st.early_stop_at);
    CHECK(f.s.n_calls == 2, "after the block with EOG nothing more is evaluated: %lld calls", (long long)f.s.n_calls);
    CHECK(f.seen.n_blocks == 1 && f.seen.n[0] == 2 && f.seen.tokens[0] == tok_of(3) && f.seen.tokens[1] == tok_of(4),
          "handed out %d blocks, first of %d tokens", f.seen.n_blocks, f.seen.n[0]);
    CHECK(f.gen[2] == EOG && f.gen[4] == MASK && f.gen[7] == MASK, "undecoded positions stay masked");
    ts_scripted_free(&f.s);

    /* early_stop off: decoding goes on, but nothing after the EOG is handed out */
    fx_init(&f, &t, false, 16);
    f.c.n_gen = 8;
    f.c.block = 4;
    f.c.early_stop = false;
    CHECK(fx_run(&f, prompt, 3) == 0, "%s", f.err.msg);
    CHECK(f.st.end == TS_DIFF_END_LENGTH && f.st.early_stop_at == -1 && f.st.tokens_committed == 8 &&
              f.seen.n_tokens == 2,
          "no early stop: end %d, committed %lld, handed out %d", (int)f.st.end, (long long)f.st.tokens_committed,
          f.seen.n_tokens);
    ts_scripted_free(&f.s);

    /* vanilla stops the same way (its first forward is call 0) */
    static const entry ev[] = {{0, 3, 0.99f, 0}, {0, 4, 0.99f, 0}, {0, 5, 0.99f, EOG}, {0, 6, 0.99f, 0}};
    table tv = {ev, 4, 0.2f};
    fx_init(&f, &tv, false, 16);
    f.c.decoder = TS_DIFF_VANILLA;
    f.c.n_gen = 8;
    f.c.block = 4;
    f.c.steps = 2;
    CHECK(fx_run(&f, prompt, 3) == 0, "%s", f.err.msg);
    /* call 0 commits 4 positions (steps 1 per block: all of them), position 5 is EOG */
    CHECK(f.st.end == TS_DIFF_END_EOG && f.st.early_stop_at == 2 && f.s.n_calls == 1, "vanilla early stop: end %d",
          (int)f.st.end);
    ts_scripted_free(&f.s);
}

/* Shift (Dream): position p reads row p-1, so a block window starts one
 * earlier; the committed token at p must be the script's prediction for p. */
static void test_shift(void) {
    table t = {NULL, 0, 0.5f};
    const int32_t prompt[3] = {5, 6, 7};
    for (int mode = 0; mode < 4; mode++) {
        fixture f;
        fx_init(&f, &t, true, 16);
        f.c.n_gen = 8;
        f.c.block = 4;
        if (mode < 3) {
            f.c.cache = (enum ts_diff_cache)mode;
        } else {
            f.c.decoder = TS_DIFF_VANILLA;
            f.c.steps = 8;
        }
        CHECK(fx_run(&f, prompt, 3) == 0, "shift mode %d: %s", mode, f.err.msg);
        for (int i = 0; i < 8; i++) CHECK(f.gen[i] == tok_of(3 + i), "shift mode %d: gen[%d] = %d", mode, i, f.gen[i]);
        if (mode == TS_DIFF_CACHE_PREFIX) {
            bool ok = call_is(&f, 1, 2, 5, 7) && call_is(&f, 5, 2, 5, 7) && call_is(&f, 6, 6, 5, 11);
            CHECK(ok, "shift prefix windows start one before the block");
            if (!ok) print_calls(&f);
        }
        if (mode == TS_DIFF_CACHE_DUAL) CHECK(call_is(&f, 1, 2, 9, 11), "shift dual first window");
        ts_scripted_free(&f.s);
    }
}

/* Vanilla: prompt 2, n_gen 8, block 4, steps 4 -> 2 steps per block, 2
 * commits each, the most confident first (confidence rises with position). */
static void rising_script(void *ud, int64_t call, int32_t pos, const int32_t *canvas, int32_t *token, float *conf) {
    (void)ud;
    (void)call;
    (void)canvas;
    *token = tok_of(pos);
    *conf = 0.2f + 0.05f * (float)pos;
}

static void test_vanilla(void) {
    fixture f;
    fx_init(&f, NULL, false, 16);
    f.s.script = rising_script;
    f.d = ts_scripted_denoiser(&f.s);
    f.c.decoder = TS_DIFF_VANILLA;
    f.c.n_gen = 8;
    f.c.block = 4;
    f.c.steps = 4;
    const int32_t prompt[2] = {5, 6};
    CHECK(fx_run(&f, prompt, 2) == 0, "vanilla: %s", f.err.msg);
    bool ok = f.s.n_calls == 4;
    for (int i = 0; i < 4; i++) ok = ok && call_is(&f, i, 0, 10, 10);
    CHECK(ok, "vanilla: every step is one forward over the whole canvas");
    CHECK(f.st.commit_hist[2] == 4 && f.st.tokens_evaluated == 40, "vanilla hist[2] %lld",
          (long long)f.st.commit_hist[2]);
    for (int i = 0; i < 8; i++) CHECK(f.gen[i] == tok_of(2 + i), "vanilla gen[%d] = %d", i, f.gen[i]);
    /* the scripted denoiser's canvas after call 0 of block 0 shows the order:
     * at call 1 positions 4, 5 (the two most confident) were committed */
    ts_scripted_free(&f.s);

    /* uneven: n_gen 10, block 4 -> blocks of 4, 4, 2; steps 5 -> 2, 2, 1 */
    fx_init(&f, NULL, false, 16);
    f.s.script = rising_script;
    f.d = ts_scripted_denoiser(&f.s);
    f.c.decoder = TS_DIFF_VANILLA;
    f.c.n_gen = 10;
    f.c.block = 4;
    f.c.steps = 5;
    CHECK(fx_run(&f, prompt, 2) == 0, "vanilla uneven: %s", f.err.msg);
    CHECK(f.s.n_calls == 5 && f.st.tokens_committed == 10 && f.st.commit_hist[2] == 5, "uneven: %lld calls",
          (long long)f.s.n_calls);
    ts_scripted_free(&f.s);
}

/* Order of commits inside a block, seen through the scripted canvas. */
typedef struct order_probe {
    int32_t committed_at[16]; /* call at which each position was first seen committed */
} order_probe;

static void probe_script(void *ud, int64_t call, int32_t pos, const int32_t *canvas, int32_t *token, float *conf) {
    order_probe *o = ud;
    for (int32_t p = 0; p < 16; p++)
        if (canvas[p] != MASK && o->committed_at[p] < 0) o->committed_at[p] = (int32_t)call;
    *token = tok_of(pos);
    *conf = 0.2f + 0.05f * (float)pos;
}

static void test_vanilla_order(void) {
    order_probe o;
    for (int i = 0; i < 16; i++) o.committed_at[i] = -1;
    fixture f;
    fx_init(&f, NULL, false, 16);
    f.s.script = probe_script;
    f.s.ud = &o;
    f.d = ts_scripted_denoiser(&f.s);
    f.c.decoder = TS_DIFF_VANILLA;
    f.c.n_gen = 8;
    f.c.block = 4;
    f.c.steps = 4;
    const int32_t prompt[2] = {5, 6};
    CHECK(fx_run(&f, prompt, 2) == 0, "%s", f.err.msg);
    /* block 0 = 2..5: call 0 commits 4, 5 (seen at call 1), call 1 commits 2, 3 (seen at call 2) */
    CHECK(o.committed_at[4] == 1 && o.committed_at[5] == 1 && o.committed_at[2] == 2 && o.committed_at[3] == 2 &&
              o.committed_at[8] == 3 && o.committed_at[6] == -1,
          "commit order: %d %d %d %d %d %d", o.committed_at[2], o.committed_at[3], o.committed_at[4],
          o.committed_at[5], o.committed_at[8], o.committed_at[6]);
    ts_scripted_free(&f.s);
}

static void test_cancel_and_errors(void) {
    table t = {NULL, 0, 0.2f};
    const int32_t prompt[3] = {5, 6, 7};
    fixture f;
    fx_init(&f, &t, false, 16);
    f.c.n_gen = 8;
    f.c.block = 4;
    f.seen.cancel_after = 2;
    CHECK(fx_run(&f, prompt, 3) == 0, "cancel: %s", f.err.msg);
    CHECK(f.st.end == TS_DIFF_END_CANCELLED && f.st.denoise_forwards == 2, "cancel: end %d after %lld",
          (int)f.st.end, (long long)f.st.denoise_forwards);
    ts_scripted_free(&f.s);

    struct {
        void (*set)(ts_diff_cfg *);
        int32_t max_window;
        const char *want;
    } bad[] = {
        {NULL, 4, "raise n_batch"},
    };
    (void)bad;
    fx_init(&f, &t, false, 16);
    f.c.n_gen = 8;
    f.c.block = 4;
    f.c.decoder = TS_DIFF_VANILLA;
    f.d.max_window = 10;
    CHECK(fx_run(&f, prompt, 3) < 0 && strstr(f.err.msg, "n_batch") && strstr(f.err.msg, "11"),
          "window too large: %s", f.err.msg);
    f.d.max_window = 16;
    f.c.steps = 1;
    CHECK(fx_run(&f, prompt, 3) < 0 && strstr(f.err.msg, "steps 1"), "steps < blocks: %s", f.err.msg);
    f.c.decoder = TS_DIFF_BLOCK;
    f.c.threshold = 1.5f;
    CHECK(fx_run(&f, prompt, 3) < 0 && strstr(f.err.msg, "threshold 1.5"), "bad threshold: %s", f.err.msg);
    f.c.threshold = 0.9f;
    f.c.block = 0;
    CHECK(fx_run(&f, prompt, 3) < 0 && strstr(f.err.msg, "block 0"), "block 0: %s", f.err.msg);
    f.c.block = 4;
    CHECK(fx_run(&f, prompt, 0) < 0 && strstr(f.err.msg, "prompt"), "empty prompt: %s", f.err.msg);
    f.c.n_gen = 20;
    CHECK(fx_run(&f, prompt, 3) < 0 && strstr(f.err.msg, "canvas"), "canvas overflow reported by the denoiser: %s",
          f.err.msg);
    f.c.n_gen = 8;
    f.d.mask_id = V;
    CHECK(fx_run(&f, prompt, 3) < 0 && strstr(f.err.msg, "mask token 64"), "mask id: %s", f.err.msg);
    ts_scripted_free(&f.s);
}

/* ---- multi-block speculative decoding: the window, drafts, lookahead ----
 * prompt 3, n_gen 8, block 4 (block 0 = 3..6, block 1 = 7..10), window 4.
 *   call 1 [3, 7): .95 .5 .92 .3 -> commits 3, 5 (the frontier was 3)
 *   call 2 [3, 8): 4 .4, 6 .6 -> commits 6; 7 is a draft (.5)
 *   call 3 [4, 8): 4 .97 -> commits 4 (block 0 done); draft 7 at .93
 *   call 4 [3, 7) n_kv 7: block 0's K/V (no draft in it)
 *   block 1: draft 7 (.93, from the last denoising forward) accepted
 *   call 5 [7, 11): 8 9 10 at .99 -> done (7's input changed: evaluated). */
static const entry window_script[] = {
    {1, 3, 0.95f, 0}, {1, 4, 0.5f, 0},  {1, 5, 0.92f, 0}, {1, 6, 0.3f, 0},  {2, 4, 0.4f, 0},
    {2, 6, 0.6f, 0},  {2, 7, 0.5f, 0},  {3, 4, 0.97f, 0}, {3, 7, 0.93f, 0}, {3, 8, 0.95f, 0},
    {5, 8, 0.99f, 0}, {5, 9, 0.99f, 0}, {5, 10, 0.99f, 0},
};

static void window_fixture(fixture *f, table *t) {
    fx_init(f, t, false, 16);
    f->c.n_gen = 8;
    f->c.block = 4;
    f->c.window = 4;
}

/* window 4 with an auto lookahead (trigger 1) over the widths 4, 8, 12 at ms[] */
static void auto_fixture(fixture *f, table *t, const double ms[3]) {
    static const int32_t lw[3] = {4, 8, 12};
    window_fixture(f, t);
    f->c.lookahead = -1;
    f->c.lookahead_trigger = 1;
    f->c.lat_width = lw;
    f->c.lat_ms = ms;
    f->c.n_lat = 3;
}

static void test_window(void) {
    table t = {window_script, (int)(sizeof window_script / sizeof window_script[0]), 0.2f};
    const int32_t prompt[3] = {5, 6, 7};
    fixture f;
    window_fixture(&f, &t);
    CHECK(fx_run(&f, prompt, 3) == 0, "window: %s", f.err.msg);
    bool ok = f.s.n_calls == 6 && call_is(&f, 0, 0, 3, 3) && call_is(&f, 1, 3, 4, 7) && call_is(&f, 2, 3, 5, 8) &&
              call_is(&f, 3, 4, 4, 8) && call_is(&f, 4, 3, 4, 7) && call_is(&f, 5, 7, 4, 11);
    CHECK(ok, "window: the sliding windows are wrong (%lld calls)", (long long)f.s.n_calls);
    if (!ok) print_calls(&f);
    CHECK(f.st.draft_evals == 2 && f.st.draft_accepted == 1 && f.st.lookahead_tokens == 0 && f.st.window_max == 5,
          "window: drafts %lld accepted %lld lookahead %lld widest %lld", (long long)f.st.draft_evals,
          (long long)f.st.draft_accepted, (long long)f.st.lookahead_tokens, (long long)f.st.window_max);
    CHECK(f.st.denoise_forwards == 4 && f.st.tokens_committed == 8 && f.st.commit_hist[3] == 1 &&
              f.st.commit_hist[2] == 1 && f.st.commit_hist[1] == 2,
          "window: %lld denoising forwards, %lld committed", (long long)f.st.denoise_forwards,
          (long long)f.st.tokens_committed);
    for (int i = 0; i < 8; i++) CHECK(f.gen[i] == tok_of(3 + i), "window: gen[%d] = %d", i, f.gen[i]);
    CHECK(f.seen.n_blocks == 2 && f.seen.n[1] == 4, "window: blocks handed out %d", f.seen.n_blocks);
    ts_scripted_free(&f.s);

    /* acceptance is the commit criterion: at threshold .94 draft 7 (.93) fails */
    window_fixture(&f, &t);
    f.c.threshold = 0.94f;
    CHECK(fx_run(&f, prompt, 3) == 0, "window, threshold .94: %s", f.err.msg);
    CHECK(f.st.draft_accepted == 0, "window: a draft below the threshold was accepted (%lld)",
          (long long)f.st.draft_accepted);
    ts_scripted_free(&f.s);

    /* fixed lookahead 2 once the block has <= 1 masked: call 3 runs [4, 10),
     * drafts 7 (.93), 8 (.95), 9 (.2); block 1 accepts 7 and 8; call 5 [7, 11) */
    window_fixture(&f, &t);
    f.c.lookahead = 2;
    f.c.lookahead_trigger = 1;
    CHECK(fx_run(&f, prompt, 3) == 0, "lookahead: %s", f.err.msg);
    ok = f.s.n_calls == 6 && call_is(&f, 2, 3, 5, 8) && call_is(&f, 3, 4, 6, 10) && call_is(&f, 5, 7, 4, 11);
    CHECK(ok, "lookahead: windows wrong");
    if (!ok) print_calls(&f);
    CHECK(f.st.lookahead_tokens == 2 && f.st.draft_evals == 4 && f.st.draft_accepted == 2,
          "lookahead: added %lld, drafts %lld, accepted %lld", (long long)f.st.lookahead_tokens,
          (long long)f.st.draft_evals, (long long)f.st.draft_accepted);
    for (int i = 0; i < 8; i++) CHECK(f.gen[i] == tok_of(3 + i), "lookahead: gen[%d] = %d", i, f.gen[i]);
    ts_scripted_free(&f.s);

    /* auto: a stage-like table (4 -> 1.0 ms, 8 -> 1.02, 12 -> 2.0), slack
     * .05: the 4-wide window of call 3 grows to 8 wide (clipped by nothing),
     * [4, 12) past the canvas -> [4, 11) */
    static const double lm[3] = {1.0, 1.02, 2.0};
    auto_fixture(&f, &t, lm);
    CHECK(fx_run(&f, prompt, 3) == 0, "auto lookahead: %s", f.err.msg);
    ok = call_is(&f, 3, 4, 7, 11);
    CHECK(ok && f.st.lookahead_tokens == 3 && f.st.draft_accepted == 2, "auto lookahead: added %lld, accepted %lld",
          (long long)f.st.lookahead_tokens, (long long)f.st.draft_accepted);
    if (!ok) print_calls(&f);
    /* a steep table (every width costs more than the slack): no lookahead */
    static const double steep[3] = {1.0, 2.0, 3.0};
    ts_scripted_free(&f.s);
    auto_fixture(&f, &t, steep);
    CHECK(fx_run(&f, prompt, 3) == 0 && f.st.lookahead_tokens == 0 && call_is(&f, 3, 4, 4, 8),
          "auto lookahead on a linear table added %lld", (long long)f.st.lookahead_tokens);
    ts_scripted_free(&f.s);

    /* configurations the window refuses */
    window_fixture(&f, &t);
    f.c.window = 3;
    CHECK(fx_run(&f, prompt, 3) < 0 && strstr(f.err.msg, "window 3 is shorter"), "window < block: %s", f.err.msg);
    f.c.window = 4;
    f.c.cache = TS_DIFF_CACHE_DUAL;
    CHECK(fx_run(&f, prompt, 3) < 0 && strstr(f.err.msg, "prefix cache"), "window + dual: %s", f.err.msg);
    f.c.cache = TS_DIFF_CACHE_PREFIX;
    f.c.window = 0;
    f.c.lookahead = 2;
    CHECK(fx_run(&f, prompt, 3) < 0 && strstr(f.err.msg, "needs a window"), "lookahead alone: %s", f.err.msg);
    f.c.window = 4;
    f.c.lookahead = -1;
    CHECK(fx_run(&f, prompt, 3) < 0 && strstr(f.err.msg, "latency table"), "auto without a table: %s", f.err.msg);
    f.c.lookahead = 0;
    f.d.max_window = 7; /* the window needs block + window = 8 */
    CHECK(fx_run(&f, prompt, 3) < 0 && strstr(f.err.msg, "n_batch"), "window too wide for the denoiser: %s",
          f.err.msg);
    ts_scripted_free(&f.s);
}

/* Staged token stabilization (visible .7, stable .9), prompt 3, n_gen 8, block 4:
 *   call 1: 3 .95 -> stable; 4 .75 -> visible; 5 .5, 6 .3 stay masked
 *   call 2: 4 predicted as 40 at .8 -> revised (still visible); 5 .6, 6 .65:
 *           none passes .7 -> 6 made visible (at least one)
 *   call 3: 4 predicted as its own 40 at .92 -> stable; 6 (.2) stays
 *           visible; 5 .72 -> visible: nothing masked, block 0 ends with
 *           5 and 6 visible
 *   call 4: block 0's K/V; call 5: block 1 at .99 -> all stable. */
static const entry sts_script[] = {
    {1, 3, 0.95f, 0}, {1, 4, 0.75f, 0}, {1, 5, 0.5f, 0},   {1, 6, 0.3f, 0},  {2, 4, 0.8f, 40},
    {2, 5, 0.6f, 0},  {2, 6, 0.65f, 0}, {3, 4, 0.92f, 40}, {3, 5, 0.72f, 0}, {3, 7, 0.8f, 0},
    {5, 7, 0.99f, 0}, {5, 8, 0.99f, 0}, {5, 9, 0.99f, 0},  {5, 10, 0.99f, 0},
};

static void sts_fixture(fixture *f, table *t) {
    fx_init(f, t, false, 16);
    f->c.n_gen = 8;
    f->c.block = 4;
    f->c.sts = true;
}

static void test_sts(void) {
    table t = {sts_script, (int)(sizeof sts_script / sizeof sts_script[0]), 0.2f};
    const int32_t prompt[3] = {5, 6, 7};
    fixture f;
    sts_fixture(&f, &t);
    CHECK(fx_run(&f, prompt, 3) == 0, "sts: %s", f.err.msg);
    bool ok = f.s.n_calls == 6 && call_is(&f, 1, 3, 4, 7) && call_is(&f, 3, 3, 4, 7) && call_is(&f, 4, 3, 4, 7) &&
              call_is(&f, 5, 7, 4, 11);
    CHECK(ok, "sts: windows wrong (%lld calls)", (long long)f.s.n_calls);
    if (!ok) print_calls(&f);
    CHECK(f.st.sts_visible == 3 && f.st.sts_forced == 1 && f.st.sts_stable == 6 && f.st.revisions == 1 &&
              f.st.unstable_at_block_end == 2,
          "sts: visible %lld forced %lld stable %lld revisions %lld unstable at block end %lld",
          (long long)f.st.sts_visible, (long long)f.st.sts_forced, (long long)f.st.sts_stable,
          (long long)f.st.revisions, (long long)f.st.unstable_at_block_end);
    CHECK(f.st.denoise_forwards == 4 && f.st.tokens_committed == 8 && f.st.commit_hist[2] == 1 &&
              f.st.commit_hist[1] == 2 && f.st.commit_hist[4] == 1,
          "sts: %lld denoising forwards, %lld unmasked", (long long)f.st.denoise_forwards,
          (long long)f.st.tokens_committed);
    for (int i = 0; i < 8; i++)
        CHECK(f.gen[i] == (i == 1 ? 40 : tok_of(3 + i)), "sts: gen[%d] = %d (position 4 revised to 40)", i, f.gen[i]);
    ts_scripted_free(&f.s);

    /* the same with selective logits skipping: the stable positions' rows
     * (3 in calls 2 and 3) are not computed; the visible ones are (NaN rows
     * would change the revision and the tokens) */
    sts_fixture(&f, &t);
    f.c.skip_logits = true;
    f.s.rows_nan = true;
    CHECK(fx_run(&f, prompt, 3) == 0, "sts + skip logits: %s", f.err.msg);
    CHECK(f.st.logits_skipped == 2 && f.st.revisions == 1 && f.gen[1] == 40 && f.st.sts_stable == 6,
          "sts + skip logits: %lld rows skipped (want 2), %lld revisions", (long long)f.st.logits_skipped,
          (long long)f.st.revisions);
    ts_scripted_free(&f.s);

    /* with a window: the next window starts at the first position that was
     * not stable (4 before call 3, where the window alone would start at the
     * frontier 5), and an accepted draft (7 at .8 from call 3) is visible,
     * re-predicted in block 1's step (.99: stable) */
    sts_fixture(&f, &t);
    f.c.window = 4;
    CHECK(fx_run(&f, prompt, 3) == 0, "sts + window: %s", f.err.msg);
    ok = f.s.n_calls == 6 && call_is(&f, 1, 3, 4, 7) && call_is(&f, 2, 3, 6, 9) && call_is(&f, 3, 4, 5, 9) &&
         call_is(&f, 4, 3, 4, 7) && call_is(&f, 5, 7, 4, 11);
    CHECK(ok, "sts + window: windows wrong");
    if (!ok) print_calls(&f);
    CHECK(f.st.draft_accepted == 1 && f.st.sts_visible == 4 && f.st.sts_stable == 6 && f.st.unstable_at_block_end == 2,
          "sts + window: accepted %lld, visible %lld, stable %lld, unstable %lld", (long long)f.st.draft_accepted,
          (long long)f.st.sts_visible, (long long)f.st.sts_stable, (long long)f.st.unstable_at_block_end);
    ts_scripted_free(&f.s);

    /* visible == stable == the threshold: the threshold decoder's tokens and forwards */
    table tb = {block_script, (int)(sizeof block_script / sizeof block_script[0]), 0.2f};
    int32_t gen[2][8];
    int64_t calls[2];
    for (int k = 0; k < 2; k++) {
        fx_init(&f, &tb, false, 16);
        f.c.n_gen = 8;
        f.c.block = 4;
        f.c.sts = k == 1;
        f.c.visible = f.c.stable = f.c.threshold;
        CHECK(fx_run(&f, prompt, 3) == 0, "sts at one threshold: %s", f.err.msg);
        memcpy(gen[k], f.gen, sizeof gen[k]);
        calls[k] = f.s.n_calls;
        if (k) CHECK(f.st.sts_forced == 2 && f.st.unstable_at_block_end == 2, "sts at one threshold: forced %lld",
                     (long long)f.st.sts_forced);
        ts_scripted_free(&f.s);
    }
    CHECK(!memcmp(gen[0], gen[1], sizeof gen[0]) && calls[0] == calls[1],
          "sts at visible = stable = threshold differs from the threshold decoder (%lld / %lld calls)",
          (long long)calls[0], (long long)calls[1]);

    /* refused */
    sts_fixture(&f, &t);
    f.c.stable = 0.5f;
    CHECK(fx_run(&f, prompt, 3) < 0 && strstr(f.err.msg, "below the visibility"), "stable < visible: %s", f.err.msg);
    f.c.stable = 0.9f;
    f.c.cache = TS_DIFF_CACHE_DUAL;
    CHECK(fx_run(&f, prompt, 3) < 0 && strstr(f.err.msg, "prefix cache"), "sts + dual: %s", f.err.msg);
    f.c.cache = TS_DIFF_CACHE_PREFIX;
    f.c.decoder = TS_DIFF_VANILLA;
    CHECK(fx_run(&f, prompt, 3) < 0 && strstr(f.err.msg, "stabilization"), "sts + vanilla: %s", f.err.msg);
    ts_scripted_free(&f.s);
}

/* Sparse cache refresh (sts .7 / .9, scr_max 8), prompt 3, n_gen 8, block 4:
 *   call 1: block 0 all at .8 -> all visible; the block ends (4 unstable)
 *   call 2: block 0's K/V
 *   block 1, step 0: copy rows [0, 7); call 3 submitted over [7, 11); while
 *     it runs, positions 3..6 are refreshed (refreshes 0..3): 3 .95 own
 *     token -> stable; 4 as 41 at .8 -> revised; 5 .2 -> unchanged; 6 as 42
 *     at .92 -> revised and stable. Call 3: 7 .95 -> stable, 8 .75 ->
 *     visible (9, 10 at .5 stay masked).
 *   step 1: the four rows merged; 4 and 5 chosen; rows [0, 11) copied; call
 *     4 (9, 10 at .95 -> stable: the block ends) beside refreshes 4 and 5:
 *     4 as its own 41 at .95 -> stable. */
static const entry scr_script[] = {
    {1, 3, 0.8f, 0},   {1, 4, 0.8f, 0},   {1, 5, 0.8f, 0},   {1, 6, 0.8f, 0},   {-1, 3, 0.95f, 0},
    {-2, 4, 0.8f, 41}, {-4, 6, 0.92f, 42}, {3, 7, 0.95f, 0},  {3, 8, 0.75f, 0},  {3, 9, 0.5f, 0},
    {3, 10, 0.5f, 0},  {4, 9, 0.95f, 0},   {4, 10, 0.95f, 0}, {-5, 4, 0.95f, 41},
};

/* The fixture's scripted denoiser remade with the CPU refresh path. */
static void fx_with_scr(fixture *f) {
    const int32_t n_ctx = f->s.n_ctx;
    ts_scripted_free(&f->s);
    f->s.scr = true;
    if (ts_scripted_init(&f->s, n_ctx, 256, &f->err) < 0) exit(1);
    f->d = ts_scripted_denoiser(&f->s);
}

static void scr_fixture(fixture *f, table *t, bool shift) {
    fx_init(f, t, shift, 16);
    fx_with_scr(f);
    f->c.n_gen = 8;
    f->c.block = 4;
    f->c.sts = true;
    f->c.scr = true;
}

static bool event_is(const fixture *f, int64_t i, char kind, int32_t pos0, int32_t n, int32_t n_kv) {
    if (i >= f->s.n_events) return false;
    const ts_scripted_event *e = &f->s.events[i];
    return e->kind == kind && e->pos0 == pos0 && e->n == n && (kind == 'M' || kind == 'W' || e->n_kv == n_kv);
}

static void print_events(const fixture *f) {
    for (int64_t i = 0; i < f->s.n_events && i < f->s.cap_calls; i++)
        fprintf(stderr, "  event %lld: %c pos0 %d n %d n_kv %d\n", (long long)i, f->s.events[i].kind,
                f->s.events[i].pos0, f->s.events[i].n, f->s.events[i].n_kv);
}

static void test_scr(void) {
    table t = {scr_script, (int)(sizeof scr_script / sizeof scr_script[0]), 0.2f};
    const int32_t prompt[3] = {5, 6, 7};
    for (int shift = 0; shift < 2; shift++) {
        fixture f;
        scr_fixture(&f, &t, shift == 1);
        CHECK(fx_run(&f, prompt, 3) == 0, "scr (shift %d): %s", shift, f.err.msg);
        const int32_t sh = shift;
        /* the refreshes run between a submit and its wait; merges and copies
         * only at step boundaries, before the next forward */
        bool ok = f.s.n_events == 19 && event_is(&f, 3, 'S', 0, 7, 7) && event_is(&f, 4, 'F', 7 - sh, 4 + sh, 11) &&
                  event_is(&f, 5, 'R', 3 - sh, 1 + sh, 7) && event_is(&f, 8, 'R', 6 - sh, 1 + sh, 7) &&
                  event_is(&f, 9, 'W', 0, 0, 0) && event_is(&f, 10, 'M', 3, 1, 0) && event_is(&f, 13, 'M', 6, 1, 0) &&
                  event_is(&f, 14, 'S', 0, 11, 11) && event_is(&f, 15, 'F', 7 - sh, 4 + sh, 11) &&
                  event_is(&f, 16, 'R', 4 - sh, 1 + sh, 11) && event_is(&f, 17, 'R', 5 - sh, 1 + sh, 11) &&
                  event_is(&f, 18, 'W', 0, 0, 0);
        CHECK(ok, "scr (shift %d): the order of forwards, refreshes, copies and merges is wrong (%lld events)", shift,
              (long long)f.s.n_events);
        if (!ok) print_events(&f);
        CHECK(f.st.scr_refreshed == 6 && f.st.scr_revisions == 2 && f.st.revisions == 2 && f.st.scr_stabilized == 3 &&
                  f.st.scr_merged == 4 && f.st.visible_at_end == 2 && f.st.unstable_at_block_end == 5,
              "scr (shift %d): refreshed %lld revised %lld/%lld stabilized %lld merged %lld visible at end %lld "
              "unstable at block end %lld", shift, (long long)f.st.scr_refreshed, (long long)f.st.scr_revisions,
              (long long)f.st.revisions, (long long)f.st.scr_stabilized, (long long)f.st.scr_merged,
              (long long)f.st.visible_at_end, (long long)f.st.unstable_at_block_end);
        for (int i = 0; i < 8; i++)
            CHECK(f.gen[i] == (i == 1 ? 41 : i == 3 ? 42 : tok_of(3 + i)), "scr (shift %d): gen[%d] = %d", shift, i,
                  f.gen[i]);
        /* the text is handed out at the end, revisions included */
        CHECK(f.seen.n_blocks == 2 && f.seen.n_tokens == 8 && f.seen.tokens[1] == 41 && f.seen.tokens[3] == 42,
              "scr (shift %d): %d blocks handed out, token 1 = %d", shift, f.seen.n_blocks, f.seen.tokens[1]);
        ts_scripted_free(&f.s);
    }

    /* refused: without sts; on a denoiser without the CPU path */
    fixture f;
    scr_fixture(&f, &t, false);
    f.c.sts = false;
    CHECK(fx_run(&f, prompt, 3) < 0 && strstr(f.err.msg, "staged token"), "scr without sts: %s", f.err.msg);
    ts_scripted_free(&f.s);
    fx_init(&f, &t, false, 16);
    f.c.n_gen = 8;
    f.c.block = 4;
    f.c.sts = f.c.scr = true;
    CHECK(fx_run(&f, prompt, 3) < 0 && strstr(f.err.msg, "CPU refresh path"), "scr without the path: %s", f.err.msg);
    ts_scripted_free(&f.s);
}

/* Selective logits skipping: the rows of positions already decided are not
 * computed (the scripted denoiser writes them as NaN, so reading one would
 * change a commit), and every decoder decodes the same tokens in the same
 * forwards as without it. */
static void test_skip_logits(void) {
    const int32_t prompt[3] = {5, 6, 7};
    for (int mode = 0; mode < 4; mode++) {
        table t = {mode == 3 ? window_script : block_script,
                   mode == 3 ? (int)(sizeof window_script / sizeof window_script[0])
                             : (int)(sizeof block_script / sizeof block_script[0]),
                   0.2f};
        int32_t gen[2][8];
        int64_t calls[2], denoise[2], skipped[2];
        for (int k = 0; k < 2; k++) {
            fixture f;
            fx_init(&f, &t, false, 16);
            f.c.n_gen = 8;
            f.c.block = 4;
            if (mode == 1) f.c.cache = TS_DIFF_CACHE_DUAL;
            if (mode == 2) f.c.decoder = TS_DIFF_VANILLA, f.c.steps = 8;
            if (mode == 3) f.c.window = 4;
            f.c.skip_logits = k == 1;
            f.s.rows_nan = true;
            CHECK(fx_run(&f, prompt, 3) == 0, "skip logits, mode %d: %s", mode, f.err.msg);
            memcpy(gen[k], f.gen, sizeof gen[k]);
            calls[k] = f.s.n_calls, denoise[k] = f.st.denoise_forwards, skipped[k] = f.st.logits_skipped;
            ts_scripted_free(&f.s);
        }
        CHECK(!memcmp(gen[0], gen[1], sizeof gen[0]) && calls[0] == calls[1] && denoise[0] == denoise[1],
              "skip logits, mode %d: tokens or forwards differ (%lld / %lld calls)", mode, (long long)calls[0],
              (long long)calls[1]);
        /* prefix: block 0's steps skip 0, 2 (3 and 5 done), 3 rows, block 1's
         * one step 0; dual: the first step's 4 suffix rows more; vanilla:
         * 11 rows a step, those of the block's masked computed (7 + 8 + 9 +
         * 10 per block); window: 0, 2 (3, 5), 2 (5, 6), 1 (7, accepted) */
        static const int64_t want[4] = {5, 9, 68, 5};
        CHECK(skipped[0] == 0 && skipped[1] == want[mode],
              "skip logits, mode %d: %lld rows skipped (want %lld)", mode, (long long)skipped[1],
              (long long)want[mode]);
    }
}

/* The step loops allocate nothing: a run of 8 tokens and one of 64 make the
 * same number of malloc calls. */
static void test_no_alloc_in_loop(void) {
    table t = {NULL, 0, 0.2f};
    const int32_t prompt[3] = {5, 6, 7};
    long counts[2][6];
    for (int k = 0; k < 2; k++)
        for (int mode = 0; mode < 6; mode++) {
            fixture f;
            fx_init(&f, &t, mode == 1, 80);
            if (mode == 5) { /* sts + scr */
                fx_with_scr(&f);
                f.c.sts = f.c.scr = true;
                f.c.visible = 0.1f; /* every position visible at once, none stable: refreshes every step */
                f.c.stable = 0.5f;
            }
            f.c.n_gen = k ? 64 : 8;
            f.c.block = 4;
            if (mode == 2) {
                f.c.decoder = TS_DIFF_VANILLA;
                f.c.steps = f.c.n_gen;
            } else if (mode == 3 || mode == 4) {
                f.c.window = 8;
                f.c.lookahead = 4;
                f.c.sts = mode == 4;
            } else {
                f.c.cache = mode == 1 ? TS_DIFF_CACHE_DUAL : TS_DIFF_CACHE_PREFIX;
            }
            long before = n_mallocs;
            CHECK(fx_run(&f, prompt, 3) == 0, "%s", f.err.msg);
            counts[k][mode] = n_mallocs - before;
            ts_scripted_free(&f.s);
        }
    for (int mode = 0; mode < 6; mode++)
        CHECK(counts[0][mode] == counts[1][mode] && counts[0][mode] > 0,
              "mode %d: %ld mallocs for 8 tokens, %ld for 64 (nothing may be allocated per step)", mode,
              counts[0][mode], counts[1][mode]);
}

int main(void) {
    test_schedule();
    test_confidence();
    test_select();
    test_block_prefix();
    test_block_windows();
    test_early_stop();
    test_shift();
    test_vanilla();
    test_vanilla_order();
    test_cancel_and_errors();
    test_window();
    test_skip_logits();
    test_sts();
    test_scr();
    test_no_alloc_in_loop();
    if (failures) {
        fprintf(stderr, "test_diffusion: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_diffusion: all passed\n");
    return 0;
}
