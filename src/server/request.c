/* request.c - turns an OpenAI request body into a generation job, or into an
 * error that names the field: the body must be valid UTF-8 and JSON (no
 * duplicate keys), an object with only known fields of the right types and
 * ranges; the prompt (messages rendered with the model's chat template, or
 * the completion prompt) must fit the slot's context. Unknown top-level
 * fields are rejected (400) rather than ignored so that a misspelt option
 * ("max_token") is not silently dropped.
 *
 * For a diffusion LLM (srv->diffusion) the job carries ts_diffusion_params
 * instead: max_tokens is the canvas (n_gen), temperature / seed the
 * decoder's, and the decoder options are extra body fields known only to
 * such a model (decoder, block, steps, threshold, cache, alg, eps,
 * early_stop); for an autoregressive model they stay unknown fields. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_util.h" /* the CLI's UTF-8 decoder: the server is part of the same executable */
#include "srv.h"

bool tsrv_utf8_valid(const char *b, size_t n) {
    const unsigned char *s = (const unsigned char *)b;
    for (size_t i = 0, len; i < n; i += len)
        if (!(len = cli_utf8_len(s + i, n - i, NULL))) return false;
    return true;
}

json_t *tsrv_body_object(const char *body, size_t len, const char *const *known, tsrv_error *e) {
    if (!tsrv_utf8_valid(body, len)) {
        tsrv_fail(e, 400, TSRV_E_INVALID_UTF8, NULL, "the request body is not valid UTF-8");
        return NULL;
    }
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        tsrv_fail(e, 400, TSRV_E_INVALID_JSON, NULL, "malformed JSON at line %d, column %d: %s", jerr.line,
                  jerr.column, jerr.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        tsrv_fail(e, 400, TSRV_E_INVALID_TYPE, NULL, "the request body must be a JSON object");
        return NULL;
    }
    const char *key;
    json_t *v;
    if (known) json_object_foreach(root, key, v) {
            bool ok = false;
            for (const char *const *k = known; *k && !ok; k++) ok = !strcmp(*k, key);
            if (!ok) {
                char list[200] = "";
                for (const char *const *k = known; *k; k++)
                    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k == known ? "" : ", ", *k);
                tsrv_fail(e, 400, TSRV_E_UNKNOWN_FIELD, key, "unknown field '%.60s' (known: %s)", key, list);
                json_decref(root);
                return NULL;
            }
        }
    return root;
}

/* ---- typed field readers: null counts as absent ---- */

static int want_number(const json_t *v, const char *name, double lo, double hi, double *out, tsrv_error *e) {
    if (!json_is_number(v)) return tsrv_fail(e, 400, TSRV_E_INVALID_TYPE, name, "'%s' must be a number", name);
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi)
        return tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, name, "'%s' must be between %g and %g, got %g", name, lo, hi, d);
    *out = d;
    return 0;
}

static int want_int(const json_t *v, const char *name, long long lo, long long hi, long long *out, tsrv_error *e) {
    if (!json_is_integer(v)) return tsrv_fail(e, 400, TSRV_E_INVALID_TYPE, name, "'%s' must be an integer", name);
    long long x = (long long)json_integer_value(v);
    if (x < lo || x > hi)
        return tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, name, "'%s' must be between %lld and %lld, got %lld", name, lo,
                         hi, x);
    *out = x;
    return 0;
}

static int want_bool(const json_t *v, const char *name, bool *out, tsrv_error *e) {
    if (!json_is_boolean(v)) return tsrv_fail(e, 400, TSRV_E_INVALID_TYPE, name, "'%s' must be true or false", name);
    *out = json_is_true(v);
    return 0;
}

/* A message's content: a string, or an array of {"type":"text","text":...} parts. */
static char *content_text(const json_t *c, size_t idx, tsrv_error *e) {
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].content", idx);
    if (!c || json_is_null(c)) return strdup("");
    if (json_is_string(c)) return strdup(json_string_value(c));
    if (!json_is_array(c)) {
        tsrv_fail(e, 400, TSRV_E_INVALID_TYPE, param, "'%s' must be a string or an array of text parts", param);
        return NULL;
    }
    tsrv_buf b = {0};
    size_t i;
    json_t *part;
    json_array_foreach(c, i, part) {
        const json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type) || strcmp(json_string_value(type), "text") ||
            !json_is_string(text)) {
            tsrv_buf_free(&b);
            tsrv_fail(e, 400, TSRV_E_UNSUPPORTED, param,
                      "'%s[%zu]' must be {\"type\": \"text\", \"text\": \"...\"}: only text is supported", param, i);
            return NULL;
        }
        if (tsrv_buf_add(&b, json_string_value(text), json_string_length(text)) < 0) {
            tsrv_buf_free(&b);
            tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
            return NULL;
        }
    }
    if (tsrv_buf_add(&b, "", 1) < 0) {
        tsrv_buf_free(&b);
        tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
        return NULL;
    }
    return b.p;
}

/* messages -> prompt text with the chat template (malloc'ed, *len). With
 * tools (j->tools) the first message is the system message holding the tool
 * list; an assistant message's tool_calls and the role "tool" messages
 * become the text the tool format gives them (tools.c). */
