/* respond.c - the JSON the server answers with, in OpenAI's shapes: error
 * objects, chat.completion / text_completion bodies, their streamed chunks
 * (Server-Sent Events "data: {...}\n\n", ending with "data: [DONE]"),
 * /v1/models and /health. Built with jansson, so every string is escaped. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv.h"

int tsrv_buf_add(tsrv_buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->len + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) return -1;
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

void tsrv_buf_free(tsrv_buf *b) {
    free(b->p);
    *b = (tsrv_buf){0};
}

/* Dumps and frees a JSON value; NULL when out of memory. */
static char *dump(json_t *v) {
    if (!v) return NULL;
    char *s = json_dumps(v, JSON_COMPACT | JSON_REAL_PRECISION(10));
    json_decref(v);
    return s;
}

char *tsrv_error_json(const tsrv_error *e) {
    return dump(json_pack("{s:{s:s, s:s, s:s?, s:s?}}", "error", "message", e->message, "type", e->type, "param",
                          e->param[0] ? e->param : NULL, "code", e->code));
}

/* ---- logprobs ---- */

/* A token's text as JSON strings want it (bytes that are not valid UTF-8,
 * such as half of a character, become U+FFFD) and its raw bytes. */
static void token_strings(const tsrv_server *s, int32_t id, json_t **str, json_t **bytes) {
    char raw[256];
    size_t n = 0;
    if (ts_model_token_piece(s->model, id, true, raw, sizeof raw, &n, NULL) != TS_OK || n > sizeof raw) n = 0;
    *bytes = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(*bytes, json_integer((unsigned char)raw[i]));
    *str = tsrv_json_text(raw, n);
}

/* chat: {"token", "logprob", "bytes", "top_logprobs": [...]} */
static json_t *chat_logprob(const tsrv_server *s, const tsrv_job *j, const tsrv_logprob *e) {
    json_t *str, *bytes, *top = json_array();
    for (int k = 0; k < j->top_logprobs; k++) {
        json_t *ts, *tb;
        token_strings(s, e->top_id[k], &ts, &tb);
        json_array_append_new(top, json_pack("{s:o, s:f, s:o}", "token", ts, "logprob", (double)e->top_lp[k],
                                             "bytes", tb));
    }
    token_strings(s, e->token, &str, &bytes);
    return json_pack("{s:o, s:f, s:o, s:o}", "token", str, "logprob", (double)e->logprob, "bytes", bytes,
                     "top_logprobs", top);
}

/* Entries [a, b) of choice ci in the endpoint's shape: chat {"content":
 * [...], "refusal": null}; completions {"tokens", "token_logprobs",
 * "top_logprobs" (a {token: logprob} object per token, or null with
 * logprobs 0), "text_offset" (within the completion's text)}. null
 * without logprobs. */
static json_t *logprobs_json(const tsrv_server *s, const tsrv_job *j, int ci, size_t a, size_t b) {
    if (!j->logprobs) return json_null();
    const tsrv_choice *ch = &j->choices[ci];
    if (j->kind == TSRV_CHAT) {
        json_t *content = json_array();
        for (size_t i = a; i < b; i++) json_array_append_new(content, chat_logprob(s, j, &ch->lp[i]));
        return json_pack("{s:o, s:n}", "content", content, "refusal");
    }
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    for (size_t i = a; i < b; i++) {
        const tsrv_logprob *e = &ch->lp[i];
        json_t *str, *bytes;
        token_strings(s, e->token, &str, &bytes);
        json_decref(bytes);
        json_array_append_new(tokens, str);
        json_array_append_new(lps, json_real(e->logprob));
        json_array_append_new(offs, json_integer((json_int_t)e->offset));
        if (j->top_logprobs > 0) {
            json_t *top = json_object();
            for (int k = 0; k < j->top_logprobs; k++) {
                json_t *ts, *tb;
                token_strings(s, e->top_id[k], &ts, &tb);
                json_decref(tb);
                if (!json_object_get(top, json_string_value(ts))) /* two ids with one text: the likelier */
                    json_object_set_new(top, json_string_value(ts), json_real(e->top_lp[k]));
                json_decref(ts);
            }
            json_array_append_new(tops, top);
        } else {
            json_array_append_new(tops, json_null());
        }
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops,
                     "text_offset", offs);
}

