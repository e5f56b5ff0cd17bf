/* diffusion_tool.c - test and benchmark helper of the diffusion decoders.
 *
 *   diffusion_tool serve MODEL [-t N] [-b N] [-c N] [--kv-f32]
 *       Window-forward server for the numpy references (tests/diffusion_ref.py):
 *       reads one request per line on stdin, on one ts_state:
 *         I                           -> "n_vocab mask shift n_eog eog..."
 *         F POS0 N N_KV WANT T1..TN   -> ts_forward_window; "OK" then, when
 *                                        WANT is 1, N rows of n_vocab f32 (binary)
 *         P N                         -> ts_state_set_n_past(N); "OK"
 *         R                           -> empty cache; "OK"
 *       Errors answer "ERR message".
 *   diffusion_tool decode MODEL PROMPT_IDS [--decoder block|vanilla]
 *                 [--cache prefix|dual|none] [--gen N] [--block N] [--steps N]
 *                 [--threshold X] [--eps E] [--alg NAME] [--temp T] [--seed S]
 *                 [--no-early-stop] [-t N] [--kv-f32]
 *       ts_diffuse over the model's denoiser (the library's decoder, not the
 *       public API); prints one JSON object: "gen" (the whole decoded canvas
 *       after the prompt, mask ids where nothing was decoded) and the counters.
 *   --kv-f32 (serve, decode): an f32 KV cache instead of f16, so that the
 *       logits are within ~1e-6 of HF's f32 forward (tests/test_diffusion_hf.py).
 *   diffusion_tool time MODEL --widths 32,64,128 [--prompt N] [--repeat R] [-t N]
 *       Latency of one denoising forward (a window of W masks after an
 *       N-token prefix, all W logits rows) per width: JSON lines with the
 *       median and minimum over R runs (bench/diffusion_bench.py).
 *   diffusion_tool predict [--gen N] [--block N] [--prompt N] [--threshold X]
 *                 [--steps N] [--seed S]
 *       Forward counts of vanilla / block / block+dual / block no-cache /
 *       block+window / block+window+lookahead / block+sts over the scripted
 *       denoiser with a synthetic commit profile (see profile_script), as
 *       JSON lines: what the decoders would do on a model whose confidences
 *       behave like that, not a measurement of any model.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "diffusion/denoiser_state.h"
#include "diffusion/diffusion.h"
#include "model/model.h"

static int usage(void) {
    fprintf(stderr, "usage: diffusion_tool serve MODEL [-t N] [-b N] [-c N] [--kv-f32] | decode MODEL IDS [options] | "
                    "predict [options]\n");
    return 2;
}

typedef struct opts {
    ts_diff_cfg c;
    int32_t n_threads, n_batch, n_ctx, n_prompt;
    bool kv_f32;
} opts;

static const char *alg_names[] = {"low_confidence", "maskgit_plus", "topk_margin", "entropy"};

/* Parses the options shared by the subcommands from argv[i0..]. */
static int parse_opts(int argc, char **argv, int i0, opts *o) {
    o->c = ts_diff_default_cfg();
    o->n_threads = 1;
    o->n_batch = 0;
    o->n_ctx = 0;
    o->n_prompt = 100;
    o->kv_f32 = false;
    o->c.steps = 0; /* default: n_gen (one token per step) */
    for (int i = i0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--no-early-stop")) {
            o->c.early_stop = false;
            continue;
        }
        if (!strcmp(a, "--kv-f32")) {
            o->kv_f32 = true;
            continue;
        }
        if (!strcmp(a, "--skip-logits")) {
            o->c.skip_logits = true;
            continue;
        }
        if (!strcmp(a, "--sts")) {
            o->c.sts = true;
            continue;
        }
        if (!strcmp(a, "--scr")) {
            o->c.scr = true;
            continue;
        }
        if (i + 1 >= argc) return -1;
        const char *v = argv[++i];
        if (!strcmp(a, "-t")) o->n_threads = atoi(v);
        else if (!strcmp(a, "-b")) o->n_batch = atoi(v);
        else if (!strcmp(a, "-c")) o->n_ctx = atoi(v);
        else if (!strcmp(a, "--gen")) o->c.n_gen = atoi(v);
        else if (!strcmp(a, "--block")) o->c.block = atoi(v);
        else if (!strcmp(a, "--steps")) o->c.steps = atoi(v);
        else if (!strcmp(a, "--prompt")) o->n_prompt = atoi(v);
        else if (!strcmp(a, "--threshold")) o->c.threshold = strtof(v, NULL);
        else if (!strcmp(a, "--eps")) o->c.eps = strtof(v, NULL);
        else if (!strcmp(a, "--temp")) o->c.temp = strtof(v, NULL);
        else if (!strcmp(a, "--seed")) o->c.seed = strtoull(v, NULL, 0);
        else if (!strcmp(a, "--visible")) o->c.visible = strtof(v, NULL), o->c.sts = true;
        else if (!strcmp(a, "--stable")) o->c.stable = strtof(v, NULL), o->c.sts = true;
        else if (!strcmp(a, "--window")) o->c.window = atoi(v);
        else if (!strcmp(a, "--lookahead")) o->c.lookahead = atoi(v);
        else if (!strcmp(a, "--lookahead-trigger")) o->c.lookahead_trigger = atoi(v);
        else if (!strcmp(a, "--decoder")) o->c.decoder = !strcmp(v, "vanilla") ? TS_DIFF_VANILLA : TS_DIFF_BLOCK;
        else if (!strcmp(a, "--cache"))
            o->c.cache = !strcmp(v, "dual") ? TS_DIFF_CACHE_DUAL : !strcmp(v, "none") ? TS_DIFF_CACHE_NONE
                                                                                      : TS_DIFF_CACHE_PREFIX;
        else if (!strcmp(a, "--alg")) {
            int k = 0;
            while (k < 4 && strcmp(v, alg_names[k])) k++;
            if (k == 4) return -1;
            o->c.alg = (enum ts_diff_alg)k;
        } else
            return -1;
    }
    if (o->c.steps <= 0) o->c.steps = o->c.n_gen;
    return 0;
}