static char *render_messages(tsrv_server *s, const tsrv_job *j, const json_t *msgs, size_t *len, tsrv_error *e) {
    if (!json_is_array(msgs)) {
        tsrv_fail(e, 400, TSRV_E_INVALID_TYPE, "messages", "'messages' must be an array of message objects");
        return NULL;
    }
    size_t n = json_array_size(msgs);
    if (n == 0) {
        tsrv_fail(e, 400, TSRV_E_MISSING_FIELD, "messages", "'messages' must hold at least one message");
        return NULL;
    }
    if (n > 4096) {
        tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, "messages", "'messages' holds %zu messages; at most 4096", n);
        return NULL;
    }
    ts_chat_message *cm = calloc(n + 1, sizeof *cm);
    char **texts = calloc(n + 1, sizeof *texts); /* owned, by output message */
    size_t no = 0;                               /* output messages */
    char *out = NULL;
    if (!cm || !texts) {
        tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(msgs, i);
        char param[64];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m)) {
            tsrv_fail(e, 400, TSRV_E_INVALID_TYPE, param, "'%s' must be an object with 'role' and 'content'", param);
            goto done;
        }
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)m, key, val) {
            if (strcmp(key, "role") && strcmp(key, "content") && strcmp(key, "name") && strcmp(key, "tool_calls") &&
                strcmp(key, "tool_call_id")) {
                char p2[128];
                snprintf(p2, sizeof p2, "%s.%s", param, key);
                tsrv_fail(e, 400, TSRV_E_UNKNOWN_FIELD, p2,
                          "unknown field '%s' in %s (known: role, content, name, tool_calls, tool_call_id)", key, param);
                goto done;
            }
        }
        const json_t *role = json_object_get(m, "role");
        if (!role) {
            tsrv_fail(e, 400, TSRV_E_MISSING_FIELD, param, "'%s' has no 'role'", param);
            goto done;
        }
        if (!json_is_string(role)) {
            tsrv_fail(e, 400, TSRV_E_INVALID_TYPE, param, "'%s.role' must be a string", param);
            goto done;
        }
        const char *r = json_string_value(role);
        if (!strcmp(r, "developer")) r = "system"; /* OpenAI's newer name for the system role */
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool")) {
            tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, param,
                      "'%s.role' is '%.40s': expected system, developer, user, assistant or tool", param, r);
            goto done;
        }
        const json_t *content = json_object_get(m, "content");
        const json_t *calls = json_object_get(m, "tool_calls");
        if (calls && !json_is_null(calls) && strcmp(r, "assistant")) {
            tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, param, "'%s.tool_calls' is for assistant messages only", param);
            goto done;
        }
        if (!content && strcmp(r, "assistant")) {
            tsrv_fail(e, 400, TSRV_E_MISSING_FIELD, param, "'%s' has no 'content'", param);
            goto done;
        }
        char *text = content_text(content, i, e);
        if (!text) goto done;
        if (calls && !json_is_null(calls)) { /* the assistant's calls as the tool format writes them */
            char *t2 = tsrv_tools_assistant(m, text, e, param);
            free(text);
            if (!(text = t2)) goto done;
        }
        if (!strcmp(r, "tool")) { /* a tool result: <tool_response> blocks, consecutive ones in one user turn */
            size_t tl = strlen(text);
            char *blk = malloc(tl + 40);
            if (!blk) {
                free(text);
                tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
                goto done;
            }
            snprintf(blk, tl + 40, "<tool_response>\n%s\n</tool_response>", text);
            free(text);
            text = blk;
            if (no > 0 && !strcmp(cm[no - 1].role, "tool")) {
                size_t a = strlen(texts[no - 1]), b = strlen(text);
                char *joined = realloc(texts[no - 1], a + b + 2);
                if (!joined) {
                    free(text);
                    tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
                    goto done;
                }
                joined[a] = '\n';
                memcpy(joined + a + 1, text, b + 1);
                free(text);
                texts[no - 1] = joined;
                cm[no - 1].content = joined;
                continue;
            }
        }
        if (i == 0 && j->tools && !strcmp(r, "system")) { /* the tool list joins the system message */
            char *t2 = tsrv_tools_system(s, j->tools, text);
            free(text);
            if (!(text = t2)) {
                tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
                goto done;
            }
        } else if (i == 0 && j->tools) { /* no system message: one with the template's default and the tools */
            if (!(texts[no] = tsrv_tools_system(s, j->tools, NULL))) {
                free(text);
                tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
                goto done;
            }
            cm[no].role = "system";
            cm[no].content = texts[no];
            no++;
        }
        texts[no] = text;
        cm[no].role = r;
        cm[no].content = text;
        no++;
    }
    for (size_t i = 0; i < no; i++)
        if (!strcmp(cm[i].role, "tool")) cm[i].role = "user"; /* the format's tool results are a user turn */
    pthread_mutex_lock(&s->fmt_mu);
    ts_status st = ts_context_chat_format(s->fmt_ctx, cm, no, true, &out, len);
    if (st != TS_OK) tsrv_fail(e, 400, TSRV_E_UNSUPPORTED, "messages", "cannot render the chat: %s", ts_last_error(s->fmt_ctx));
    pthread_mutex_unlock(&s->fmt_mu);
    if (st == TS_OK) {
        /* the library allocates with its own allocator: copy into ours */
        char *copy = malloc(*len + 1);
        if (copy) {
            memcpy(copy, out, *len);
            copy[*len] = '\0';
        } else {
            tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
        }
        ts_free(out);
        out = copy;
    } else {
        out = NULL;
    }
