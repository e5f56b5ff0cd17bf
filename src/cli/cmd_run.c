/* cmd_run.c - `tessera run`: one prompt in, streamed generation out, then the
 * counters (a stats line, or one JSON object with --stats json) on stderr. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_util.h"
#include "gen_common.h"
#include "serve.h"

/* What the streaming callbacks need. */
typedef struct run_io {
    FILE *logits;      /* --logits-out, or NULL */
    bool write_failed;
} run_io;

static bool on_token(const char *piece, size_t len, int32_t token, void *ud) {
    (void)token;
    (void)ud;
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
    return true;
}

static bool on_logits(const float *logits, int32_t n_vocab, void *ud) {
    run_io *io = ud;
    if (fwrite(logits, sizeof(float), (size_t)n_vocab, io->logits) != (size_t)n_vocab) {
        io->write_failed = true;
        return false;
    }
    return true;
}

/* Evaluates the prompt; with --logits-out n_batch tokens at a time so only one
 * batch of rows (n_vocab floats each) is held in memory. */
static int eval_prompt(ts_context *ctx, const int32_t *ids, int32_t n, int32_t n_vocab, FILE *lf) {
    if (!lf) {
        if (ts_context_eval(ctx, ids, n, NULL) != TS_OK) {
            fprintf(stderr, "error: evaluation failed: %s\n", ts_last_error(ctx));
            return -1;
        }
        return 0;
    }
    const int32_t nb = ts_context_n_batch(ctx);
    float *rows = malloc((size_t)nb * (size_t)n_vocab * sizeof *rows);
    if (!rows) {
        fprintf(stderr, "error: out of memory (%d rows of %d logits)\n", (int)nb, (int)n_vocab);
        return -1;
    }
    int rc = 0;
    for (int32_t i = 0; i < n && rc == 0; i += nb) {
        int32_t k = n - i < nb ? n - i : nb;
        if (ts_context_eval(ctx, ids + i, k, rows) != TS_OK) {
            fprintf(stderr, "error: evaluation failed: %s\n", ts_last_error(ctx));
            rc = -1;
        } else if (fwrite(rows, sizeof(float) * (size_t)n_vocab, (size_t)k, lf) != (size_t)k) {
            fprintf(stderr, "error: writing --logits-out: %s\n", strerror(errno));
            rc = -1;
        }
    }
    free(rows);
    return rc;
}