/* The logprob entries of choice ci whose text starts before byte `to`. */
static size_t lp_before(const tsrv_choice *ch, size_t from_entry, size_t to) {
    size_t i = from_entry;
    while (i < ch->n_lp && ch->lp[i].offset < to) i++;
    return i;
}

static const char *choice_finish(const tsrv_job *j, int ci) {
    const char *f = j->choices[ci].finish;
    return f && (!strcmp(f, "stop") || !strcmp(f, "length") || !strcmp(f, "tool_calls")) ? f : NULL;
}

static json_t *usage_json(const tsrv_job *j) {
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)j->n_prompt, "completion_tokens",
                     (json_int_t)j->n_gen, "total_tokens", (json_int_t)j->n_prompt + (json_int_t)j->n_gen,
                     "prompt_tokens_details", "cached_tokens", (json_int_t)j->n_cached);
}

static json_t *timings_json(const tsrv_job *j) {
    json_t *t = json_pack("{s:I, s:f, s:f, s:f, s:f}", "prompt_evaluated", (json_int_t)j->n_evaluated, "prefill_ms",
                     j->prefill_ms, "decode_ms", j->decode_ms, "prefill_tokens_per_s",
                     j->prefill_ms > 0 ? j->n_evaluated * 1000.0 / j->prefill_ms : 0.0, "decode_tokens_per_s",
                     j->decode_ms > 0 ? j->n_gen * 1000.0 / j->decode_ms : 0.0);
    /* constrained output: tokens checked against the grammar, steps that
     * checked the whole vocabulary, and the time in both (within decode_ms) */
    if (t && j->grammar)
        json_object_set_new(t, "grammar", json_pack("{s:I, s:I, s:f}", "checks", (json_int_t)j->grammar_checks,
                                                    "masks", (json_int_t)j->grammar_masks, "ms", j->grammar_ms));
    return t;
}

/* A diffusion job's decoder counters (non-OpenAI, like timings). */
static json_t *diffusion_json(const tsrv_job *j) {
    const ts_diffusion_stats *d = &j->ds;
    return json_pack("{s:s, s:I, s:I, s:I, s:i, s:o}", "decoder", tsrv_diff_decoder_name(j->dp.decoder), "forwards",
                     (json_int_t)d->forwards, "denoise_forwards", (json_int_t)d->denoise_forwards,
                     "tokens_evaluated", (json_int_t)d->tokens_evaluated, "blocks", (int)d->n_blocks,
                     "early_stop_at", d->early_stop_at >= 0 ? json_integer(d->early_stop_at) : json_null());
}

/* A float option as its shortest decimal (0.9, not 0.899999976). */
static double short_real(float x) {
    char b[32];
    snprintf(b, sizeof b, "%g", (double)x);
    return strtod(b, NULL);
}

/* The decoder options a diffusion request without them gets (/health,
 * /v1/models); steps null = one per canvas token. */
static json_t *diffusion_defaults_json(const tsrv_server *s) {
    if (!s->diffusion) return json_null();
    const ts_diffusion_params *p = &s->diffusion_defaults;
    return json_pack("{s:s, s:i, s:f, s:s, s:s, s:o, s:f, s:f, s:b, s:i}", "decoder",
                     tsrv_diff_decoder_name(p->decoder), "block", (int)p->block, "threshold", short_real(p->threshold),
                     "cache", tsrv_diff_cache_name(p->cache), "alg", tsrv_diff_alg_name(p->alg), "steps",
                     p->steps > 0 ? json_integer(p->steps) : json_null(), "eps", short_real(p->eps), "temperature",
                     short_real(p->temp), "early_stop", p->early_stop, "max_tokens", (int)p->n_gen);
}

