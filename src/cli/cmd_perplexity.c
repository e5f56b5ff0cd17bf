/* cmd_perplexity.c - `tessera perplexity`: the llama-perplexity measurement.
 *
 * The file is tokenized once (BOS per metadata, special-token text NOT parsed,
 * as llama-perplexity's common_tokenize default), cut into non-overlapping
 * windows of n_ctx tokens; each window starts from an empty KV cache with its
 * first token replaced by BOS when the model adds BOS, and the logits at
 * positions first = n_ctx/2 .. n_ctx-2 score the next token. With NLL summed
 * over all scored tokens: PPL = exp(mean NLL) and the reported uncertainty is
 * PPL * sqrt((E[nll^2] - E[nll]^2) / (count - 1)). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cli_util.h"
#include "gen_common.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
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

    if (!(text = cli_read_file(o.file, &text_len))) goto done;
    if (gen_load(&o, &m, &ctx) < 0) goto done;
    ts_model_info info = TS_STRUCT_INIT(ts_model_info);
    ts_model_get_info(m, &info);
    const int32_t n_vocab = info.n_vocab;
    const int32_t n_ctx = o.n_ctx;
    if (ts_context_n_ctx(ctx) < n_ctx) {
        fprintf(stderr, "error: the context holds %d tokens, less than -c %d\n", (int)ts_context_n_ctx(ctx),
                (int)n_ctx);
        goto done;
    }
    int64_t n_tok = 0;
    double t0 = now_ms();
    if (!(ids = cli_tokenize_text(m, text, text_len, true, false, &n_tok))) goto done;
    if (n_tok < 2 * (int64_t)n_ctx) {
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
    printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, unc);
    ts_stats st = TS_STRUCT_INIT(ts_stats);
    ts_context_get_stats(ctx, &st);
    fprintf(stderr, "perplexity: %lld scored tokens in %.2f s, peak RSS %.1f MiB\n", (long long)count,
            (now_ms() - t0) / 1000.0, st.peak_rss_mib);
    if (o.stats_json) { /* the evaluations of every window form one run */
        fprintf(stderr, "{\"ppl\":%.6f,\"scored_tokens\":%lld,\"n_ctx\":%d,\"n_batch\":%d", ppl, (long long)count,
                (int)n_ctx, (int)n_batch);
        gen_print_dev_json(stderr, &st);
        fputs("}\n", stderr);
    }
    status = 0;
done:
    free(rows);
    free(win);
    free(ids);
    free(text);
    ts_context_free(ctx);
    ts_model_free(m);
    return status;
}
