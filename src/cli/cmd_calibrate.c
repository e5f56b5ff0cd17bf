/* cmd_calibrate.c - `tessera calibrate -m FILE -f CORPUS [-o FILE.calib]`:
 * the calibration sidecar of per-tensor INT8 with shadow outliers (seed 003;
 * docs/ENGINE.md "Calibration").
 *
 * Two passes over the corpus, cut into perplexity windows of -c tokens:
 *   1. the exact CPU forward gathers every matmul input's |x| (ts_calib_*):
 *      each input's clip is the --percentile of |x|, its hot channels those
 *      beyond the clip, and their stability the fraction of windows in which
 *      they were; written as the sidecar.
 *   2. importance (unless --importance-chunks 0): perplexity of the first
 *      windows on --device with calib= that sidecar, once with every layer's
 *      outliers on the CPU and once per layer with that layer's pruned; a
 *      layer's importance is the increase. prune=P drops the least important.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cli_util.h"
#include "tessera.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tessera calibrate -m FILE -f CORPUS [-o OUT] [options]\n"
            "  Measure the activations of every matmul input on CORPUS and write the\n"
            "  sidecar that `--prefill-device amx,act=int8,calib=OUT` reads: per input\n"
            "  the clip of its one INT8 scale, its hot channels and their stability;\n"
            "  per layer the perplexity cost of not computing its outliers (for prune=P).\n"
            "  -m FILE                 the model (GGUF)\n"
            "  -f CORPUS               calibration text (a few thousand tokens or more)\n"
            "  -o OUT                  the sidecar (default: FILE with .calib for .gguf)\n"
            "  -c N                    window in tokens (default 512)\n"
            "  --chunks N              windows of CORPUS to gather (default: all)\n"
            "  --percentile P          the clip: this percentile of |x| (default 99)\n"
            "  --importance-chunks N   windows each importance run scores (default 2; 0: none,\n"
            "                          and prune= then refuses the sidecar)\n"
            "  --device D              where the importance runs (default amx,act=int8; without\n"
            "                          AMX, amx,act=int8,emulate=1)\n"
            "  -t N                    threads (default: the physical cores)\n");
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct run_env {
    ts_model *m;
    const int32_t *ids;
    int32_t n_ctx, n_vocab, bos, n_threads;
    int32_t *win;
    float *rows;
} run_env;

/* Perplexity of windows [0, n) with prefill_device dev (NULL: the CPU);
 * -1 when the device is not used or a window fails. */
static double ppl_on(const run_env *r, const char *dev, int64_t n, bool quiet) {
    ts_context_params cp = ts_context_default_params();
    cp.n_ctx = r->n_ctx;
    cp.n_batch = r->n_ctx;
    cp.n_threads = r->n_threads;
    cp.prefill_device = dev ? dev : "none";
    cp.chunk = r->n_ctx;
    cp.prefill_min_tokens = 2;
    ts_context *ctx = NULL;
    ts_error e = {0};
    if (ts_context_create(r->m, &cp, &ctx, &e) != TS_OK) {
        fprintf(stderr, "error: %s\n", e.message);
        return -1;
    }
    ts_stats st = TS_STRUCT_INIT(ts_stats);
    ts_context_get_stats(ctx, &st);
    if (dev && st.device_fallback) {
        if (!quiet) fprintf(stderr, "error: %s\n", st.device_fallback);
        ts_context_free(ctx);
        return -1;
    }
    cli_ppl_acc acc = {0};
    for (int64_t c = 0; c < n; c++)
        if (cli_score_window(ctx, r->ids + c * r->n_ctx, r->n_ctx, r->bos, r->n_vocab, r->n_ctx, r->win, r->rows,
                             &acc)) {
            ts_context_free(ctx);
            return -1;
        }
    ts_context_free(ctx);
    return exp(acc.nll / (double)acc.count);
}

