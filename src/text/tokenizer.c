/* tokenizer.c - loading a GGUF vocabulary, splitting text around added/special
 * tokens, and detokenization (whole and streaming). The two BPE families live
 * in bpe.c ("gpt2", byte-level) and spm.c ("llama", SentencePiece-style), the
 * unigram one in ugm.c ("t5"); this file holds what they share. Behaviour follows Hugging Face tokenizers as built
 * by transformers from the same GGUF file; docs/TOKENIZERS.md lists the choices.
 */
#include "text/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "text/tok_internal.h"
#include "text/utf8.h"

/* ---- small shared helpers ---------------------------------------------- */

int ts_tokvec_push(ts_tokvec *tv, int32_t id, ts_err *err) {
    if (tv->n == tv->cap) {
        size_t nc = tv->cap ? tv->cap * 2 : 64;
        int32_t *nv = realloc(tv->v, nc * sizeof *nv);
        if (!nv) return ts_err_set(err, "tokenize: out of memory (%zu tokens)", nc);
        tv->v = nv;
        tv->cap = nc;
    }
    tv->v[tv->n++] = id;
    return 0;
}

int ts_scratch_grow(void **p, size_t *cap, size_t need, ts_err *err) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 256;
    while (nc < need) {
        if (nc > SIZE_MAX / 2) return ts_err_set(err, "tokenize: scratch size %zu overflows", need);
        nc *= 2;
    }
    void *np = realloc(*p, nc);
    if (!np) return ts_err_set(err, "tokenize: out of memory (%zu bytes of scratch)", nc);
    *p = np;
    *cap = nc;
    return 0;
}

size_t ts_tok_pool_add(ts_tokenizer *t, const char *s, size_t n) {
    if (n > SIZE_MAX - 1 - t->pool_len) return SIZE_MAX;
    size_t need = t->pool_len + n + 1;
    if (need > t->pool_cap) {
        size_t nc = t->pool_cap ? t->pool_cap : 1 << 16;
        while (nc < need) {
            if (nc > SIZE_MAX / 2) return SIZE_MAX;
            nc *= 2;
        }
        char *np = realloc(t->pool, nc);
        if (!np) return SIZE_MAX;
        t->pool = np;
        t->pool_cap = nc;
    }
    size_t off = t->pool_len;
    if (n && s) memcpy(t->pool + off, s, n);
    t->pool[off + n] = 0;
    t->pool_len = need;
    return off;
}

void ts_tok_pool_trim(ts_tokenizer *t, size_t off, size_t used) {
    t->pool[off + used] = 0;
    t->pool_len = off + used + 1;
}

/* ---- loading ------------------------------------------------------------ */

static bool is_int_type(uint32_t ty) {
    return ty == TS_GGUF_UINT8 || ty == TS_GGUF_INT8 || ty == TS_GGUF_UINT16 || ty == TS_GGUF_INT16 ||
           ty == TS_GGUF_UINT32 || ty == TS_GGUF_INT32 || ty == TS_GGUF_UINT64 || ty == TS_GGUF_INT64;
}
static bool is_signed_type(uint32_t ty) {
    return ty == TS_GGUF_INT8 || ty == TS_GGUF_INT16 || ty == TS_GGUF_INT32 || ty == TS_GGUF_INT64;
}

/* Optional token id: -1 when absent or negative (some converters write -1 for
 * "none"); an error when it is not an integer or lies outside the vocabulary. */
static int opt_token_id(const ts_gguf *g, const char *key, int32_t n_vocab, int32_t *out, ts_err *err) {
    *out = -1;
    const ts_gguf_value *v = ts_gguf_find(g, key);
    if (!v) return 0;
    if (!is_int_type(v->type))
        return ts_err_set(err, "%s: expected an integer token id, got %s", key, ts_gguf_vtype_name(v->type));
    if (is_signed_type(v->type) && v->num.i64 < 0) return 0;
    if (v->num.u64 >= (uint64_t)n_vocab)
        return ts_err_set(err, "%s: token id %llu is outside the vocabulary of %d tokens", key,
                          (unsigned long long)v->num.u64, n_vocab);
    *out = (int32_t)v->num.u64;
    return 0;
}