done:
    if (texts)
        for (size_t i = 0; i < no; i++) free(texts[i]);
    free(texts);
    free(cm);
    return out;
}

static int parse_stop(tsrv_job *j, const json_t *v, tsrv_error *e) {
    const json_t *one[1] = {v};
    size_t n = 1;
    if (json_is_array(v)) {
        n = json_array_size(v);
        if (n > TSRV_MAX_STOPS)
            return tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, "stop", "'stop' holds %zu strings; at most %d", n,
                             TSRV_MAX_STOPS);
    } else if (!json_is_string(v)) {
        return tsrv_fail(e, 400, TSRV_E_INVALID_TYPE, "stop", "'stop' must be a string or an array of strings");
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *sv = json_is_array(v) ? json_array_get(v, i) : one[0];
        if (!json_is_string(sv))
            return tsrv_fail(e, 400, TSRV_E_INVALID_TYPE, "stop", "'stop[%zu]' must be a string", i);
        size_t l = json_string_length(sv);
        if (l == 0 || l > TSRV_MAX_STOP_LEN)
            return tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, "stop", "each stop string must have 1 to %d bytes, got %zu",
                             TSRV_MAX_STOP_LEN, l);
        if (!(j->stops[j->n_stops] = malloc(l + 1))) return tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
        memcpy(j->stops[j->n_stops], json_string_value(sv), l + 1);
        j->stop_len[j->n_stops++] = l;
    }
    return 0;
}

/* response_format: {"type": "text" | "json_object" | "json_schema",
 * "json_schema": {"name", "schema", "strict", "description"}} -> j->grammar */
static int parse_response_format(tsrv_job *j, const json_t *v, tsrv_error *e) {
    if (!json_is_object(v)) return tsrv_fail(e, 400, TSRV_E_INVALID_TYPE, "response_format", "'response_format' must be an object");
    const char *key;
    json_t *x;
    json_object_foreach((json_t *)v, key, x) if (strcmp(key, "type") && strcmp(key, "json_schema")) return tsrv_fail(
        e, 400, TSRV_E_UNKNOWN_FIELD, "response_format", "unknown field '%.60s' in 'response_format' (known: type, json_schema)",
        key);
    const json_t *type = json_object_get(v, "type");
    if (!json_is_string(type))
        return tsrv_fail(e, 400, TSRV_E_INVALID_TYPE, "response_format",
                         "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
    const char *t = json_string_value(type);
    if (!strcmp(t, "text")) return 0;
    if (!strcmp(t, "json_object")) {
        tsrv_buf b = {0};
        static const char head[] = "root ::= json-object\n";
        if (tsrv_buf_add(&b, head, sizeof head - 1) || tsrv_buf_add(&b, tsrv_json_gbnf_common, strlen(tsrv_json_gbnf_common)))
            return tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
        j->grammar = b.p;
        return 0;
    }
    if (strcmp(t, "json_schema"))
        return tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, "response_format",
                         "'response_format.type' is '%.40s': expected text, json_object or json_schema", t);
    const json_t *js = json_object_get(v, "json_schema");
    if (!json_is_object(js))
        return tsrv_fail(e, 400, TSRV_E_INVALID_TYPE, "response_format",
                         "'response_format.json_schema' must be an object with 'name' and 'schema'");
    json_object_foreach((json_t *)js, key, x) if (strcmp(key, "name") && strcmp(key, "schema") && strcmp(key, "strict") &&
                                                  strcmp(key, "description")) return tsrv_fail(
        e, 400, TSRV_E_UNKNOWN_FIELD, "response_format",
        "unknown field '%.60s' in 'response_format.json_schema' (known: name, schema, strict, description)", key);
    const json_t *schema = json_object_get(js, "schema");
    if (!schema) schema = json_true(); /* OpenAI: no schema = any JSON */
    tsrv_error se;
    if (!(j->grammar = tsrv_schema_gbnf(schema, &se))) {
        *e = se;
        snprintf(e->param, sizeof e->param, "response_format");
        return -1;
    }
    return 0;
}

static uint64_t fresh_seed(void) {
    static _Atomic uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ (++counter * 0x9E3779B97F4A7C15ull);
    x ^= x >> 31; /* splitmix-style finalizer */
    x *= 0xBF58476D1CE4E5B9ull;
    return x ^ (x >> 29);
}

static const char *const chat_fields[] = {
    "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p", "seed",
    "stop", "n", "stream", "stream_options", "user", "presence_penalty", "frequency_penalty", "repeat_penalty",
    "logprobs", "top_logprobs", "response_format", "grammar", "tools", "tool_choice", "parallel_tool_calls", NULL};
static const char *const completion_fields[] = {
    "model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop", "n", "stream",
    "stream_options", "user", "presence_penalty", "frequency_penalty", "repeat_penalty", "logprobs", "echo",
    "response_format", "grammar", NULL};
/* Known only when the model is a diffusion LLM (both endpoints). */
static const char *const diffusion_fields[] = {"decoder", "block", "steps", "threshold", "cache", "alg", "eps",
                                               "early_stop", NULL};

