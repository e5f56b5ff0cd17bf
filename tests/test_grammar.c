/* test_grammar.c - the GBNF compiler and matcher (src/text/grammar.h):
 * every compile error names what is wrong and where; literals, classes
 * (negated, ranges, escapes, non-ASCII), groups, alternatives, * + ? {m,n};
 * bytes split anywhere inside a UTF-8 character; can_end / done; the
 * first-byte filter never refuses a byte that check accepts; a JSON grammar
 * on valid and invalid documents, nested 200 deep. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/grammar.h"

#include "check.h"

static ts_grammar *compile(const char *text) {
    ts_err e = {{0}};
    ts_grammar *g = ts_grammar_compile(text, strlen(text), NULL, &e);
    CHECK(g, "compile failed: %s\n%s", e.msg, text);
    return g;
}

static void compile_fails(const char *text, const char *want) {
    ts_err e = {{0}};
    ts_grammar *g = ts_grammar_compile(text, strlen(text), NULL, &e);
    CHECK(!g && strstr(e.msg, want), "'%s': wanted an error with '%s', got %s", text, want, g ? "success" : e.msg);
    ts_grammar_free(g);
}

/* accept the text in pieces of `step` bytes; 1 = accepted and complete,
 * 0 = accepted but incomplete, -1 = refused */
static int match(const ts_grammar *g, const char *text, size_t step) {
    ts_gmatch *m = ts_gmatch_new(g, NULL);
    size_t n = strlen(text);
    int r = 0;
    for (size_t i = 0; i < n; i += step) {
        size_t k = n - i < step ? n - i : step;
        uint8_t first[256];
        ts_gmatch_first_bytes(m, first);
        bool ok = ts_gmatch_check(m, text + i, k);
        CHECK(!ok || first[(unsigned char)text[i]], "first-byte filter refuses byte 0x%02x that check accepts in '%s'",
              (unsigned char)text[i], text);
        if (!ts_gmatch_accept(m, text + i, k)) {
            CHECK(!ok, "check and accept disagree at %zu of '%s'", i, text);
            r = -1;
            break;
        }
    }
    if (r == 0) r = ts_gmatch_can_end(m) ? 1 : 0;
    ts_gmatch_free(m);
    return r;
}

static void expect(const ts_grammar *g, const char *text, int want) {
    for (size_t step = 1; step <= 4; step++) {
        int got = match(g, text, step);
        CHECK(got == want, "'%s' in pieces of %zu: %d, want %d", text, step, got, want);
    }
    int got = match(g, text, strlen(text) ? strlen(text) : 1);
    CHECK(got == want, "'%s' whole: %d, want %d", text, got, want);
}

static void test_errors(void) {
    compile_fails("root ::= foo", "rule 'foo' is used but not defined");
    compile_fails("root ::= \"a\"\nroot ::= \"b\"", "defined twice");
    compile_fails("root \"a\"", "expected '::='");
    compile_fails("start ::= \"a\"", "no rule 'root'");
    compile_fails("root ::= \"abc", "unterminated string");
    compile_fails("root ::= [a-", "unterminated character class");
    compile_fails("root ::= [z-a]", "backwards");
    compile_fails("root ::= \"\\q\"", "unknown escape");
    compile_fails("root ::= \"\\x4\"", "hex digits");
    compile_fails("root ::= (\"a\" ", "'(' without ')'");
    compile_fails("root ::= \"a\" )", "unexpected ')'");
    compile_fails("root ::= \"a\"{3,2}", "n must be m");
    compile_fails("root ::= \"a\"{5000}", "m must be");
    compile_fails("root ::= root \"a\" | \"b\"", "rule 'root' is left-recursive");
    compile_fails("root ::= x\nx ::= y \"a\"\ny ::= \"\" x | \"b\"", "left-recursive");
    compile_fails("root ::= (\"a\"?)*", "left-recursive"); /* a nullable body repeated */
    compile_fails("root ::= \"a\" $", "line 1, column 14: unexpected '$'");
    compile_fails("root ::= \"a\"\n  ok ::= \"b\" |\n  \"c\" ] ", "line 3, column 7");
}