static int opt_bool(const ts_gguf *g, const char *key, bool dflt, bool *out, ts_err *err) {
    *out = dflt;
    return ts_gguf_opt_bool(g, key, out, err) < 0 ? -1 : 0;
}

/* Numeric array of exactly n elements, or NULL when absent (err set and *bad=1 on mismatch). */
static const ts_gguf_value *opt_num_array(const ts_gguf *g, const char *key, int32_t n, bool want_float, int *bad,
                                          ts_err *err) {
    *bad = 0;
    const ts_gguf_value *v = ts_gguf_find(g, key);
    if (!v) return NULL;
    bool ok_elem = v->type == TS_GGUF_ARRAY &&
                   (is_int_type(v->arr.type) ||
                    (want_float && (v->arr.type == TS_GGUF_FLOAT32 || v->arr.type == TS_GGUF_FLOAT64)));
    if (!ok_elem) {
        *bad = 1;
        ts_err_set(err, "%s: expected an array of %s, got %s%s%s", key, want_float ? "numbers" : "integers",
                   ts_gguf_vtype_name(v->type), v->type == TS_GGUF_ARRAY ? " of " : "",
                   v->type == TS_GGUF_ARRAY ? ts_gguf_vtype_name(v->arr.type) : "");
        return NULL;
    }
    if (v->arr.n != (uint64_t)n) {
        *bad = 1;
        ts_err_set(err, "%s: has %llu entries but tokenizer.ggml.tokens has %d", key, (unsigned long long)v->arr.n,
                   n);
        return NULL;
    }
    return v;
}

static int build_trie(ts_tokenizer *t, ts_err *err) {
    size_t total = 1;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (t->flags[i] & TS_TF_ADDED) total += t->text_len[i];
    if (total > INT32_MAX / 2) return ts_err_set(err, "tokenizer: added tokens too long (%zu bytes)", total);
    t->trie_tok = malloc(total * sizeof *t->trie_tok);
    if (!t->trie_tok || ts_u64map_init(&t->trie, total) < 0)
        return ts_err_set(err, "tokenizer: out of memory for the added-token trie (%zu nodes)", total);
    t->trie_tok[0] = -1;
    t->n_trie = 1;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (!(t->flags[i] & TS_TF_ADDED)) continue;
        const uint8_t *s = (const uint8_t *)t->pool + t->text_off[i];
        int32_t node = 0;
        for (uint32_t k = 0; k < t->text_len[i]; k++) {
            uint64_t key = ((uint64_t)node << 8) | s[k];
            int32_t child = ts_u64map_get(&t->trie, key);
            if (child < 0) {
                child = t->n_trie++;
                t->trie_tok[child] = -1;
                ts_u64map_put(&t->trie, key, child);
            }
            node = child;
        }
        if (t->trie_tok[node] < 0) t->trie_tok[node] = i; /* first of equal texts wins */
        t->trie_first[s[0] >> 3] |= (uint8_t)(1u << (s[0] & 7));
    }
    return 0;
}

static void add_eog(ts_tokenizer *t, int32_t id) {
    if (id < 0) return;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return;
    if (t->n_eog < TS_TOK_MAX_EOG) t->eog[t->n_eog++] = id;
}

/* End-of-turn style control tokens known by their text (the files rarely say). */
static const char *const eot_names[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                        "<EOT>", "_<EOT>", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                        NULL};
static const char *const eog_extra_names[] = {"<|eom_id|>", "<|end_of_text|>", NULL};

static int32_t find_control(const ts_tokenizer *t, const char *name) {
    int32_t id = ts_tok_find(t, name);
    if (id >= 0 && t->type[id] != TS_TT_CONTROL && t->type[id] != TS_TT_USER) return -1;
    return id;
}

ts_tokenizer *ts_tokenizer_load(const ts_gguf *g, ts_err *err) { return ts_tokenizer_load_ex(g, NULL, err); }