static const char *const decoder_names[] = {"block", "vanilla", NULL};       /* ts_diffusion_decoder order */
static const char *const cache_names[] = {"prefix", "dual", "none", NULL};    /* ts_diffusion_cache order */
static const char *const alg_names[] = {"low_confidence", "maskgit_plus", "topk_margin", "entropy", NULL};

const char *tsrv_diff_decoder_name(ts_diffusion_decoder d) { return (unsigned)d < 2 ? decoder_names[d] : "?"; }
const char *tsrv_diff_cache_name(ts_diffusion_cache c) { return (unsigned)c < 3 ? cache_names[c] : "?"; }
const char *tsrv_diff_alg_name(ts_diffusion_alg a) { return (unsigned)a < 4 ? alg_names[a] : "?"; }

static bool known(const char *const *list, const char *key) {
    for (; *list; list++)
        if (!strcmp(*list, key)) return true;
    return false;
}

/* True for an autoregressive sampler option set to a value that would
 * change something (top_p 1, top_k 0, min_p 0, the penalties off are no-ops
 * and accepted for any model). */
static bool sampler_only(const char *key, const json_t *v) {
    if (!json_is_number(v)) return false; /* the field's own check says what is wrong */
    double d = json_number_value(v);
    if (!strcmp(key, "top_p")) return d != 1;
    if (!strcmp(key, "top_k")) return d != 0;
    if (!strcmp(key, "min_p") || !strcmp(key, "presence_penalty")) return d != 0;
    if (!strcmp(key, "repeat_penalty")) return d != 1;
    return false;
}

/* Which decoder fields a diffusion request gave (bits), for the checks that
 * span fields once all are read. */
enum { G_DECODER = 1, G_BLOCK = 2, G_STEPS = 4, G_THRESHOLD = 8, G_CACHE = 16, G_ALG = 32, G_EPS = 64 };

/* A string field that must be one of names[]: its index, or -1 with e. */
static int want_name(const json_t *v, const char *key, const char *const *names, tsrv_error *e) {
    char list[160] = "";
    for (int k = 0; names[k]; k++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s'%s'", k ? ", " : "", names[k]);
    if (!json_is_string(v)) return tsrv_fail(e, 400, TSRV_E_INVALID_TYPE, key, "'%s' must be a string: %s", key, list);
    for (int k = 0; names[k]; k++)
        if (!strcmp(json_string_value(v), names[k])) return k;
    return tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, key, "'%s' is '%.40s': expected %s", key, json_string_value(v),
                     list);
}

/* One of diffusion_fields (v not null) into j->dp. */
static int apply_diffusion_field(tsrv_server *s, tsrv_job *j, const char *key, const json_t *v, unsigned *given,
                                 tsrv_error *e) {
    ts_diffusion_params *dp = &j->dp;
    double d = 0;
    long long x = 0;
    int k;
    if (!strcmp(key, "decoder")) {
        if ((k = want_name(v, key, decoder_names, e)) < 0) return -1;
        dp->decoder = (ts_diffusion_decoder)k;
        *given |= G_DECODER;
    } else if (!strcmp(key, "cache")) {
        if ((k = want_name(v, key, cache_names, e)) < 0) return -1;
        dp->cache = (ts_diffusion_cache)k;
        *given |= G_CACHE;
    } else if (!strcmp(key, "alg")) {
        if ((k = want_name(v, key, alg_names, e)) < 0) return -1;
        dp->alg = (ts_diffusion_alg)k;
        *given |= G_ALG;
    } else if (!strcmp(key, "block")) {
        if (want_int(v, key, 1, s->n_ctx, &x, e) < 0) return -1;
        dp->block = (int32_t)x;
        *given |= G_BLOCK;
    } else if (!strcmp(key, "steps")) {
        if (want_int(v, key, 1, s->n_ctx, &x, e) < 0) return -1;
        dp->steps = (int32_t)x;
        *given |= G_STEPS;
    } else if (!strcmp(key, "threshold")) { /* [0, 1], or <= 0 for alg entropy: checked with alg below */
        if (want_number(v, key, -1e6, 1, &d, e) < 0) return -1;
        dp->threshold = (float)d;
        *given |= G_THRESHOLD;
    } else if (!strcmp(key, "eps")) {
        if (want_number(v, key, 0, 0.999999, &d, e) < 0) return -1;
        dp->eps = (float)d;
        *given |= G_EPS;
    } else if (!strcmp(key, "early_stop")) {
        if (want_bool(v, key, &dp->early_stop, e) < 0) return -1;
    }
    return 0;
}

