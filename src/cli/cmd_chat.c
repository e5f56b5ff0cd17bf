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

#include "cli.h"
#include "cli_util.h"
#include "gen_common.h"

typedef struct conv {
    ts_chat_message *m;
    size_t n, cap;
} conv;

static int conv_push(conv *c, const char *role, const char *content, size_t len) {
    if (c->n == c->cap) {
        size_t nc = c->cap ? c->cap * 2 : 8;
        ts_chat_message *nm = realloc(c->m, nc * sizeof *nm);
        if (!nm) return -1;
        c->m = nm;
        c->cap = nc;
    }
    char *copy = malloc(len + 1);
    if (!copy) return -1;
    memcpy(copy, content, len);
    copy[len] = '\0';
    c->m[c->n++] = (ts_chat_message){role, copy};
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

static void cache_reset(cache *k) {
    k->n = 0;
    k->len = 0;
    k->text_ok = true;
}

/* One reply as it streams: printed, and kept (text and ids) for the cache. */
typedef struct reply {
    char *text;
    size_t len, cap;
    int32_t *ids;
    int32_t n_ids, ids_cap;
    bool oom;
} reply;

static bool on_token(const char *piece, size_t len, int32_t token, void *ud) {
    reply *r = ud;
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
    if (r->len + len + 1 > r->cap) {
        size_t nc = r->cap ? r->cap * 2 : 256;
        while (nc < r->len + len + 1) nc *= 2;
        char *nt = realloc(r->text, nc);
        if (!nt) return !(r->oom = true);
        r->text = nt;
        r->cap = nc;
    }
    memcpy(r->text + r->len, piece, len);
    r->len += len;
    r->text[r->len] = '\0';
    if (token < 0) return true; /* the final flush */
    if (r->n_ids == r->ids_cap) {
        int32_t nc = r->ids_cap ? r->ids_cap * 2 : 64;
        int32_t *ni = realloc(r->ids, (size_t)nc * sizeof *ni);
        if (!ni) return !(r->oom = true);
        r->ids = ni;
        r->ids_cap = nc;
    }
    r->ids[r->n_ids++] = token;
    return true;
}

int cli_chat(int argc, char **argv) {
    gen_opts o;
    int prc = gen_parse(GEN_CHAT, argc, argv, &o);
    if (prc != 0) return prc > 0 ? 0 : 2;

    int status = 1;
    ts_model *m = NULL;
    ts_context *ctx = NULL;
    reply r = {0};
    conv c = {0};
    cache k = {0};
    char *line = NULL;
    size_t line_cap = 0;

    if (gen_load(&o, &m, &ctx) < 0) goto done;
    const char *family = ts_context_chat_template(ctx);
    if (!family) {
        fprintf(stderr, "error: %s\n", ts_last_error(ctx));
        goto done;
    }
    int32_t n_ctx = ts_context_n_ctx(ctx);
    if (!(k.ids = malloc((size_t)n_ctx * sizeof *k.ids))) {
        fprintf(stderr, "error: out of memory\n");
        goto done;
    }
    k.text_ok = true;
    if (o.system && conv_push(&c, "system", o.system, strlen(o.system)) < 0) goto oom;
    const size_t n_fixed = c.n; /* messages /reset keeps */

    fprintf(stderr, "chat template: %s; /reset clears the conversation, Ctrl-D quits\n", family);
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
            cache_reset(&k);
            ts_context_reset(ctx); /* KV cache, sampler history and seed */
            fprintf(stderr, "(conversation cleared)\n");
            continue;
        }
        if (len == 0) continue;

        const size_t n_before = c.n;
        if (conv_push(&c, "user", line, len) < 0) goto oom;
        size_t rlen = 0;
        char *rendered = NULL;
        if (ts_context_chat_format(ctx, c.m, c.n, true, &rendered, &rlen) != TS_OK) {
            fprintf(stderr, "error: %s\n", ts_last_error(ctx));
            conv_pop_to(&c, n_before);
            continue;
        }
        /* tokens to add on top of the `keep` cached ones */
        int32_t keep;
        int64_t n_new = 0;
        int32_t *new_ids = NULL, *full = NULL;
        if (k.text_ok && k.n > 0 && rlen >= k.len && memcmp(rendered, k.text, k.len) == 0) {
            keep = k.n;
            new_ids = cli_tokenize_text(m, rendered + k.len, rlen - k.len, false, true, &n_new);
        } else {
            int64_t n_full = 0;
            full = cli_tokenize_text(m, rendered, rlen, true, true, &n_full);
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
            ts_free(rendered);
            goto done;
        }
        if ((int64_t)keep + n_new > n_ctx) {
            fprintf(stderr,
                    "context full: this turn needs %lld more tokens, %d are cached and the context holds %d; "
                    "type /reset to start a new conversation (or use a larger -c)\n",
                    (long long)n_new, (int)keep, (int)n_ctx);
            conv_pop_to(&c, n_before);
            free(full ? full : new_ids);
            ts_free(rendered);
            continue;
        }
        ts_context_kv_truncate(ctx, keep);
        k.n = keep;
        /* evaluating also records the tokens in the sampler's penalty history */
        ts_status est = ts_context_eval(ctx, new_ids, (int32_t)n_new, NULL);
        if (est == TS_OK) {
            memcpy(k.ids + k.n, new_ids, (size_t)n_new * sizeof *new_ids);
            k.n += (int32_t)n_new;
        }
        free(full ? full : new_ids);
        if (est != TS_OK) {
            fprintf(stderr, "error: evaluation failed: %s\n", ts_last_error(ctx));
            ts_free(rendered);
            goto done;
        }
        int rc = cache_set_text(&k, rendered, rlen, false);
        ts_free(rendered);
        if (rc < 0) goto oom;
        k.text_ok = true;

        r.len = 0;
        r.n_ids = 0;
        if (r.text) r.text[0] = '\0';
        ts_generate_params gp = ts_generate_default_params();
        gp.n_predict = o.n_predict;
        gp.stop_at_end_of_turn = true;
        gp.eval_last = true; /* the cache then holds the whole reply */
        gp.on_token = on_token;
        gp.user_data = &r;
        int32_t past0 = ts_context_n_past(ctx);
        ts_status gst = ts_context_generate(ctx, &gp);
        fputc('\n', stdout);
        fflush(stdout);
        ts_stats st = TS_STRUCT_INIT(ts_stats);
        ts_context_get_stats(ctx, &st);
        int32_t n_eval = ts_context_n_past(ctx) - past0;
        if (n_eval > r.n_ids) n_eval = r.n_ids;
        if (n_eval < 0) n_eval = 0;
        memcpy(k.ids + k.n, r.ids, (size_t)n_eval * sizeof *r.ids);
        k.n += n_eval;
        /* the cache text is exact only if every emitted token was evaluated */
        if (n_eval == r.n_ids) {
            if (cache_set_text(&k, r.text ? r.text : "", r.len, true) < 0) goto oom;
        } else {
            k.text_ok = false;
        }
        if (r.oom) goto oom;
        if (gst != TS_OK) {
            fprintf(stderr, "error: %s\n", ts_last_error(ctx));
            goto done;
        }
        if (conv_push(&c, "assistant", r.text ? r.text : "", r.len) < 0) goto oom;
        if (o.stats_json)
            fprintf(stderr,
                    "{\"n_prompt_tokens\":%lld,\"n_gen_tokens\":%lld,\"prefill_ms\":%.3f,\"decode_ms\":%.3f,"
                    "\"prefill_tps\":%.3f,\"decode_tps\":%.3f,\"peak_rss_mib\":%.1f,\"stop_reason\":\"%s\","
                    "\"n_past\":%d,\"n_ctx\":%d,\"seed\":%llu",
                    (long long)st.n_prompt_tokens, (long long)st.n_gen_tokens, st.prefill_ms, st.decode_ms,
                    st.prefill_tps, st.decode_tps, st.peak_rss_mib, ts_stop_reason_name(st.stop_reason),
                    (int)st.n_past, (int)st.n_ctx, (unsigned long long)st.seed);
        if (o.stats_json) { /* prefill on a device */
            gen_print_dev_json(stderr, &st);
            fputs("}\n", stderr);
        }
        if (st.stop_reason == TS_STOP_CONTEXT_FULL)
            fprintf(stderr, "context full (%d tokens): type /reset to start a new conversation\n", (int)n_ctx);
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
    free(r.text);
    free(r.ids);
    ts_context_free(ctx);
    ts_model_free(m);
    return status;
}