ts_tokenizer *ts_tokenizer_load_ex(const ts_gguf *g, const char *pre_override, ts_err *err) {
    if (!g) {
        ts_err_set(err, "tokenizer: no GGUF file given");
        return NULL;
    }
    ts_gguf_str model;
    if (ts_gguf_get_str(g, "tokenizer.ggml.model", &model, err) < 0) return NULL;
    int kind;
    if (model.len == 4 && !memcmp(model.ptr, "gpt2", 4)) kind = TS_TOK_BPE;
    else if (model.len == 5 && !memcmp(model.ptr, "llama", 5)) kind = TS_TOK_SPM;
    else if (model.len == 2 && !memcmp(model.ptr, "t5", 2)) kind = TS_TOK_UGM;
    else {
        ts_err_set(err, "tokenizer.ggml.model: '%.*s' is not supported (expected 'gpt2', 'llama' or 't5')",
                   (int)(model.len > 64 ? 64 : model.len), model.ptr);
        return NULL;
    }
    const ts_gguf_value *toks = ts_gguf_find(g, "tokenizer.ggml.tokens");
    if (!toks) {
        ts_err_set(err, "tokenizer.ggml.tokens: missing");
        return NULL;
    }
    if (toks->type != TS_GGUF_ARRAY || toks->arr.type != TS_GGUF_STRING) {
        ts_err_set(err, "tokenizer.ggml.tokens: expected an array of strings, got %s",
                   ts_gguf_vtype_name(toks->type));
        return NULL;
    }
    if (toks->arr.n < 1 || toks->arr.n > (uint64_t)(INT32_MAX / 4)) {
        ts_err_set(err, "tokenizer.ggml.tokens: %llu tokens is out of range (1..%d)",
                   (unsigned long long)toks->arr.n, INT32_MAX / 4);
        return NULL;
    }
    int32_t n = (int32_t)toks->arr.n;

    ts_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        ts_err_set(err, "tokenizer: out of memory");
        return NULL;
    }
    t->kind = kind;
    t->n_vocab = n;
    t->text_off = malloc((size_t)n * sizeof *t->text_off);
    t->text_len = malloc((size_t)n * sizeof *t->text_len);
    t->key_off = malloc((size_t)n * sizeof *t->key_off);
    t->key_len = malloc((size_t)n * sizeof *t->key_len);
    t->piece_off = malloc((size_t)n * sizeof *t->piece_off);
    t->piece_len = malloc((size_t)n * sizeof *t->piece_len);
    t->type = malloc((size_t)n);
    t->flags = calloc((size_t)n, 1);
    if (!t->text_off || !t->text_len || !t->key_off || !t->key_len || !t->piece_off || !t->piece_len || !t->type ||
        !t->flags) {
        ts_err_set(err, "tokenizer: out of memory for %d tokens", n);
        goto fail;
    }

    /* Stored texts, NUL-terminated. */
    for (int32_t i = 0; i < n; i++) {
        const ts_gguf_str *s = &toks->arr.items[i].str;
        if (s->len > UINT32_MAX / 4) {
            ts_err_set(err, "tokenizer.ggml.tokens[%d]: length %llu is too long", i, (unsigned long long)s->len);
            goto fail;
        }
        size_t off = ts_tok_pool_add(t, s->ptr, (size_t)s->len);
        if (off == SIZE_MAX) {
            ts_err_set(err, "tokenizer: out of memory copying the vocabulary");
            goto fail;
        }
        t->text_off[i] = off;
        t->text_len[i] = (uint32_t)s->len;
    }

    int bad;
    const ts_gguf_value *types = opt_num_array(g, "tokenizer.ggml.token_type", n, false, &bad, err);
    if (bad) goto fail;
    for (int32_t i = 0; i < n; i++) {
        int64_t ty = types ? ts_gguf_arr_i64(types, (uint64_t)i) : TS_TT_NORMAL;
        /* Unknown values are treated as normal tokens rather than rejected. */
        t->type[i] = (uint8_t)(ty >= TS_TT_NORMAL && ty <= TS_TT_BYTE ? ty : TS_TT_NORMAL);
    }
    const ts_gguf_value *scores = opt_num_array(g, "tokenizer.ggml.scores", n, true, &bad, err);
    if (bad) goto fail;
    if (scores) {
        t->score = malloc((size_t)n * sizeof *t->score);
        if (!t->score) {
            ts_err_set(err, "tokenizer: out of memory for scores");
            goto fail;
        }
        for (int32_t i = 0; i < n; i++) t->score[i] = (float)ts_gguf_arr_f64(scores, (uint64_t)i);
    }

    if ((kind == TS_TOK_BPE   ? ts_bpe_init(t, g, pre_override, err)
         : kind == TS_TOK_SPM ? ts_spm_init(t, g, err)
                              : ts_ugm_init(t, g, err)) < 0)
        goto fail;

    if (opt_token_id(g, "tokenizer.ggml.bos_token_id", n, &t->bos, err) < 0 ||
        opt_token_id(g, "tokenizer.ggml.eos_token_id", n, &t->eos, err) < 0 ||
        opt_token_id(g, "tokenizer.ggml.eot_token_id", n, &t->eot, err) < 0 ||
        opt_token_id(g, "tokenizer.ggml.eom_token_id", n, &t->eom, err) < 0 ||
        opt_token_id(g, "tokenizer.ggml.unknown_token_id", n, &t->unk, err) < 0 ||
        opt_token_id(g, "tokenizer.ggml.padding_token_id", n, &t->pad, err) < 0)
        goto fail;
    if (t->unk < 0) /* files without the key still mark their unknown token by type */
        for (int32_t i = 0; i < n && t->unk < 0; i++)
            if (t->type[i] == TS_TT_UNKNOWN) t->unk = i;
    /* SentencePiece vocabularies add BOS unless told otherwise (as llama.cpp and transformers do). */
    if (opt_bool(g, "tokenizer.ggml.add_bos_token", kind == TS_TOK_SPM, &t->add_bos, err) < 0 ||
        opt_bool(g, "tokenizer.ggml.add_eos_token", false, &t->add_eos, err) < 0 ||
        opt_bool(g, "tokenizer.ggml.add_space_prefix", kind != TS_TOK_BPE, &t->add_space_prefix, err) < 0)
        goto fail;

    /* Added tokens, as transformers' GGUF loader declares them:
     *  - control tokens are special added tokens (for byte-level vocabularies only
     *    those spelled in the byte alphabet: others are mislabelled ordinary tokens);
     *  - user-defined tokens are non-special added tokens if their text is a
     *    lookup key (Gemma's space runs are not: they are looked up as "▁▁"...);
     *  - BOS/EOS/UNK/PAD are special whatever their type.
     * Added tokens must be non-empty valid UTF-8 so matches fall on character boundaries. */
    for (int32_t i = 0; i < n; i++) {
        const char *s = t->pool + t->text_off[i];
        uint32_t len = t->text_len[i];
        uint8_t f = 0;
        if (t->type[i] == TS_TT_CONTROL) {
            if (t->key_off[i] == t->text_off[i]) f = TS_TF_ADDED | TS_TF_SPECIAL;
        } else if (t->type[i] == TS_TT_USER) {
            if (ts_strmap_get(&t->vocab, s, len) >= 0) f = TS_TF_ADDED;
        }
        if (i == t->bos || i == t->eos || i == t->unk || i == t->pad) f = TS_TF_ADDED | TS_TF_SPECIAL;
        if (len == 0 || !ts_utf8_valid(s, len)) f = 0;
        if (t->type[i] == TS_TT_CONTROL || t->type[i] == TS_TT_UNKNOWN || (f & TS_TF_SPECIAL)) f |= TS_TF_HIDDEN;
        t->flags[i] = f;
    }
    if (build_trie(t, err) < 0) goto fail;

    /* End of generation: EOS, EOT, EOM and the usual end-of-turn control tokens. */
    if (t->eot < 0)
        for (int k = 0; eot_names[k] && t->eot < 0; k++) t->eot = find_control(t, eot_names[k]);
    add_eog(t, t->eos);
    add_eog(t, t->eot);
    add_eog(t, t->eom);
    for (int k = 0; eot_names[k]; k++) add_eog(t, find_control(t, eot_names[k]));
    for (int k = 0; eog_extra_names[k]; k++) add_eog(t, find_control(t, eog_extra_names[k]));

    /* Decoded pieces: added and control tokens stand for their own text. */
    for (int32_t i = 0; i < n; i++) {
        if ((t->flags[i] & TS_TF_ADDED) || t->type[i] == TS_TT_CONTROL || t->type[i] == TS_TT_UNKNOWN) {
            t->piece_off[i] = t->text_off[i];
            t->piece_len[i] = t->text_len[i];
        } else if ((kind == TS_TOK_BPE   ? ts_bpe_piece(t, i, err)
                    : kind == TS_TOK_SPM ? ts_spm_piece(t, i, err)
                                         : ts_ugm_piece(t, i, err)) < 0) {
            goto fail;
        }
        if (t->piece_len[i] > t->max_piece) t->max_piece = t->piece_len[i];
    }
    /* Shrink the pool to its final size (pointers are offsets, so this is safe). */
    char *shrunk = realloc(t->pool, t->pool_len);
    if (shrunk) {
        t->pool = shrunk;
        t->pool_cap = t->pool_len;
    }
    return t;
