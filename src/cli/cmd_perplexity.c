/* cmd_perplexity.c - `tessera perplexity`: the llama-perplexity measurement.
 *
 * The file is tokenized once (BOS per metadata, special-token text NOT parsed,
 * as llama-perplexity's common_tokenize default), cut into non-overlapping
 * windows of n_ctx tokens; each window starts from an empty KV cache with its
 * first token replaced by BOS when the model adds BOS, and the logits at
 * positions first = n_ctx/2 .. n_ctx-2 score the next token. With NLL summed
 * over all scored tokens: PPL = exp(mean NLL) and the reported uncertainty is
 * PPL * sqrt((E[nll^2] - E[nll]^2) / (count - 1)).
 *
 * --kl-divergence-base FILE writes the log-probabilities of every scored
 * token to FILE as it goes; --kl-divergence reads such a file (tessera's or
 * llama-perplexity's) instead of -f: its tokens and window length are
 * scored again and compared (kld.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cli_util.h"
#include "gen_common.h"
#include "kld.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* acc->row for --kl-divergence-base: encode and write the row */
static int row_write(void *u, const float *logits, int32_t target) {
    (void)target;
    return kld_write(u, logits);
}

typedef struct kld_cmp {
    kld_file *f;
    kld_stats st;
    int32_t n_vocab;
} kld_cmp;

/* acc->row for --kl-divergence: the base's record for this token, compared */
static int row_compare(void *u, const float *logits, int32_t target) {
    kld_cmp *c = u;
    if (kld_read(c->f)) return -1;
    kld_add(&c->st, logits, kld_record(c->f), c->n_vocab, target);
    return 0;
}