static void test_basics(void) {
    ts_grammar *g = compile("root ::= \"yes\" | \"no\"   # a comment\n");
    expect(g, "yes", 1);
    expect(g, "no", 1);
    expect(g, "ye", 0);
    expect(g, "yess", -1);
    expect(g, "nope", -1);
    ts_gmatch *m = ts_gmatch_new(g, NULL);
    CHECK(!ts_gmatch_can_end(m) && ts_gmatch_accept(m, "no", 2) && ts_gmatch_done(m), "'no' is done");
    ts_gmatch_reset(m);
    CHECK(!ts_gmatch_done(m) && ts_gmatch_check(m, "y", 1), "reset");
    ts_gmatch_free(m);
    ts_grammar_free(g);

    g = compile("root ::= [a-c]+ \"!\"?\n");
    expect(g, "abcab", 1);
    expect(g, "abc!", 1);
    expect(g, "", 0);
    expect(g, "abd", -1);
    expect(g, "!", -1);
    expect(g, "ab!!", -1);
    ts_grammar_free(g);

    g = compile("root ::= \"x\"{2,3} \"ab\"{2} y{0,}\ny ::= [0-9]\n");
    expect(g, "xxabab", 1);
    expect(g, "xxxabab123", 1);
    expect(g, "xxxxabab", -1);
    expect(g, "xaba", -1);
    expect(g, "xxab", 0);
    ts_grammar_free(g);

    g = compile("root ::= (\"a\" | \"b\" (\"c\" | ))* \"!\"\n");
    expect(g, "abcbba!", 1);
    expect(g, "!", 1);
    expect(g, "ac!", -1);
    ts_grammar_free(g);

    /* negated class, escapes, non-ASCII, any character */
    g = compile("root ::= \"\\\"\" [^\"\\\\\\x00-\\x1F]* \"\\\"\" . \"\\u00e9\\U0001F600\"\n");
    expect(g, "\"h\xc3\xa9llo \xe2\x82\xac\"x\xc3\xa9\xf0\x9f\x98\x80", 1);
    expect(g, "\"a\\b\"x\xc3\xa9\xf0\x9f\x98\x80", -1);
    expect(g, "\"a\nb\"", -1);
    expect(g, "\"ok\"\xe2\x82\xac\xc3\xa9\xf0\x9f\x98\x80", 1);
    expect(g, "\"ok\"x\xc3\xa8", -1);        /* e-grave: the lead byte fits, the character does not */
    expect(g, "\"\xc3\"", -1);               /* a lead byte then a quote: invalid UTF-8 */
    expect(g, "\"\xc0\xaf\"", -1);           /* overlong */
    expect(g, "\"\xed\xa0\x80\"", -1);       /* surrogate */
    ts_grammar_free(g);

    /* a class of non-ASCII characters only: the first-byte filter keeps just their lead bytes */
    g = compile("root ::= [\xce\xb1-\xcf\x89]+\n"); /* Greek small letters */
    ts_gmatch *m2 = ts_gmatch_new(g, NULL);
    uint8_t first[256];
    ts_gmatch_first_bytes(m2, first);
    int n_first = 0;
    for (int b = 0; b < 256; b++) n_first += first[b];
    CHECK(first[0xCE] && first[0xCF] && n_first == 2, "Greek: lead bytes 0xCE 0xCF only (%d)", n_first);
    CHECK(ts_gmatch_accept(m2, "\xce", 1) && !ts_gmatch_can_end(m2), "half a character is not an end");
    ts_gmatch_first_bytes(m2, first);
    CHECK(first[0xB1] && !first['a'], "after a lead byte: continuation bytes");
    CHECK(!ts_gmatch_check(m2, "\xa0", 1), "U+03A0 (capital Pi) is outside the class");
    CHECK(ts_gmatch_accept(m2, "\xbb", 1) && ts_gmatch_can_end(m2), "U+03BB completes");
    ts_gmatch_free(m2);
    ts_grammar_free(g);
}