fail:
    ts_tokenizer_free(t);
    return NULL;
}

void ts_tokenizer_free(ts_tokenizer *t) {
    if (!t) return;
    if (t->kind == TS_TOK_BPE) ts_bpe_free(t);
    else if (t->kind == TS_TOK_SPM) ts_spm_free(t);
    else ts_ugm_free(t);
    ts_strmap_free(&t->vocab);
    ts_strmap_free(&t->alias);
    ts_u64map_free(&t->trie);
    free(t->trie_tok);
    free(t->pool);
    free(t->text_off);
    free(t->text_len);
    free(t->key_off);
    free(t->key_len);
    free(t->piece_off);
    free(t->piece_len);
    free(t->type);
    free(t->flags);
    free(t->score);
    free(t);
}

/* ---- accessors ---------------------------------------------------------- */

int32_t ts_tok_n_vocab(const ts_tokenizer *t) { return t->n_vocab; }
int32_t ts_tok_bos(const ts_tokenizer *t) { return t->bos; }
int32_t ts_tok_eos(const ts_tokenizer *t) { return t->eos; }
int32_t ts_tok_eot(const ts_tokenizer *t) { return t->eot; }
bool ts_tok_add_bos(const ts_tokenizer *t) { return t->add_bos && t->bos >= 0; }
bool ts_tok_add_eos(const ts_tokenizer *t) { return t->add_eos && t->eos >= 0; }
int64_t ts_tok_max_piece(const ts_tokenizer *t) { return t->max_piece; }