static void print_stats(const ts_diff_stats *s) {
    int last = 0;
    for (int k = 0; k < TS_DIFF_HIST_LEN; k++)
        if (s->commit_hist[k]) last = k;
    printf("\"forwards\":%lld,\"denoise_forwards\":%lld,\"tokens_evaluated\":%lld,\"tokens_committed\":%lld,"
           "\"commit_per_forward_hist\":[",
           (long long)s->forwards, (long long)s->denoise_forwards, (long long)s->tokens_evaluated,
           (long long)s->tokens_committed);
    for (int k = 0; k <= last; k++) printf("%s%lld", k ? "," : "", (long long)s->commit_hist[k]);
    printf("],\"early_stop_at\":");
    if (s->early_stop_at >= 0) printf("%d", s->early_stop_at);
    else printf("null");
    printf(",\"end\":%d,\"n_blocks\":%d,\"prefill_ms\":%.3f,\"denoise_ms\":%.3f", (int)s->end, s->n_blocks_done,
           s->prefill_ms, s->denoise_ms);
    printf(",\"window_max\":%lld,\"draft_evals\":%lld,\"draft_accepted\":%lld,\"lookahead_tokens\":%lld,"
           "\"logits_skipped\":%lld",
           (long long)s->window_max, (long long)s->draft_evals, (long long)s->draft_accepted,
           (long long)s->lookahead_tokens, (long long)s->logits_skipped);
    printf(",\"sts_visible\":%lld,\"sts_forced\":%lld,\"sts_stable\":%lld,\"revisions\":%lld,"
           "\"unstable_at_block_end\":%lld",
           (long long)s->sts_visible, (long long)s->sts_forced, (long long)s->sts_stable, (long long)s->revisions,
           (long long)s->unstable_at_block_end);
    printf(",\"visible_at_end\":%lld,\"scr_refreshed\":%lld,\"scr_revisions\":%lld,\"scr_stabilized\":%lld,"
           "\"scr_merged\":%lld",
           (long long)s->visible_at_end, (long long)s->scr_refreshed, (long long)s->scr_revisions,
           (long long)s->scr_stabilized, (long long)s->scr_merged);
}

/* ---- serve ---- */

