/* spm.c - SentencePiece-style BPE ("llama" vocabularies: Gemma 3, Llama 2, ...).
 *
 * Follows HF tokenizers as transformers builds it from a GGUF (GemmaTokenizer /
 * LlamaTokenizer over merges it derives from the vocabulary):
 *  - spaces become U+2581 "▁" (a prefix "▁" only when add_space_prefix says so);
 *  - every character starts as its own symbol; one the vocabulary lacks becomes
 *    its UTF-8 bytes as <0xXX> tokens (or <unk>, consecutive ones fused);
 *  - adjacent symbols a, b merge when the string a+b is itself a token. The
 *    derived merge list is ordered by the merged token's priority (its score,
 *    or for Gemma its position in the file, since Gemma's scores do not follow
 *    its merge order), then the longer left part, then the longer right part,
 *    then the lower token id; equal merges go leftmost first.
 * Merges are found on the fly by concatenating keys and looking the result up,
 * which is equivalent to the derived list without building its 500k entries.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/heap.h"
#include "text/tok_internal.h"
#include "text/utf8.h"

static const char SPM_SPACE[] = "\xe2\x96\x81"; /* U+2581 */

/* Python's str.isspace(), which decides whether transformers respells a token. */
static bool py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Gemma files store runs of spaces with real spaces; their key is "▁" per character. */
static bool space_run(const char *s, size_t n, size_t *chars) {
    const uint8_t *p = (const uint8_t *)s;
    bool has_space = false;
    size_t i = 0, k = 0;
    if (n == 0) return false;
    while (i < n) {
        uint32_t cp;
        int r = ts_utf8_next(p + i, n - i, &cp, NULL);
        if (r <= 0 || !py_space(cp)) return false;
        has_space |= cp == ' ';
        i += (size_t)r;
        k++;
    }
    *chars = k;
    return has_space;
}

int ts_spm_init(ts_tokenizer *t, const ts_gguf *g, ts_err *err) {
    int32_t n = t->n_vocab;
    ts_gguf_str arch = {"", 0};
    if (ts_gguf_opt_str(g, "general.architecture", &arch, err) < 0) return -1;
    bool gemma = (arch.len == 5 && !memcmp(arch.ptr, "gemma", 5)) || (arch.len == 6 && !memcmp(arch.ptr, "gemma2", 6)) ||
                 (arch.len == 6 && !memcmp(arch.ptr, "gemma3", 6));

    int32_t n_respelled = 0;
    for (int32_t i = 0; i < n; i++) {
        const char *s = t->pool + t->text_off[i];
        size_t chars;
        t->key_off[i] = t->text_off[i];
        t->key_len[i] = t->text_len[i];
        if (!gemma || !space_run(s, t->text_len[i], &chars)) continue;
        size_t kl = chars * 3;
        char *buf = malloc(kl ? kl : 1);
        if (!buf) return ts_err_set(err, "tokenizer: out of memory");
        for (size_t k = 0; k < chars; k++) memcpy(buf + 3 * k, SPM_SPACE, 3);
        size_t off = ts_tok_pool_add(t, buf, kl);
        free(buf);
        if (off == SIZE_MAX || kl > UINT32_MAX) return ts_err_set(err, "tokenizer: out of memory");
        t->key_off[i] = off;
        t->key_len[i] = (uint32_t)kl;
        n_respelled++;
    }
    if (ts_strmap_init(&t->vocab, (size_t)n, &t->pool) < 0 ||
        ts_strmap_init(&t->alias, (size_t)n_respelled, &t->pool) < 0)
        return ts_err_set(err, "tokenizer: out of memory for the vocabulary map");
    t->prio = malloc((size_t)n * sizeof *t->prio);
    t->key_chars = malloc((size_t)n * sizeof *t->key_chars);
    if (!t->prio || !t->key_chars) return ts_err_set(err, "tokenizer: out of memory");
    for (int32_t i = 0; i < n; i++) {
        const char *k = ts_tok_key(t, i);
        ts_strmap_put(&t->vocab, t->key_off[i], t->key_len[i], i);
        if (t->key_off[i] != t->text_off[i]) ts_strmap_add(&t->alias, t->text_off[i], t->text_len[i], i);
        t->prio[i] = gemma || !t->score ? -(double)i : (double)t->score[i];
        size_t c = ts_utf8_count(k, t->key_len[i]);
        t->key_chars[i] = (uint16_t)(c > UINT16_MAX ? UINT16_MAX : c);
        if (t->key_len[i] > t->max_key_len) t->max_key_len = t->key_len[i];
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_tok[b] = ts_strmap_get(&t->vocab, name, 6);
    }
    return 0;
}