bool ts_tok_is_eog(const ts_tokenizer *t, int32_t id) {
    if (id < 0) return false;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return true;
    return false;
}

bool ts_tok_is_special(const ts_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && (t->flags[id] & TS_TF_HIDDEN);
}

const char *ts_tok_text(const ts_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    return t->pool + t->text_off[id];
}

int32_t ts_tok_find(const ts_tokenizer *t, const char *text) {
    if (!text) return -1;
    size_t len = strlen(text);
    int32_t id = ts_strmap_get(&t->alias, text, len);
    if (id >= 0) return id;
    return ts_strmap_get(&t->vocab, text, len);
}

/* ---- tokenize ----------------------------------------------------------- */

static int encode_run(const ts_tokenizer *t, const char *s, size_t n, bool at_start, ts_tok_scratch *sc,
                      ts_tokvec *out, ts_err *err) {
    if (n == 0) return 0;
    if (t->kind == TS_TOK_BPE) return ts_bpe_encode(t, s, n, sc, out, err);
    if (t->kind == TS_TOK_UGM) return ts_ugm_encode(t, s, n, sc, out, err);
    return ts_spm_encode(t, s, n, at_start, sc, out, err);
}

/* Longest added token starting at s[0], or -1. */
static int32_t match_added(const ts_tokenizer *t, const uint8_t *s, size_t n, size_t *mlen) {
    int32_t node = 0, best = -1;
    for (size_t j = 0; j < n; j++) {
        node = ts_u64map_get(&t->trie, ((uint64_t)node << 8) | s[j]);
        if (node < 0) break;
        if (t->trie_tok[node] >= 0) {
            best = t->trie_tok[node];
            *mlen = j + 1;
        }
    }
    return best;
}