static int serve(const char *path, const opts *o) {
    ts_err e = {{0}};
    ts_mdl *m = ts_mdl_load(path, NULL, &e);
    if (!m) {
        fprintf(stderr, "diffusion_tool: %s\n", e.msg);
        return 1;
    }
    const ts_hparams *hp = ts_mdl_hparams(m);
    ts_state_params sp = ts_state_default_params();
    sp.n_threads = o->n_threads;
    sp.kv_f32 = o->kv_f32;
    sp.n_ctx = o->n_ctx > 0 ? o->n_ctx : hp->n_ctx_train;
    sp.n_batch = o->n_batch > 0 ? o->n_batch : sp.n_ctx;
    ts_state *s = ts_state_new(m, &sp, &e);
    if (!s) {
        fprintf(stderr, "diffusion_tool: %s\n", e.msg);
        ts_mdl_free(m);
        return 1;
    }
    const int32_t V = hp->n_vocab, cap = ts_state_n_batch(s);
    float *logits = malloc((size_t)cap * (size_t)V * sizeof(float));
    int32_t *toks = malloc((size_t)cap * sizeof(int32_t));
    char *line = NULL;
    size_t line_cap = 0;
    int rc = 0;
    while (logits && toks && getline(&line, &line_cap, stdin) > 0) {
        char *p = line, *end;
        char cmd = *p++;
        if (cmd == 'Q') break;
        if (cmd == 'I') {
            const ts_tokenizer *t = ts_mdl_tokenizer(m);
            int32_t eog[64], n_eog = 0;
            for (int32_t v = 0; v < V && n_eog < 64; v++)
                if (ts_tok_is_eog(t, v)) eog[n_eog++] = v;
            printf("%d %d %d %d", V, hp->mask_token_id, hp->shift_logits, n_eog);
            for (int32_t i = 0; i < n_eog; i++) printf(" %d", eog[i]);
            printf("\n");
        } else if (cmd == 'R') {
            ts_state_kv_truncate(s, 0);
            printf("OK\n");
        } else if (cmd == 'P') {
            long n = strtol(p, &end, 10);
            if (ts_state_set_n_past(s, (int32_t)n, &e) < 0) printf("ERR %s\n", e.msg);
            else printf("OK\n");
        } else if (cmd == 'F') {
            long v[4];
            for (int k = 0; k < 4; k++) {
                v[k] = strtol(p, &end, 10);
                p = end;
            }
            int32_t n = (int32_t)v[1];
            if (n < 0 || n > cap) {
                printf("ERR window of %d tokens outside [0, %d]\n", n, cap);
                fflush(stdout);
                continue;
            }
            for (int32_t i = 0; i < n; i++) {
                toks[i] = (int32_t)strtol(p, &end, 10);
                p = end;
            }
            if (ts_forward_window(s, toks, n, (int32_t)v[0], (int32_t)v[2], v[3] ? logits : NULL, &e) < 0) {
                printf("ERR %s\n", e.msg);
            } else {
                printf("OK\n");
                if (v[3]) fwrite(logits, sizeof(float) * (size_t)V, (size_t)n, stdout);
            }
        } else {
            printf("ERR unknown request '%c'\n", cmd);
        }
        fflush(stdout);
    }
    if (!logits || !toks) rc = 1;
    free(line);
    free(logits);
    free(toks);
    ts_state_free(s);
    ts_mdl_free(m);
    return rc;
}

/* ---- decode ---- */

static bool tool_is_eog(void *ud, int32_t token) { return ts_tok_is_eog(ud, token); }

static int decode(const char *path, const char *ids, opts *o) {
    int32_t prompt[4096], np = 0;
    for (const char *p = ids; *p && np < 4096;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) return usage();
        prompt[np++] = (int32_t)v;
        p = *end == ',' ? end + 1 : end;
    }
    ts_err e = {{0}};
    ts_mdl *m = ts_mdl_load(path, NULL, &e);
    if (!m) {
        fprintf(stderr, "diffusion_tool: %s\n", e.msg);
        return 1;
    }
    const ts_hparams *hp = ts_mdl_hparams(m);
    int32_t need = ts_diff_max_window(&o->c, np, hp->shift_logits != 0, &e);
    if (need < 0) {
        fprintf(stderr, "diffusion_tool: %s\n", e.msg);
        ts_mdl_free(m);
        return 1;
    }
    ts_state_params sp = ts_state_default_params();
    sp.n_threads = o->n_threads;
    sp.kv_f32 = o->kv_f32;
    sp.n_ctx = np + o->c.n_gen;
    sp.n_batch = o->n_batch > 0 ? o->n_batch : need;
    ts_state *s = ts_state_new(m, &sp, &e);
    ts_state_scr scr = {s, NULL}; /* --scr: the CPU path */
    ts_denoiser d;
    int32_t *gen = malloc((size_t)o->c.n_gen * sizeof *gen);
    ts_diff_stats st;
    int rc = 1;
    o->c.is_eog = tool_is_eog;
    o->c.ud = (void *)ts_mdl_tokenizer(m);
    if (s && gen && ts_state_denoiser(s, m, -1, &d, &e) == 0 &&
        (!o->c.scr || ts_state_denoiser_scr(&d, &scr, m, &e) == 0) && ts_diffuse(&d, prompt, np, &o->c, gen, &st, &e) == 0) {
        printf("{\"gen\":[");
        for (int32_t i = 0; i < o->c.n_gen; i++) printf("%s%d", i ? "," : "", gen[i]);
        printf("],");
        print_stats(&st);
        printf("}\n");
        rc = 0;
    } else {
        fprintf(stderr, "diffusion_tool: %s\n", e.msg[0] ? e.msg : "out of memory");
    }
    free(gen);
    ts_state_scr_free(&scr);
    ts_state_free(s);
    ts_mdl_free(m);
    return rc;
}

