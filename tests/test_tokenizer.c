/* test_tokenizer.c - unit tests of src/text/tokenizer*: streaming detokenization
 * of UTF-8 split across tokens, invalid UTF-8 input, special-token parsing on
 * and off, BOS/EOS, accessors, thread-safety smoke, very long words, and load
 * errors on synthetic GGUF files (plus a tiny generic SentencePiece vocabulary).
 * The oracle comparison over the corpus is test_tokenizer_oracle.py.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf/gguf.h"
#include "gguf_builder.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

#ifndef TS_MODELS_DIR
#define TS_MODELS_DIR "models"
#endif

static int failures;
#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            failures++;                                                    \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fputc('\n', stderr);                                           \
        }                                                                  \
    } while (0)

typedef struct {
    int32_t ids[4096];
    int64_t n;
} idlist;

static idlist tok(const ts_tokenizer *t, const char *s, size_t n, bool add, bool parse) {
    idlist r;
    ts_err err = {{0}};
    r.n = ts_tokenize(t, s, n, add, parse, r.ids, 4096, &err);
    if (r.n < 0 || r.n > 4096) {
        fprintf(stderr, "tokenize failed: %s\n", err.msg);
        exit(1);
    }
    return r;
}
static idlist toks(const ts_tokenizer *t, const char *s, bool add, bool parse) {
    return tok(t, s, strlen(s), add, parse);
}
static bool same(idlist a, idlist b) { return a.n == b.n && !memcmp(a.ids, b.ids, (size_t)a.n * sizeof a.ids[0]); }
static bool contains(idlist a, int32_t id) {
    for (int64_t i = 0; i < a.n; i++)
        if (a.ids[i] == id) return true;
    return false;
}

static ts_tokenizer *load_model(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", TS_MODELS_DIR, name);
    ts_err err = {{0}};
    ts_gguf *g = ts_gguf_open(path, &err);
    if (!g) {
        fprintf(stderr, "FAIL: cannot open %s (%s): run tools/fetch_models.sh\n", path, err.msg);
        exit(1);
    }
    clock_t c0 = clock();
    ts_tokenizer *t = ts_tokenizer_load(g, &err);
    double secs = (double)(clock() - c0) / CLOCKS_PER_SEC;
    ts_gguf_close(g);
    if (!t) {
        fprintf(stderr, "FAIL: tokenizer of %s: %s\n", name, err.msg);
        exit(1);
    }
    printf("%s: %d tokens, loaded in %.3f s CPU\n", name, ts_tok_n_vocab(t), secs);
    CHECK(secs < 2.0, "load of %s took %.2f s (budget 0.5 s on an idle machine)", name, secs);
    return t;
}

/* ---- streaming detokenization ------------------------------------------- */

