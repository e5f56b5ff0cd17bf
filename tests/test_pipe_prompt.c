/* test_pipe_prompt.c - the prompt stream on two engines (ts_prompt_pipe,
 * seed 002's pipeline over an AR prompt's chunks x layers) against one
 * engine's prefill of the same prompts:
 *   test_pipe_prompt MODEL A B REF same [quick] [one-copy]
 *     every cut k (quick: every 7th and both ends) through A + B: each
 *     prompt's next-token logits bit-identical to a context prefilled on
 *     REF ("none": the CPU; else a prefill device taking every chunk), and
 *     the whole-prompt baselines (A alone, B alone, both) too; one-copy:
 *     engines reading one layout, B maps A's packed weights (shared bytes
 *     > 0) and, with own_copies, packs its own (0 shared, a middle cut's
 *     logits the same);
 *   test_pipe_prompt MODEL A B REF nmse BOUND [quick]
 *     the same within a normalised MSE of BOUND (engines whose arithmetic
 *     differs); prints the worst.
 *   test_pipe_prompt MODEL A B REF diffuse [quick]
 *     a diffusion LLM (the vanilla decoder: 8 steps over a canvas of 12
 *     prompt + 16 generated tokens): every cut's decoded tokens identical
 *     to ts_context_diffuse's on REF, and a block decoder refused.
 * The prefill modes also check the refusals (prompts of different chunk
 * counts, an unknown engine). Three prompts of 40 tokens in chunks of 16
 * (16, 16, 8): B = 3 x n_layer block executions, the last chunk narrower
 * than the rest. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera.h"

#define N_PROMPTS 3
#define PROMPT_LEN 40
#define CHUNK 16

static int failures;
#define CHECK(c, ...)                                                                                                  \
    do {                                                                                                               \
        if (!(c)) {                                                                                                    \
            failures++;                                                                                                \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                       \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fprintf(stderr, "\n");                                                                                     \
        }                                                                                                              \
    } while (0)

typedef struct got {
    float *logits; /* [N_PROMPTS + 1][n_vocab]: by request index (request i is prompt i % N_PROMPTS) */
    int n_vocab;
    int seen[N_PROMPTS + 1]; /* one element per request: each written by one thread */
} got;

static bool on_logits(int32_t i, const float *logits, int32_t n_vocab, void *user) {
    got *g = user;
    if (i >= 0 && i <= N_PROMPTS && n_vocab == g->n_vocab) {
        memcpy(g->logits + (size_t)i * (size_t)n_vocab, logits, (size_t)n_vocab * sizeof(float));
        g->seen[i] = 1;
    }
    return true;
}

/* NMSE of a against the reference r */
static double nmse(const float *a, const float *r, int n) {
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        const double d = (double)a[i] - r[i];
        num += d * d;
        den += (double)r[i] * r[i];
    }
    return den > 0 ? num / den : num;
}

static bool same_bits(const float *a, const float *b, int n, int *at) {
    for (int i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float))) {
            *at = i;
            return false;
        }
    return true;
}

/* A context on REF ("none": the CPU) taking every chunk of `width` tokens
 * there, for the one-engine reference; NULL (said why) when it does not open. */
static ts_context *ref_context(ts_model *m, const char *ref_dev, int n_ctx, int width) {
    ts_error err = {0};
    ts_context_params cp = ts_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = width;
    cp.n_threads = 1;
    cp.chunk = width;
    cp.prefill_min_tokens = 1;
    cp.prefill_device = ref_dev;
    ts_context *c = NULL;
    if (ts_context_create(m, &cp, &c, &err) != TS_OK) fprintf(stderr, "context: %s\n", err.message);
    return c;
}

/* The reference device did not take the run (skip: 77). */
static bool ref_fell_back(const ts_context *c, const char *ref_dev) {
    ts_stats cs = TS_STRUCT_INIT(ts_stats);
    ts_context_get_stats(c, &cs);
    if (!strcmp(ref_dev, "none") || !cs.device_fallback) return false;
    fprintf(stderr, "skip: reference device %s: %s\n", ref_dev, cs.device_fallback);
    return true;
}

