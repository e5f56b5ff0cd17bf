/* cmd_run.c - `tessera run`: one prompt in, streamed generation out, then the
 * counters (a stats line, or one JSON object with --stats json) on stderr. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/gen_common.h"
#include "core/threadpool.h"

static double per_s(double n, double ms) { return ms > 0.0 ? n * 1000.0 / ms : 0.0; }

int cli_run(int argc, char **argv) {
    gen_opts o;
    int prc = gen_parse(GEN_RUN, argc, argv, &o);
    if (prc != 0) return prc > 0 ? 0 : 2;

    int status = 1;
    char *file_text = NULL, *rendered = NULL;
    int32_t *ids = NULL;
    ts_model *m = NULL;
    ts_state *s = NULL;
    ts_chat_template *tmpl = NULL;
    ts_sampler *smpl = NULL;
    FILE *lf = NULL;
    gen_ctx g = {0};
    gen_result r = {0};

    size_t text_len = 0;
    const char *text = o.prompt;
    if (o.file) {
        if (!(file_text = gen_read_file(o.file, &text_len))) goto done;
        text = file_text;
    } else {
        text_len = strlen(text);
    }
    if (gen_load(&o, &m, &s) < 0) goto done;
    const ts_tokenizer *tok = ts_model_tokenizer(m);
    const ts_hparams *hp = ts_model_hparams(m);

    int32_t stop_id = -1;
    if (o.chat) { /* one user turn (after the optional system message) */
        if (!(tmpl = gen_chat_template(&o, m))) goto done;
        ts_chat_msg msgs[2];
        size_t nm = 0;
        if (o.system) msgs[nm++] = (ts_chat_msg){"system", o.system};
        msgs[nm++] = (ts_chat_msg){"user", text};
        ts_err err = {{0}};
        if (!(rendered = ts_chat_render(tmpl, msgs, nm, true, gen_chat_bos_text(tmpl, tok), &text_len, &err))) {
            fprintf(stderr, "error: %s\n", err.msg);
            goto done;
        }
        text = rendered;
        stop_id = ts_chat_end_of_turn_id(tmpl, tok);
    }

    int64_t n_prompt = 0;
    if (!(ids = gen_tokenize(tok, text, text_len, true, true, &n_prompt))) goto done;
    int32_t n_ctx = ts_state_n_ctx(s);
    if (n_prompt > n_ctx) {
        fprintf(stderr, "error: the prompt is %lld tokens but the context holds %d (use a larger -c or a shorter prompt)\n",
                (long long)n_prompt, (int)n_ctx);
        goto done;
    }
    if (n_prompt == 0) {
        fprintf(stderr, "error: the prompt is empty (0 tokens)\n");
        goto done;
    }

    if (o.sp.repeat_last_n < 0) o.sp.repeat_last_n = n_ctx;
    if (!(smpl = ts_sampler_new(&o.sp, hp->n_vocab))) {
        fprintf(stderr, "error: cannot create the sampler (n_vocab %d)\n", (int)hp->n_vocab);
        goto done;
    }
    for (int64_t i = 0; i < n_prompt; i++) ts_sampler_accept(smpl, ids[i]);

    if (o.logits_out && !(lf = fopen(o.logits_out, "wb"))) {
        fprintf(stderr, "error: cannot open --logits-out '%s': %s\n", o.logits_out, strerror(errno));
        goto done;
    }
    ts_state_params dsp = ts_state_default_params();
    int32_t n_batch = o.n_batch > 0 ? o.n_batch : dsp.n_batch;
    int32_t n_threads = o.n_threads > 0 ? o.n_threads : ts_physical_cores(); /* the state's rule for 0 */
    if (gen_ctx_init(&g, s, tok, smpl, hp->n_vocab, n_batch, lf) < 0) goto done;
    g.stop_id = stop_id;

    if (o.display_prompt) {
        fwrite(text, 1, text_len, stdout);
        fflush(stdout);
    }
    double t0 = gen_now_ms();
    if (gen_eval(s, ids, (int32_t)n_prompt, n_batch, hp->n_vocab, lf, g.rowbuf) < 0) goto done;
    double prefill_ms = gen_now_ms() - t0;

    int grc = gen_generate(&g, o.n_predict, false, &r);
    fputc('\n', stdout);
    fflush(stdout);
    if (grc < 0) goto done;
    if (!strcmp(r.stop, "context_full"))
        fprintf(stderr, "context full (%d tokens): generation stopped\n", (int)n_ctx);
    if (lf) {
        if (fclose(lf) != 0) {
            lf = NULL;
            fprintf(stderr, "error: writing --logits-out '%s' failed\n", o.logits_out);
            goto done;
        }
        lf = NULL;
    }

    double rss = gen_peak_rss_mib();
    if (o.stats_json) {
        fprintf(stderr,
                "{\"n_prompt_tokens\":%lld,\"n_gen_tokens\":%d,\"prefill_ms\":%.3f,\"decode_ms\":%.3f,"
                "\"prefill_tps\":%.3f,\"decode_tps\":%.3f,\"peak_rss_mib\":%.1f,\"stop_reason\":\"%s\","
                "\"n_threads\":%d,\"n_ctx\":%d,\"n_batch\":%d,\"seed\":%llu}\n",
                (long long)n_prompt, (int)r.n_gen, prefill_ms, r.ms, per_s((double)n_prompt, prefill_ms),
                per_s(r.n_gen, r.ms), rss, r.stop, (int)n_threads, (int)n_ctx, (int)n_batch,
                (unsigned long long)o.sp.seed);
    } else {
        fprintf(stderr,
                "prompt: %lld tokens, %.1f tok/s | generated: %d tokens, %.1f tok/s | stop: %s | "
                "peak RSS %.1f MiB | seed %llu\n",
                (long long)n_prompt, per_s((double)n_prompt, prefill_ms), (int)r.n_gen, per_s(r.n_gen, r.ms),
                r.stop, rss, (unsigned long long)o.sp.seed);
    }
    status = 0;
done:
    if (lf) fclose(lf);
    gen_result_free(&r);
    gen_ctx_free(&g);
    ts_sampler_free(smpl);
    ts_chat_template_free(tmpl);
    free(ids);
    free(rendered);
    free(file_text);
    if (s) ts_state_free(s);
    ts_model_free(m);
    return status;
}