static void test_stream(const ts_tokenizer *t, const int32_t byte_ids[4], const char *name) {
    /* "😀" = F0 9F 98 80, one byte token at a time. */
    char out[1024];
    ts_detok d;
    ts_detok_init(&d);
    int64_t k[4];
    for (int i = 0; i < 4; i++) k[i] = ts_detok_push(&d, t, byte_ids[i], true, out, sizeof out);
    CHECK(k[0] == 0 && k[1] == 0 && k[2] == 0 && k[3] == 4, "%s: emoji pushes gave %lld %lld %lld %lld", name,
          (long long)k[0], (long long)k[1], (long long)k[2], (long long)k[3]);
    CHECK(!memcmp(out, "\xF0\x9F\x98\x80", 4), "%s: emoji bytes wrong", name);
    CHECK(ts_detok_flush(&d, out, sizeof out) == 0, "%s: nothing should be left", name);

    /* Whole-sequence decode gives the same 4 bytes. */
    char buf[16];
    CHECK(ts_detokenize(t, byte_ids, 4, true, buf, sizeof buf) == 4 && !memcmp(buf, "\xF0\x9F\x98\x80", 5),
          "%s: detokenize of byte tokens", name);

    /* Two bytes then flush: one U+FFFD for the unfinished sequence. */
    ts_detok_init(&d);
    CHECK(ts_detok_push(&d, t, byte_ids[0], true, out, sizeof out) == 0, "%s", name);
    CHECK(ts_detok_push(&d, t, byte_ids[1], true, out, sizeof out) == 0, "%s", name);
    CHECK(ts_detok_flush(&d, out, sizeof out) == 3 && !memcmp(out, "\xEF\xBF\xBD", 3), "%s: flush", name);
    CHECK(ts_detok_flush(&d, out, sizeof out) == 0, "%s: second flush", name);

    /* A lead byte followed by ASCII: U+FFFD then the ASCII, nothing held. */
    idlist a = toks(t, "a", false, false);
    ts_detok_init(&d);
    CHECK(ts_detok_push(&d, t, byte_ids[0], true, out, sizeof out) == 0, "%s", name);
    int64_t n = ts_detok_push(&d, t, a.ids[a.n - 1], true, out, sizeof out);
    CHECK(n == 4 && !memcmp(out, "\xEF\xBF\xBD" "a", 4), "%s: lead byte + 'a' gave %lld bytes", name, (long long)n);
    CHECK(d.n_pending == 0, "%s: nothing held", name);

    /* A continuation byte alone is invalid at once. */
    ts_detok_init(&d);
    CHECK(ts_detok_push(&d, t, byte_ids[3], true, out, sizeof out) == 3, "%s: stray continuation", name);

    /* Too small an output buffer: -1 and the state is unchanged. */
    ts_detok_init(&d);
    idlist w = toks(t, "hello world", false, false);
    CHECK(ts_detok_push(&d, t, w.ids[0], true, out, 1) == -1 && d.n_tokens == 0, "%s: small cap", name);
    CHECK(ts_detok_push(&d, t, -5, true, out, sizeof out) == -1, "%s: bad id", name);
    CHECK(ts_detok_push(&d, t, ts_tok_n_vocab(t), true, out, sizeof out) == -1, "%s: id past the end", name);

    /* Streaming a long mixed text equals the whole decode. */
    const char *text = "Stream 😀 test — ünïcödé 中文 👨‍👩‍👧 done.\n";
    idlist x = toks(t, text, false, false);
    char s1[4096], s2[4096];
    size_t o = 0;
    ts_detok_init(&d);
    for (int64_t i = 0; i < x.n; i++) o += (size_t)ts_detok_push(&d, t, x.ids[i], true, s1 + o, sizeof s1 - o);
    o += (size_t)ts_detok_flush(&d, s1 + o, sizeof s1 - o);
    int64_t whole = ts_detokenize(t, x.ids, x.n, true, s2, sizeof s2);
    CHECK(whole == (int64_t)strlen(text) && o == (size_t)whole && !memcmp(s1, s2, o) && !memcmp(s2, text, o),
          "%s: stream vs whole decode", name);
}

/* ---- invalid UTF-8 -------------------------------------------------------- */