static void job_id(const tsrv_job *j, char *buf, size_t cap) {
    snprintf(buf, cap, "%s-%llu", j->kind == TSRV_CHAT ? "chatcmpl" : "cmpl", (unsigned long long)j->id);
}

char *tsrv_completion_json(const tsrv_server *s, const tsrv_job *j, time_t created) {
    char id[48];
    job_id(j, id, sizeof id);
    json_t *choices = json_array();
    for (int ci = 0; ci < j->n_choices; ci++) {
        const tsrv_choice *ch = &j->choices[ci];
        json_t *lp = logprobs_json(s, j, ci, 0, ch->n_lp);
        if (j->kind == TSRV_CHAT) {
            /* with tool calls: the text before them is the content (null when there is none) */
            json_t *msg = ch->tool_calls
                              ? json_pack("{s:s, s:o, s:O}", "role", "assistant", "content",
                                          ch->visible ? json_stringn(ch->text, ch->visible) : json_null(),
                                          "tool_calls", ch->tool_calls)
                              : json_pack("{s:s, s:s%}", "role", "assistant", "content", ch->text ? ch->text : "",
                                          ch->len);
            json_array_append_new(choices, json_pack("{s:i, s:o, s:o, s:s?}", "index", ci, "message", msg, "logprobs",
                                                     lp, "finish_reason", choice_finish(j, ci)));
        } else {
            json_array_append_new(choices, json_pack("{s:s%, s:i, s:o, s:s?}", "text", ch->text ? ch->text : "",
                                                     ch->len, "index", ci, "logprobs", lp, "finish_reason",
                                                     choice_finish(j, ci)));
        }
    }
    json_t *r = json_pack("{s:s, s:s, s:I, s:s, s:o, s:o, s:o}", "id", id, "object",
                          j->kind == TSRV_CHAT ? "chat.completion" : "text_completion", "created",
                          (json_int_t)created, "model", s->model_id, "choices", choices, "usage", usage_json(j),
                          "timings", timings_json(j));
    if (r && j->diffusion) json_object_set_new(r, "diffusion", diffusion_json(j));
    return dump(r);
}

/* One SSE event holding v (consumed). */
static int sse_event(tsrv_buf *b, json_t *v) {
    char *s = dump(v);
    if (!s) return -1;
    int rc = tsrv_buf_add(b, "data: ", 6) | tsrv_buf_add(b, s, strlen(s)) | tsrv_buf_add(b, "\n\n", 2);
    free(s);
    return rc ? -1 : 0;
}

static json_t *chunk(const tsrv_server *s, const tsrv_job *j, time_t created, json_t *choices) {
    char id[48];
    job_id(j, id, sizeof id);
    return json_pack("{s:s, s:s, s:I, s:s, s:o}", "id", id, "object",
                     j->kind == TSRV_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                     (json_int_t)created, "model", s->model_id, "choices", choices);
}

int tsrv_sse_delta(tsrv_buf *b, const tsrv_server *s, const tsrv_job *j, time_t created, int ci, size_t from,
                   size_t to, size_t *lp_sent, size_t lp_upto, bool first) {
    const tsrv_choice *ch = &j->choices[ci];
    const char *text = ch->text ? ch->text + from : "";
    const size_t n = to - from;
    size_t e = lp_sent ? lp_before(ch, *lp_sent, lp_upto) : 0;
    json_t *lp = lp_sent ? logprobs_json(s, j, ci, *lp_sent, e) : json_null();
    if (lp_sent) *lp_sent = e;
    json_t *choice;
    if (j->kind == TSRV_CHAT) {
        json_t *delta = first ? json_pack("{s:s, s:s%}", "role", "assistant", "content", text, n)
                              : json_pack("{s:s%}", "content", text, n);
        choice = json_pack("{s:i, s:o, s:o, s:n}", "index", ci, "delta", delta, "logprobs", lp, "finish_reason");
    } else {
        choice = json_pack("{s:s%, s:i, s:o, s:n}", "text", text, n, "index", ci, "logprobs", lp, "finish_reason");
    }
    return sse_event(b, chunk(s, j, created, json_pack("[o]", choice)));
}

