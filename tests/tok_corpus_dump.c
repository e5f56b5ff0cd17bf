/* tok_corpus_dump.c - helper for tests/test_tokenizer_oracle.py: tokenizes a
 * whole corpus in one process so the oracle test needs no process per string.
 *
 *   tok_corpus_dump MODEL.gguf [--pre NAME] [--splits] < records > lines
 *
 * Input: records of [uint32 little-endian byte length][bytes]. Output: one line
 * per record, fields separated by '|':
 *   A ids with add_special=1 parse_special=1
 *   B ids with add_special=0 parse_special=0
 *   D hex of ts_detokenize(B, render_special=1)
 *   E hex of ts_detokenize(A, render_special=1)
 *   S hex of the streaming detokenizer over B (push each id, then flush)
 * --pre replaces tokenizer.ggml.pre (byte-level vocabularies only).
 * --splits prints instead the pre-tokenizer's byte ranges of the whole text
 * ("b-e b-e ..."), for comparing the regexes themselves.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "text/tok_internal.h"
#include "text/tokenizer.h"

static int32_t *tokenize(const ts_tokenizer *t, const char *s, size_t n, bool add, bool parse, int64_t *count) {
    ts_err err = {{0}};
    int64_t k = ts_tokenize(t, s, n, add, parse, NULL, 0, &err);
    if (k < 0) {
        fprintf(stderr, "tokenize failed: %s\n", err.msg);
        exit(1);
    }
    int32_t *ids = malloc((size_t)(k + 1) * sizeof *ids);
    if (!ids || ts_tokenize(t, s, n, add, parse, ids, k, &err) != k) {
        fprintf(stderr, "tokenize failed on the second call\n");
        exit(1);
    }
    *count = k;
    return ids;
}

static void put_ids(const int32_t *ids, int64_t n) {
    for (int64_t i = 0; i < n; i++) printf("%s%d", i ? " " : "", ids[i]);
}

static void put_hex(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) printf("%02x", (unsigned char)s[i]);
}

static void put_detok(const ts_tokenizer *t, const int32_t *ids, int64_t n) {
    int64_t need = ts_detokenize(t, ids, n, true, NULL, 0);
    char *buf = malloc((size_t)need + 1);
    if (need < 0 || !buf || ts_detokenize(t, ids, n, true, buf, (size_t)need + 1) != need) {
        fprintf(stderr, "detokenize failed\n");
        exit(1);
    }
    put_hex(buf, (size_t)need);
    free(buf);
}

static void put_stream(const ts_tokenizer *t, const int32_t *ids, int64_t n) {
    size_t cap = 3 * ((size_t)ts_tok_max_piece(t) + 3);
    char *buf = malloc(cap);
    ts_detok d;
    ts_detok_init(&d);
    for (int64_t i = 0; i < n; i++) {
        int64_t k = ts_detok_push(&d, t, ids[i], true, buf, cap);
        if (k < 0) {
            fprintf(stderr, "ts_detok_push failed\n");
            exit(1);
        }
        put_hex(buf, (size_t)k);
    }
    int64_t k = ts_detok_flush(&d, buf, cap);
    put_hex(buf, (size_t)(k > 0 ? k : 0));
    free(buf);
}

int main(int argc, char **argv) {
    const char *pre = NULL;
    bool splits = false;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--pre") && i + 1 < argc) pre = argv[++i];
        else if (!strcmp(argv[i], "--splits")) splits = true;
        else argc = 0;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: tok_corpus_dump MODEL.gguf [--pre NAME] [--splits] < records\n");
        return 2;
    }
    ts_err err = {{0}};
    ts_gguf *g = ts_gguf_open(argv[1], &err);
    if (!g) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    ts_tokenizer *t = ts_tokenizer_load_ex(g, pre, &err);
    ts_gguf_close(g);
    if (!t) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    for (;;) {
        unsigned char hdr[4];
        if (fread(hdr, 1, 4, stdin) != 4) break;
        size_t n = (size_t)hdr[0] | (size_t)hdr[1] << 8 | (size_t)hdr[2] << 16 | (size_t)hdr[3] << 24;
        char *s = malloc(n + 1);
        if (!s || fread(s, 1, n, stdin) != n) {
            fprintf(stderr, "short record\n");
            return 1;
        }
        if (splits) {
            ts_tok_scratch sc = {0};
            size_t nr;
            if (ts_bpe_split(t, s, n, &sc, &nr, &err) < 0) {
                fprintf(stderr, "split failed: %s\n", err.msg);
                return 1;
            }
            const uint32_t *r = sc.ranges;
            for (size_t k = 0; k < nr; k++) printf("%s%u-%u", k ? " " : "", r[2 * k], r[2 * k + 1]);
            putchar('\n');
            ts_scratch_free(&sc);
            free(s);
            continue;
        }
        int64_t na, nb;
        int32_t *a = tokenize(t, s, n, true, true, &na);
        int32_t *b = tokenize(t, s, n, false, false, &nb);
        put_ids(a, na);
        putchar('|');
        put_ids(b, nb);
        putchar('|');
        put_detok(t, b, nb);
        putchar('|');
        put_detok(t, a, na);
        putchar('|');
        put_stream(t, b, nb);
        putchar('\n');
        free(a);
        free(b);
        free(s);
    }
    ts_tokenizer_free(t);
    return 0;
}