int cli_calibrate(int argc, char **argv) {
    const char *model = NULL, *corpus = NULL, *out = NULL, *device = NULL;
    int32_t n_ctx = 512, chunks = 0, imp_chunks = 2, threads = 0;
    float pct = 99.0f;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "error: %s: %s\n", a, a[0] == '-' ? "missing value" : "unexpected argument");
            usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "-m")) model = v;
        else if (!strcmp(a, "-f")) corpus = v;
        else if (!strcmp(a, "-o")) out = v;
        else if (!strcmp(a, "--device")) device = v;
        else if (!strcmp(a, "-c")) { if (cli_parse_i32(a, v, 8, &n_ctx)) return 2; }
        else if (!strcmp(a, "--chunks")) { if (cli_parse_i32(a, v, 1, &chunks)) return 2; }
        else if (!strcmp(a, "--importance-chunks")) { if (cli_parse_i32(a, v, 0, &imp_chunks)) return 2; }
        else if (!strcmp(a, "-t")) { if (cli_parse_i32(a, v, 1, &threads)) return 2; }
        else if (!strcmp(a, "--percentile")) { if (cli_parse_f32(a, v, 1.0f, 99.99999f, &pct)) return 2; }
        else {
            fprintf(stderr, "error: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!model || !corpus) {
        fprintf(stderr, "error: %s is required\n", !model ? "-m FILE" : "-f CORPUS");
        usage(stderr);
        return 2;
    }
    char def_out[1024];
    if (!out) {
        const size_t len = strlen(model);
        const bool gguf = len > 5 && !strcmp(model + len - 5, ".gguf");
        if (len + 7 > sizeof def_out) {
            fprintf(stderr, "error: model path too long for a default -o; give -o\n");
            return 2;
        }
        snprintf(def_out, sizeof def_out, "%.*s.calib", (int)(gguf ? len - 5 : len), model);
        out = def_out;
    }

    int status = 1;
    char *text = NULL, *tmp = NULL;
    int32_t *ids = NULL, *win = NULL;
    float *rows = NULL, *imp = NULL;
    ts_model *m = NULL;
    ts_calib *cal = NULL;
    ts_calib_input_stats *stats = NULL;
    ts_error e = {0};
    size_t text_len = 0;
    const double t0 = now_s();

    if (!(text = cli_read_file(corpus, &text_len))) goto done;
    ts_model_params mp = ts_model_default_params();
    mp.log = cli_log;
    if (ts_model_load(model, &mp, &m, &e) != TS_OK) {
        fprintf(stderr, "error: %s\n", e.message);
        goto done;
    }
    ts_model_info info = TS_STRUCT_INIT(ts_model_info);
    ts_model_get_info(m, &info);
    int64_t n_tok = 0;
    if (!(ids = cli_tokenize_text(m, text, text_len, true, false, &n_tok))) goto done;
    int64_t n_chunk = n_tok / n_ctx;
    if (n_chunk < 1) {
        fprintf(stderr, "error: '%s' tokenizes to %lld tokens, less than one window of -c %d\n", corpus,
                (long long)n_tok, (int)n_ctx);
        goto done;
    }
    if (chunks > 0 && chunks < n_chunk) n_chunk = chunks;
    if (imp_chunks > n_chunk) imp_chunks = (int32_t)n_chunk;
    win = malloc((size_t)n_ctx * sizeof *win);
    rows = malloc((size_t)n_ctx * (size_t)info.n_vocab * sizeof *rows);
    stats = calloc((size_t)info.n_layer * 4, sizeof *stats);
    if (!win || !rows || !stats) {
        fprintf(stderr, "error: out of memory\n");
        goto done;
    }
    run_env r = {.m = m, .ids = ids, .n_ctx = n_ctx, .n_vocab = info.n_vocab,
                 .bos = info.add_bos ? info.token_bos : -1, .n_threads = threads, .win = win, .rows = rows};

    /* 1. gather, on the exact CPU forward */
    if (ts_calib_begin(m, &cal, &e) != TS_OK) {
        fprintf(stderr, "error: %s\n", e.message);
        goto done;
    }
    {
        ts_context_params cp = ts_context_default_params();
        cp.n_ctx = n_ctx, cp.n_batch = n_ctx, cp.n_threads = threads, cp.prefill_device = "none";
        ts_context *ctx = NULL;
        if (ts_context_create(m, &cp, &ctx, &e) != TS_OK) {
            fprintf(stderr, "error: %s\n", e.message);
            goto done;
        }
        cli_ppl_acc acc = {0};
        fprintf(stderr, "calibrate: %lld windows of %d tokens from %s\n", (long long)n_chunk, (int)n_ctx, corpus);
        for (int64_t c = 0; c < n_chunk; c++) {
            if (cli_score_window(ctx, ids + c * n_ctx, n_ctx, r.bos, info.n_vocab, n_ctx, win, rows, &acc) ||
                ts_calib_end_chunk(cal) != TS_OK) {
                ts_context_free(ctx);
                goto done;
            }
            fprintf(stderr, "[%lld]%.4f,", (long long)c + 1, exp(acc.nll / (double)acc.count));
        }
        fputc('\n', stderr);
        ts_context_free(ctx);
    }
    if (ts_calib_write(cal, pct, out, stats, &e) != TS_OK) {
        fprintf(stderr, "error: %s\n", e.message);
        goto done;
    }
    ts_calib_free(cal); /* the model's contexts from here on gather nothing */
    cal = NULL;

    /* what was gathered */
    printf("# %s: clip = p%g of |x|, %lld windows of %d\n", out, (double)pct, (long long)n_chunk, (int)n_ctx);
    printf("layer  input  n_in  clip      amax      beyond%%   hot  stable\n");
    static const char *const in_names[4] = {"qkv", "o", "ffn", "down"};
    double hot_sum = 0, ch_sum = 0;
    for (int32_t i = 0; i < info.n_layer * 4; i++) {
        const ts_calib_input_stats *s = &stats[i];
        if (!s->n_in) continue;
        printf("%5d  %-5s %5d  %-8.4g  %-8.4g  %7.4f  %4d  %6d\n", (int)s->layer, in_names[s->input], (int)s->n_in,
               (double)s->clip, (double)s->amax, 100.0 * s->frac_beyond, (int)s->hot_channels,
               (int)s->stable_channels);
        hot_sum += s->hot_channels, ch_sum += s->n_in;
    }
    printf("# hot channels: %.3f%% of all inputs' channels\n", ch_sum > 0 ? 100.0 * hot_sum / ch_sum : 0.0);

    /* 2. importance of each layer's outlier handling */
    if (imp_chunks > 0) {
        const size_t tl = strlen(out) + 16;
        tmp = malloc(tl);
        imp = calloc((size_t)info.n_layer, sizeof *imp);
        if (!tmp || !imp) goto done;
        snprintf(tmp, tl, "%s.layer.tmp", out);
        char dev[512];
        const char *base = device ? device : "amx,act=int8";
        snprintf(dev, sizeof dev, "%s,calib=%s", base, out);
        double p_all = ppl_on(&r, dev, imp_chunks, !device);
        if (p_all < 0 && !device) {
            base = "amx,act=int8,emulate=1";
            snprintf(dev, sizeof dev, "%s,calib=%s", base, out);
            fprintf(stderr, "calibrate: no AMX here: the importance runs on the tile emulator (%s)\n", base);
            p_all = ppl_on(&r, dev, imp_chunks, false);
        }
        if (p_all < 0) goto done;
        const double p_cpu = ppl_on(&r, NULL, imp_chunks, false);
        printf("# importance on %d windows, %s: exact %.4f, calibrated (every layer's outliers on the CPU) %.4f\n",
               (int)imp_chunks, base, p_cpu, p_all);
        printf("layer  ppl(layer pruned)   importance\n");
        char dev_l[512];
        snprintf(dev_l, sizeof dev_l, "%s,calib=%s", base, tmp);
        for (int32_t l = 0; l < info.n_layer; l++) {
            if (ts_calib_edit(out, tmp, l, NULL, &e) != TS_OK) {
                fprintf(stderr, "error: %s\n", e.message);
                goto done;
            }
            const double p = ppl_on(&r, dev_l, imp_chunks, false);
            if (p < 0) goto done;
            imp[l] = (float)(p - p_all);
            printf("%5d  %18.4f  %+10.4f\n", (int)l, p, (double)imp[l]);
            fflush(stdout);
        }
        remove(tmp);
        if (ts_calib_edit(out, out, -1, imp, &e) != TS_OK) {
            fprintf(stderr, "error: %s\n", e.message);
            goto done;
        }
    }
    fprintf(stderr, "calibrate: wrote %s in %.1f s\n", out, now_s() - t0);
    status = 0;
done:
    if (tmp) remove(tmp);
    free(tmp);
    free(imp);
    free(stats);
    free(rows);
    free(win);
    free(ids);
    free(text);
    ts_calib_free(cal);
    ts_model_free(m);
    return status;
}