int tsrv_sse_tool_calls(tsrv_buf *b, const tsrv_server *s, const tsrv_job *j, time_t created, int ci) {
    /* the calls whole, each with its index in the list (a client joins
     * deltas by index: here each arrives in one piece) */
    json_t *calls = json_array();
    size_t k;
    json_t *c;
    json_array_foreach(j->choices[ci].tool_calls, k, c) {
        json_t *d = json_deep_copy(c);
        if (d) json_object_set_new(d, "index", json_integer((json_int_t)k));
        json_array_append_new(calls, d);
    }
    json_t *choice = json_pack("{s:i, s:{s:o}, s:n, s:n}", "index", ci, "delta", "tool_calls", calls, "logprobs",
                               "finish_reason");
    return sse_event(b, chunk(s, j, created, json_pack("[o]", choice)));
}

int tsrv_sse_choice_end(tsrv_buf *b, const tsrv_server *s, const tsrv_job *j, time_t created, int ci) {
    json_t *choice = j->kind == TSRV_CHAT
                         ? json_pack("{s:i, s:{}, s:n, s:s?}", "index", ci, "delta", "logprobs", "finish_reason",
                                     choice_finish(j, ci))
                         : json_pack("{s:s, s:i, s:n, s:s?}", "text", "", "index", ci, "logprobs", "finish_reason",
                                     choice_finish(j, ci));
    return sse_event(b, chunk(s, j, created, json_pack("[o]", choice)));
}

int tsrv_sse_final(tsrv_buf *b, const tsrv_server *s, const tsrv_job *j, time_t created) {
    int rc = 0;
    if (!strcmp(j->finish, "error")) {
        tsrv_error e;
        tsrv_fail(&e, 500, TSRV_E_INTERNAL, NULL, "%s", j->errmsg[0] ? j->errmsg : "generation failed");
        char *body = tsrv_error_json(&e);
        rc = !body || tsrv_buf_add(b, "data: ", 6) || tsrv_buf_add(b, body, strlen(body)) || tsrv_buf_add(b, "\n\n", 2);
        free(body);
    } else {
        /* the last choice's finish chunk carries the job's timings (and a
         * diffusion job's decoder counters) */
        json_t *choice = j->kind == TSRV_CHAT
                             ? json_pack("{s:i, s:{}, s:n, s:s?}", "index", j->n_choices - 1, "delta", "logprobs",
                                         "finish_reason", choice_finish(j, j->n_choices - 1))
                             : json_pack("{s:s, s:i, s:n, s:s?}", "text", "", "index", j->n_choices - 1, "logprobs",
                                         "finish_reason", choice_finish(j, j->n_choices - 1));
        json_t *c = chunk(s, j, created, json_pack("[o]", choice));
        if (c) json_object_set_new(c, "timings", timings_json(j));
        if (c && j->diffusion) json_object_set_new(c, "diffusion", diffusion_json(j));
        rc = sse_event(b, c);
        if (!rc && j->include_usage) {
            json_t *u = chunk(s, j, created, json_array());
            if (u) json_object_set_new(u, "usage", usage_json(j));
            rc = sse_event(b, u);
        }
    }
    return rc || tsrv_buf_add(b, "data: [DONE]\n\n", 14) ? -1 : 0;
}

char *tsrv_models_json(const tsrv_server *s) {
    return dump(json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:{s:s, s:I, s:I, s:I, s:i, s:b, s:o}}]}", "object", "list",
                          "data", "id", s->model_id, "object", "model", "created", (json_int_t)s->started, "owned_by",
                          "tessera", "meta", "architecture", s->info.arch, "n_params", (json_int_t)s->info.n_params,
                          "size_bytes", (json_int_t)s->info.size_bytes, "n_ctx_train",
                          (json_int_t)s->info.n_ctx_train, "n_ctx", (int)s->n_ctx, "diffusion", s->diffusion,
                          "diffusion_defaults", diffusion_defaults_json(s)));
}