/* The checks that span fields, once the prompt length is known. */
static int check_diffusion(tsrv_server *s, tsrv_job *j, unsigned given, tsrv_error *e) {
    const ts_diffusion_params *dp = &j->dp;
    const bool vanilla = dp->decoder == TS_DIFFUSION_VANILLA;
    static const struct {
        unsigned bit;
        const char *name;
        bool vanilla_only;
    } only[] = {{G_STEPS, "steps", true}, {G_EPS, "eps", true}, {G_THRESHOLD, "threshold", false},
                {G_CACHE, "cache", false}};
    for (size_t i = 0; i < sizeof only / sizeof only[0]; i++)
        if ((given & only[i].bit) && only[i].vanilla_only != vanilla)
            return tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, only[i].name,
                             "'%s' applies to the %s decoder only (this request's decoder is '%s')", only[i].name,
                             only[i].vanilla_only ? "vanilla" : "block", tsrv_diff_decoder_name(dp->decoder));
    if (!vanilla && dp->alg != TS_DIFFUSION_ENTROPY && dp->threshold < 0)
        return tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, "threshold",
                         "'threshold' is %g: with alg '%s' it must be between 0 and 1 (only entropy's are <= 0)",
                         (double)dp->threshold, tsrv_diff_alg_name(dp->alg));
    int64_t n_blocks = ((int64_t)dp->n_gen + dp->block - 1) / dp->block;
    if (vanilla && dp->steps > 0 && dp->steps < n_blocks)
        return tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, "steps",
                         "'steps' is %d, fewer than the %lld blocks of %d tokens in max_tokens %d (each block needs "
                         "at least one step)",
                         (int)dp->steps, (long long)n_blocks, (int)dp->block, (int)dp->n_gen);
    /* Whatever the library still finds wrong, and the window that the slot's
     * batch must hold (n_batch = n_ctx holds every canvas that fits). */
    int32_t need = ts_diffusion_n_batch(s->model, dp, j->n_prompt);
    if (need < 0)
        return tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, NULL, "the diffusion decoder's parameters are not valid");
    if (need > s->n_batch) {
        tsrv_fail(e, 400, TSRV_E_CONTEXT_EXCEEDED, "max_tokens", "the decoder needs windows of %d tokens; the slots hold %d",
                  (int)need, (int)s->n_batch);
        e->code = "context_length_exceeded";
        return -1;
    }
    return 0;
}

