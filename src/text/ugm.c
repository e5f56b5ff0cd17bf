/* ugm.c - SentencePiece unigram vocabularies ("t5": T5, umT5, the Wan2.1
 * text encoder's).
 *
 * Follows HF tokenizers as transformers builds a T5 tokenizer from its
 * SentencePiece model (T5Tokenizer with the model's precompiled charsmap;
 * transformers' GGUF loader drops the charsmap, the model's own tokenizer
 * does not: we follow the model, docs/TOKENIZERS.md):
 *  1. normalizer (Precompiled): the text in extended grapheme clusters
 *     (PCRE2's \X); a cluster shorter than 6 bytes whose bytes start with a
 *     key of the charsmap's trie is replaced whole by the shortest such
 *     key's string, else each character by its own entry or itself (HF's
 *     spm_precompiled, quirks included: "Yes, this seems broken");
 *  2. pre-tokenizer: split on White_Space (dropped), "▁" prepended to each
 *     word not starting with one (add_space_prefix), then split before every
 *     "▁" (WhitespaceSplit, Metaspace(prepend_scheme "always", split));
 *  3. model (Unigram): per piece, the Viterbi path maximising the sum of the
 *     tokens' scores (in double) over every vocabulary token, ties to the
 *     candidate found first (start positions ascending, then lengths
 *     ascending); a character no single token covers gets the unknown token
 *     at the lowest score minus 10; consecutive unknown tokens fuse into one.
 * The charsmap blob (tokenizer.ggml.precompiled_charsmap): u32 little-endian
 * trie size, a Darts-clone double array of that many bytes, then the
 * replacement strings, NUL-separated. Every index from the file is checked
 * before use: a bad trie gives "no replacement", never a read outside it.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "text/tok_internal.h"
#include "text/utf8.h"

static const char SPACE[] = "\xe2\x96\x81"; /* U+2581 "▁" */
#define UNK_PENALTY 10.0                    /* HF's K_UNK_PENALTY */

/* Unicode White_Space (Rust's char::is_whitespace, which HF's WhitespaceSplit uses). */
static bool white_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* ---- loading ------------------------------------------------------------ */

typedef struct sort_key {
    const uint8_t *p;
    uint32_t len;
    int32_t id;
} sort_key;

/* bytes ascending (a prefix first), then the later id first: HF keeps the
 * last id of a text it sees twice */
static int cmp_key(const void *a, const void *b) {
    const sort_key *x = a, *y = b;
    const uint32_t n = x->len < y->len ? x->len : y->len;
    const int c = n ? memcmp(x->p, y->p, n) : 0;
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id > y->id ? -1 : x->id < y->id;
}