/* ---- time ---- */

static double ms_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int time_windows(const char *path, const char *widths, const opts *o, int repeat) {
    int32_t w[16], nw = 0, wmax = 0;
    for (const char *p = widths; *p && nw < 16;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1) return usage();
        w[nw++] = (int32_t)v;
        if (v > wmax) wmax = (int32_t)v;
        p = *end == ',' ? end + 1 : end;
    }
    if (repeat < 1 || repeat > 64) repeat = 3;
    ts_err e = {{0}};
    ts_mdl *m = ts_mdl_load(path, NULL, &e);
    if (!m) {
        fprintf(stderr, "diffusion_tool: %s\n", e.msg);
        return 1;
    }
    const ts_hparams *hp = ts_mdl_hparams(m);
    const int32_t np = o->n_prompt;
    ts_state_params sp = ts_state_default_params();
    sp.n_threads = o->n_threads;
    sp.n_ctx = np + wmax;
    sp.n_batch = np > wmax ? np : wmax;
    ts_state *s = ts_state_new(m, &sp, &e);
    int32_t *toks = malloc((size_t)sp.n_batch * sizeof *toks);
    float *logits = malloc((size_t)wmax * (size_t)hp->n_vocab * sizeof(float));
    const int32_t mask = hp->mask_token_id >= 0 ? hp->mask_token_id : 0;
    int rc = 1;
    if (!s || !toks || !logits) goto done;
    for (int32_t i = 0; i < np; i++) toks[i] = 1 + i % (hp->n_vocab - 1 > 1000 ? 1000 : hp->n_vocab - 1);
    double t0 = ms_now();
    if (ts_forward_window(s, toks, np, 0, np, NULL, &e) < 0) goto done;
    printf("{\"what\":\"prefill\",\"tokens\":%d,\"ms\":%.3f,\"threads\":%d}\n", np, ms_now() - t0,
           ts_state_n_threads(s));
    fflush(stdout);
    for (int k = 0; k < nw; k++) {
        double t[64];
        for (int32_t i = 0; i < w[k]; i++) toks[i] = mask;
        for (int r = 0; r < repeat; r++) {
            double a = ms_now();
            if (ts_forward_window(s, toks, w[k], np, np + w[k], logits, &e) < 0) goto done;
            t[r] = ms_now() - a;
        }
        qsort(t, (size_t)repeat, sizeof t[0], cmp_double);
        printf("{\"what\":\"forward\",\"width\":%d,\"prefix\":%d,\"median_ms\":%.3f,\"min_ms\":%.3f,"
               "\"repeat\":%d,\"threads\":%d}\n",
               w[k], np, t[repeat / 2], t[0], repeat, ts_state_n_threads(s));
        fflush(stdout);
    }
    rc = 0;
done:
    if (rc) fprintf(stderr, "diffusion_tool: %s\n", e.msg[0] ? e.msg : "out of memory");
    free(toks);
    free(logits);
    ts_state_free(s);
    ts_mdl_free(m);
    return rc;
}

/* ---- predict ---- */

