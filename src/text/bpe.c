/* bpe.c - byte-level BPE ("gpt2" vocabularies: SmolLM, Llama 3, Qwen 2, ...).
 *
 * Text is first split by the pre-tokenizer regexes named by tokenizer.ggml.pre
 * (PCRE2 with Unicode properties; a list of patterns applied in sequence, each
 * keeping both its matches and the text between them, like HF's Split
 * "isolated"). Each piece's bytes are spelled in GPT-2's byte alphabet (every
 * byte is one printable code point) and merged by rank: the pair with the
 * lowest merge index goes first, leftmost on ties, exactly as HF tokenizers'
 * BPE. The merge loop is a priority queue of candidate pairs over a linked
 * list of symbols, so a 10k-byte word costs O(n log n), not O(n^2).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/heap.h"
#include "text/tok_internal.h"
#include "text/utf8.h"

/* Unicode White_Space, spelled out because PCRE2's \s also matches U+180E
 * while the reference (Oniguruma in HF tokenizers) follows White_Space. Used
 * inside character classes in place of \s. */
#define WS "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define S_ "[" WS "]"
#define NS_ "[^" WS "]"

/* The GPT-2 pattern as HF's ByteLevel pre-tokenizer writes it. */
static const char re_gpt2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|" S_ "+(?!" NS_
                              ")|" S_ "+";
/* SmolLM (also StarCoder): each digit on its own first, then GPT-2. */
static const char re_digit[] = "\\p{N}";
/* Llama 3 (tokenizer.json of Meta-Llama-3, transformers' GGUF table). */
static const char re_llama3[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^" WS
                                "\\p{L}\\p{N}]+[\\r\\n]*|" S_ "*[\\r\\n]+|" S_ "+(?!" NS_ ")|" S_ "+";
/* Qwen 2 / 2.5 / 3: like Llama 3 but one digit at a time. */
static const char re_qwen2[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^" WS
                               "\\p{L}\\p{N}]+[\\r\\n]*|" S_ "*[\\r\\n]+|" S_ "+(?!" NS_ ")|" S_ "+";
/* Qwen 3.5: letters may carry combining marks. */
static const char re_qwen35[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^" WS
                                "\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|" S_ "*[\\r\\n]+|" S_ "+(?!" NS_ ")|" S_ "+";
/* Mistral Tekken. */
static const char re_tekken[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
    "|\\p{N}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n/]*|" S_ "*[\\r\\n]+|" S_ "+(?!" NS_ ")|" S_ "+";
/* GPT-4o / Llama 4. */
static const char re_gpt4o[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|\\p{N}{1,3}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n/]*|" S_ "*[\\r\\n]+|" S_ "+(?!" NS_ ")|" S_ "+";

typedef struct pre_def {
    const char *name;
    const char *re[2]; /* applied in sequence; NULL-terminated */
} pre_def;

static const pre_def pre_defs[] = {
    {"default", {re_gpt2, NULL}},   {"gpt2", {re_gpt2, NULL}},           {"smollm", {re_digit, re_gpt2}},
    {"llama-bpe", {re_llama3, NULL}}, {"llama3", {re_llama3, NULL}},     {"llama-v3", {re_llama3, NULL}},
    {"falcon3", {re_llama3, NULL}}, {"falcon-h1", {re_llama3, NULL}},    {"pixtral", {re_llama3, NULL}},
    {"midm-2.0", {re_llama3, NULL}}, {"lfm2", {re_llama3, NULL}},        {"jina-v5-nano", {re_llama3, NULL}},
    {"dbrx", {re_llama3, NULL}},    {"smaug-bpe", {re_llama3, NULL}},    {"qwen2", {re_qwen2, NULL}},
    {"deepseek-r1-qwen", {re_qwen2, NULL}}, {"kormo", {re_qwen2, NULL}}, {"f2llmv2", {re_qwen2, NULL}},
    {"megrez", {re_qwen2, NULL}},   {"qwen35", {re_qwen35, NULL}},       {"tekken", {re_tekken, NULL}},
    {"gpt-4o", {re_gpt4o, NULL}},   {"llama4", {re_gpt4o, NULL}},        {"kanana2", {re_gpt4o, NULL}},
    {"talkie", {re_gpt4o, NULL}},   {"minimax-m2", {re_gpt4o, NULL}},
};

const char *const ts_bpe_pre_names[] = {
    "default", "gpt2", "smollm", "llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral",
    "midm-2.0", "lfm2", "jina-v5-nano", "dbrx", "smaug-bpe", "qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2",
    "megrez", "qwen35", "tekken", "gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2", NULL,
};

/* ---- loading ------------------------------------------------------------ */

static void init_byte_alphabet(ts_tokenizer *t) {
    /* Printable Latin-1 bytes stand for themselves; the rest are shifted to 256+. */
    int extra = 0;
    for (int i = 0; i < 324; i++) t->cp_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        uint32_t cp = keep ? (uint32_t)b : (uint32_t)(256 + extra++);
        t->byte_cp[b] = cp;
        t->cp_byte[cp] = (int16_t)b;
    }
}

/* True when s is valid UTF-8 made only of byte-alphabet code points. */
static bool in_alphabet(const ts_tokenizer *t, const char *s, size_t n) {
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int r = ts_utf8_next(p + i, n - i, &cp, NULL);
        if (r <= 0 || cp >= 324 || t->cp_byte[cp] < 0) return false;
        i += (size_t)r;
    }
    return true;
}

static int compile_pre(ts_tokenizer *t, const char *name, size_t name_len, ts_err *err) {
    const pre_def *def = NULL;
    for (size_t i = 0; i < sizeof pre_defs / sizeof pre_defs[0]; i++)
        if (strlen(pre_defs[i].name) == name_len && !memcmp(pre_defs[i].name, name, name_len)) def = &pre_defs[i];
    if (!def) {
        char list[512];
        size_t o = 0;
        for (int i = 0; ts_bpe_pre_names[i] && o < sizeof list - 32; i++)
            o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", ts_bpe_pre_names[i]);
        return ts_err_set(err, "tokenizer.ggml.pre: '%.*s' is not a supported pre-tokenizer (supported: %s)",
                          (int)(name_len > 64 ? 64 : name_len), name, list);
    }
    snprintf(t->pre_name, sizeof t->pre_name, "%s", def->name);
    for (int k = 0; k < 2 && def->re[k]; k++) {
        int ec;
        PCRE2_SIZE eo;
        pcre2_code *code =
            pcre2_compile((PCRE2_SPTR)def->re[k], PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
        if (!code) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(ec, msg, sizeof msg);
            return ts_err_set(err, "tokenizer: pre-tokenizer '%s' regex %d does not compile at %zu: %s", def->name, k,
                              (size_t)eo, (const char *)msg);
        }
        /* JIT is an optimisation only: matching falls back to the interpreter. */
        (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
        t->pre[t->n_pre++] = code;
    }
    return 0;
}

int ts_bpe_init(ts_tokenizer *t, const ts_gguf *g, const char *pre_override, ts_err *err) {
    init_byte_alphabet(t);
    int32_t n = t->n_vocab;

    /* Lookup keys: a token already spelled in the byte alphabet is its own key;
     * any other (CJK control tokens and the like) is respelled byte by byte,
     * as transformers does when it builds the vocabulary. */
    int32_t n_respelled = 0;
    for (int32_t i = 0; i < n; i++) {
        const char *s = t->pool + t->text_off[i];
        uint32_t len = t->text_len[i];
        if (in_alphabet(t, s, len)) {
            t->key_off[i] = t->text_off[i];
            t->key_len[i] = len;
            continue;
        }
        char tmp[2 * 256];
        size_t cap = (size_t)len * 2, off = SIZE_MAX;
        char *buf = cap <= sizeof tmp ? tmp : malloc(cap ? cap : 1);
        if (buf) {
            size_t o = 0;
            for (uint32_t k = 0; k < len; k++) o += (size_t)ts_utf8_put(t->byte_cp[(uint8_t)s[k]], buf + o);
            off = ts_tok_pool_add(t, buf, o);
            t->key_len[i] = (uint32_t)o;
            if (buf != tmp) free(buf);
        }
        if (off == SIZE_MAX) return ts_err_set(err, "tokenizer: out of memory respelling token %d", i);
        t->key_off[i] = off;
        n_respelled++;
    }
    if (ts_strmap_init(&t->vocab, (size_t)n, &t->pool) < 0 ||
        ts_strmap_init(&t->alias, (size_t)n_respelled, &t->pool) < 0)
        return ts_err_set(err, "tokenizer: out of memory for the vocabulary map");
    for (int32_t i = 0; i < n; i++) ts_strmap_put(&t->vocab, t->key_off[i], t->key_len[i], i);
    for (int32_t i = 0; i < n; i++)
        if (t->key_off[i] != t->text_off[i]) ts_strmap_add(&t->alias, t->text_off[i], t->text_len[i], i);

    /* Merges "left right", ranked by position; a repeated pair keeps the later
     * rank (HF builds a hash map from the list). */
    const ts_gguf_value *mv = ts_gguf_find(g, "tokenizer.ggml.merges");
    if (!mv) return ts_err_set(err, "tokenizer.ggml.merges: missing (required for a 'gpt2' tokenizer)");
    if (mv->type != TS_GGUF_ARRAY || mv->arr.type != TS_GGUF_STRING)
        return ts_err_set(err, "tokenizer.ggml.merges: expected an array of strings, got %s",
                          ts_gguf_vtype_name(mv->type));
    if (mv->arr.n > (uint64_t)(INT32_MAX / 4))
        return ts_err_set(err, "tokenizer.ggml.merges: %llu merges is too many", (unsigned long long)mv->arr.n);
    t->n_merges = (int32_t)mv->arr.n;
    t->merge_new = malloc(((size_t)t->n_merges + 1) * sizeof *t->merge_new);
    if (!t->merge_new || ts_u64map_init(&t->merges, (size_t)t->n_merges) < 0)
        return ts_err_set(err, "tokenizer: out of memory for %d merges", t->n_merges);
    char *cat = NULL;
    size_t cat_cap = 0;
    for (int32_t r = 0; r < t->n_merges; r++) {
        const ts_gguf_str *m = &mv->arr.items[r].str;
        const char *sp = memchr(m->ptr, ' ', (size_t)m->len);
        size_t ll = sp ? (size_t)(sp - m->ptr) : 0, rl = sp ? (size_t)m->len - ll - 1 : 0;
        if (!sp || memchr(sp + 1, ' ', rl)) {
            free(cat);
            return ts_err_set(err, "tokenizer.ggml.merges[%d]: '%.*s' is not two tokens separated by one space", r,
                              (int)(m->len > 80 ? 80 : m->len), m->ptr);
        }
        int32_t a = ts_strmap_get(&t->vocab, m->ptr, ll), b = ts_strmap_get(&t->vocab, sp + 1, rl);
        int32_t ab = -1;
        if (a >= 0 && b >= 0) {
            if (ll + rl > cat_cap) {
                free(cat);
                cat_cap = (ll + rl) * 2;
                cat = malloc(cat_cap);
                if (!cat) return ts_err_set(err, "tokenizer: out of memory");
            }
            memcpy(cat, m->ptr, ll);
            memcpy(cat + ll, sp + 1, rl);
            ab = ts_strmap_get(&t->vocab, cat, ll + rl);
        }
        if (ab < 0) {
            free(cat);
            return ts_err_set(err, "tokenizer.ggml.merges[%d]: '%.*s' %s not in the vocabulary", r,
                              (int)(m->len > 80 ? 80 : m->len), m->ptr,
                              a < 0 || b < 0 ? "has a part that is" : "merges into a token that is");
        }
        ts_u64map_put(&t->merges, ((uint64_t)(uint32_t)a << 32) | (uint32_t)b, r);
        t->merge_new[r] = ab;
    }
    free(cat);

    for (int b = 0; b < 256; b++) {
        char c[4];
        int l = ts_utf8_put(t->byte_cp[b], c);
        t->byte_id[b] = ts_strmap_get(&t->vocab, c, (size_t)l);
    }

    ts_gguf_str pre = {"default", 7};
    if (pre_override) {
        pre.ptr = pre_override;
        pre.len = strlen(pre_override);
    } else if (ts_gguf_opt_str(g, "tokenizer.ggml.pre", &pre, err) < 0) {
        return -1;
    }
    return compile_pre(t, pre.ptr, (size_t)pre.len, err);
}

void ts_bpe_free(ts_tokenizer *t) {
    for (int i = 0; i < t->n_pre; i++) pcre2_code_free(t->pre[i]);
    t->n_pre = 0;
    ts_u64map_free(&t->merges);
    free(t->merge_new);
    t->merge_new = NULL;
}

int ts_bpe_piece(ts_tokenizer *t, int32_t id, ts_err *err) {
    /* Keys are all in the byte alphabet: map each code point back to its byte. */
    uint32_t n = t->key_len[id];
    size_t off = ts_tok_pool_add(t, NULL, n);
    if (off == SIZE_MAX) return ts_err_set(err, "tokenizer: out of memory");
    const uint8_t *k = (const uint8_t *)t->pool + t->key_off[id];
    char *buf = t->pool + off;
    size_t o = 0, i = 0;
    while (i < n) {
        uint32_t cp = 0;
        int r = ts_utf8_next(k + i, n - i, &cp, NULL);
        if (r <= 0) break; /* cannot happen: keys are valid by construction */
        buf[o++] = (char)(cp < 324 && t->cp_byte[cp] >= 0 ? t->cp_byte[cp] : '?');
        i += (size_t)r;
    }
    ts_tok_pool_trim(t, off, o);
    t->piece_off[id] = off;
    t->piece_len[id] = (uint32_t)o;
    return 0;
}

void ts_scratch_free(ts_tok_scratch *s) {
    free(s->sym);
    free(s->heap);
    free(s->ranges);
    free(s->ranges2);
    free(s->buf);
    free(s->cat);
    if (s->match_data) pcre2_match_data_free(s->match_data);
    memset(s, 0, sizeof *s);
}

/* ---- pre-tokenizer ------------------------------------------------------ */

typedef struct range {
    uint32_t b, e;
} range;

static int push_range(ts_tok_scratch *sc, void **arr, size_t *cap, size_t *n, uint32_t b, uint32_t e, ts_err *err) {
    (void)sc;
    if (ts_scratch_grow(arr, cap, (*n + 1) * sizeof(range), err) < 0) return -1;
    ((range *)*arr)[(*n)++] = (range){b, e};
    return 0;
}

/* Splits every range of s by one regex, keeping matches and the gaps between them. */
static int split_ranges(const pcre2_code *code, const char *s, ts_tok_scratch *sc, size_t n_in, size_t *n_out,
                        ts_err *err) {
    size_t no = 0;
    for (size_t k = 0; k < n_in; k++) {
        range r = ((range *)sc->ranges)[k];
        PCRE2_SPTR subj = (PCRE2_SPTR)(s + r.b);
        PCRE2_SIZE len = r.e - r.b, off = 0, last = 0;
        while (off < len) {
            int rc = pcre2_match(code, subj, len, off, PCRE2_NO_UTF_CHECK, sc->match_data, NULL);
            if (rc == PCRE2_ERROR_JIT_STACKLIMIT) /* very long runs: the interpreter has no such limit */
                rc = pcre2_match(code, subj, len, off, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, sc->match_data, NULL);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) {
                PCRE2_UCHAR msg[160];
                pcre2_get_error_message(rc, msg, sizeof msg);
                return ts_err_set(err, "tokenize: pre-tokenizer match failed at byte %u: %s",
                                  (unsigned)(r.b + off), (const char *)msg);
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(sc->match_data);
            PCRE2_SIZE ms = ov[0], me = ov[1];
            if (me == ms) { /* empty match (no shipped pattern has one): step one character */
                off = ms + 1;
                while (off < len && (subj[off] & 0xC0) == 0x80) off++;
                continue;
            }
            if (ms > last && push_range(sc, &sc->ranges2, &sc->ranges2_cap, &no, r.b + (uint32_t)last,
                                        r.b + (uint32_t)ms, err) < 0)
                return -1;
            if (push_range(sc, &sc->ranges2, &sc->ranges2_cap, &no, r.b + (uint32_t)ms, r.b + (uint32_t)me, err) < 0)
                return -1;
            off = last = me;
        }
        if (last < len && push_range(sc, &sc->ranges2, &sc->ranges2_cap, &no, r.b + (uint32_t)last, r.e, err) < 0)
            return -1;
    }
    /* swap so that sc->ranges holds the output */
    void *tp = sc->ranges;
    size_t tc = sc->ranges_cap;
    sc->ranges = sc->ranges2;
    sc->ranges_cap = sc->ranges2_cap;
    sc->ranges2 = tp;
    sc->ranges2_cap = tc;
    *n_out = no;
    return 0;
}

/* ---- merge loop --------------------------------------------------------- */

typedef struct sym {
    int32_t id;   /* token id; -1 once merged into its left neighbour */
    int32_t prev; /* index of the previous live symbol, or -1 */
    int32_t next; /* index of the next live symbol, or -1 */
} sym;

typedef struct cand {
    int32_t rank;
    int32_t pos; /* left symbol */
} cand;

static inline bool cand_before(const cand *a, const cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}
TS_HEAP_DEFINE(heap, cand, cand_before)


static int32_t pair_rank(const ts_tokenizer *t, int32_t a, int32_t b) {
    return ts_u64map_get(&t->merges, ((uint64_t)(uint32_t)a << 32) | (uint32_t)b);
}

static int bpe_word(const ts_tokenizer *t, const uint8_t *s, size_t n, ts_tok_scratch *sc, ts_tokvec *out,
                    ts_err *err) {
    if (ts_scratch_grow(&sc->sym, &sc->sym_cap, n * sizeof(sym), err) < 0) return -1;
    sym *y = sc->sym;
    int32_t ns = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[s[i]];
        if (id < 0) continue; /* a byte the vocabulary cannot spell is dropped, as HF does */
        y[ns] = (sym){id, ns - 1, -1};
        if (ns > 0) y[ns - 1].next = ns;
        ns++;
    }
    if (ns > 1) {
        /* Each merge adds at most two candidates to the n-1 initial ones. */
        if (ts_scratch_grow(&sc->heap, &sc->heap_cap, (size_t)ns * 3 * sizeof(cand), err) < 0) return -1;
        cand *h = sc->heap;
        size_t nh = 0;
        for (int32_t i = 0; i + 1 < ns; i++) {
            int32_t r = pair_rank(t, y[i].id, y[i + 1].id);
            if (r >= 0) heap_push(h, &nh, (cand){r, i});
        }
        while (nh > 0) {
            cand c = heap_pop(h, &nh);
            sym *L = &y[c.pos];
            if (L->id < 0 || L->next < 0) continue;
            sym *R = &y[L->next];
            if (pair_rank(t, L->id, R->id) != c.rank) continue; /* stale: a neighbour changed */
            L->id = t->merge_new[c.rank];
            R->id = -1;
            L->next = R->next;
            if (R->next >= 0) y[R->next].prev = c.pos;
            if (L->prev >= 0) {
                int32_t r = pair_rank(t, y[L->prev].id, L->id);
                if (r >= 0) heap_push(h, &nh, (cand){r, L->prev});
            }
            if (L->next >= 0) {
                int32_t r = pair_rank(t, L->id, y[L->next].id);
                if (r >= 0) heap_push(h, &nh, (cand){r, c.pos});
            }
        }
    }
    for (int32_t i = 0; ns > 0 && i >= 0; i = y[i].next)
        if (ts_tokvec_push(out, y[i].id, err) < 0) return -1;
    return 0;
}

int ts_bpe_split(const ts_tokenizer *t, const char *s, size_t n, ts_tok_scratch *sc, size_t *n_out, ts_err *err) {
    if (!sc->match_data) {
        sc->match_data = pcre2_match_data_create(4, NULL);
        if (!sc->match_data) return ts_err_set(err, "tokenize: out of memory for match data");
    }
    size_t nr = 0;
    if (push_range(sc, &sc->ranges, &sc->ranges_cap, &nr, 0, (uint32_t)n, err) < 0) return -1;
    for (int k = 0; k < t->n_pre; k++)
        if (split_ranges(t->pre[k], s, sc, nr, &nr, err) < 0) return -1;
    *n_out = nr;
    return 0;
}

int ts_bpe_encode(const ts_tokenizer *t, const char *s, size_t n, ts_tok_scratch *sc, ts_tokvec *out, ts_err *err) {
    size_t nr;
    if (ts_bpe_split(t, s, n, sc, &nr, err) < 0) return -1;
    for (size_t k = 0; k < nr; k++) {
        range r = ((range *)sc->ranges)[k];
        if (bpe_word(t, (const uint8_t *)s + r.b, r.e - r.b, sc, out, err) < 0) return -1;
    }
    return 0;
}