char *tsrv_health_json(tsrv_server *s) {
    int queued, busy;
    tsrv_sched_counts(s, &queued, &busy);
    /* prefill_device: what --prefill-device asked for, whether it opened,
     * and the library's line when it fell back to the CPU */
    /* and, when it opened, the session the slots share: one upload of the
     * weights for all of them (upload_mib ~ weight_mib, sharing = slots) */
    return dump(json_pack("{s:s, s:s, s:s, s:b, s:o, s:{s:i, s:i, s:i}, s:i, s:{s:s, s:s}, "
                          "s:{s:s?, s:b, s:s?, s:f, s:f, s:f, s:i}}",
                          "status", "ok", "model", s->model_id, "architecture", s->info.arch, "diffusion",
                          s->diffusion, "diffusion_defaults", diffusion_defaults_json(s), "slots", "total",
                          s->n_slots, "busy", busy, "n_ctx", (int)s->n_ctx, "queue", queued, "engine", "prefill", s->engine_prefill ? s->engine_prefill : "none", "decode",
                          s->engine_decode ? s->engine_decode : "none", "prefill_device", "requested",
                          s->cfg.prefill_device, "opened", s->prefill_device[0] != '\0', "fallback",
                          s->device_fallback[0] ? s->device_fallback : NULL, "upload_mib", s->dev_upload_mib,
                          "weight_mib", s->dev_weight_mib, "window_peak_mib", s->dev_window_peak_mib, "sharing",
                          s->dev_sharing));
}

/* n floats as base64 of their little-endian bytes (OpenAI's encoding_format
 * base64, which its Python client asks for by default) */
static json_t *base64_floats(const float *x, int32_t n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const size_t nb = (size_t)n * 4, no = (nb + 2) / 3 * 4;
    unsigned char *b = malloc(nb ? nb : 1);
    char *o = malloc(no + 1);
    json_t *r = NULL;
    if (b && o) {
        for (int32_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &x[i], 4);
            for (int k = 0; k < 4; k++) b[4 * (size_t)i + (size_t)k] = (unsigned char)(u >> (8 * k));
        }
        size_t w = 0;
        for (size_t i = 0; i < nb; i += 3) {
            uint32_t v = (uint32_t)b[i] << 16 | (i + 1 < nb ? (uint32_t)b[i + 1] << 8 : 0) | (i + 2 < nb ? b[i + 2] : 0);
            o[w++] = tab[v >> 18 & 63];
            o[w++] = tab[v >> 12 & 63];
            o[w++] = i + 1 < nb ? tab[v >> 6 & 63] : '=';
            o[w++] = i + 2 < nb ? tab[v & 63] : '=';
        }
        r = json_stringn(o, w);
    }
    free(b), free(o);
    return r;
}

char *tsrv_embeddings_json(const tsrv_server *s, const tsrv_job *j) {
    json_t *data = json_array();
    const int32_t E = s->info.n_embd;
    for (int i = 0; i < j->n_inputs && data; i++) {
        if (j->embd_base64) {
            json_array_append_new(data, json_pack("{s:s, s:i, s:o}", "object", "embedding", "index", i, "embedding",
                                                  base64_floats(j->embd + (size_t)i * (size_t)E, E)));
            continue;
        }
        json_t *v = json_array();
        for (int32_t e = 0; e < E && v; e++) json_array_append_new(v, json_real(j->embd[(size_t)i * (size_t)E + e]));
        json_array_append_new(data, json_pack("{s:s, s:i, s:o}", "object", "embedding", "index", i, "embedding", v));
    }
    return dump(json_pack("{s:s, s:o, s:s, s:{s:I, s:I}}", "object", "list", "data", data, "model", s->model_id,
                          "usage", "prompt_tokens", (json_int_t)j->n_prompt, "total_tokens", (json_int_t)j->n_prompt));
}
