/* tok_internal.h - the tokenizer's private state, shared by tokenizer.c (loading,
 * special tokens, detokenization), bpe.c (byte-level BPE, "gpt2") and spm.c
 * (SentencePiece-style BPE, "llama"). Not part of the public API; tests may use
 * ts_tokenizer_load_ex to try other pre-tokenizers on a real vocabulary.
 */
#ifndef TS_TEXT_TOK_INTERNAL_H
#define TS_TEXT_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "gguf/gguf.h"
#include "text/tok_maps.h"
#include "text/tokenizer.h"

enum ts_tok_kind { TS_TOK_BPE = 1, TS_TOK_SPM = 2, TS_TOK_UGM = 3 };

/* tokenizer.ggml.token_type values */
enum ts_tok_type {
    TS_TT_UNDEFINED = 0,
    TS_TT_NORMAL = 1,
    TS_TT_UNKNOWN = 2,
    TS_TT_CONTROL = 3,
    TS_TT_USER = 4,
    TS_TT_UNUSED = 5,
    TS_TT_BYTE = 6,
};

/* Per-token flags */
enum {
    TS_TF_ADDED = 1,   /* matched whole in the input text (an "added token") */
    TS_TF_SPECIAL = 2, /* ... but only when parse_special (control tokens) */
    TS_TF_HIDDEN = 4,  /* rendered only when render_special */
};

#define TS_TOK_MAX_PRE 4
#define TS_TOK_MAX_EOG 16

struct ts_tokenizer {
    int kind;
    int32_t n_vocab;

    /* One pool holds every string: the stored token texts, the lookup keys
     * that differ from them, and the decoded pieces. Offsets index into it. */
    char *pool;
    size_t pool_len, pool_cap;
    size_t *text_off; /* stored text of token i, NUL-terminated */
    uint32_t *text_len;
    size_t *key_off; /* the spelling BPE looks tokens up by (see bpe.c/spm.c) */
    uint32_t *key_len;
    size_t *piece_off; /* the bytes the token stands for in output text */
    uint32_t *piece_len;
    uint8_t *type;  /* enum ts_tok_type */
    uint8_t *flags; /* TS_TF_* */
    float *score;   /* NULL when the file has no scores */

    ts_strmap vocab; /* key -> id (later duplicates win, as in the reference) */
    ts_strmap alias; /* stored text -> id where it differs from the key (ts_tok_find) */

    /* Byte trie over the texts of the added tokens, for leftmost-longest matching. */
    ts_u64map trie;     /* (node << 8 | byte) -> child node */
    int32_t *trie_tok;  /* node -> token id ending there, or -1 */
    int32_t n_trie;
    uint8_t trie_first[32]; /* bitmap of bytes that can start an added token */

    int32_t bos, eos, eot, eom, unk, pad;
    bool add_bos, add_eos, add_space_prefix;
    int32_t eog[TS_TOK_MAX_EOG];
    int n_eog;
    int64_t max_piece;

    /* byte-level BPE */
    ts_u64map merges;     /* (left id << 32 | right id) -> rank */
    int32_t *merge_new;   /* rank -> merged id */
    int32_t n_merges;
    uint32_t byte_cp[256]; /* GPT-2 bytes_to_unicode */
    int16_t cp_byte[324];  /* inverse: code point (< 324) -> byte, or -1 */
    int32_t byte_id[256];  /* token of each byte's 1-char spelling, or -1 */
    void *pre[TS_TOK_MAX_PRE]; /* pcre2_code_8 *, applied in sequence */
    int n_pre;
    char pre_name[64];

    /* SentencePiece-style BPE */
    double *prio;        /* merge priority of each token: higher merges first */
    uint16_t *key_chars; /* code points in each key (tie-break, as the reference) */
    int32_t byte_tok[256]; /* <0xXX> token of each byte, or -1 */
    uint32_t max_key_len;

    /* SentencePiece unigram (ugm.c) */
    int32_t *ugm_sorted;  /* non-empty tokens by their bytes (equal texts: higher id first) */
    int32_t ugm_n_sorted;
    double ugm_unk_score; /* the unknown token's score: the lowest score - 10 */
    uint32_t *cm_units;   /* the precompiled charsmap's double-array trie */
    uint32_t cm_n_units;
    char *cm_norm;        /* its replacement strings, NUL-separated (+ a final NUL) */
    uint32_t cm_norm_len;
    void *grapheme;       /* pcre2_code_8 * of \X */
};