/* A synthetic commit profile standing in for a trained model, where a
 * masked position is easy when the text to its left is known: confidence
 * = base(pos) - 0.03 * (d - 1), d = distance to the nearest committed token
 * on the left, base(pos) in [0.88, 1.0) from a hash of the position. With
 * threshold 0.9 a step commits about two positions on average, in the range
 * of the 2-3 tokens per forward Fast-dLLM reports for LLaDA on GSM8K. */
static void profile_script(void *ud, int64_t call, int32_t pos, const int32_t *canvas, int32_t *token, float *conf) {
    (void)call;
    const int32_t mask = *(const int32_t *)ud;
    int32_t d = 1;
    while (pos - d >= 0 && canvas[pos - d] == mask) d++;
    uint32_t h = (uint32_t)pos * 2654435761u;
    h ^= h >> 15;
    float base = 0.88f + 0.12f * (float)(h % 1000u) / 1000.0f;
    float c = base - 0.03f * (float)(d - 1);
    *conf = c < 0.15f ? 0.15f : c;
    *token = 1 + pos % 40;
}

static int predict(opts *o) {
    const int32_t np = o->n_prompt, L = np + o->c.n_gen;
    int32_t mask = 255;
    int32_t *prompt = malloc((size_t)np * sizeof *prompt), *gen = malloc((size_t)o->c.n_gen * sizeof *gen);
    if (!prompt || !gen) return 1;
    for (int32_t i = 0; i < np; i++) prompt[i] = 1 + i % 40;
    static const char *names[] = {"vanilla", "block", "block+dual", "block no-cache", "block+window",
                                  "block+window+lookahead", "block+sts"};
    int rc = 0;
    for (int k = 0; k < 7; k++) {
        ts_scripted sc;
        memset(&sc, 0, sizeof sc);
        sc.n_vocab = 256;
        sc.mask_id = mask;
        sc.script = profile_script;
        sc.ud = &mask;
        ts_err e = {{0}};
        if (ts_scripted_init(&sc, L, 0, &e) < 0) return 1;
        ts_denoiser d = ts_scripted_denoiser(&sc);
        ts_diff_cfg c = o->c;
        c.decoder = k == 0 ? TS_DIFF_VANILLA : TS_DIFF_BLOCK;
        c.cache = k == 2 ? TS_DIFF_CACHE_DUAL : k == 3 ? TS_DIFF_CACHE_NONE : TS_DIFF_CACHE_PREFIX;
        /* multi-block speculative decoding: a window of one block; lookahead
         * half a block more once 4 positions are left */
        c.window = k >= 4 ? c.block : 0;
        c.lookahead = k == 5 ? c.block / 2 : 0;
        c.sts = k == 6; /* staged token stabilization at visible / stable (0.7 / 0.9 unless given) */
        ts_diff_stats st;
        if (ts_diffuse(&d, prompt, np, &c, gen, &st, &e) < 0) {
            fprintf(stderr, "diffusion_tool: %s\n", e.msg);
            rc = 1;
        } else {
            printf("{\"decoder\":\"%s\",\"source\":\"scripted profile (prediction)\",\"prompt\":%d,\"gen\":%d,"
                   "\"block\":%d,\"steps\":%d,\"threshold\":%g,",
                   names[k], np, c.n_gen, c.block, c.steps, (double)c.threshold);
            print_stats(&st);
            printf("}\n");
        }
        ts_scripted_free(&sc);
    }
    free(prompt);
    free(gen);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage();
    opts o;
    if (!strcmp(argv[1], "serve") && argc >= 3) {
        if (parse_opts(argc, argv, 3, &o) < 0) return usage();
        return serve(argv[2], &o);
    }
    if (!strcmp(argv[1], "decode") && argc >= 4) {
        if (parse_opts(argc, argv, 4, &o) < 0) return usage();
        return decode(argv[2], argv[3], &o);
    }
    if (!strcmp(argv[1], "time") && argc >= 5 && !strcmp(argv[3], "--widths")) {
        int repeat = 3;
        char *rest[32];
        int nr = 0;
        for (int i = 5; i < argc && nr < 30; i++) { /* --repeat is this subcommand's own */
            if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
            else rest[nr++] = argv[i];
        }
        if (parse_opts(nr, rest, 0, &o) < 0) return usage();
        return time_windows(argv[2], argv[4], &o, repeat);
    }
    if (!strcmp(argv[1], "predict")) {
        if (parse_opts(argc, argv, 2, &o) < 0) return usage();
        return predict(&o);
    }
    return usage();
}
