/* cmd_chat.c - `tessera chat`: interactive multi-turn chat on stdin/stdout.
 *
 * The KV cache survives between turns. Each turn the whole conversation is
 * re-rendered with the chat template; when that text extends what the cache
 * already holds (the usual case), only the new suffix is tokenized and
 * evaluated. Otherwise (e.g. Gemma trims a reply that ended in whitespace) the
 * full rendering is tokenized, the cache is cut back to the longest common
 * token prefix, and the rest is evaluated. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/gen_common.h"

typedef struct conv {
    ts_chat_msg *m;
    size_t n, cap;
} conv;

static int conv_push(conv *c, const char *role, const char *content, size_t len) {
    if (c->n == c->cap) {
        size_t nc = c->cap ? c->cap * 2 : 8;
        ts_chat_msg *nm = realloc(c->m, nc * sizeof *nm);
        if (!nm) return -1;
        c->m = nm;
        c->cap = nc;
    }
    char *copy = malloc(len + 1);
    if (!copy) return -1;
    memcpy(copy, content, len);
    copy[len] = '\0';
    c->m[c->n++] = (ts_chat_msg){role, copy};
    return 0;
}

static void conv_pop_to(conv *c, size_t n) {
    while (c->n > n) free((char *)c->m[--c->n].content);
}

/* What the KV cache holds: its token ids, and the text they render when that
 * is known exactly (text_ok). */
typedef struct cache {
    int32_t *ids;
    int32_t n;
    char *text;
    size_t len, cap;
    bool text_ok;
} cache;

static int cache_set_text(cache *k, const char *s, size_t n, bool append) {
    size_t base = append ? k->len : 0;
    if (base + n + 1 > k->cap) {
        size_t nc = k->cap ? k->cap : 1024;
        while (nc < base + n + 1) nc *= 2;
        char *nt = realloc(k->text, nc);
        if (!nt) return -1;
        k->text = nt;
        k->cap = nc;
    }
    memcpy(k->text + base, s, n);
    k->len = base + n;
    k->text[k->len] = '\0';
    return 0;
}

static void cache_reset(cache *k, ts_state *s) {
    ts_state_kv_truncate(s, 0);
    k->n = 0;
    k->len = 0;
    k->text_ok = true;
}

static double per_s(double n, double ms) { return ms > 0.0 ? n * 1000.0 / ms : 0.0; }