/* The stream of the prompts on pp's engines and its info, or NULL (said why). */
static ts_prompt_pipe *open_stream(ts_model *m, const int32_t *prompts, const int32_t *lens,
                                   const ts_prompt_pipe_params *pp, ts_stream_info *in) {
    ts_error err = {0};
    ts_prompt_pipe *p = NULL;
    if (ts_prompt_pipe_open(m, prompts, lens, N_PROMPTS, pp, &p, &err) != TS_OK) {
        fprintf(stderr, "FAIL: open %s + %s: %s\n", pp->engine_a, pp->engine_b, err.message);
        return NULL;
    }
    ts_prompt_pipe_get_info(p, in);
    return p;
}

/* Whether pp's engines A / B cannot run on this machine (e.g. vnni on a CPU
 * without AVX-512 VNNI): then the test skips (77) with the reason, rather
 * than failing the refusal checks, which expect the engines to open. */
static bool engine_unavailable(const ts_model *m, const int32_t *prompts, const int32_t *lens,
                               const ts_prompt_pipe_params *pp) {
    ts_error e = {0};
    ts_prompt_pipe *p = NULL;
    if (ts_prompt_pipe_open(m, prompts, lens, N_PROMPTS, pp, &p, &e) == TS_OK) {
        ts_prompt_pipe_free(p);
        return false;
    }
    if (!strstr(e.message, "unavailable")) return false; /* the checks below say what is wrong */
    fprintf(stderr, "skip: %s\n", e.message);
    return true;
}

/* ---- a diffusion LLM ---- */

#define D_PROMPT 12
#define D_GEN 16

typedef struct dgot {
    int32_t tokens[N_PROMPTS + 1][D_GEN];
    int seen[N_PROMPTS + 1];
} dgot;

static bool on_tokens(int32_t i, const int32_t *tokens, int32_t n, void *user) {
    dgot *g = user;
    if (i >= 0 && i <= N_PROMPTS && n == D_GEN) {
        memcpy(g->tokens[i], tokens, sizeof(int32_t) * D_GEN);
        g->seen[i] = 1;
    }
    return true;
}