static int load_charsmap(ts_tokenizer *t, const ts_gguf *g, ts_err *err) {
    const char *key = "tokenizer.ggml.precompiled_charsmap";
    const ts_gguf_value *v = ts_gguf_find(g, key);
    if (!v) return 0; /* no normalization */
    if (v->type != TS_GGUF_ARRAY || (v->arr.type != TS_GGUF_UINT8 && v->arr.type != TS_GGUF_INT8) || !v->arr.data)
        return ts_err_set(err, "%s: expected an array of bytes", key);
    const uint8_t *b = v->arr.data;
    const uint64_t n = v->arr.n;
    if (n == 0) return 0;
    if (n < 4) return ts_err_set(err, "%s: %llu bytes, too short for its trie size", key, (unsigned long long)n);
    const uint32_t trie = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    if (trie % 4 || (uint64_t)trie > n - 4 || n - 4 - trie > UINT32_MAX)
        return ts_err_set(err, "%s: trie of %u bytes does not fit the %llu-byte blob in 4-byte units", key, trie,
                          (unsigned long long)n);
    t->cm_n_units = trie / 4;
    t->cm_norm_len = (uint32_t)(n - 4 - trie);
    t->cm_units = malloc((size_t)t->cm_n_units * 4 + 4);
    t->cm_norm = malloc((size_t)t->cm_norm_len + 1);
    if (!t->cm_units || !t->cm_norm) return ts_err_set(err, "tokenizer: out of memory for the charsmap");
    for (uint32_t i = 0; i < t->cm_n_units; i++) {
        const uint8_t *u = b + 4 + 4 * (size_t)i;
        t->cm_units[i] = (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 | (uint32_t)u[3] << 24;
    }
    memcpy(t->cm_norm, b + 4 + trie, t->cm_norm_len);
    t->cm_norm[t->cm_norm_len] = 0;
    if (!ts_utf8_valid(t->cm_norm, t->cm_norm_len))
        return ts_err_set(err, "%s: the replacement strings are not valid UTF-8", key);
    return 0;
}

int ts_ugm_init(ts_tokenizer *t, const ts_gguf *g, ts_err *err) {
    const int32_t n = t->n_vocab;
    for (int32_t i = 0; i < n; i++) {
        t->key_off[i] = t->text_off[i];
        t->key_len[i] = t->text_len[i];
    }
    if (ts_strmap_init(&t->vocab, (size_t)n, &t->pool) < 0 || ts_strmap_init(&t->alias, 0, &t->pool) < 0)
        return ts_err_set(err, "tokenizer: out of memory for the vocabulary map");
    for (int32_t i = 0; i < n; i++) ts_strmap_put(&t->vocab, t->key_off[i], t->key_len[i], i);
    /* the lattice's candidates: every non-empty token, by its bytes */
    sort_key *k = malloc((size_t)n * sizeof *k);
    t->ugm_sorted = malloc((size_t)n * sizeof *t->ugm_sorted);
    if (!k || !t->ugm_sorted) {
        free(k);
        return ts_err_set(err, "tokenizer: out of memory");
    }
    int32_t m = 0;
    double lo = 0.0;
    for (int32_t i = 0; i < n; i++) {
        const double s = t->score ? (double)t->score[i] : 0.0;
        if (i == 0 || s < lo) lo = s;
        if (t->text_len[i]) k[m++] = (sort_key){(const uint8_t *)t->pool + t->text_off[i], t->text_len[i], i};
    }
    qsort(k, (size_t)m, sizeof *k, cmp_key);
    for (int32_t i = 0; i < m; i++) t->ugm_sorted[i] = k[i].id;
    t->ugm_n_sorted = m;
    free(k);
    t->ugm_unk_score = lo - UNK_PENALTY;
    if (load_charsmap(t, g, err) < 0) return -1;
    int ec;
    PCRE2_SIZE eo;
    t->grapheme = pcre2_compile((PCRE2_SPTR) "\\X", PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    if (!t->grapheme) return ts_err_set(err, "tokenizer: cannot compile the grapheme pattern (error %d)", ec);
    (void)pcre2_jit_compile(t->grapheme, PCRE2_JIT_COMPLETE);
    return 0;
}

void ts_ugm_free(ts_tokenizer *t) {
    free(t->ugm_sorted);
    free(t->cm_units);
    free(t->cm_norm);
    if (t->grapheme) pcre2_code_free(t->grapheme);
    t->ugm_sorted = NULL, t->cm_units = NULL, t->cm_norm = NULL, t->grapheme = NULL;
}

/* "▁" stands for a space; nothing else is respelled (no byte fallback). */
int ts_ugm_piece(ts_tokenizer *t, int32_t id, ts_err *err) {
    const uint32_t n = t->text_len[id];
    size_t off = ts_tok_pool_add(t, NULL, n);
    if (off == SIZE_MAX) return ts_err_set(err, "tokenizer: out of memory");
    const char *k = t->pool + t->text_off[id];
    char *o = t->pool + off;
    size_t w = 0;
    for (uint32_t i = 0; i < n;) {
        if (i + 3 <= n && !memcmp(k + i, SPACE, 3)) {
            o[w++] = ' ';
            i += 3;
        } else {
            o[w++] = k[i++];
        }
    }
    ts_tok_pool_trim(t, off, w);
    t->piece_off[id] = off;
    t->piece_len[id] = (uint32_t)w;
    return 0;
}

/* ---- normalizer ---------------------------------------------------------- */

/* Darts-clone units */
static uint32_t u_offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }
static uint32_t u_label(uint32_t u) { return u & ((1u << 31) | 0xFF); }
static bool u_leaf(uint32_t u) { return (u >> 8) & 1; }
static uint32_t u_value(uint32_t u) { return u & ((1u << 31) - 1); }

/* The replacement of the shortest charsmap key that key[0..n) starts with
 * (*rlen bytes), or NULL: spm_precompiled's transform(). */
static const char *cm_lookup(const ts_tokenizer *t, const uint8_t *key, size_t n, size_t *rlen) {
    const uint32_t *a = t->cm_units, N = t->cm_n_units;
    if (!N) return NULL;
    uint32_t pos = u_offset(a[0]);
    for (size_t i = 0; i < n && key[i]; i++) {
        pos ^= key[i];
        if (pos >= N) return NULL;
        const uint32_t u = a[pos];
        if (u_label(u) != key[i]) return NULL;
        pos ^= u_offset(u);
        if (!u_leaf(u)) continue;
        if (pos >= N) return NULL;
        const uint32_t v = u_value(a[pos]);
        /* a string starting inside a character is no string (Rust's str::get) */
        if (v > t->cm_norm_len || (v < t->cm_norm_len && (t->cm_norm[v] & 0xC0) == 0x80)) return NULL;
        *rlen = strlen(t->cm_norm + v);
        return t->cm_norm + v;
    }
    return NULL;
}

static int put(ts_tok_scratch *sc, size_t *o, const void *p, size_t n, ts_err *err) {
    if (ts_scratch_grow((void **)&sc->buf, &sc->buf_cap, *o + n + 1, err) < 0) return -1;
    memcpy(sc->buf + *o, p, n);
    *o += n;
    return 0;
}

int ts_ugm_normalize(const ts_tokenizer *t, const char *s, size_t n, ts_tok_scratch *sc, size_t *out_len,
                     ts_err *err) {
    const uint8_t *u = (const uint8_t *)s;
    size_t o = 0;
    if (ts_scratch_grow((void **)&sc->buf, &sc->buf_cap, n + 1, err) < 0) return -1;
    if (!t->cm_n_units) { /* no charsmap: the text as it is */
        memcpy(sc->buf, s, n);
        sc->buf[n] = 0;
        *out_len = n;
        return 0;
    }
    if (!sc->match_data) {
        sc->match_data = pcre2_match_data_create(1, NULL);
        if (!sc->match_data) return ts_err_set(err, "tokenize: out of memory for match data");
    }
    for (size_t i = 0; i < n;) {
        /* the cluster at i: an ASCII character other than CR before ASCII
         * is one on its own (UAX #29), else PCRE2's \X decides */
        size_t g = 1;
        if (!(u[i] < 0x80 && u[i] != '\r' && (i + 1 == n || u[i + 1] < 0x80))) {
            int rc = pcre2_match(t->grapheme, u, n, i, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK, sc->match_data, NULL);
            if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
                rc = pcre2_match(t->grapheme, u, n, i, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                                 sc->match_data, NULL);
            const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(sc->match_data);
            if (rc > 0 && ov[1] > i && ov[1] <= n) {
                g = ov[1] - i;
            } else { /* cannot happen: \X matches any character; take one */
                uint32_t cp;
                int r = ts_utf8_next(u + i, n - i, &cp, NULL);
                g = r > 0 ? (size_t)r : 1;
            }
        }
        size_t rl;
        const char *r = g < 6 ? cm_lookup(t, u + i, g, &rl) : NULL;
        if (r) {
            if (put(sc, &o, r, rl, err) < 0) return -1;
        } else {
            for (size_t j = i; j < i + g;) {
                uint32_t cp;
                int cl = ts_utf8_next(u + j, i + g - j, &cp, NULL);
                size_t c = cl > 0 ? (size_t)cl : 1;
                const char *cr = cm_lookup(t, u + j, c, &rl);
                if (put(sc, &o, cr ? cr : (const char *)u + j, cr ? rl : c, err) < 0) return -1;
                j += c;
            }
        }
        i += g;
    }
    sc->buf[o] = 0;
    *out_len = o;
    return 0;
}

/* ---- model --------------------------------------------------------------- */

typedef struct node {
    double score; /* best path score ending here */
    int32_t start; /* -1: not reached */
    int32_t id;
} node;

/* [*lo, *hi) of the sorted tokens, all sharing their first k bytes, narrowed
 * to those whose byte k is c. */
static void narrow(const ts_tokenizer *t, uint32_t k, uint8_t c, int32_t *lo, int32_t *hi) {
    const int32_t *srt = t->ugm_sorted;
    /* first token whose byte k is >= c (a token of k bytes sorts first) */
    int32_t a = *lo, b = *hi;
    while (a < b) {
        const int32_t m = a + (b - a) / 2, id = srt[m];
        if (t->text_len[id] <= k || (uint8_t)t->pool[t->text_off[id] + k] < c) a = m + 1;
        else b = m;
    }
    const int32_t first = a;
    b = *hi;
    while (a < b) {
        const int32_t m = a + (b - a) / 2, id = srt[m];
        if ((uint8_t)t->pool[t->text_off[id] + k] <= c) a = m + 1;
        else b = m;
    }
    *lo = first, *hi = a;
}

/* The Viterbi tokens of one piece p[0..n) (valid UTF-8), pushed to out. */
static int viterbi(const ts_tokenizer *t, const uint8_t *p, size_t n, ts_tok_scratch *sc, ts_tokvec *out,
                   ts_err *err) {
    if (n > INT32_MAX / 2) return ts_err_set(err, "tokenize: a word of %zu bytes is too long", n);
    if (ts_scratch_grow(&sc->sym, &sc->sym_cap, (n + 1) * sizeof(node), err) < 0) return -1;
    node *nd = sc->sym;
    for (size_t i = 0; i <= n; i++) nd[i] = (node){0.0, -1, -1};
    nd[0].start = 0;
    for (size_t st = 0; st < n;) {
        uint32_t cp;
        int cl = ts_utf8_next(p + st, n - st, &cp, NULL);
        const size_t mb = cl > 0 ? (size_t)cl : 1;
        const double base = nd[st].score;
        bool single = false;
        int32_t lo = 0, hi = t->ugm_n_sorted;
        for (size_t k = 0; st + k < n && lo < hi; k++) {
            narrow(t, (uint32_t)k, p[st + k], &lo, &hi);
            if (lo >= hi) break;
            const int32_t id = t->ugm_sorted[lo];
            const size_t e = st + k + 1;
            /* a token equal to p[st..e) sorts first; only ends on characters count */
            if (t->text_len[id] != k + 1 || (e < n && (p[e] & 0xC0) == 0x80)) continue;
            const double c = base + (t->score ? (double)t->score[id] : 0.0);
            if (nd[e].start < 0 || c > nd[e].score) nd[e] = (node){c, (int32_t)st, id};
            single |= k + 1 == mb;
        }
        if (!single) {
            if (t->unk < 0)
                return ts_err_set(err, "tokenize: no token covers a character and the vocabulary has no unknown token");
            const double c = base + t->ugm_unk_score;
            const size_t e = st + mb;
            if (nd[e].start < 0 || c > nd[e].score) nd[e] = (node){c, (int32_t)st, t->unk};
        }
        st += mb;
    }
    /* back from the end; consecutive unknown tokens become one */
    const size_t first = out->n;
    bool prev_unk = false;
    for (size_t e = n; e > 0;) {
        const node *x = &nd[e];
        if (x->start < 0 || (size_t)x->start >= e)
            return ts_err_set(err, "tokenize: internal error: byte %zu of a word not reached", e); /* cannot happen */
        const bool unk = x->id == t->unk;
        if (!(unk && prev_unk) && ts_tokvec_push(out, x->id, err) < 0) return -1;
        prev_unk = unk;
        e = (size_t)x->start;
    }
    for (size_t a = first, b = out->n; a + 1 < b; a++, b--) {
        const int32_t tmp = out->v[a];
        out->v[a] = out->v[b - 1];
        out->v[b - 1] = tmp;
    }
    return 0;
}

int ts_ugm_encode(const ts_tokenizer *t, const char *s, size_t n, ts_tok_scratch *sc, ts_tokvec *out, ts_err *err) {
    size_t m;
    if (ts_ugm_normalize(t, s, n, sc, &m, err) < 0) return -1;
    const uint8_t *u = (const uint8_t *)sc->buf;
    for (size_t i = 0; i < m;) {
        /* a word: up to the next White_Space character */
        size_t e = i;
        uint32_t cp = 0;
        int cl = 0;
        while (e < m) {
            cl = ts_utf8_next(u + e, m - e, &cp, NULL);
            if (cl > 0 && white_space(cp)) break;
            e += cl > 0 ? (size_t)cl : 1;
        }
        if (e > i) {
            /* "▁" + word (unless it starts with one), cut before every "▁" */
            const bool pre = t->add_space_prefix && !(e - i >= 3 && !memcmp(u + i, SPACE, 3));
            const size_t wl = e - i + (pre ? 3 : 0);
            if (ts_scratch_grow((void **)&sc->cat, &sc->cat_cap, wl, err) < 0) return -1;
            if (pre) memcpy(sc->cat, SPACE, 3);
            memcpy(sc->cat + (pre ? 3 : 0), u + i, e - i);
            const uint8_t *w = (const uint8_t *)sc->cat;
            size_t a = 0;
            for (size_t j = 1; j <= wl; j++)
                if (j == wl || (j + 3 <= wl && !memcmp(w + j, SPACE, 3))) {
                    if (viterbi(t, w + a, j - a, sc, out, err) < 0) return -1;
                    a = j;
                }
        }
        i = e < m ? e + (size_t)(cl > 0 ? cl : 1) : m;
    }
    return 0;
}
