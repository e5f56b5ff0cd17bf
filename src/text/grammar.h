/* grammar.h - constrained decoding: a GBNF grammar (llama.cpp's text form;
 * docs/GRAMMAR.md) compiled to rules over Unicode code points, and a matcher
 * that follows every way the text so far can continue.
 *
 * The matcher is a pushdown recognizer over a set of stacks (llama.cpp's
 * scheme): a stack is the list of positions still to match, innermost rule
 * last, and its top is always a character class. A code point advances each
 * stack whose top class holds it; a rule reference at the new top is
 * replaced by each of the rule's alternatives. An empty stack means the text
 * is a complete match. Left recursion would expand forever and is refused
 * when the grammar is compiled.
 *
 * Text arrives as bytes (a token may end inside a UTF-8 sequence): the
 * matcher holds an incomplete sequence and accepts it while some stack's top
 * class holds a code point that the sequence can still become.
 *
 * A compiled grammar is immutable (share it between threads); a matcher
 * belongs to one generation at a time. */
#ifndef TS_GRAMMAR_H
#define TS_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef struct ts_grammar ts_grammar;
typedef struct ts_gmatch ts_gmatch;

/* Compiles len bytes of GBNF text whose start rule is `root` (NULL: "root").
 * NULL with err naming the line and column, or the rule, on failure. */
ts_grammar *ts_grammar_compile(const char *text, size_t len, const char *root, ts_err *err);
void ts_grammar_free(ts_grammar *g); /* NULL is a no-op */
int32_t ts_grammar_n_rules(const ts_grammar *g);

/* A matcher at the start of g (g must outlive it). */
ts_gmatch *ts_gmatch_new(const ts_grammar *g, ts_err *err);
void ts_gmatch_free(ts_gmatch *m);
void ts_gmatch_reset(ts_gmatch *m);
/* Whether the n bytes could come next; the state does not change. */
bool ts_gmatch_check(ts_gmatch *m, const char *b, size_t n);
/* Advances by n bytes; returns false (state unchanged) when they cannot come next. */
bool ts_gmatch_accept(ts_gmatch *m, const char *b, size_t n);
/* The text so far is a complete match (and holds no incomplete character). */
bool ts_gmatch_can_end(const ts_gmatch *m);
/* ... and nothing may follow it. */
bool ts_gmatch_done(const ts_gmatch *m);
/* first[b] = 1 for each byte that may start the next bytes (a quick filter
 * before ts_gmatch_check: a 0 is a sure refusal). */
void ts_gmatch_first_bytes(const ts_gmatch *m, uint8_t first[256]);
/* The number of stacks (ways to continue) right now. */
int ts_gmatch_n_stacks(const ts_gmatch *m);
/* A limit cut an expansion short since the last reset: more than 1024 ways
 * to continue at once, or more than 2^18 expansion steps for one
 * character (a grammar ambiguous enough to stall generation). Steps cut
 * short are refused, so the matcher errs on the side of refusing. */
bool ts_gmatch_overflow(const ts_gmatch *m);

#endif