static int diffuse_case(ts_model *m, const char *ea, const char *eb, const char *ref_dev, bool quick) {
    ts_error err = {0};
    int32_t prompts[N_PROMPTS * D_PROMPT], lens[N_PROMPTS];
    for (int i = 0; i < N_PROMPTS; i++) {
        lens[i] = D_PROMPT;
        for (int t = 0; t < D_PROMPT; t++) prompts[i * D_PROMPT + t] = 20 + (i * 131 + t * 37) % 580;
    }
    ts_diffusion_params dp = ts_diffusion_default_params();
    dp.decoder = TS_DIFFUSION_VANILLA;
    dp.n_gen = D_GEN;
    dp.block = 8;
    dp.steps = 8;
    dp.early_stop = false;
    {
        ts_prompt_pipe_params probe = ts_prompt_pipe_default_params();
        probe.engine_a = ea, probe.engine_b = eb, probe.diffusion = &dp;
        if (engine_unavailable(m, prompts, lens, &probe)) return 77;
    }
    /* the reference: each prompt decoded in a context on REF */
    int32_t ref[N_PROMPTS][D_GEN], n_ref[N_PROMPTS];
    for (int i = 0; i < N_PROMPTS; i++) {
        ts_context *c = ref_context(m, ref_dev, D_PROMPT + D_GEN, D_PROMPT + D_GEN);
        if (!c) return 1;
        if (ts_context_diffuse(c, prompts + i * D_PROMPT, D_PROMPT, &dp, ref[i], D_GEN, &n_ref[i], NULL) != TS_OK) {
            fprintf(stderr, "diffuse: %s\n", ts_last_error(c));
            return 1;
        }
        if (ref_fell_back(c, ref_dev)) {
            ts_context_free(c);
            return 77;
        }
        ts_context_free(c);
    }
    ts_prompt_pipe_params pp = ts_prompt_pipe_default_params();
    pp.engine_a = ea, pp.engine_b = eb;
    ts_prompt_pipe *p = NULL;
    {
        ts_diffusion_params bad = dp;
        bad.decoder = TS_DIFFUSION_BLOCK;
        pp.diffusion = &bad;
        CHECK(ts_prompt_pipe_open(m, prompts, lens, N_PROMPTS, &pp, &p, &err) == TS_ERR_UNSUPPORTED &&
                  strstr(err.message, "vanilla"),
              "block decoder: %s", err.message);
    }
    dgot g;
    memset(&g, 0, sizeof g);
    pp.diffusion = &dp, pp.on_tokens = on_tokens, pp.user_data = &g;
    ts_stream_info in;
    if (!(p = open_stream(m, prompts, lens, &pp, &in))) return 1;
    const int B = in.n_blocks;
    CHECK(B == dp.steps * in.step_blocks, "B %d for %d steps of %d layers", B, dp.steps, in.step_blocks);
    /* the rates first: its probes leave slots part-way (the next start drops them) */
    ts_stream_rates solo, co;
    CHECK(ts_prompt_pipe_measure(p, 0, &solo, &co, &err) == TS_OK, "measure: %s", err.message);
    int runs = 0;
    const int L = in.step_blocks;
    for (int k = 0; k <= B + 3; k++) {
        /* quick: both ends, around the first step boundary, the middle, and the baselines */
        if (quick && k <= B && k > 1 && k != L - 1 && k != L && k != L + 1 && k != B / 2 && k < B - 1) continue;
        ts_stream_result r;
        memset(g.seen, 0, sizeof g.seen);
        const int n_req = N_PROMPTS + 1;
        ts_status st = k <= B ? ts_prompt_pipe_run(p, k, n_req, NULL, 0, &r, &err)
                              : ts_prompt_pipe_run_whole(p, (uint32_t)(k - B), n_req, &r, &err);
        CHECK(st == TS_OK, "cut %d: %s", k, err.message);
        if (st != TS_OK) break;
        runs++;
        for (int i = 0; i < n_req; i++) {
            CHECK(g.seen[i], "cut %d: no tokens of request %d", k, i);
            const int pi = i % N_PROMPTS;
            for (int t = 0; t < n_ref[pi]; t++)
                if (g.tokens[i][t] != ref[pi][t]) {
                    CHECK(0, "cut %d (%s) %s + %s, request %d: token %d is %d, one engine decodes %d", k,
                          k <= B ? "stream" : "baseline", ea, eb, i, t, (int)g.tokens[i][t], (int)ref[pi][t]);
                    break;
                }
        }
    }
    ts_prompt_pipe_free(p);
    if (!failures)
        printf("%s + %s (diffusion, %d steps x %d layers): %d runs (%s cuts of %d, baselines) of %d requests: every "
           "token as %s decodes it alone\n", ea, eb, dp.steps, in.step_blocks, runs, quick ? "sampled" : "all", B,
           N_PROMPTS + 1, ref_dev);
    return failures ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: test_pipe_prompt MODEL A B REF same|nmse [BOUND] [quick]\n");
        return 2;
    }
    const char *path = argv[1], *ea = argv[2], *eb = argv[3], *ref_dev = argv[4];
    if (!strcmp(argv[5], "diffuse")) {
        ts_error e = {0};
        ts_model *dm = NULL;
        if (ts_model_load(path, NULL, &dm, &e) != TS_OK) {
            fprintf(stderr, "skip: %s\n", e.message);
            return 77;
        }
        const int rc = diffuse_case(dm, ea, eb, ref_dev, argc > 6 && !strcmp(argv[6], "quick"));
        ts_model_free(dm);
        if (failures) fprintf(stderr, "%d failures\n", failures);
        return rc;
    }
    const bool exact = !strcmp(argv[5], "same");
    int ai = 6;
    double bound = 0;
    if (!exact) bound = atof(argv[ai++]);
    bool quick = false, one_copy = false;
    for (; ai < argc; ai++) *(!strcmp(argv[ai], "one-copy") ? &one_copy : &quick) = true;

    ts_error err = {0};
    ts_model *m = NULL;
    if (ts_model_load(path, NULL, &m, &err) != TS_OK) {
        fprintf(stderr, "skip: %s\n", err.message);
        return 77;
    }
    ts_model_info mi = TS_STRUCT_INIT(ts_model_info);
    ts_model_get_info(m, &mi);
    const int V = mi.n_vocab;
    /* three prompts of real text */
    static const char *const text =
        "The printing press was invented by Johannes Gutenberg around 1440. It made books cheaper and faster to "
        "produce, and within decades presses were running in more than two hundred European cities. Scholars could "
        "compare identical copies of a text, which changed how knowledge was checked and shared across the continent.";
    int32_t toks[512];
    int64_t n_text = 0;
    if (ts_model_tokenize(m, text, strlen(text), false, false, toks, 512, &n_text, &err) != TS_OK ||
        n_text < 20) {
        fprintf(stderr, "tokenize: %s (%d tokens)\n", err.message, (int)n_text);
        return 1;
    }
    int32_t prompts[N_PROMPTS * PROMPT_LEN], lens[N_PROMPTS];
    for (int i = 0; i < N_PROMPTS; i++) {
        lens[i] = PROMPT_LEN;
        for (int t = 0; t < PROMPT_LEN; t++) prompts[i * PROMPT_LEN + t] = toks[(i * 17 + t) % n_text];
    }
    {
        ts_prompt_pipe_params probe = ts_prompt_pipe_default_params();
        probe.engine_a = ea, probe.engine_b = eb, probe.chunk = CHUNK;
        if (engine_unavailable(m, prompts, lens, &probe)) {
            ts_model_free(m);
            return 77;
        }
    }
    /* the reference: one context per prompt, prefilled on REF */
    float *ref = malloc(sizeof(float) * (size_t)V * N_PROMPTS);
    for (int i = 0; i < N_PROMPTS; i++) {
        ts_context *c = ref_context(m, ref_dev, 64, CHUNK);
        if (!c) return 1;
        if (ts_context_eval(c, prompts + i * PROMPT_LEN, PROMPT_LEN, NULL) != TS_OK) {
            fprintf(stderr, "eval: %s\n", ts_last_error(c));
            return 1;
        }
        if (ref_fell_back(c, ref_dev)) { /* skip, leaving nothing for LeakSanitizer to report */
            ts_context_free(c);
            free(ref);
            ts_model_free(m);
            return 77;
        }
        memcpy(ref + (size_t)i * V, ts_context_logits(c), sizeof(float) * (size_t)V);
        ts_context_free(c);
    }

    /* refusals */
    {
        ts_prompt_pipe_params pp = ts_prompt_pipe_default_params();
        pp.engine_a = ea, pp.engine_b = eb, pp.chunk = CHUNK;
        ts_prompt_pipe *p = NULL;
        const int32_t bad[2] = {PROMPT_LEN, CHUNK}; /* 3 chunks and 1 */
        CHECK(ts_prompt_pipe_open(m, prompts, bad, 2, &pp, &p, &err) == TS_ERR_INVALID_ARG &&
                  strstr(err.message, "same number of block executions"),
              "prompts of 3 and 1 chunks: %s", err.message);
        pp.engine_b = "no-such-engine";
        CHECK(ts_prompt_pipe_open(m, prompts, lens, N_PROMPTS, &pp, &p, &err) != TS_OK &&
                  strstr(err.message, "no-such-engine"),
              "unknown engine: %s", err.message);
        CHECK(!p, "no stream after a refusal");
    }

    got g = {calloc((size_t)V * (N_PROMPTS + 1), sizeof(float)), V, {0}};
    ts_prompt_pipe_params pp = ts_prompt_pipe_default_params();
    pp.engine_a = ea, pp.engine_b = eb, pp.chunk = CHUNK, pp.on_logits = on_logits, pp.user_data = &g;
    ts_stream_info in;
    ts_prompt_pipe *p = open_stream(m, prompts, lens, &pp, &in);
    if (!p) return 1;
    const int B = in.n_blocks;
    CHECK(B == 3 * in.step_blocks, "B %d for 3 chunks of %d layers", B, in.step_blocks);
    if (one_copy) {
        CHECK(in.shared_bytes > 0, "%s + %s: B maps none of A's packed weights", ea, eb);
        /* B's own copy: none shared, the same logits at a middle cut */
        ts_prompt_pipe_params po = pp;
        po.own_copies = true;
        ts_stream_info io;
        ts_prompt_pipe *q = open_stream(m, prompts, lens, &po, &io);
        ts_stream_result r;
        CHECK(q && io.shared_bytes == 0, "own copies: %lld bytes shared", q ? (long long)io.shared_bytes : -1LL);
        memset(g.seen, 0, sizeof g.seen);
        CHECK(q && ts_prompt_pipe_run(q, B / 2, N_PROMPTS, NULL, 0, &r, &err) == TS_OK, "own copies: %s", err.message);
        for (int i = 0; q && i < N_PROMPTS; i++) {
            int at = -1;
            CHECK(g.seen[i] && same_bits(g.logits + (size_t)i * V, ref + (size_t)i * V, V, &at),
                  "own copies, cut %d, request %d: logit %d differs", B / 2, i, at);
        }
        ts_prompt_pipe_free(q);
        printf("%s + %s: %.1f MiB of B's packed weights mapped from A; none with own copies\n", ea, eb,
               (double)in.shared_bytes / 1048576.0);
    }
    double worst = 0;
    int runs = 0;
    /* every cut (quick: a sample with both ends and a chunk boundary), then the three baselines (-1, -2, -3) */
    for (int k = 0; k <= B + 3; k++) {
        if (quick && k <= B && k % 7 && k != B && k != in.step_blocks && k != in.step_blocks + 1) continue;
        ts_stream_result r;
        memset(g.seen, 0, sizeof g.seen);
        const int n_req = N_PROMPTS + 1; /* request 3 is prompt 0 again, in a slot that held another prompt */
        ts_status st = k <= B ? ts_prompt_pipe_run(p, k, n_req, NULL, 0, &r, &err)
                              : ts_prompt_pipe_run_whole(p, (uint32_t)(k - B), n_req, &r, &err);
        char what[48];
        if (k <= B) snprintf(what, sizeof what, "cut %d", k);
        else snprintf(what, sizeof what, "%s", k == B + 1 ? "A alone" : k == B + 2 ? "B alone" : "data parallel");
        CHECK(st == TS_OK, "%s: %s", what, err.message);
        if (st != TS_OK) break;
        for (int i = 0; i < n_req; i++) CHECK(g.seen[i], "%s: no logits of request %d", what, i);
        runs++;
        for (int i = 0; i < n_req; i++) {
            const float *a = g.logits + (size_t)i * V, *rr = ref + (size_t)(i % N_PROMPTS) * V;
            if (exact) {
                int at = -1;
                CHECK(same_bits(a, rr, V, &at), "%s %s + %s, request %d: logit %d is %.9g, one engine gives %.9g", what,
                      ea, eb, i, at, at >= 0 ? (double)a[at] : 0.0, at >= 0 ? (double)rr[at] : 0.0);
            } else {
                const double e = nmse(a, rr, V);
                if (e > worst) worst = e;
                CHECK(e <= bound, "%s %s + %s, request %d: nmse %.3e > %.1e", what, ea, eb, i, e, bound);
            }
        }
    }
    ts_prompt_pipe_free(p);
    free(g.logits);
    free(ref);
    ts_model_free(m);
    if (failures)
        ;
    else if (exact)
        printf("%s + %s: %d runs (%s cuts of %d, baselines) of %d requests: every logit bit-identical to %s alone\n",
               ea, eb, runs, quick ? "sampled" : "all", B, N_PROMPTS + 1, ref_dev);
    else
        printf("%s + %s: %d runs: worst nmse %.3e vs %s (bound %.1e)\n", ea, eb, runs, worst, ref_dev, bound);
    if (failures) fprintf(stderr, "%d failures\n", failures);
    return failures ? 1 : 0;
}