int64_t ts_tokenize(const ts_tokenizer *t, const char *text, size_t len, bool add_special, bool parse_special,
                    int32_t *out, int64_t cap, ts_err *err) {
    if (!t || (!text && len) || cap < 0 || (!out && cap > 0)) {
        ts_err_set(err, "tokenize: invalid arguments");
        return -1;
    }
    if (len > (size_t)INT32_MAX / 4) {
        ts_err_set(err, "tokenize: text of %zu bytes is too long (limit %d)", len, INT32_MAX / 4);
        return -1;
    }
    /* Invalid UTF-8 becomes U+FFFD (per maximal subpart) before anything else. */
    char *owned = NULL;
    const char *s = text ? text : "";
    size_t n = len;
    if (!ts_utf8_valid(s, n)) {
        owned = ts_utf8_sanitize(s, n, &n);
        if (!owned) {
            ts_err_set(err, "tokenize: out of memory");
            return -1;
        }
        s = owned;
    }
    ts_tokvec tv = {0};
    ts_tok_scratch sc = {0};
    int rc = 0;
    if (add_special && t->add_bos && t->bos >= 0) rc = ts_tokvec_push(&tv, t->bos, err);

    /* Split around added tokens: leftmost-longest over all of them; a special one
     * found while !parse_special stays plain text (and is skipped whole, like
     * the reference does, so no shorter token is matched inside it). */
    const uint8_t *u = (const uint8_t *)s;
    size_t run = 0, i = 0;
    while (rc == 0 && i < n) {
        if (!(t->trie_first[u[i] >> 3] & (1u << (u[i] & 7)))) {
            i++;
            continue;
        }
        size_t mlen = 0;
        int32_t id = match_added(t, u + i, n - i, &mlen);
        if (id < 0) {
            i++;
            continue;
        }
        if ((t->flags[id] & TS_TF_SPECIAL) && !parse_special) {
            i += mlen;
            continue;
        }
        rc = encode_run(t, s + run, i - run, run == 0, &sc, &tv, err);
        if (rc == 0) rc = ts_tokvec_push(&tv, id, err);
        i += mlen;
        run = i;
    }
    if (rc == 0) rc = encode_run(t, s + run, n - run, run == 0, &sc, &tv, err);
    if (rc == 0 && add_special && t->add_eos && t->eos >= 0) rc = ts_tokvec_push(&tv, t->eos, err);

    int64_t count = -1;
    if (rc == 0) {
        count = (int64_t)tv.n;
        int64_t k = count < cap ? count : cap;
        if (k > 0) memcpy(out, tv.v, (size_t)k * sizeof *out);
    }
    free(tv.v);
    ts_scratch_free(&sc);
    free(owned);
    return count;
}

/* ---- detokenize --------------------------------------------------------- */

/* The piece of id as output (empty for hidden tokens unless render_special). */
static const char *piece_of(const ts_tokenizer *t, int32_t id, bool render_special, size_t *len) {
    if (!render_special && (t->flags[id] & TS_TF_HIDDEN)) {
        *len = 0;
        return "";
    }
    *len = t->piece_len[id];
    return t->pool + t->piece_off[id];
}

/* SentencePiece vocabularies with a space prefix drop one space from the start
 * of the decoded text (HF's Strip(left=1) over the joined pieces, added tokens
 * included). */