static int apply_fields(tsrv_server *s, tsrv_job *j, const json_t *root, unsigned *given, tsrv_error *e) {
    const char *const *list = j->kind == TSRV_CHAT ? chat_fields : completion_fields;
    const char *key;
    json_t *v;
    long long max_tokens = -1;
    bool top_given = false;
    json_object_foreach((json_t *)root, key, v) {
        bool dfield = j->diffusion && known(diffusion_fields, key);
        if (!known(list, key) && !dfield)
            return tsrv_fail(e, 400, TSRV_E_UNKNOWN_FIELD, key, "unknown field '%.60s' (supported: see docs/SERVER.md)",
                             key);
        if (json_is_null(v)) continue; /* clients send null for "not set" */
        if (dfield) {
            if (apply_diffusion_field(s, j, key, v, given, e) < 0) return -1;
            continue;
        }
        double d = 0;
        long long x = 0;
        bool b = false;
        if (!strcmp(key, "model")) {
            if (!json_is_string(v)) return tsrv_fail(e, 400, TSRV_E_INVALID_TYPE, key, "'model' must be a string");
        } else if (!strcmp(key, "user")) {
            if (!json_is_string(v)) return tsrv_fail(e, 400, TSRV_E_INVALID_TYPE, key, "'user' must be a string");
        } else if (!strcmp(key, "max_tokens") || !strcmp(key, "max_completion_tokens")) {
            if (want_int(v, key, 1, s->n_ctx, &max_tokens, e) < 0) {
                if (e->kind == TSRV_E_INVALID_VALUE)
                    snprintf(e->message, sizeof e->message,
                             "'%s' is %lld: it must be between 1 and the context size %d", key,
                             (long long)json_integer_value(v), (int)s->n_ctx);
                return -1;
            }
        } else if (!strcmp(key, "temperature")) {
            if (want_number(v, key, 0, 2, &d, e) < 0) return -1;
            j->sp.temp = (float)d;
            j->dp.temp = (float)d; /* diffusion: Gumbel-max noise at this temperature, 0 = argmax */
        } else if (j->diffusion && sampler_only(key, v)) {
            return tsrv_fail(e, 400, TSRV_E_UNSUPPORTED, key,
                             "'%s' does not apply to a diffusion model (its decoder samples with temperature and "
                             "seed only)",
                             key);
        } else if (!strcmp(key, "top_p")) {
            if (want_number(v, key, 0, 1, &d, e) < 0) return -1;
            j->sp.top_p = (float)d;
        } else if (!strcmp(key, "min_p")) {
            if (want_number(v, key, 0, 1, &d, e) < 0) return -1;
            j->sp.min_p = (float)d;
        } else if (!strcmp(key, "top_k")) {
            if (want_int(v, key, 0, 1 << 30, &x, e) < 0) return -1;
            j->sp.top_k = (int32_t)x;
        } else if (!strcmp(key, "seed")) {
            if (!json_is_integer(v)) return tsrv_fail(e, 400, TSRV_E_INVALID_TYPE, key, "'seed' must be an integer");
            j->sp.seed = (uint64_t)json_integer_value(v);
            j->dp.seed = j->sp.seed;
        } else if (!strcmp(key, "presence_penalty")) {
            if (want_number(v, key, -2, 2, &d, e) < 0) return -1;
            j->sp.presence_penalty = (float)d;
        } else if (!strcmp(key, "frequency_penalty")) {
            if (want_number(v, key, -2, 2, &d, e) < 0) return -1;
            if (d != 0)
                return tsrv_fail(e, 400, TSRV_E_UNSUPPORTED, key,
                                 "'frequency_penalty' is not supported (use presence_penalty or repeat_penalty)");
        } else if (!strcmp(key, "repeat_penalty")) {
            if (want_number(v, key, 0.01, 10, &d, e) < 0) return -1;
            j->sp.repeat_penalty = (float)d;
        } else if (!strcmp(key, "n")) {
            if (want_int(v, key, 1, TSRV_MAX_CHOICES, &x, e) < 0) return -1;
            j->n_choices = (int)x;
        } else if (!strcmp(key, "stream")) {
            if (want_bool(v, key, &j->stream, e) < 0) return -1;
        } else if (!strcmp(key, "stream_options")) {
            if (!json_is_object(v))
                return tsrv_fail(e, 400, TSRV_E_INVALID_TYPE, key, "'stream_options' must be an object");
            const char *k2;
            json_t *v2;
            json_object_foreach(v, k2, v2) {
                if (strcmp(k2, "include_usage"))
                    return tsrv_fail(e, 400, TSRV_E_UNKNOWN_FIELD, "stream_options",
                                     "unknown field '%.60s' in 'stream_options' (known: include_usage)", k2);
                if (!json_is_null(v2) && want_bool(v2, "stream_options.include_usage", &j->include_usage, e) < 0)
                    return -1;
            }
        } else if (!strcmp(key, "stop")) {
            if (parse_stop(j, v, e) < 0) return -1;
        } else if (!strcmp(key, "logprobs") && j->kind == TSRV_CHAT) {
            if (want_bool(v, key, &j->logprobs, e) < 0) return -1;
        } else if (!strcmp(key, "logprobs")) { /* completions: how many alternatives, 0..5 */
            if (want_int(v, key, 0, 5, &x, e) < 0) return -1;
            j->logprobs = true;
            j->top_logprobs = (int)x;
        } else if (!strcmp(key, "top_logprobs")) {
            if (want_int(v, key, 0, TSRV_MAX_TOP_LOGPROBS, &x, e) < 0) return -1;
            j->top_logprobs = (int)x;
            top_given = true;
        } else if (!strcmp(key, "response_format")) {
            if (j->grammar) return tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, key, "give 'response_format' or 'grammar', not both");
            if (parse_response_format(j, v, e) < 0) return -1;
        } else if (!strcmp(key, "grammar")) {
            if (j->grammar) return tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, key, "give 'response_format' or 'grammar', not both");
            if (!json_is_string(v)) return tsrv_fail(e, 400, TSRV_E_INVALID_TYPE, key, "'grammar' must be a string (GBNF)");
            ts_error ge;
            if (ts_grammar_check(json_string_value(v), "root", &ge) != TS_OK)
                return tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, key, "%s", ge.message);
            if (!(j->grammar = strdup(json_string_value(v)))) return tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
        } else if (!strcmp(key, "tools") || !strcmp(key, "tool_choice")) {
            /* read with the messages */
        } else if (!strcmp(key, "parallel_tool_calls")) {
            if (want_bool(v, key, &b, e) < 0) return -1; /* accepted; a forced call is one call */
        } else if (!strcmp(key, "echo")) {
            if (want_bool(v, key, &b, e) < 0) return -1;
            if (b)
                return tsrv_fail(e, 400, TSRV_E_UNSUPPORTED, key,
                                 "'echo' is not supported (tokenize the prompt with /tokenize instead)");
        }
        /* messages / prompt are handled by the caller */
    }
    j->max_tokens = (int32_t)max_tokens;
    if (top_given && !j->logprobs)
        return tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (j->grammar && j->diffusion)
        return tsrv_fail(e, 400, TSRV_E_UNSUPPORTED, json_object_get(root, "grammar") ? "grammar" : "response_format",
                         "constrained output (response_format json, grammar) is not available for a diffusion model: "
                         "its decoder commits tokens anywhere in a block at once, and the grammar follows text left "
                         "to right");
    if (j->logprobs && j->diffusion)
        return tsrv_fail(e, 400, TSRV_E_UNSUPPORTED, "logprobs",
                         "'logprobs' is not supported for a diffusion model: its decoder commits tokens by "
                         "confidence over a whole block, not by sampling one token from one distribution");
    return 0;
}