int cli_chat(int argc, char **argv) {
    gen_opts o;
    int prc = gen_parse(GEN_CHAT, argc, argv, &o);
    if (prc != 0) return prc > 0 ? 0 : 2;

    int status = 1;
    ts_model *m = NULL;
    ts_state *s = NULL;
    ts_chat_template *tmpl = NULL;
    ts_sampler *smpl = NULL;
    gen_ctx g = {0};
    conv c = {0};
    cache k = {0};
    char *line = NULL;
    size_t line_cap = 0;

    if (gen_load(&o, &m, &s) < 0) goto done;
    const ts_tokenizer *tok = ts_model_tokenizer(m);
    const ts_hparams *hp = ts_model_hparams(m);
    if (!(tmpl = gen_chat_template(&o, m))) goto done;
    const char *bos_text = gen_chat_bos_text(tmpl, tok);
    int32_t n_ctx = ts_state_n_ctx(s);
    if (o.sp.repeat_last_n < 0) o.sp.repeat_last_n = n_ctx;
    if (!(smpl = ts_sampler_new(&o.sp, hp->n_vocab))) {
        fprintf(stderr, "error: cannot create the sampler (n_vocab %d)\n", (int)hp->n_vocab);
        goto done;
    }
    ts_state_params dsp = ts_state_default_params();
    int32_t n_batch = o.n_batch > 0 ? o.n_batch : dsp.n_batch;
    if (gen_ctx_init(&g, s, tok, smpl, hp->n_vocab, n_batch, NULL) < 0) goto done;
    g.stop_id = ts_chat_end_of_turn_id(tmpl, tok);
    if (!(k.ids = malloc((size_t)n_ctx * sizeof *k.ids))) {
        fprintf(stderr, "error: out of memory\n");
        goto done;
    }
    k.text_ok = true;
    if (o.system && conv_push(&c, "system", o.system, strlen(o.system)) < 0) goto oom;
    const size_t n_fixed = c.n; /* messages /reset keeps */

    fprintf(stderr, "chat template: %s; /reset clears the conversation, Ctrl-D quits\n",
            ts_chat_family_name(ts_chat_template_family(tmpl)));
    for (;;) {
        fputs("> ", stderr);
        fflush(stderr);
        ssize_t got = getline(&line, &line_cap, stdin);
        if (got < 0) {
            fputc('\n', stderr);
            break;
        }
        size_t len = (size_t)got;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (!strcmp(line, "/reset")) {
            conv_pop_to(&c, n_fixed);
            cache_reset(&k, s);
            ts_sampler_reset(smpl);
            fprintf(stderr, "(conversation cleared)\n");
            continue;
        }
        if (len == 0) continue;

        const size_t n_before = c.n;
        if (conv_push(&c, "user", line, len) < 0) goto oom;
        ts_err err = {{0}};
        size_t rlen = 0;
        char *rendered = ts_chat_render(tmpl, c.m, c.n, true, bos_text, &rlen, &err);
        if (!rendered) {
            fprintf(stderr, "error: %s\n", err.msg);
            conv_pop_to(&c, n_before);
            continue;
        }
        /* tokens to add on top of the `keep` cached ones */
        int32_t keep;
        int64_t n_new = 0;
        int32_t *new_ids = NULL, *full = NULL;
        if (k.text_ok && k.n > 0 && rlen >= k.len && memcmp(rendered, k.text, k.len) == 0) {
            keep = k.n;
            new_ids = gen_tokenize(tok, rendered + k.len, rlen - k.len, false, true, &n_new);
        } else {
            int64_t n_full = 0;
            full = gen_tokenize(tok, rendered, rlen, true, true, &n_full);
            if (full) {
                int32_t lcp = 0;
                while (lcp < k.n && lcp < n_full && full[lcp] == k.ids[lcp]) lcp++;
                if (lcp == n_full && lcp > 0) lcp--; /* evaluate at least one token for fresh logits */
                keep = lcp;
                n_new = n_full - lcp;
                new_ids = full + lcp;
            } else {
                keep = 0;
            }
        }
        if (!new_ids) {
            free(rendered);
            goto done;
        }
        if ((int64_t)keep + n_new > n_ctx) {
            fprintf(stderr,
                    "context full: this turn needs %lld more tokens, %d are cached and the context holds %d; "
                    "type /reset to start a new conversation (or use a larger -c)\n",
                    (long long)n_new, (int)keep, (int)n_ctx);
            conv_pop_to(&c, n_before);
            free(full ? full : new_ids);
            free(rendered);
            continue;
        }
        ts_state_kv_truncate(s, keep);
        k.n = keep;
        for (int64_t i = 0; i < n_new; i++) ts_sampler_accept(smpl, new_ids[i]);
        double t0 = gen_now_ms();
        int erc = gen_eval(s, new_ids, (int32_t)n_new, n_batch, hp->n_vocab, NULL, NULL);
        double prefill_ms = gen_now_ms() - t0;
        if (erc == 0) {
            memcpy(k.ids + k.n, new_ids, (size_t)n_new * sizeof *new_ids);
            k.n += (int32_t)n_new;
        }
        free(full ? full : new_ids);
        if (erc < 0) {
            free(rendered);
            goto done;
        }
        int rc = cache_set_text(&k, rendered, rlen, false);
        free(rendered);
        if (rc < 0) goto oom;
        k.text_ok = true;

        gen_result r;
        int32_t past0 = ts_state_n_past(s);
        int grc = gen_generate(&g, o.n_predict, true, &r);
        fputc('\n', stdout);
        fflush(stdout);
        int32_t n_eval = ts_state_n_past(s) - past0;
        if (n_eval > r.n_gen) n_eval = r.n_gen;
        memcpy(k.ids + k.n, r.ids, (size_t)(n_eval > 0 ? n_eval : 0) * sizeof *r.ids);
        k.n += n_eval > 0 ? n_eval : 0;
        /* the cache text is exact only if every emitted token was evaluated */
        if (n_eval == r.n_gen) {
            if (cache_set_text(&k, r.text, r.text_len, true) < 0) {
                gen_result_free(&r);
                goto oom;
            }
        } else {
            k.text_ok = false;
        }
        if (grc < 0 || conv_push(&c, "assistant", r.text ? r.text : "", r.text_len) < 0) {
            gen_result_free(&r);
            goto done;
        }
        if (o.stats_json)
            fprintf(stderr,
                    "{\"n_prompt_tokens\":%lld,\"n_gen_tokens\":%d,\"prefill_ms\":%.3f,\"decode_ms\":%.3f,"
                    "\"prefill_tps\":%.3f,\"decode_tps\":%.3f,\"peak_rss_mib\":%.1f,\"stop_reason\":\"%s\","
                    "\"n_past\":%d,\"n_ctx\":%d,\"seed\":%llu}\n",
                    (long long)n_new, (int)r.n_gen, prefill_ms, r.ms, per_s((double)n_new, prefill_ms),
                    per_s(r.n_gen, r.ms), gen_peak_rss_mib(), r.stop, (int)ts_state_n_past(s), (int)n_ctx,
                    (unsigned long long)o.sp.seed);
        if (!strcmp(r.stop, "context_full"))
            fprintf(stderr, "context full (%d tokens): type /reset to start a new conversation\n", (int)n_ctx);
        gen_result_free(&r);
    }
    status = 0;
    goto done;
oom:
    fprintf(stderr, "error: out of memory\n");
done:
    free(line);
    conv_pop_to(&c, 0);
    free(c.m);
    free(k.ids);
    free(k.text);
    gen_ctx_free(&g);
    ts_sampler_free(smpl);
    ts_chat_template_free(tmpl);
    if (s) ts_state_free(s);
    ts_model_free(m);
    return status;
}