int cli_run(int argc, char **argv) {
    gen_opts o;
    int prc = gen_parse(GEN_RUN, argc, argv, &o);
    if (prc != 0) return prc > 0 ? 0 : 2;

    int status = 1;
    char *file_text = NULL, *rendered = NULL, *grammar = NULL, *schema_text = NULL;
    int32_t *ids = NULL;
    ts_model *m = NULL;
    ts_context *ctx = NULL;
    run_io io = {NULL, false};

    size_t text_len = 0;
    const char *text = o.prompt;
    if (o.file) {
        if (!(file_text = cli_read_file(o.file, &text_len))) goto done;
        text = file_text;
    } else {
        text_len = strlen(text);
    }
    if (!!o.grammar + !!o.grammar_file + !!o.json_schema > 1) {
        fprintf(stderr, "error: give one of --grammar, --grammar-file, --json-schema\n");
        goto done;
    }
    size_t flen = 0;
    if (o.grammar_file && !(grammar = cli_read_file(o.grammar_file, &flen))) goto done;
    if (o.json_schema) {
        const char *schema = o.json_schema;
        if (schema[0] == '@' && !(schema_text = cli_read_file(schema + 1, &flen))) goto done;
        char why[512];
        if (!(grammar = tsrv_json_schema_text_gbnf(schema_text ? schema_text : schema, why, sizeof why))) {
            fprintf(stderr, "error: --json-schema: %s\n", why);
            goto done;
        }
    }
    if (gen_load(&o, &m, &ctx) < 0) goto done;
    if ((grammar || o.grammar) && ts_context_set_grammar(ctx, grammar ? grammar : o.grammar, NULL) != TS_OK) {
        fprintf(stderr, "error: %s\n", ts_last_error(ctx));
        goto done;
    }
    ts_model_info info = TS_STRUCT_INIT(ts_model_info);
    ts_model_get_info(m, &info);

    if (o.chat) { /* one user turn (after the optional system message) */
        ts_chat_message msgs[2];
        size_t nm = 0;
        if (o.system) msgs[nm++] = (ts_chat_message){"system", o.system};
        msgs[nm++] = (ts_chat_message){"user", text};
        if (ts_context_chat_format(ctx, msgs, nm, true, &rendered, &text_len) != TS_OK) {
            fprintf(stderr, "error: %s\n", ts_last_error(ctx));
            goto done;
        }
        text = rendered;
    }

    int64_t n_prompt = 0;
    if (!(ids = cli_tokenize_text(m, text, text_len, true, true, &n_prompt))) goto done;
    int32_t n_ctx = ts_context_n_ctx(ctx);
    if (n_prompt > n_ctx) {
        fprintf(stderr, "error: the prompt is %lld tokens but the context holds %d (use a larger -c or a shorter prompt)\n",
                (long long)n_prompt, (int)n_ctx);
        goto done;
    }
    if (n_prompt == 0) {
        fprintf(stderr, "error: the prompt is empty (0 tokens)\n");
        goto done;
    }
    if (o.logits_out && !(io.logits = fopen(o.logits_out, "wb"))) {
        fprintf(stderr, "error: cannot open --logits-out '%s': %s\n", o.logits_out, strerror(errno));
        goto done;
    }

    if (o.display_prompt) {
        fwrite(text, 1, text_len, stdout);
        fflush(stdout);
    }
    if (eval_prompt(ctx, ids, (int32_t)n_prompt, info.n_vocab, io.logits) < 0) goto done;

    ts_generate_params gp = ts_generate_default_params();
    gp.n_predict = o.n_predict;
    gp.stop_at_end_of_turn = o.chat;
    gp.on_token = on_token;
    gp.on_logits = io.logits ? on_logits : NULL;
    gp.user_data = &io;
    ts_status gst = ts_context_generate(ctx, &gp);
    fputc('\n', stdout);
    fflush(stdout);
    if (gst != TS_OK) {
        fprintf(stderr, "error: %s\n", ts_last_error(ctx));
        goto done;
    }
    if (io.write_failed) {
        fprintf(stderr, "error: writing --logits-out: %s\n", strerror(errno));
        goto done;
    }
    ts_stats st = TS_STRUCT_INIT(ts_stats);
    ts_context_get_stats(ctx, &st);
    if (st.stop_reason == TS_STOP_CONTEXT_FULL)
        fprintf(stderr, "context full (%d tokens): generation stopped\n", (int)n_ctx);
    if (io.logits) {
        int crc = fclose(io.logits);
        io.logits = NULL;
        if (crc != 0) {
            fprintf(stderr, "error: writing --logits-out '%s' failed\n", o.logits_out);
            goto done;
        }
    }

    if (o.stats_json) {
        fprintf(stderr,
                "{\"n_prompt_tokens\":%lld,\"n_gen_tokens\":%lld,\"prefill_ms\":%.3f,\"decode_ms\":%.3f,"
                "\"prefill_tps\":%.3f,\"decode_tps\":%.3f,\"peak_rss_mib\":%.1f,\"stop_reason\":\"%s\","
                "\"n_threads\":%d,\"n_ctx\":%d,\"n_batch\":%d,\"seed\":%llu",
                (long long)st.n_prompt_tokens, (long long)st.n_gen_tokens, st.prefill_ms, st.decode_ms,
                st.prefill_tps, st.decode_tps, st.peak_rss_mib, ts_stop_reason_name(st.stop_reason),
                (int)st.n_threads, (int)st.n_ctx, (int)st.n_batch, (unsigned long long)st.seed);
        gen_print_dev_json(stderr, &st); /* prefill on a device */
        if (grammar || o.grammar)
            fprintf(stderr, ",\"grammar_checks\":%lld,\"grammar_masks\":%lld,\"grammar_ms\":%.3f",
                    (long long)st.grammar_checks, (long long)st.grammar_masks, st.grammar_ms);
        fputs("}\n", stderr);
    } else {
        fprintf(stderr,
                "prompt: %lld tokens, %.1f tok/s | generated: %lld tokens, %.1f tok/s | stop: %s | "
                "peak RSS %.1f MiB | seed %llu\n",
                (long long)st.n_prompt_tokens, st.prefill_tps, (long long)st.n_gen_tokens, st.decode_tps,
                ts_stop_reason_name(st.stop_reason), st.peak_rss_mib, (unsigned long long)st.seed);
    }
    status = 0;
done:
    if (io.logits) fclose(io.logits);
    free(ids);
    ts_free(rendered);
    free(file_text);
    free(grammar);
    free(schema_text);
    ts_context_free(ctx);
    ts_model_free(m);
    return status;
}