static const char *json_gbnf =
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
    "array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
    "number ::= \"-\"? ([0-9] | [1-9] [0-9]{1,15}) (\".\" [0-9]+)? ([eE] [-+]? [0-9]{1,15})? ws\n"
    "ws     ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

static void test_json(void) {
    ts_grammar *g = compile(json_gbnf);
    expect(g, "{}", 1);
    expect(g, "{\"a\": 1, \"b\": [true, false, null, -0.5e+3, \"x\\u00e9\\n\"], \"c\": {\"d\": []}}", 1);
    expect(g, "{\n  \"k\": \"v\"\n}", 1);
    expect(g, "{\"a\": 01}", -1);
    expect(g, "{\"a\": tru}", -1);
    expect(g, "{\"a\" 1}", -1);
    expect(g, "{\"a\": 1,}", -1);
    expect(g, "[1]", -1);
    expect(g, "{\"a\": \"\x01\"}", -1);
    expect(g, "{\"a\": [1, 2", 0);
    /* 200 nested arrays */
    char deep[1000];
    size_t n = 0;
    n += (size_t)snprintf(deep + n, sizeof deep - n, "{\"a\": ");
    for (int i = 0; i < 200; i++) deep[n++] = '[';
    for (int i = 0; i < 200; i++) deep[n++] = ']';
    deep[n++] = '}';
    deep[n] = '\0';
    CHECK(match(g, deep, 7) == 1, "200 nested arrays");
    ts_gmatch *m = ts_gmatch_new(g, NULL);
    CHECK(ts_gmatch_accept(m, "{\"a\": 1}", 8) && ts_gmatch_can_end(m) && !ts_gmatch_done(m),
          "after the object: complete, but whitespace may follow");
    CHECK(ts_gmatch_accept(m, " ", 1) && ts_gmatch_done(m), "after the trailing space: done");
    ts_gmatch_free(m);
    ts_grammar_free(g);
}

/* Grammars that would make the matcher's work explode are cut at a limit,
 * flagged, and refused quickly rather than followed. */
static void test_limits(void) {
    char g[1200];
    size_t n = (size_t)snprintf(g, sizeof g, "e ::= \"\" | \"\"\nroot ::=");
    for (int i = 0; i < 40; i++) n += (size_t)snprintf(g + n, sizeof g - n, " e");
    snprintf(g + n, sizeof g - n, " \"x\"\n");
    ts_grammar *gr = compile(g); /* 2^40 ways to expand the start */
    ts_gmatch *m = gr ? ts_gmatch_new(gr, NULL) : NULL;
    CHECK(m && ts_gmatch_overflow(m), "2^40 empty expansions: the matcher says it hit its limit");
    ts_gmatch_free(m);
    ts_grammar_free(gr);
    gr = compile("root ::= ((\"a\"?){40}){30} \"b\"\n"); /* 1201 ways to continue at the start */
    m = gr ? ts_gmatch_new(gr, NULL) : NULL;
    CHECK(m && ts_gmatch_overflow(m) && ts_gmatch_n_stacks(m) <= 1024, "more than 1024 stacks: flagged, capped at 1024");
    ts_gmatch_free(m);
    ts_grammar_free(gr);
    gr = compile("root ::= (\"a\"?){200} \"b\"\n"); /* within the limits: followed exactly */
    m = gr ? ts_gmatch_new(gr, NULL) : NULL;
    CHECK(m && !ts_gmatch_overflow(m) && ts_gmatch_accept(m, "aaab", 4) && ts_gmatch_can_end(m),
          "201 ways to continue: within the limits");
    ts_gmatch_free(m);
    ts_grammar_free(gr);
}

int main(void) {
    test_errors();
    test_limits();
    test_basics();
    test_json();
    if (failures) {
        fprintf(stderr, "%d failure(s)\n", failures);
        return 1;
    }
    printf("all grammar tests passed\n");
    return 0;
}