static bool strip_first_space(const ts_tokenizer *t) { return t->kind != TS_TOK_BPE && t->add_space_prefix; }

int64_t ts_token_piece(const ts_tokenizer *t, int32_t id, bool render_special, char *buf, size_t cap) {
    if (!t || id < 0 || id >= t->n_vocab) return -1;
    size_t len;
    const char *p = piece_of(t, id, render_special, &len);
    if (buf) memcpy(buf, p, len < cap ? len : cap);
    return (int64_t)len;
}

int64_t ts_detokenize(const ts_tokenizer *t, const int32_t *ids, int64_t n, bool render_special, char *buf,
                      size_t cap) {
    if (!t || n < 0 || (!ids && n > 0)) return -1;
    size_t o = 0;
    bool seen_text = false; /* only the first piece with text may lose its space */
    for (int64_t k = 0; k < n; k++) {
        int32_t id = ids[k];
        if (id < 0 || id >= t->n_vocab) return -1;
        size_t len;
        const char *p = piece_of(t, id, render_special, &len);
        bool visible = len > 0;
        if (!seen_text && len > 0 && p[0] == ' ' && strip_first_space(t)) {
            p++;
            len--;
        }
        seen_text |= visible;
        if (buf && o < cap) memcpy(buf + o, p, len < cap - o ? len : cap - o);
        o += len;
    }
    if (buf && o < cap) buf[o] = 0;
    return (int64_t)o;
}

void ts_detok_init(ts_detok *d) { memset(d, 0, sizeof *d); }

/* Writes the complete UTF-8 sequences of pending+piece to out (invalid bytes as
 * U+FFFD) and keeps an incomplete tail. All-or-nothing: -1 if out is too small. */
int64_t ts_detok_push(ts_detok *d, const ts_tokenizer *t, int32_t id, bool render_special, char *out, size_t cap) {
    if (!d || !t || id < 0 || id >= t->n_vocab || d->n_pending < 0 || d->n_pending > 3) return -1;
    size_t plen;
    const char *p = piece_of(t, id, render_special, &plen);
    bool has_text = plen > 0;
    if (d->n_text == 0 && plen > 0 && p[0] == ' ' && strip_first_space(t)) {
        p++;
        plen--;
    }
    size_t np = (size_t)d->n_pending, total = np + plen, i = 0, o = 0;
    while (i < total) {
        uint8_t tmp[4];
        size_t avail = total - i < 4 ? total - i : 4;
        for (size_t k = 0; k < avail; k++)
            tmp[k] = (uint8_t)(i + k < np ? d->pending[i + k] : p[i + k - np]);
        uint32_t cp;
        int bad = 0;
        int r = ts_utf8_next(tmp, avail, &cp, &bad);
        if (r == 0) break; /* incomplete sequence at the end: hold it */
        const char *src = (const char *)tmp;
        size_t w = (size_t)r;
        static const char repl[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
        if (r < 0) {
            src = repl;
            w = 3;
        }
        if (w > cap - o || o > cap) return -1;
        if (out) memcpy(out + o, src, w);
        o += w;
        i += r > 0 ? (size_t)r : (size_t)-r;
    }
    /* Hold the tail (at most 3 bytes of a valid prefix). */
    char keep[8];
    size_t nk = total - i;
    for (size_t k = 0; k < nk; k++) keep[k] = i + k < np ? d->pending[i + k] : p[i + k - np];
    memcpy(d->pending, keep, nk);
    d->n_pending = (int)nk;
    d->n_tokens++;
    d->n_text += has_text;
    d->n_bytes += (int64_t)o;
    return (int64_t)o;
}

int64_t ts_detok_flush(ts_detok *d, char *out, size_t cap) {
    if (!d || d->n_pending <= 0) return 0;
    /* A held tail is a valid but unfinished prefix: one U+FFFD. */
    if (cap < 3) return -1;
    if (out) memcpy(out, "\xEF\xBF\xBD", 3);
    d->n_pending = 0;
    d->n_bytes += 3;
    return 3;
}