/* Growable id list. */
typedef struct ts_tokvec {
    int32_t *v;
    size_t n, cap;
} ts_tokvec;
int ts_tokvec_push(ts_tokvec *tv, int32_t id, ts_err *err);

/* Per-call scratch memory (keeps the tokenizer itself immutable). */
typedef struct ts_tok_scratch {
    void *sym;
    size_t sym_cap; /* bytes */
    void *heap;
    size_t heap_cap;
    void *ranges;
    size_t ranges_cap;
    void *ranges2;
    size_t ranges2_cap;
    char *buf;
    size_t buf_cap;
    char *cat;
    size_t cat_cap;
    void *match_data; /* pcre2_match_data_8 * */
} ts_tok_scratch;
/* Ensures *p holds at least need bytes. 0 or -1 (err set). */
int ts_scratch_grow(void **p, size_t *cap, size_t need, ts_err *err);
void ts_scratch_free(ts_tok_scratch *s);

/* Appends n bytes (NUL-terminated) to the pool, returns the offset (or SIZE_MAX
 * when out of memory). With s == NULL the room is reserved for the caller to
 * fill (re-derive pool pointers afterwards: the pool may move) and
 * ts_tok_pool_trim then fixes the length actually used (<= n). */
size_t ts_tok_pool_add(ts_tokenizer *t, const char *s, size_t n);
void ts_tok_pool_trim(ts_tokenizer *t, size_t off, size_t used);
static inline const char *ts_tok_key(const ts_tokenizer *t, int32_t id) { return t->pool + t->key_off[id]; }

/* Family-specific parts of loading: fill key_off/key_len, the vocab map and the
 * family's tables. pre_override (may be NULL) replaces tokenizer.ggml.pre. */
int ts_bpe_init(ts_tokenizer *t, const ts_gguf *g, const char *pre_override, ts_err *err);
int ts_spm_init(ts_tokenizer *t, const ts_gguf *g, ts_err *err);
int ts_ugm_init(ts_tokenizer *t, const ts_gguf *g, ts_err *err);
void ts_bpe_free(ts_tokenizer *t);
void ts_spm_free(ts_tokenizer *t);
void ts_ugm_free(ts_tokenizer *t);
/* Decoded piece of a normal (non-added) token, written into t's pool. */
int ts_bpe_piece(ts_tokenizer *t, int32_t id, ts_err *err);
int ts_spm_piece(ts_tokenizer *t, int32_t id, ts_err *err);
int ts_ugm_piece(ts_tokenizer *t, int32_t id, ts_err *err);

/* Tokenize one run of plain text (valid UTF-8, no added tokens in it).
 * at_start: the run begins at offset 0 of the caller's text. */
int ts_bpe_encode(const ts_tokenizer *t, const char *s, size_t n, ts_tok_scratch *sc, ts_tokvec *out, ts_err *err);
int ts_spm_encode(const ts_tokenizer *t, const char *s, size_t n, bool at_start, ts_tok_scratch *sc, ts_tokvec *out,
                  ts_err *err);

int ts_ugm_encode(const ts_tokenizer *t, const char *s, size_t n, ts_tok_scratch *sc, ts_tokvec *out, ts_err *err);
/* The unigram family's normalizer (the precompiled charsmap over grapheme
 * clusters) of valid UTF-8 s: *out_len bytes in sc->buf. For the tests. */
int ts_ugm_normalize(const ts_tokenizer *t, const char *s, size_t n, ts_tok_scratch *sc, size_t *out_len,
                     ts_err *err);

/* Pre-tokenizer split of s (byte-level BPE only): *n_out byte ranges, stored as
 * pairs of uint32 (begin, end) in sc->ranges. Exposed for the tests. */
int ts_bpe_split(const ts_tokenizer *t, const char *s, size_t n, ts_tok_scratch *sc, size_t *n_out, ts_err *err);

/* ts_tokenizer_load with an optional pre-tokenizer name instead of the file's
 * tokenizer.ggml.pre (byte-level BPE only; used by the tests). */
ts_tokenizer *ts_tokenizer_load_ex(const ts_gguf *g, const char *pre_override, ts_err *err);

/* Names of the supported tokenizer.ggml.pre values, NULL-terminated (for messages and docs). */
extern const char *const ts_bpe_pre_names[];

#endif