void ts_spm_free(ts_tokenizer *t) {
    free(t->prio);
    free(t->key_chars);
    t->prio = NULL;
    t->key_chars = NULL;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int ts_spm_piece(ts_tokenizer *t, int32_t id, ts_err *err) {
    const char *k = ts_tok_key(t, id);
    uint32_t n = t->key_len[id];
    /* <0xXX> stands for one byte (HF's ByteFallback decoder recognises the spelling). */
    if (n == 6 && !memcmp(k, "<0x", 3) && k[5] == '>' && hexval(k[3]) >= 0 && hexval(k[4]) >= 0) {
        char b = (char)(hexval(k[3]) * 16 + hexval(k[4]));
        size_t off = ts_tok_pool_add(t, &b, 1);
        if (off == SIZE_MAX) return ts_err_set(err, "tokenizer: out of memory");
        t->piece_off[id] = off;
        t->piece_len[id] = 1;
        return 0;
    }
    size_t off = ts_tok_pool_add(t, NULL, n);
    if (off == SIZE_MAX) return ts_err_set(err, "tokenizer: out of memory");
    k = ts_tok_key(t, id); /* the pool may have moved */
    char *buf = t->pool + off;
    size_t o = 0;
    for (uint32_t i = 0; i < n;) {
        if (i + 3 <= n && !memcmp(k + i, SPM_SPACE, 3)) {
            buf[o++] = ' ';
            i += 3;
        } else {
            buf[o++] = k[i++];
        }
    }
    ts_tok_pool_trim(t, off, o);
    t->piece_off[id] = off;
    t->piece_len[id] = (uint32_t)o;
    return 0;
}

/* ---- merge loop --------------------------------------------------------- */

typedef struct sym {
    int32_t id; /* -1 once merged into its left neighbour */
    int32_t prev, next;
} sym;

typedef struct cand {
    double prio;     /* of the merged token */
    int32_t merged;  /* the token a+b */
    uint16_t lenl, lenr; /* code points of a and b */
    int32_t pos;     /* left symbol */
    int32_t lid, rpos, rid; /* the pair as it was when queued */
} cand;

/* True when a should be merged before b. */
static inline bool cand_before(const cand *a, const cand *b) {
    if (a->prio != b->prio) return a->prio > b->prio;
    if (a->lenl != b->lenl) return a->lenl > b->lenl;
    if (a->lenr != b->lenr) return a->lenr > b->lenr;
    if (a->merged != b->merged) return a->merged < b->merged;
    return a->pos < b->pos;
}

TS_HEAP_DEFINE(heap, cand, cand_before)

/* Queues the pair (pos, its next) if their concatenation is a token. */
static void try_pair(const ts_tokenizer *t, const sym *y, int32_t pos, char *cat, cand *h, size_t *nh) {
    int32_t r = y[pos].next;
    if (r < 0) return;
    int32_t a = y[pos].id, b = y[r].id;
    size_t la = t->key_len[a], lb = t->key_len[b];
    if (la + lb > t->max_key_len) return;
    memcpy(cat, ts_tok_key(t, a), la);
    memcpy(cat + la, ts_tok_key(t, b), lb);
    int32_t m = ts_strmap_get(&t->vocab, cat, la + lb);
    if (m < 0) return;
    heap_push(h, nh, (cand){t->prio[m], m, t->key_chars[a], t->key_chars[b], pos, a, r, b});
}

int ts_spm_encode(const ts_tokenizer *t, const char *s, size_t n, bool at_start, ts_tok_scratch *sc, ts_tokvec *out,
                  ts_err *err) {
    /* Normalize: spaces -> "▁", optional prefix. */
    if (ts_scratch_grow((void **)&sc->buf, &sc->buf_cap, n * 3 + 4, err) < 0) return -1;
    char *w = sc->buf;
    size_t wn = 0;
    if (t->add_space_prefix && at_start && s[0] != ' ') {
        memcpy(w, SPM_SPACE, 3);
        wn = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(w + wn, SPM_SPACE, 3);
            wn += 3;
        } else {
            w[wn++] = s[i];
        }
    }

    /* Initial symbols: one per character (at most wn of them, bytes included). */
    if (ts_scratch_grow(&sc->sym, &sc->sym_cap, wn * sizeof(sym), err) < 0) return -1;
    sym *y = sc->sym;
    int32_t ns = 0;
    bool last_unk = false;
    const uint8_t *u = (const uint8_t *)w;
    for (size_t i = 0; i < wn;) {
        uint32_t cp;
        int r = ts_utf8_next(u + i, wn - i, &cp, NULL);
        size_t cl = r > 0 ? (size_t)r : 1; /* input is valid UTF-8; be safe anyway */
        int32_t id = ts_strmap_get(&t->vocab, w + i, cl);
        if (id >= 0) {
            y[ns] = (sym){id, ns - 1, -1};
            ns++;
            last_unk = false;
        } else {
            bool all = true;
            for (size_t k = 0; k < cl; k++) all &= t->byte_tok[u[i + k]] >= 0;
            if (all) {
                for (size_t k = 0; k < cl; k++) {
                    y[ns] = (sym){t->byte_tok[u[i + k]], ns - 1, -1};
                    ns++;
                }
                last_unk = false;
            } else if (t->unk >= 0 && !last_unk) { /* consecutive unknowns fuse into one */
                y[ns] = (sym){t->unk, ns - 1, -1};
                ns++;
                last_unk = true;
            }
        }
        i += cl;
    }
    for (int32_t i = 0; i + 1 < ns; i++) y[i].next = i + 1;

    if (ns > 1) {
        size_t need = (size_t)t->max_key_len * 2 + 1;
        if (ts_scratch_grow((void **)&sc->cat, &sc->cat_cap, need, err) < 0) return -1;
        if (ts_scratch_grow(&sc->heap, &sc->heap_cap, (size_t)ns * 3 * sizeof(cand), err) < 0) return -1;
        cand *h = sc->heap;
        size_t nh = 0;
        for (int32_t i = 0; i + 1 < ns; i++) try_pair(t, y, i, sc->cat, h, &nh);
        while (nh > 0) {
            cand c = heap_pop(h, &nh);
            sym *L = &y[c.pos];
            if (L->id != c.lid || L->next != c.rpos || y[c.rpos].id != c.rid) continue; /* stale */
            sym *R = &y[c.rpos];
            L->id = c.merged;
            R->id = -1;
            L->next = R->next;
            if (R->next >= 0) y[R->next].prev = c.pos;
            if (L->prev >= 0) try_pair(t, y, L->prev, sc->cat, h, &nh);
            try_pair(t, y, c.pos, sc->cat, h, &nh);
        }
    }
    for (int32_t i = 0; ns > 0 && i >= 0; i = y[i].next)
        if (ts_tokvec_push(out, y[i].id, err) < 0) return -1;
    return 0;
}