int cli_perplexity(int argc, char **argv) {
    gen_opts o;
    int prc = gen_parse(GEN_PPL, argc, argv, &o);
    if (prc != 0) return prc > 0 ? 0 : 2;

    int status = 1;
    char *text = NULL;
    int32_t *ids = NULL, *win = NULL;
    float *rows = NULL;
    ts_model *m = NULL;
    ts_context *ctx = NULL;
    size_t text_len = 0;
    kld_file *kf = NULL;
    kld_cmp cmp = {0};
    int32_t f_ctx = 0, f_vocab = 0, f_chunk = 0;

    if (o.kld) { /* the base's tokens and window length, before the context is sized */
        if (o.file) fprintf(stderr, "perplexity: --kl-divergence scores the tokens of '%s'; -f is not read\n", o.kld_base);
        if (!(kf = kld_open(o.kld_base, &f_ctx, &f_vocab, &f_chunk, &ids))) goto done;
        if (o.ctx_set && o.n_ctx != f_ctx) {
            fprintf(stderr, "error: '%s' was written with windows of %d tokens; -c %d differs (leave -c out)\n",
                    o.kld_base, (int)f_ctx, (int)o.n_ctx);
            goto done;
        }
        o.n_ctx = f_ctx;
    } else if (!(text = cli_read_file(o.file, &text_len))) {
        goto done;
    }
    if (gen_load(&o, &m, &ctx) < 0) goto done;
    ts_model_info info = TS_STRUCT_INIT(ts_model_info);
    ts_model_get_info(m, &info);
    const int32_t n_vocab = info.n_vocab;
    const int32_t n_ctx = o.n_ctx;
    if (kf && f_vocab != n_vocab) {
        fprintf(stderr, "error: '%s' holds distributions over %d tokens; this model's vocabulary has %d\n",
                o.kld_base, (int)f_vocab, (int)n_vocab);
        goto done;
    }
    if (ts_context_n_ctx(ctx) < n_ctx) {
        fprintf(stderr, "error: the context holds %d tokens, less than -c %d\n", (int)ts_context_n_ctx(ctx),
                (int)n_ctx);
        goto done;
    }
    int64_t n_tok = (int64_t)f_chunk * f_ctx;
    double t0 = now_ms();
    if (!kf && !(ids = cli_tokenize_text(m, text, text_len, true, false, &n_tok))) goto done;
    if (!kf && n_tok < 2 * (int64_t)n_ctx) {
        fprintf(stderr,
                "error: '%s' tokenizes to %lld tokens; perplexity with a context of %d needs at least %d "
                "(use a longer file or a smaller -c)\n",
                o.file, (long long)n_tok, (int)n_ctx, 2 * (int)n_ctx);
        goto done;
    }
    int64_t n_chunk = n_tok / n_ctx;
    if (o.chunks > 0 && o.chunks < n_chunk) n_chunk = o.chunks;
    int32_t n_batch = ts_context_n_batch(ctx);
    if (n_batch > n_ctx) n_batch = n_ctx;
    const bool add_bos = info.add_bos;
    const int32_t bos = info.token_bos;
    if (add_bos && bos < 0) {
        fprintf(stderr, "error: the model asks for BOS but has no BOS token id\n");
        goto done;
    }
    win = malloc((size_t)n_ctx * sizeof *win);
    rows = malloc((size_t)n_batch * (size_t)n_vocab * sizeof *rows);
    if (!win || !rows) {
        fprintf(stderr, "error: out of memory (%d rows of %d logits)\n", (int)n_batch, (int)n_vocab);
        goto done;
    }
    fprintf(stderr, "perplexity: %lld tokens, %lld chunks of %d, batch %d\n", (long long)n_tok,
            (long long)n_chunk, (int)n_ctx, (int)n_batch);

    cli_ppl_acc acc = {0};
    if (kf) {
        cmp.f = kf;
        cmp.n_vocab = n_vocab;
        if (kld_stats_init(&cmp.st, n_chunk * (n_ctx - 1 - n_ctx / 2))) goto done;
        acc.row = row_compare;
        acc.row_u = &cmp;
    } else if (o.kld_base) {
        if (!(kf = kld_create(o.kld_base, n_ctx, n_vocab, (int32_t)n_chunk, ids))) goto done;
        acc.row = row_write;
        acc.row_u = kf;
    }
    for (int64_t c = 0; c < n_chunk; c++) {
        if (cli_score_window(ctx, ids + c * n_ctx, n_ctx, add_bos ? bos : -1, n_vocab, n_batch, win, rows, &acc)) {
            fprintf(stderr, "error: at chunk %lld\n", (long long)c + 1);
            goto done;
        }
        fprintf(stderr, "[%lld]%.4f,", (long long)c + 1, exp(acc.nll / (double)acc.count));
        fflush(stderr);
    }
    fputc('\n', stderr);

    const double nll = acc.nll, nll2 = acc.nll2;
    const int64_t count = acc.count;
    double mean = nll / (double)count, ppl = exp(mean);
    double var = nll2 / (double)count - mean * mean;
    double unc = (var > 0.0 && count > 1) ? ppl * sqrt(var / (double)(count - 1)) : 0.0;
    if (o.kld) {
        kld_print(stdout, &cmp.st);
    } else {
        printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, unc);
        if (kf && kld_close(kf)) goto done;
        if (kf) fprintf(stderr, "perplexity: log-probabilities of %lld tokens written to %s\n", (long long)count,
                        o.kld_base);
        kf = NULL;
    }
    ts_stats st = TS_STRUCT_INIT(ts_stats);
    ts_context_get_stats(ctx, &st);
    fprintf(stderr, "perplexity: %lld scored tokens in %.2f s, peak RSS %.1f MiB\n", (long long)count,
            (now_ms() - t0) / 1000.0, st.peak_rss_mib);
    if (o.stats_json) { /* the evaluations of every window form one run */
        fprintf(stderr, "{\"ppl\":%.6f,\"scored_tokens\":%lld,\"n_ctx\":%d,\"n_batch\":%d", ppl, (long long)count,
                (int)n_ctx, (int)n_batch);
        if (o.kld) kld_print_json(stderr, &cmp.st);
        gen_print_dev_json(stderr, &st);
        fputs("}\n", stderr);
    }
    status = 0;
done:
    if (kf) {
        kld_close(kf);
        if (!o.kld) remove(o.kld_base); /* unfinished: it would read as truncated */
    }
    kld_stats_free(&cmp.st);
    free(rows);
    free(win);
    free(ids);
    free(text);
    ts_context_free(ctx);
    ts_model_free(m);
    return status;
}
