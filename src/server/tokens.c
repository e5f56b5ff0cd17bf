/* tokens.c - POST /tokenize and /detokenize in llama-server's shapes:
 *   /tokenize   {"content": str, "add_special": false, "parse_special": true,
 *                "with_pieces": false} -> {"tokens": [ids]}, or with pieces
 *               {"tokens": [{"id": id, "piece": str}]} (a piece that is not
 *               valid UTF-8 on its own, half of a character, is its bytes
 *               as an array of integers, as llama-server gives it)
 *   /detokenize {"tokens": [ids]} -> {"content": str}
 * Unknown fields, wrong types and ids outside the vocabulary are 400s. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv.h"

json_t *tsrv_json_text(const char *b, size_t n) {
    char *out = malloc(3 * n + 1);
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = 1;
        while (k <= 4 && i + k <= n && !tsrv_utf8_valid(b + i, k)) k++;
        if (k <= 4 && i + k <= n) {
            memcpy(out + o, b + i, k);
            o += k;
            i += k;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3); /* U+FFFD */
            o += 3;
            i++;
        }
    }
    json_t *s = json_stringn(out, o);
    free(out);
    return s;
}

static char *dump(json_t *v) {
    if (!v) return NULL;
    char *s = json_dumps(v, JSON_COMPACT);
    json_decref(v);
    return s;
}

static int opt_bool(const json_t *root, const char *key, bool *out, tsrv_error *e) {
    const json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return tsrv_fail(e, 400, TSRV_E_INVALID_TYPE, key, "'%s' must be true or false", key);
    *out = json_is_true(v);
    return 0;
}

char *tsrv_tokenize(tsrv_server *s, const char *body, size_t len, tsrv_error *e) {
    static const char *const known[] = {"content", "add_special", "parse_special", "with_pieces", "model", NULL};
    json_t *root = tsrv_body_object(body, len, known, e), *out = NULL;
    int32_t *ids = NULL;
    if (!root) return NULL;
    bool add_special = false, parse_special = true, with_pieces = false;
    if (opt_bool(root, "add_special", &add_special, e) < 0 || opt_bool(root, "parse_special", &parse_special, e) < 0 ||
        opt_bool(root, "with_pieces", &with_pieces, e) < 0)
        goto done;
    const json_t *c = json_object_get(root, "content");
    if (!c || json_is_null(c)) {
        tsrv_fail(e, 400, TSRV_E_MISSING_FIELD, "content", "'content' is required");
        goto done;
    }
    if (!json_is_string(c)) {
        tsrv_fail(e, 400, TSRV_E_INVALID_TYPE, "content", "'content' must be a string");
        goto done;
    }
    size_t n = json_string_length(c);
    int64_t cap = (int64_t)n + 4, nt = 0; /* at most a token per byte, plus BOS/EOS */
    ts_error terr;
    if (!(ids = malloc((size_t)cap * sizeof *ids))) {
        tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
        goto done;
    }
    if (ts_model_tokenize(s->model, json_string_value(c), n, add_special, parse_special, ids, cap, &nt, &terr) !=
            TS_OK ||
        nt > cap) {
        tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, "content", "cannot tokenize: %s", nt > cap ? "too many tokens" : terr.message);
        goto done;
    }
    json_t *arr = json_array();
    for (int64_t i = 0; i < nt && arr; i++) {
        if (!with_pieces) {
            json_array_append_new(arr, json_integer(ids[i]));
            continue;
        }
        char piece[256];
        size_t pl = 0;
        if (ts_model_token_piece(s->model, ids[i], true, piece, sizeof piece, &pl, NULL) != TS_OK || pl > sizeof piece)
            pl = 0;
        json_t *p;
        if (tsrv_utf8_valid(piece, pl)) {
            p = json_stringn(piece, pl);
        } else {
            p = json_array();
            for (size_t k = 0; k < pl; k++) json_array_append_new(p, json_integer((unsigned char)piece[k]));
        }
        json_array_append_new(arr, json_pack("{s:i, s:o}", "id", (int)ids[i], "piece", p));
    }
    out = json_pack("{s:o}", "tokens", arr);
    if (!out) tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
done:
    free(ids);
    json_decref(root);
    char *r = out ? dump(out) : NULL;
    if (out && !r) tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
    return r;
}

char *tsrv_detokenize(tsrv_server *s, const char *body, size_t len, tsrv_error *e) {
    static const char *const known[] = {"tokens", "model", NULL};
    json_t *root = tsrv_body_object(body, len, known, e), *out = NULL;
    int32_t *ids = NULL;
    char *text = NULL;
    if (!root) return NULL;
    const json_t *t = json_object_get(root, "tokens");
    if (!t || json_is_null(t)) {
        tsrv_fail(e, 400, TSRV_E_MISSING_FIELD, "tokens", "'tokens' is required");
        goto done;
    }
    if (!json_is_array(t)) {
        tsrv_fail(e, 400, TSRV_E_INVALID_TYPE, "tokens", "'tokens' must be an array of token ids");
        goto done;
    }
    size_t n = json_array_size(t);
    if (!(ids = malloc((n ? n : 1) * sizeof *ids))) {
        tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(t, i);
        if (!json_is_integer(v)) {
            tsrv_fail(e, 400, TSRV_E_INVALID_TYPE, "tokens", "'tokens[%zu]' must be an integer", i);
            goto done;
        }
        json_int_t id = json_integer_value(v);
        if (id < 0 || id >= s->info.n_vocab) {
            tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, "tokens", "'tokens[%zu]' is %lld: ids are 0 .. %d", i,
                      (long long)id, (int)s->info.n_vocab - 1);
            goto done;
        }
        ids[i] = (int32_t)id;
    }
    size_t tl = 0, cap = 64 + 16 * n;
    ts_error terr;
    for (int pass = 0; pass < 2; pass++) { /* the second with the length the first reported */
        free(text);
        if (!(text = malloc(cap + 1))) {
            tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
            goto done;
        }
        if (ts_model_detokenize(s->model, ids, (int64_t)n, false, text, cap + 1, &tl, &terr) != TS_OK) {
            tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, "tokens", "cannot detokenize: %s", terr.message);
            goto done;
        }
        if (tl <= cap) break;
        cap = tl;
    }
    out = json_pack("{s:o}", "content", tsrv_json_text(text, tl));
    if (!out) tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
done:
    free(ids);
    free(text);
    json_decref(root);
    char *r = out ? dump(out) : NULL;
    if (out && !r) tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
    return r;
}