tsrv_job *tsrv_request_parse(tsrv_server *s, tsrv_kind kind, const char *body, size_t len, tsrv_error *e) {
    json_t *root = tsrv_body_object(body, len, NULL, e); /* apply_fields names the unknown ones */
    if (!root) return NULL;
    tsrv_job *j = NULL;
    char *prompt = NULL;
    size_t plen = 0;
    if (!(j = tsrv_job_new())) {
        tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
        goto fail;
    }
    j->kind = kind;
    j->sp.seed = fresh_seed(); /* a request without "seed" gets its own */
    j->diffusion = s->diffusion;
    if (j->diffusion) {
        j->dp = s->diffusion_defaults;
        j->dp.seed = j->sp.seed;
    }
    unsigned given = 0;
    if (apply_fields(s, j, root, &given, e) < 0) goto fail;

    if (kind == TSRV_CHAT) {
        const json_t *msgs = json_object_get(root, "messages");
        if (!msgs || json_is_null(msgs)) {
            tsrv_fail(e, 400, TSRV_E_MISSING_FIELD, "messages", "'messages' is required");
            goto fail;
        }
        const json_t *tools = json_object_get(root, "tools"), *choice = json_object_get(root, "tool_choice");
        if (tools && !json_is_null(tools) && j->diffusion) {
            tsrv_fail(e, 400, TSRV_E_UNSUPPORTED, "tools", "'tools' are not supported for a diffusion model");
            goto fail;
        }
        if (tools && !json_is_null(tools) && j->grammar) {
            tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, "tools", "give 'tools' or 'response_format' / 'grammar', not both");
            goto fail;
        }
        if (tsrv_tools_parse(j, tools, choice, e) < 0) goto fail;
        if (!(prompt = render_messages(s, j, msgs, &plen, e))) goto fail;
    } else {
        const json_t *p = json_object_get(root, "prompt");
        if (json_is_array(p) && json_array_size(p) == 1) p = json_array_get(p, 0);
        if (!p || json_is_null(p)) {
            tsrv_fail(e, 400, TSRV_E_MISSING_FIELD, "prompt", "'prompt' is required");
            goto fail;
        }
        if (!json_is_string(p)) {
            tsrv_fail(e, 400, TSRV_E_INVALID_TYPE, "prompt", "'prompt' must be a string (or an array of one string)");
            goto fail;
        }
        plen = json_string_length(p);
        if (!(prompt = malloc(plen + 1))) {
            tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
            goto fail;
        }
        memcpy(prompt, json_string_value(p), plen + 1);
    }

    /* Tokenize: a prompt longer than the body in bytes cannot have more tokens
     * than bytes + a BOS/EOS, so one pass with that capacity suffices. */
    int64_t cap = (int64_t)plen + 4, n = 0;
    if (!(j->prompt = malloc((size_t)cap * sizeof *j->prompt))) {
        tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
        goto fail;
    }
    ts_error terr;
    if (ts_model_tokenize(s->model, prompt, plen, true, true, j->prompt, cap, &n, &terr) != TS_OK || n > cap) {
        tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, kind == TSRV_CHAT ? "messages" : "prompt", "cannot tokenize: %s",
                  n > cap ? "too many tokens" : terr.message);
        goto fail;
    }
    if (n == 0) {
        tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, "prompt", "the prompt is empty");
        goto fail;
    }
    if (n >= s->n_ctx) {
        tsrv_fail(e, 400, TSRV_E_CONTEXT_EXCEEDED, kind == TSRV_CHAT ? "messages" : "prompt",
                  "the prompt has %lld tokens, but the context holds %d (and must leave room for the reply)",
                  (long long)n, (int)s->n_ctx);
        e->code = "context_length_exceeded";
        goto fail;
    }
    j->n_prompt = (int32_t)n;
    int32_t room = s->n_ctx - j->n_prompt;
    if (j->diffusion) {
        /* The canvas is decoded as a whole: it must fit (OpenAI's answer to a
         * prompt + max_tokens over the context is a 400 too). Without
         * max_tokens: the library's default canvas, cut to the room left. */
        if (j->max_tokens > room) {
            tsrv_fail(e, 400, TSRV_E_CONTEXT_EXCEEDED, "max_tokens",
                      "the prompt has %d tokens and max_tokens is %d, but a diffusion model decodes the whole canvas "
                      "at once and the context holds %d",
                      (int)j->n_prompt, (int)j->max_tokens, (int)s->n_ctx);
            e->code = "context_length_exceeded";
            goto fail;
        }
        if (j->max_tokens <= 0) j->max_tokens = s->diffusion_defaults.n_gen < room ? s->diffusion_defaults.n_gen : room;
        j->dp.n_gen = j->max_tokens;
        if (check_diffusion(s, j, given, e) < 0) goto fail;
    }
    if (j->max_tokens <= 0) j->max_tokens = kind == TSRV_CHAT ? room : (room < 16 ? room : 16);
    free(prompt);
    json_decref(root);
    return j;
fail:
    free(prompt);
    tsrv_job_release(j);
    json_decref(root);
    return NULL;
}

char *tsrv_apply_template(tsrv_server *s, const char *body, size_t len, tsrv_error *e) {
    static const char *const known[] = {"messages", "tools", "tool_choice", "model", NULL};
    json_t *root = tsrv_body_object(body, len, known, e);
    if (!root) return NULL;
    char *out = NULL, *prompt = NULL;
    tsrv_job *j = NULL;
    if (!(j = tsrv_job_new())) {
        tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
        goto done;
    }
    j->kind = TSRV_CHAT;
    const json_t *msgs = json_object_get(root, "messages");
    if (!msgs || json_is_null(msgs)) {
        tsrv_fail(e, 400, TSRV_E_MISSING_FIELD, "messages", "'messages' is required");
        goto done;
    }
    if (tsrv_tools_parse(j, json_object_get(root, "tools"), json_object_get(root, "tool_choice"), e) < 0) goto done;
    size_t plen = 0;
    if (!(prompt = render_messages(s, j, msgs, &plen, e))) goto done;
    json_t *r = json_pack("{s:s%}", "prompt", prompt, plen);
    if (r) out = json_dumps(r, JSON_COMPACT);
    json_decref(r);
    if (!out) tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
done:
    free(prompt);
    tsrv_job_release(j);
    json_decref(root);
    return out;
}

/* /v1/embeddings: {"input": a string, an array of strings, an array of
 * token ids or an array of such arrays, "model", "encoding_format": "float",
 * "user", "pooling": "mean" (default) | "last" (tessera's)} */