static void test_utf8_helpers(void) {
    struct {
        const char *in, *want;
    } cases[] = {
        {"abc", "abc"},
        {"a\xff" "b", "a\xEF\xBF\xBD" "b"},
        {"\xe4\xb8", "\xEF\xBF\xBD"},                           /* truncated: one replacement */
        {"\xe4\xb8x", "\xEF\xBF\xBDx"},
        {"\xed\xa0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* surrogate: three */
        {"\xc0\xaf", "\xEF\xBF\xBD\xEF\xBF\xBD"},               /* overlong */
        {"\xf0\x9f\x98", "\xEF\xBF\xBD"},
        {"\xf4\x90\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n;
        char *o = ts_utf8_sanitize(cases[i].in, strlen(cases[i].in), &n);
        CHECK(o && n == strlen(cases[i].want) && !memcmp(o, cases[i].want, n), "sanitize case %zu", i);
        CHECK(ts_utf8_valid(cases[i].in, strlen(cases[i].in)) == !strcmp(cases[i].in, cases[i].want),
              "valid case %zu", i);
        free(o);
    }
}

static void test_invalid_input(const ts_tokenizer *t, const char *name) {
    /* Same ids as the text with U+FFFD in place of each maximal invalid subpart. */
    const char *pairs[][2] = {
        {"abc\xff" "def", "abc\xEF\xBF\xBD" "def"},
        {"caf\xe9 au lait", "caf\xEF\xBF\xBD au lait"},
        {"\xe4\xb8 cut", "\xEF\xBF\xBD cut"},
        {"end \xf0\x9f\x98", "end \xEF\xBF\xBD"},
        {"\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        idlist a = toks(t, pairs[i][0], true, true), b = toks(t, pairs[i][1], true, true);
        CHECK(same(a, b), "%s: invalid UTF-8 case %zu differs from its U+FFFD form", name, i);
    }
    /* NUL bytes are ordinary text. */
    idlist z = tok(t, "a\0b", 3, false, false);
    char buf[16];
    CHECK(ts_detokenize(t, z.ids, z.n, true, buf, sizeof buf) == 3 && !memcmp(buf, "a\0b", 3), "%s: NUL", name);
    /* Empty text. */
    idlist e = tok(t, "", 0, false, true);
    CHECK(e.n == 0, "%s: empty text gave %lld ids", name, (long long)e.n);
    ts_err err = {{0}};
    CHECK(ts_tokenize(t, NULL, 0, false, true, NULL, 0, &err) == 0, "%s: NULL text of length 0", name);
    CHECK(ts_tokenize(t, NULL, 0, true, true, NULL, 0, &err) == (ts_tok_add_bos(t) ? 1 : 0), "%s: BOS only", name);
    CHECK(ts_tokenize(t, NULL, 5, false, true, NULL, 0, &err) == -1 && err.msg[0], "%s: NULL text", name);
}

/* ---- special tokens --------------------------------------------------------- */

static void test_specials_smollm(const ts_tokenizer *t) {
    int32_t im_start = ts_tok_find(t, "<|im_start|>"), im_end = ts_tok_find(t, "<|im_end|>");
    CHECK(im_start == 1 && im_end == 2, "ids %d %d", im_start, im_end);
    idlist on = toks(t, "<|im_start|>user\nhi<|im_end|>", false, true);
    idlist off = toks(t, "<|im_start|>user\nhi<|im_end|>", false, false);
    CHECK(on.n >= 3 && on.ids[0] == im_start && on.ids[on.n - 1] == im_end, "parse_special on");
    CHECK(!contains(off, im_start) && !contains(off, im_end) && off.n > on.n, "parse_special off");
    /* No BOS for SmolLM (add_bos_token false), EOS/EOT/EOG. */
    CHECK(!ts_tok_add_bos(t), "smollm add_bos");
    idlist b = toks(t, "hi", true, true);
    CHECK(b.n == 1, "smollm adds nothing: %lld", (long long)b.n);
    CHECK(ts_tok_eos(t) == im_end && ts_tok_eot(t) == im_end, "eos %d eot %d", ts_tok_eos(t), ts_tok_eot(t));
    CHECK(ts_tok_is_eog(t, im_end) && ts_tok_is_eog(t, ts_tok_find(t, "<|endoftext|>")) && !ts_tok_is_eog(t, im_start),
          "eog");
    CHECK(ts_tok_is_special(t, im_start) && !ts_tok_is_special(t, b.ids[0]), "is_special");
    char p[64];
    CHECK(ts_token_piece(t, im_start, false, p, sizeof p) == 0, "hidden special");
    CHECK(ts_token_piece(t, im_start, true, p, sizeof p) == 12 && !memcmp(p, "<|im_start|>", 12), "rendered");
    CHECK(ts_token_piece(t, -1, true, p, sizeof p) == -1 && ts_token_piece(t, 49152, true, p, sizeof p) == -1,
          "piece range");
    CHECK(ts_tok_text(t, 49152) == NULL && !strcmp(ts_tok_text(t, 1), "<|im_start|>"), "text");
    /* The leftmost-longest rule and partial matches. */
    idlist x = toks(t, "<|im_start<|im_start|>", false, true);
    CHECK(x.n > 1 && x.ids[x.n - 1] == im_start && !contains((idlist){{x.ids[0]}, 1}, im_start), "partial then full");
    /* "ĠĠ"-style byte-alphabet spellings in the input are plain text. */
    idlist g = toks(t, "\xc4\xa0", false, true);
    char buf[8];
    CHECK(ts_detokenize(t, g.ids, g.n, true, buf, sizeof buf) == 2 && !memcmp(buf, "\xc4\xa0", 2), "Ġ text");
    /* Capacity protocol: count returned when cap is too small, nothing written past cap. */
    int32_t small[2] = {-7, -7};
    ts_err err = {{0}};
    int64_t n = ts_tokenize(t, "hello world and more", 20, false, true, small, 1, &err);
    CHECK(n > 1 && small[1] == -7, "cap protocol: %lld", (long long)n);
}

static void test_specials_gemma(const ts_tokenizer *t) {
    int32_t sot = ts_tok_find(t, "<start_of_turn>"), eot = ts_tok_find(t, "<end_of_turn>"), bold = ts_tok_find(t, "<b>");
    CHECK(sot == 105 && eot == 106 && bold == 200, "ids %d %d %d", sot, eot, bold);
    CHECK(ts_tok_eot(t) == eot && ts_tok_is_eog(t, eot) && ts_tok_is_eog(t, ts_tok_eos(t)), "gemma eot");
    CHECK(ts_tok_add_bos(t) && ts_tok_bos(t) == 2, "gemma bos");
    idlist on = toks(t, "<start_of_turn>user <b>x</b>", true, true);
    idlist off = toks(t, "<start_of_turn>user <b>x</b>", true, false);
    CHECK(on.ids[0] == 2 && on.ids[1] == sot, "gemma BOS + special");
    CHECK(off.ids[0] == 2 && !contains(off, sot), "gemma parse off");
    /* User-defined tokens are matched either way (as in the reference). */
    CHECK(contains(on, bold) && contains(off, bold), "user-defined <b>");
    idlist nl = toks(t, "a\n\n\nb", false, false);
    CHECK(contains(nl, ts_tok_find(t, "\n\n\n")), "newline run token");
    /* Runs of spaces are stored as real spaces but looked up as "▁▁"... */
    idlist sp = toks(t, "  a", false, false);
    CHECK(sp.n == 2 && sp.ids[0] == ts_tok_find(t, "  "), "space run token %d", sp.n ? sp.ids[0] : -1);
    /* No prefix space, and decoding keeps a leading space. */
    idlist h = toks(t, " Hello", false, false);
    char buf[32];
    CHECK(ts_detokenize(t, h.ids, h.n, false, buf, sizeof buf) == 6 && !strcmp(buf, " Hello"), "leading space");
    idlist h2 = toks(t, "Hello", true, true);
    CHECK(ts_detokenize(t, h2.ids, h2.n, false, buf, sizeof buf) == 5 && !strcmp(buf, "Hello"), "BOS hidden");
    CHECK(ts_detokenize(t, h2.ids, h2.n, true, buf, sizeof buf) == 10 && !strcmp(buf, "<bos>Hello"), "BOS shown");
    /* NUL-termination and truncation of ts_detokenize. */
    memset(buf, 'x', sizeof buf);
    CHECK(ts_detokenize(t, h2.ids, h2.n, true, buf, 4) == 10 && !memcmp(buf, "<bos", 4) && buf[4] == 'x', "trunc");
}

/* ---- threads ---------------------------------------------------------------- */

typedef struct {
    const ts_tokenizer *t;
    const char *text;
    idlist want;
    int bad;
} thread_arg;

static void *thread_main(void *p) {
    thread_arg *a = p;
    for (int i = 0; i < 40; i++) {
        idlist r = toks(a->t, a->text, true, i % 2 == 0);
        if (i % 2 == 0 && !same(r, a->want)) a->bad++;
    }
    return NULL;
}

static void test_threads(const ts_tokenizer *t, const char *name) {
    const char *texts[2] = {"<|im_start|>Concurrency test: the quick brown fox 12345 jumps. Привет 😀 中文 <bos>",
                            "Another text with    spaces\n\n\tand tabs, numbers 3.14159 and emoji 👍🏽🇺🇸."};
    thread_arg args[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        args[i] = (thread_arg){t, texts[i], toks(t, texts[i], true, true), 0};
        CHECK(pthread_create(&th[i], NULL, thread_main, &args[i]) == 0, "pthread_create");
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        CHECK(args[i].bad == 0, "%s: thread %d saw %d differing results", name, i, args[i].bad);
    }
}

/* ---- long words ------------------------------------------------------------- */

static void test_long(const ts_tokenizer *t, const char *name) {
    size_t n = 100000;
    char *s = malloc(n + 1);
    uint32_t x = 12345;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        s[i] = (char)('a' + (x >> 16) % 26);
    }
    s[n] = 0;
    clock_t c0 = clock();
    ts_err err = {{0}};
    int64_t k = ts_tokenize(t, s, n, false, false, NULL, 0, &err);
    memset(s, ' ', n);
    int64_t k2 = ts_tokenize(t, s, n, false, false, NULL, 0, &err);
    double secs = (double)(clock() - c0) / CLOCKS_PER_SEC;
    printf("%s: 100k-letter word -> %lld tokens, 100k spaces -> %lld tokens, %.3f s CPU\n", name, (long long)k,
           (long long)k2, secs);
    CHECK(k > 1000 && k2 > 0, "%s: long inputs", name);
    CHECK(secs < 5.0, "%s: long words took %.2f s: the merge loop looks quadratic", name, secs);
    free(s);
}

/* ---- synthetic files: load errors and a generic SentencePiece vocabulary ---- */

typedef struct {
    const char *model, *pre, *arch;
    const char **tokens;
    int n_tokens;
    const float *scores;
    const int32_t *types;
    const char **merges;
    int n_merges;
    int64_t bos; /* < -1: absent */
    int add_space_prefix; /* -1 absent */
    int n_types;          /* entries written for token_type (0: n_tokens) */
} synth;

static ts_gguf *build(const synth *s, gb_buf *b) {
    uint64_t n_kv = 2 + (s->pre != NULL) + (s->arch != NULL) + (s->scores != NULL) + (s->types != NULL) +
                    (s->merges != NULL) + (s->bos >= -1) + (s->add_space_prefix >= 0);
    memset(b, 0, sizeof *b);
    gb_header(b, 3, 0, n_kv);
    gb_kv_str(b, "tokenizer.ggml.model", s->model);
    if (s->pre) gb_kv_str(b, "tokenizer.ggml.pre", s->pre);
    if (s->arch) gb_kv_str(b, "general.architecture", s->arch);
    gb_key(b, "tokenizer.ggml.tokens", 9);
    gb_u32(b, 8);
    gb_u64(b, (uint64_t)s->n_tokens);
    for (int i = 0; i < s->n_tokens; i++) gb_str(b, s->tokens[i]);
    if (s->scores) {
        gb_key(b, "tokenizer.ggml.scores", 9);
        gb_u32(b, 6);
        gb_u64(b, (uint64_t)s->n_tokens);
        for (int i = 0; i < s->n_tokens; i++) gb_f32(b, s->scores[i]);
    }
    if (s->types) {
        gb_key(b, "tokenizer.ggml.token_type", 9);
        gb_u32(b, 5);
        int nt = s->n_types ? s->n_types : s->n_tokens;
        gb_u64(b, (uint64_t)nt);
        for (int i = 0; i < nt; i++) gb_u32(b, (uint32_t)s->types[i]);
    }
    if (s->merges) {
        gb_key(b, "tokenizer.ggml.merges", 9);
        gb_u32(b, 8);
        gb_u64(b, (uint64_t)s->n_merges);
        for (int i = 0; i < s->n_merges; i++) gb_str(b, s->merges[i]);
    }
    if (s->bos >= -1) {
        gb_key(b, "tokenizer.ggml.bos_token_id", 5);
        gb_u32(b, (uint32_t)(int32_t)s->bos);
    }
    if (s->add_space_prefix >= 0) {
        gb_key(b, "tokenizer.ggml.add_space_prefix", 7);
        gb_u8(b, (uint8_t)s->add_space_prefix);
    }
    ts_err err = {{0}};
    ts_gguf *g = ts_gguf_open_mem(b->p, b->n, &err);
    if (!g) fprintf(stderr, "synthetic GGUF rejected: %s\n", err.msg);
    return g;
}

static void expect_load_error(const synth *s, const char *want1, const char *want2) {
    gb_buf b;
    ts_gguf *g = build(s, &b);
    ts_err err = {{0}};
    ts_tokenizer *t = g ? ts_tokenizer_load(g, &err) : NULL;
    CHECK(g && !t && strstr(err.msg, want1) && strstr(err.msg, want2), "want error with '%s' and '%s', got '%s'",
          want1, want2, err.msg);
    ts_tokenizer_free(t);
    ts_gguf_close(g);
    free(b.p);
}

static void test_synthetic(void) {
    /* Byte-level vocabulary: all 256 byte spellings would be needed for real
     * text; a few letters suffice here. */
    const char *bt[] = {"a", "b", "ab", "<|x|>"};
    const int32_t btypes[] = {1, 1, 1, 3};
    const char *bm[] = {"a b"};
    synth s = {"gpt2", "no-such-pre", NULL, bt, 4, NULL, btypes, bm, 1, -2, -1, 0};
    expect_load_error(&s, "tokenizer.ggml.pre", "no-such-pre");
    s.pre = "gpt2";
    s.model = "bert";
    expect_load_error(&s, "tokenizer.ggml.model", "bert");
    s.model = "gpt2";
    const char *bad_merge[] = {"a b c"};
    s.merges = bad_merge;
    expect_load_error(&s, "tokenizer.ggml.merges[0]", "a b c");
    const char *missing_merge[] = {"a z"};
    s.merges = missing_merge;
    expect_load_error(&s, "tokenizer.ggml.merges[0]", "not in the vocabulary");
    s.merges = NULL;
    expect_load_error(&s, "tokenizer.ggml.merges", "missing");
    s.merges = bm;
    s.bos = 99;
    expect_load_error(&s, "tokenizer.ggml.bos_token_id", "99");
    s.bos = -2;
    s.n_types = 3;
    expect_load_error(&s, "tokenizer.ggml.token_type", "has 3 entries");
    s.n_types = 0;

    /* A working byte-level vocabulary: "abab" -> [ab, ab]; control token parsed. */
    {
        gb_buf b;
        ts_gguf *g = build(&s, &b);
        ts_err err = {{0}};
        ts_tokenizer *t = g ? ts_tokenizer_load(g, &err) : NULL;
        CHECK(t, "synthetic gpt2 load: %s", err.msg);
        if (t) {
            idlist r = toks(t, "abab<|x|>", false, true);
            CHECK(r.n == 3 && r.ids[0] == 2 && r.ids[1] == 2 && r.ids[2] == 3, "synthetic gpt2 ids");
            ts_tokenizer_free(t);
        }
        ts_gguf_close(g);
        free(b.p);
    }

    /* Generic SentencePiece ("llama" arch): prefix space, merges by score, byte fallback. */
    const char *st[] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "h", "e", "l", "o", "he", "ll", "hell",
                        "\xe2\x96\x81hell", "\xe2\x96\x81hello", "<0xC3>", "<0xA9>"};
    const float ss[] = {0, 0, 0, -1, -2, -3, -4, -5, -10, -6, -20, -30, -40, 0, 0};
    const int32_t sty[] = {2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 6, 6};
    synth p = {"llama", NULL, "llama", st, 15, ss, sty, NULL, 0, 1, 1, 0};
    gb_buf b;
    ts_gguf *g = build(&p, &b);
    ts_err err = {{0}};
    ts_tokenizer *t = g ? ts_tokenizer_load(g, &err) : NULL;
    CHECK(t, "synthetic llama load: %s", err.msg);
    if (t) {
        /* "hello" -> "▁hello" after the prefix; ll (-6) merges before he (-10). */
        idlist r = toks(t, "hello", true, true);
        CHECK(r.n == 2 && r.ids[0] == 1 && r.ids[1] == 12, "spm ids: n=%lld [%d %d]", (long long)r.n, r.ids[0],
              r.n > 1 ? r.ids[1] : -1);
        char buf[32];
        CHECK(ts_detokenize(t, r.ids, r.n, false, buf, sizeof buf) == 5 && !strcmp(buf, "hello"), "spm strip: '%s'",
              buf);
        /* "é" is not in the vocabulary: byte fallback <0xC3><0xA9>. */
        idlist e = toks(t, "\xc3\xa9", false, true);
        CHECK(e.n == 3 && e.ids[0] == 3 && e.ids[1] == 13 && e.ids[2] == 14, "byte fallback: n=%lld", (long long)e.n);
        CHECK(ts_detokenize(t, e.ids, e.n, true, buf, sizeof buf) == 2 && !strcmp(buf, "\xc3\xa9"), "bytes decode");
        /* Only the first text loses its space: "▁" then "▁hello" decodes to " hello"
         * (HF strips one space from the joined text), whole and streamed alike. */
        int32_t two[3] = {1, 3, 12};
        CHECK(ts_detokenize(t, two, 3, false, buf, sizeof buf) == 6 && !strcmp(buf, " hello"), "one strip: '%s'", buf);
        ts_detok d;
        ts_detok_init(&d);
        size_t o = 0;
        for (int i = 0; i < 3; i++) o += (size_t)ts_detok_push(&d, t, two[i], false, buf + o, sizeof buf - o);
        CHECK(o == 6 && !memcmp(buf, " hello", 6), "one strip, streamed");
        /* An unknown character without byte tokens: <unk>, consecutive ones fused. */
        idlist u = toks(t, "hxyz", false, true);
        CHECK(u.n == 3 && u.ids[2] == 0, "unk fuse: n=%lld", (long long)u.n);
        ts_tokenizer_free(t);
    }
    ts_gguf_close(g);
    free(b.p);
}

int main(void) {
    test_utf8_helpers();
    test_synthetic();

    ts_tokenizer *smol = load_model("SmolLM2-135M-Instruct.Q4_1.gguf");
    ts_tokenizer *gemma = load_model("gemma-3-270m-q4_k_m.gguf");

    /* Byte tokens of F0 9F 98 80: byte-level spellings for SmolLM, <0xXX> for Gemma. */
    int32_t smol_bytes[4] = {ts_tok_find(smol, "\xc3\xb0"), ts_tok_find(smol, "\xc5\x81"),
                             ts_tok_find(smol, "\xc4\xba"), ts_tok_find(smol, "\xc4\xa2")};
    int32_t gemma_bytes[4] = {ts_tok_find(gemma, "<0xF0>"), ts_tok_find(gemma, "<0x9F>"),
                              ts_tok_find(gemma, "<0x98>"), ts_tok_find(gemma, "<0x80>")};
    for (int i = 0; i < 4; i++) CHECK(smol_bytes[i] >= 0 && gemma_bytes[i] >= 0, "byte token %d missing", i);
    test_stream(smol, smol_bytes, "smollm");
    test_stream(gemma, gemma_bytes, "gemma");

    test_invalid_input(smol, "smollm");
    test_invalid_input(gemma, "gemma");
    test_specials_smollm(smol);
    test_specials_gemma(gemma);
    test_threads(smol, "smollm");
    test_threads(gemma, "gemma");
    test_long(smol, "smollm");
    test_long(gemma, "gemma");

    ts_tokenizer_free(smol);
    ts_tokenizer_free(gemma);
    ts_tokenizer_free(NULL);
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("OK\n");
    return 0;
}