tsrv_job *tsrv_embed_parse(tsrv_server *s, const char *body, size_t len, tsrv_error *e) {
    static const char *const known[] = {"input", "model", "user", "encoding_format", "pooling", "dimensions", NULL};
    json_t *root = tsrv_body_object(body, len, known, e);
    if (!root) return NULL;
    tsrv_job *j = NULL;
    if (s->diffusion) {
        tsrv_fail(e, 400, TSRV_E_UNSUPPORTED, NULL,
                  "embeddings are not available for a diffusion model (its forward is bidirectional over a masked "
                  "canvas)");
        goto fail;
    }
    if (!(j = tsrv_job_new())) {
        tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
        goto fail;
    }
    j->kind = TSRV_EMBED;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "input") || !strcmp(key, "model") || !strcmp(key, "user") || json_is_null(v)) continue;
        if (!strcmp(key, "encoding_format")) {
            if (!json_is_string(v) || (strcmp(json_string_value(v), "float") && strcmp(json_string_value(v), "base64"))) {
                tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, key, "'encoding_format' must be \"float\" or \"base64\"");
                goto fail;
            }
            j->embd_base64 = !strcmp(json_string_value(v), "base64");
        } else if (!strcmp(key, "pooling")) {
            if (!json_is_string(v) || (strcmp(json_string_value(v), "mean") && strcmp(json_string_value(v), "last"))) {
                tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, key, "'pooling' must be \"mean\" or \"last\"");
                goto fail;
            }
            j->pooling = strcmp(json_string_value(v), "last") ? TS_POOLING_MEAN : TS_POOLING_LAST;
        } else if (!strcmp(key, "dimensions")) {
            tsrv_fail(e, 400, TSRV_E_UNSUPPORTED, key,
                      "'dimensions' is not supported: the embedding has the model's width (%d)", (int)s->info.n_embd);
            goto fail;
        }
    }
    const json_t *in = json_object_get(root, "input");
    if (!in || json_is_null(in)) {
        tsrv_fail(e, 400, TSRV_E_MISSING_FIELD, "input", "'input' is required");
        goto fail;
    }
    /* the inputs as a list: one string, or one token array, or a list of either */
    json_t *list = NULL;
    bool ids_one = json_is_array(in) && json_array_size(in) > 0 && json_is_integer(json_array_get(in, 0));
    if (json_is_string(in) || ids_one) list = json_pack("[O]", in);
    else if (json_is_array(in)) list = json_incref((json_t *)in);
    else {
        tsrv_fail(e, 400, TSRV_E_INVALID_TYPE, "input", "'input' must be a string, an array of strings or of token ids");
        goto fail;
    }
    size_t n = json_array_size(list);
    if (n == 0 || n > 256) {
        json_decref(list);
        tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, "input", "'input' must hold 1 to 256 inputs, got %zu", n);
        goto fail;
    }
    j->n_inputs = (int)n;
    j->input_len = calloc(n, sizeof *j->input_len);
    int64_t cap = 0, total = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_array_get(list, i);
        cap += json_is_string(x) ? (int64_t)json_string_length(x) + 4 : json_is_array(x) ? (int64_t)json_array_size(x) : 0;
    }
    j->prompt = malloc((size_t)(cap > 0 ? cap : 1) * sizeof *j->prompt);
    if (!j->input_len || !j->prompt) {
        json_decref(list);
        tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_array_get(list, i);
        int64_t k = 0;
        if (json_is_string(x)) {
            ts_error terr;
            if (ts_model_tokenize(s->model, json_string_value(x), json_string_length(x), true, false, j->prompt + total,
                                  cap - total, &k, &terr) != TS_OK || k > cap - total) {
                json_decref(list);
                tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, "input", "input %zu: cannot tokenize: %s", i, terr.message);
                goto fail;
            }
        } else if (json_is_array(x)) {
            size_t q;
            json_t *id;
            json_array_foreach(x, q, id) {
                if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= s->info.n_vocab) {
                    json_decref(list);
                    tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, "input", "input %zu: token %zu is not an id in 0 .. %d", i,
                              q, (int)s->info.n_vocab - 1);
                    goto fail;
                }
                j->prompt[total + k++] = (int32_t)json_integer_value(id);
            }
        } else {
            json_decref(list);
            tsrv_fail(e, 400, TSRV_E_INVALID_TYPE, "input", "input %zu must be a string or an array of token ids", i);
            goto fail;
        }
        if (k == 0 || k > s->n_ctx) {
            json_decref(list);
            tsrv_fail(e, 400, k ? TSRV_E_CONTEXT_EXCEEDED : TSRV_E_INVALID_VALUE, "input",
                      "input %zu has %lld tokens: it must have 1 to %d (the context)", i, (long long)k, (int)s->n_ctx);
            if (k) e->code = "context_length_exceeded";
            goto fail;
        }
        j->input_len[i] = (int32_t)k;
        total += k;
    }
    json_decref(list);
    j->n_prompt = (int32_t)total;
    if (!(j->embd = calloc((size_t)n * (size_t)s->info.n_embd, sizeof *j->embd))) {
        tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
        goto fail;
    }
    json_decref(root);
    return j;
fail:
    tsrv_job_release(j);
    json_decref(root);
    return NULL;
}
