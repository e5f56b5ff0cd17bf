/* grammar.c - GBNF compiler and matcher (see grammar.h).
 *
 * Compiled form: every alternative of every rule is a run of elements in one
 * array, ended by E_END. An element is (kind << 28) | value: E_REF names a
 * rule, E_CLASS a character class (ranges of code points, maybe negated). A
 * group, a literal string under a repetition and each repetition become
 * rules of their own, so the matcher only knows references and classes:
 *   x*      R ::= x R |             (empty alternative)
 *   x+      x R, with R as for x*
 *   x?      R ::= x |
 *   x{m,n}  m copies of x, then n - m nested optionals (x{m,}: then x*)
 *
 * Matcher: a stack set is a flat int32 array of records [len, e0 .. e(len-1)]
 * (e = element index still to match, innermost last). Three sets rotate so
 * that a check can run ahead of the current state without copying it. */
#include "text/grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { E_END = 0, E_REF = 1, E_CLASS = 2 };
#define EL(kind, v) (((uint32_t)(kind) << 28) | (uint32_t)(v))
#define KIND(e) ((e) >> 28)
#define VAL(e) ((e) & 0x0FFFFFFFu)

#define MAX_RULES 65536
#define MAX_REPEAT 1000   /* x{m,n}: m, n at most this */
#define MAX_NEST 64       /* nested parentheses */
#define MAX_STACKS 1024   /* ways to continue followed at once */
#define MAX_STACK_LEN 2048
#define MAX_DEPTH 4096    /* nested expansions without consuming a character */
/* Expansion steps for one character (or the start). A grammar can make the
 * expansion branch exponentially without consuming anything (a run of
 * rules that each match the empty text in two ways); past this budget the
 * matcher stops and says the grammar is too ambiguous, so an untrusted
 * grammar cannot stall a generation. */
#define MAX_WORK (1 << 18)

struct ts_grammar {
    uint32_t *el;
    int32_t n_el;
    int32_t n_rules, root;
    int32_t *rule_alt0, *rule_nalt; /* [n_rules]: first index into alts, count */
    int32_t *alts;                  /* element index where each alternative starts */
    uint32_t *cls_r;                /* lo, hi pairs */
    int32_t *cls_off, *cls_n;       /* [n_cls]: first pair, pair count */
    uint8_t *cls_neg;
    int32_t n_cls;
};

/* ---- growable arrays ---- */

typedef struct {
    uint32_t *v;
    int32_t n, cap;
} vec;

static int vpush(vec *a, uint32_t x) {
    if (a->n == a->cap) {
        int32_t nc = a->cap ? 2 * a->cap : 8;
        uint32_t *nv = realloc(a->v, (size_t)nc * sizeof *nv);
        if (!nv) return -1;
        a->v = nv;
        a->cap = nc;
    }
    a->v[a->n++] = x;
    return 0;
}

static int vcat(vec *a, const vec *b) {
    for (int32_t i = 0; i < b->n; i++)
        if (vpush(a, b->v[i]) < 0) return -1;
    return 0;
}

typedef struct {
    char *name;
    vec *alts;
    int32_t n_alts, cap_alts;
    bool defined;
    int32_t first_use; /* byte offset of the first reference, for the error */
} prule;

typedef struct {
    const char *s;
    size_t n, pos;
    prule *rules;
    int32_t n_rules, cap_rules;
    vec cls_r, cls_off, cls_n, cls_neg;
    ts_err *err;
    bool failed;
    int nest;
} parser;

static void where(const parser *p, size_t pos, int *line, int *col) {
    *line = 1, *col = 1;
    for (size_t i = 0; i < pos && i < p->n; i++) {
        if (p->s[i] == '\n') ++*line, *col = 1;
        else ++*col;
    }
}

#define PFAIL(p, pos, ...)                                                                    \
    do {                                                                                      \
        if (!(p)->failed) {                                                                   \
            int l_, c_;                                                                       \
            char m_[200];                                                                     \
            where((p), (pos), &l_, &c_);                                                      \
            snprintf(m_, sizeof m_, __VA_ARGS__);                                             \
            ts_err_set((p)->err, "grammar: line %d, column %d: %s", l_, c_, m_);            \
            (p)->failed = true;                                                               \
        }                                                                                     \
        return -1;                                                                            \
    } while (0)

static bool is_name(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

static void skip_ws(parser *p) {
    while (p->pos < p->n) {
        char c = p->s[p->pos];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            p->pos++;
        } else if (c == '#') {
            while (p->pos < p->n && p->s[p->pos] != '\n') p->pos++;
        } else {
            break;
        }
    }
}

/* At "name ::=" (the start of the next rule)? */
static bool at_rule_start(parser *p) {
    size_t save = p->pos, i = p->pos;
    while (i < p->n && is_name(p->s[i])) i++;
    if (i == p->pos) return false;
    p->pos = i;
    skip_ws(p);
    bool yes = p->n - p->pos >= 3 && !memcmp(p->s + p->pos, "::=", 3);
    p->pos = save;
    return yes;
}

static int32_t find_rule(parser *p, const char *name, size_t len, size_t use_pos) {
    for (int32_t i = 0; i < p->n_rules; i++)
        if (strlen(p->rules[i].name) == len && !memcmp(p->rules[i].name, name, len)) return i;
    if (p->n_rules >= MAX_RULES) {
        if (!p->failed) {
            ts_err_set(p->err, "grammar: more than %d rules", MAX_RULES);
            p->failed = true;
        }
        return -1;
    }
    if (p->n_rules == p->cap_rules) {
        int32_t nc = p->cap_rules ? 2 * p->cap_rules : 16;
        prule *nr = realloc(p->rules, (size_t)nc * sizeof *nr);
        if (!nr) return -1;
        p->rules = nr;
        p->cap_rules = nc;
    }
    prule *r = &p->rules[p->n_rules];
    memset(r, 0, sizeof *r);
    if (!(r->name = malloc(len + 1))) return -1;
    memcpy(r->name, name, len);
    r->name[len] = '\0';
    r->first_use = (int32_t)use_pos;
    return p->n_rules++;
}

/* A generated rule (groups, repetitions): named after its parent. */
static int32_t new_rule(parser *p, int32_t parent) {
    char name[160];
    snprintf(name, sizeof name, "%.100s~%d", parent >= 0 ? p->rules[parent].name : "g", (int)p->n_rules);
    int32_t r = find_rule(p, name, strlen(name), p->pos);
    if (r >= 0) p->rules[r].defined = true;
    return r;
}

static vec *add_alt(parser *p, int32_t r) {
    prule *ru = &p->rules[r];
    if (ru->n_alts == ru->cap_alts) {
        int32_t nc = ru->cap_alts ? 2 * ru->cap_alts : 4;
        vec *na = realloc(ru->alts, (size_t)nc * sizeof *na);
        if (!na) return NULL;
        ru->alts = na;
        ru->cap_alts = nc;
    }
    vec *a = &ru->alts[ru->n_alts++];
    memset(a, 0, sizeof *a);
    return a;
}

static int32_t add_class(parser *p, const uint32_t *lohi, int32_t n_pairs, bool neg) {
    int32_t id = p->cls_off.n;
    if (vpush(&p->cls_off, (uint32_t)p->cls_r.n / 2) < 0 || vpush(&p->cls_n, (uint32_t)n_pairs) < 0 ||
        vpush(&p->cls_neg, neg) < 0)
        return -1;
    for (int32_t i = 0; i < 2 * n_pairs; i++)
        if (vpush(&p->cls_r, lohi[i]) < 0) return -1;
    return id;
}

/* One UTF-8 character of the grammar text (its own bytes must be valid). */
static int read_utf8(parser *p, uint32_t *cp) {
    const unsigned char *s = (const unsigned char *)p->s + p->pos;
    size_t left = p->n - p->pos;
    unsigned c = s[0];
    int len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!len || (size_t)len > left) PFAIL(p, p->pos, "invalid UTF-8 in the grammar text");
    uint32_t v = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) PFAIL(p, p->pos, "invalid UTF-8 in the grammar text");
        v = (v << 6) | (s[i] & 0x3F);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min_cp[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        PFAIL(p, p->pos, "invalid UTF-8 in the grammar text");
    p->pos += (size_t)len;
    *cp = v;
    return 0;
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A character of a literal or a class, escapes decoded. */
static int read_char(parser *p, uint32_t *cp) {
    if (p->pos >= p->n) PFAIL(p, p->pos, "unexpected end of the grammar");
    if (p->s[p->pos] != '\\') return read_utf8(p, cp);
    size_t at = p->pos++;
    if (p->pos >= p->n) PFAIL(p, at, "unfinished escape");
    char c = p->s[p->pos++];
    int digits = 0;
    switch (c) {
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 't': *cp = '\t'; return 0;
    case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': *cp = (uint32_t)c; return 0;
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    default: PFAIL(p, at, "unknown escape '\\%c'", c);
    }
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        int h = p->pos < p->n ? hexval(p->s[p->pos]) : -1;
        if (h < 0) PFAIL(p, at, "escape '\\%c' needs %d hex digits", c, digits);
        v = v * 16 + (uint32_t)h;
        p->pos++;
    }
    if (v > 0x10FFFF) PFAIL(p, at, "code point U+%X is beyond U+10FFFF", (unsigned)v);
    *cp = v;
    return 0;
}

static int parse_alternatives(parser *p, int32_t rule);

/* One item (with its repetition) appended to seq. */
static int parse_item(parser *p, int32_t rule, vec *seq) {
    vec item = {0};
    size_t start = p->pos;
    char c = p->s[p->pos];
    if (c == '"') {
        p->pos++;
        while (p->pos < p->n && p->s[p->pos] != '"') {
            uint32_t cp, pair[2];
            if (read_char(p, &cp) < 0) goto fail;
            pair[0] = pair[1] = cp;
            int32_t k = add_class(p, pair, 1, false);
            if (k < 0 || vpush(&item, EL(E_CLASS, k)) < 0) goto oom;
        }
        if (p->pos >= p->n) {
            free(item.v);
            PFAIL(p, start, "unterminated string");
        }
        p->pos++;
    } else if (c == '[') {
        p->pos++;
        bool neg = p->pos < p->n && p->s[p->pos] == '^';
        if (neg) p->pos++;
        vec r = {0};
        while (p->pos < p->n && p->s[p->pos] != ']') {
            uint32_t lo, hi;
            if (read_char(p, &lo) < 0) {
                free(r.v);
                goto fail;
            }
            hi = lo;
            if (p->pos + 1 < p->n && p->s[p->pos] == '-' && p->s[p->pos + 1] != ']') {
                p->pos++;
                if (read_char(p, &hi) < 0) {
                    free(r.v);
                    goto fail;
                }
                if (hi < lo) {
                    free(r.v);
                    free(item.v);
                    PFAIL(p, start, "character range U+%X-U+%X is backwards", (unsigned)lo, (unsigned)hi);
                }
            }
            if (vpush(&r, lo) < 0 || vpush(&r, hi) < 0) {
                free(r.v);
                goto oom;
            }
        }
        if (p->pos >= p->n) {
            free(r.v);
            free(item.v);
            PFAIL(p, start, "unterminated character class");
        }
        p->pos++;
        int32_t k = add_class(p, r.v, r.n / 2, neg);
        free(r.v);
        if (k < 0 || vpush(&item, EL(E_CLASS, k)) < 0) goto oom;
    } else if (c == '.') {
        p->pos++;
        int32_t k = add_class(p, NULL, 0, true);
        if (k < 0 || vpush(&item, EL(E_CLASS, k)) < 0) goto oom;
    } else if (c == '(') {
        if (++p->nest > MAX_NEST) PFAIL(p, start, "parentheses nested deeper than %d", MAX_NEST);
        p->pos++;
        int32_t g = new_rule(p, rule);
        if (g < 0 || parse_alternatives(p, g) < 0) goto fail;
        skip_ws(p);
        if (p->pos >= p->n || p->s[p->pos] != ')') PFAIL(p, start, "'(' without ')'");
        p->pos++;
        p->nest--;
        if (vpush(&item, EL(E_REF, g)) < 0) goto oom;
    } else if (is_name(c)) {
        size_t a = p->pos;
        while (p->pos < p->n && is_name(p->s[p->pos])) p->pos++;
        int32_t r = find_rule(p, p->s + a, p->pos - a, a);
        if (r < 0 || vpush(&item, EL(E_REF, r)) < 0) goto fail;
    } else {
        PFAIL(p, start, "unexpected '%c'", c);
    }

    /* repetition */
    if (p->pos < p->n && strchr("*+?{", p->s[p->pos])) {
        char op = p->s[p->pos++];
        long m = 0, n = -1;
        if (op == '{') {
            char *end;
            m = strtol(p->s + p->pos, &end, 10);
            if (end == p->s + p->pos || m < 0 || m > MAX_REPEAT) {
                free(item.v);
                PFAIL(p, start, "x{m,n}: m must be 0 .. %d", MAX_REPEAT);
            }
            p->pos = (size_t)(end - p->s);
            n = m;
            if (p->pos < p->n && p->s[p->pos] == ',') {
                p->pos++;
                n = -1;
                if (p->pos < p->n && p->s[p->pos] != '}') {
                    n = strtol(p->s + p->pos, &end, 10);
                    if (end == p->s + p->pos || n < m || n > MAX_REPEAT) {
                        free(item.v);
                        PFAIL(p, start, "x{m,n}: n must be m .. %d", MAX_REPEAT);
                    }
                    p->pos = (size_t)(end - p->s);
                }
            }
            if (p->pos >= p->n || p->s[p->pos] != '}') {
                free(item.v);
                PFAIL(p, start, "x{m,n} without '}'");
            }
            p->pos++;
        } else {
            m = op == '+' ? 1 : 0;
            n = op == '?' ? 1 : -1;
        }
        /* a multi-element item (a literal string) becomes a rule of its own */
        if (item.n > 1) {
            int32_t g = new_rule(p, rule);
            vec *alt = g >= 0 ? add_alt(p, g) : NULL;
            if (!alt || vcat(alt, &item) < 0) goto oom;
            item.n = 0;
            if (vpush(&item, EL(E_REF, g)) < 0) goto oom;
        }
        for (long i = 0; i < m; i++)
            if (vcat(seq, &item) < 0) goto oom;
        if (n < 0) { /* R ::= item R | */
            int32_t r = new_rule(p, rule);
            vec *a1 = r >= 0 ? add_alt(p, r) : NULL;
            if (!a1 || vcat(a1, &item) < 0 || vpush(a1, EL(E_REF, r)) < 0 || !add_alt(p, r)) goto oom;
            if (vpush(seq, EL(E_REF, r)) < 0) goto oom;
        } else if (n > m) { /* R_k ::= item R_(k-1) | */
            int32_t last = -1;
            for (long k = 0; k < n - m; k++) {
                int32_t r = new_rule(p, rule);
                vec *a1 = r >= 0 ? add_alt(p, r) : NULL;
                if (!a1 || vcat(a1, &item) < 0 || (last >= 0 && vpush(a1, EL(E_REF, last)) < 0) || !add_alt(p, r))
                    goto oom;
                last = r;
            }
            if (vpush(seq, EL(E_REF, last)) < 0) goto oom;
        }
        free(item.v);
        return 0;
    }
    int rc = vcat(seq, &item);
    free(item.v);
    if (rc < 0) goto oom;
    return 0;
oom:
    free(item.v);
    if (!p->failed) {
        ts_err_set(p->err, "grammar: out of memory");
        p->failed = true;
    }
    return -1;
fail:
    free(item.v);
    return -1;
}

static int parse_alternatives(parser *p, int32_t rule) {
    for (;;) {
        vec *alt = add_alt(p, rule);
        if (!alt) PFAIL(p, p->pos, "out of memory");
        for (;;) {
            skip_ws(p);
            if (p->pos >= p->n) break;
            char c = p->s[p->pos];
            if (c == '|' || c == ')') break;
            if (at_rule_start(p)) break;
            /* parse_item may grow the rules array: find the alternative again */
            vec seq = {0};
            if (parse_item(p, rule, &seq) < 0) {
                free(seq.v);
                return -1;
            }
            prule *ru = &p->rules[rule];
            int rc = vcat(&ru->alts[ru->n_alts - 1], &seq);
            free(seq.v);
            if (rc < 0) PFAIL(p, p->pos, "out of memory");
        }
        if (p->pos < p->n && p->s[p->pos] == '|') {
            p->pos++;
            continue;
        }
        return 0;
    }
}

static void parser_free(parser *p) {
    for (int32_t i = 0; i < p->n_rules; i++) {
        for (int32_t a = 0; a < p->rules[i].n_alts; a++) free(p->rules[i].alts[a].v);
        free(p->rules[i].alts);
        free(p->rules[i].name);
    }
    free(p->rules);
    free(p->cls_r.v), free(p->cls_off.v), free(p->cls_n.v), free(p->cls_neg.v);
}

/* Left recursion: a rule that can reach itself before consuming anything
 * (through rules that may match the empty text) would expand forever. */
static int check_left_recursion(parser *p) {
    int32_t n = p->n_rules;
    bool *nullable = calloc((size_t)n, 1);
    uint8_t *color = calloc((size_t)n, 1);
    int32_t *stack = malloc((size_t)n * 2 * sizeof *stack);
    int rc = 0;
    if (!nullable || !color || !stack) {
        ts_err_set(p->err, "grammar: out of memory");
        rc = -1;
        goto done;
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t r = 0; r < n; r++) {
            if (nullable[r]) continue;
            for (int32_t a = 0; a < p->rules[r].n_alts && !nullable[r]; a++) {
                const vec *al = &p->rules[r].alts[a];
                int32_t i = 0;
                while (i < al->n && KIND(al->v[i]) == E_REF && nullable[VAL(al->v[i])]) i++;
                if (i == al->n) nullable[r] = changed = true;
            }
        }
    }
    /* iterative DFS over "r may start with rule x" edges; color 1 = on the path */
    for (int32_t s = 0; s < n && !rc; s++) {
        if (color[s]) continue;
        int32_t sp = 0;
        stack[sp++] = s, stack[sp++] = 0; /* rule, next edge ordinal */
        color[s] = 1;
        while (sp && !rc) {
            int32_t r = stack[sp - 2], k = stack[sp - 1]++, seen = 0, next = -1;
            for (int32_t a = 0; a < p->rules[r].n_alts && next < 0; a++) {
                const vec *al = &p->rules[r].alts[a];
                for (int32_t i = 0; i < al->n && KIND(al->v[i]) == E_REF; i++) {
                    if (seen++ == k) {
                        next = (int32_t)VAL(al->v[i]);
                        break;
                    }
                    if (!nullable[VAL(al->v[i])]) break;
                }
            }
            if (next < 0) {
                color[r] = 2;
                sp -= 2;
            } else if (color[next] == 1) {
                ts_err_set(p->err, "grammar: rule '%s' is left-recursive (it can reach itself before matching a "
                                   "character); rewrite it with a repetition such as x*",
                           p->rules[next].name);
                rc = -1;
            } else if (!color[next]) {
                color[next] = 1;
                stack[sp++] = next, stack[sp++] = 0;
            }
        }
    }
done:
    free(nullable), free(color), free(stack);
    return rc;
}

ts_grammar *ts_grammar_compile(const char *text, size_t len, const char *root, ts_err *err) {
    parser p = {.s = text ? text : "", .n = text ? len : 0, .err = err};
    ts_grammar *g = NULL;
    if (!root) root = "root";
    skip_ws(&p);
    while (p.pos < p.n && !p.failed) {
        size_t a = p.pos;
        while (p.pos < p.n && is_name(p.s[p.pos])) p.pos++;
        if (p.pos == a) {
            int l, c;
            where(&p, a, &l, &c);
            ts_err_set(err, "grammar: line %d, column %d: expected a rule name", l, c);
            goto fail;
        }
        int32_t r = find_rule(&p, p.s + a, p.pos - a, a);
        if (r < 0) goto fail;
        skip_ws(&p);
        if (p.n - p.pos < 3 || memcmp(p.s + p.pos, "::=", 3)) {
            int l, c;
            where(&p, p.pos, &l, &c);
            ts_err_set(err, "grammar: line %d, column %d: expected '::=' after '%s'", l, c, p.rules[r].name);
            goto fail;
        }
        if (p.rules[r].defined) {
            int l, c;
            where(&p, a, &l, &c);
            ts_err_set(err, "grammar: line %d, column %d: rule '%s' is defined twice", l, c, p.rules[r].name);
            goto fail;
        }
        p.rules[r].defined = true;
        p.pos += 3;
        if (parse_alternatives(&p, r) < 0) goto fail;
        skip_ws(&p);
        if (p.pos < p.n && (p.s[p.pos] == ')' || p.s[p.pos] == '|')) {
            int l, c;
            where(&p, p.pos, &l, &c);
            ts_err_set(err, "grammar: line %d, column %d: unexpected '%c'", l, c, p.s[p.pos]);
            goto fail;
        }
    }
    if (p.failed) goto fail;
    for (int32_t i = 0; i < p.n_rules; i++)
        if (!p.rules[i].defined) {
            int l, c;
            where(&p, (size_t)p.rules[i].first_use, &l, &c);
            ts_err_set(err, "grammar: line %d, column %d: rule '%s' is used but not defined", l, c, p.rules[i].name);
            goto fail;
        }
    int32_t root_id = -1;
    for (int32_t i = 0; i < p.n_rules; i++)
        if (!strcmp(p.rules[i].name, root)) root_id = i;
    if (root_id < 0) {
        ts_err_set(err, "grammar: no rule '%s' (the start rule)", root);
        goto fail;
    }
    if (check_left_recursion(&p) < 0) goto fail;

    if (!(g = calloc(1, sizeof *g))) goto oom;
    int32_t n_alts = 0, n_el = 0;
    for (int32_t i = 0; i < p.n_rules; i++) {
        n_alts += p.rules[i].n_alts;
        for (int32_t a = 0; a < p.rules[i].n_alts; a++) n_el += p.rules[i].alts[a].n + 1;
    }
    g->n_rules = p.n_rules;
    g->root = root_id;
    g->el = malloc((size_t)(n_el + 1) * sizeof *g->el);
    g->alts = malloc((size_t)(n_alts + 1) * sizeof *g->alts);
    g->rule_alt0 = malloc((size_t)p.n_rules * sizeof *g->rule_alt0);
    g->rule_nalt = malloc((size_t)p.n_rules * sizeof *g->rule_nalt);
    g->n_cls = p.cls_off.n;
    g->cls_r = malloc(((size_t)p.cls_r.n + 1) * sizeof *g->cls_r);
    g->cls_off = malloc(((size_t)g->n_cls + 1) * sizeof *g->cls_off);
    g->cls_n = malloc(((size_t)g->n_cls + 1) * sizeof *g->cls_n);
    g->cls_neg = malloc((size_t)g->n_cls + 1);
    if (!g->el || !g->alts || !g->rule_alt0 || !g->rule_nalt || !g->cls_r || !g->cls_off || !g->cls_n || !g->cls_neg)
        goto oom;
    int32_t ai = 0, ei = 0;
    for (int32_t i = 0; i < p.n_rules; i++) {
        g->rule_alt0[i] = ai;
        g->rule_nalt[i] = p.rules[i].n_alts;
        for (int32_t a = 0; a < p.rules[i].n_alts; a++) {
            g->alts[ai++] = ei;
            for (int32_t k = 0; k < p.rules[i].alts[a].n; k++) g->el[ei++] = p.rules[i].alts[a].v[k];
            g->el[ei++] = EL(E_END, 0);
        }
    }
    g->n_el = ei;
    if (p.cls_r.n) memcpy(g->cls_r, p.cls_r.v, (size_t)p.cls_r.n * sizeof *g->cls_r);
    for (int32_t i = 0; i < g->n_cls; i++) {
        g->cls_off[i] = (int32_t)p.cls_off.v[i];
        g->cls_n[i] = (int32_t)p.cls_n.v[i];
        g->cls_neg[i] = (uint8_t)p.cls_neg.v[i];
    }
    parser_free(&p);
    return g;
oom:
    ts_err_set(err, "grammar: out of memory");
fail:
    ts_grammar_free(g);
    parser_free(&p);
    return NULL;
}

void ts_grammar_free(ts_grammar *g) {
    if (!g) return;
    free(g->el), free(g->alts), free(g->rule_alt0), free(g->rule_nalt);
    free(g->cls_r), free(g->cls_off), free(g->cls_n), free(g->cls_neg);
    free(g);
}

int32_t ts_grammar_n_rules(const ts_grammar *g) { return g->n_rules; }

/* ---- classes ---- */

static bool cls_has(const ts_grammar *g, int32_t c, uint32_t cp) {
    const uint32_t *r = g->cls_r + 2 * g->cls_off[c];
    bool in = false;
    for (int32_t i = 0; i < g->cls_n[c] && !in; i++) in = cp >= r[2 * i] && cp <= r[2 * i + 1];
    return in != (g->cls_neg[c] != 0);
}

/* Whether the class holds some code point in [lo, hi] (negated classes:
 * unless one range covers all of it; close enough for a filter). */
static bool cls_meets(const ts_grammar *g, int32_t c, uint32_t lo, uint32_t hi) {
    const uint32_t *r = g->cls_r + 2 * g->cls_off[c];
    for (int32_t i = 0; i < g->cls_n[c]; i++) {
        if (g->cls_neg[c]) {
            if (r[2 * i] <= lo && r[2 * i + 1] >= hi) return false;
        } else if (r[2 * i] <= hi && r[2 * i + 1] >= lo) {
            return true;
        }
    }
    return g->cls_neg[c] != 0;
}

/* ---- the matcher ---- */

typedef struct {
    int32_t *v;
    size_t n, cap;
    int count;
} sset;

struct ts_gmatch {
    const ts_grammar *g;
    sset s[3];
    int cur;
    int32_t *tmp; /* [MAX_STACK_LEN] */
    uint8_t pend[4];
    int npend, need;
    bool cut;      /* a limit cut the current expansion short */
    bool overflow; /* ... at some step since the reset */
    int64_t work;  /* expansion steps of the current step */
};

static bool sset_add(ts_gmatch *m, sset *d, const int32_t *t, int len) {
    for (size_t i = 0; i < d->n; i += (size_t)d->v[i] + 1)
        if (d->v[i] == len && !memcmp(d->v + i + 1, t, (size_t)len * sizeof *t)) return true;
    if (d->count >= MAX_STACKS) {
        m->cut = true;
        return false;
    }
    if (d->n + (size_t)len + 1 > d->cap) {
        size_t nc = d->cap ? 2 * d->cap : 256;
        while (nc < d->n + (size_t)len + 1) nc *= 2;
        int32_t *nv = realloc(d->v, nc * sizeof *nv);
        if (!nv) {
            m->cut = true;
            return false;
        }
        d->v = nv;
        d->cap = nc;
    }
    d->v[d->n] = len;
    memcpy(d->v + d->n + 1, t, (size_t)len * sizeof *t);
    d->n += (size_t)len + 1;
    d->count++;
    return true;
}

/* Adds to d every stack that t[0..len) becomes once its top is a class (or
 * it is empty). Leaves t[0..len) as it found it. */
static void expand(ts_gmatch *m, sset *d, int32_t *t, int len, int depth) {
    const ts_grammar *g = m->g;
    if (depth > MAX_DEPTH || ++m->work > MAX_WORK) {
        m->cut = true;
        return;
    }
    if (len == 0) {
        sset_add(m, d, t, 0);
        return;
    }
    const int32_t top = t[len - 1];
    const uint32_t e = g->el[top];
    switch (KIND(e)) {
    case E_CLASS: sset_add(m, d, t, len); return;
    case E_END: expand(m, d, t, len - 1, depth + 1); return;
    default: {
        const int32_t r = (int32_t)VAL(e);
        int base = len - 1; /* nothing after the reference: a tail call */
        if (KIND(g->el[top + 1]) != E_END) t[len - 1] = top + 1, base = len;
        if (base + 1 > MAX_STACK_LEN) {
            m->cut = true;
        } else {
            for (int32_t a = 0; a < g->rule_nalt[r]; a++) {
                t[base] = g->alts[g->rule_alt0[r] + a];
                expand(m, d, t, base + 1, depth + 1);
            }
        }
        t[len - 1] = top;
        return;
    }
    }
}

static void sset_clear(sset *s) { s->n = 0, s->count = 0; }

ts_gmatch *ts_gmatch_new(const ts_grammar *g, ts_err *err) {
    ts_gmatch *m = calloc(1, sizeof *m);
    if (!m || !(m->tmp = malloc(MAX_STACK_LEN * sizeof *m->tmp))) {
        free(m);
        ts_err_set(err, "grammar: out of memory");
        return NULL;
    }
    m->g = g;
    ts_gmatch_reset(m);
    return m;
}

void ts_gmatch_free(ts_gmatch *m) {
    if (!m) return;
    for (int i = 0; i < 3; i++) free(m->s[i].v);
    free(m->tmp);
    free(m);
}

void ts_gmatch_reset(ts_gmatch *m) {
    const ts_grammar *g = m->g;
    m->cur = 0;
    m->npend = m->need = 0;
    m->work = 0;
    m->cut = false;
    sset_clear(&m->s[0]);
    for (int32_t a = 0; a < g->rule_nalt[g->root]; a++) {
        m->tmp[0] = g->alts[g->rule_alt0[g->root] + a];
        expand(m, &m->s[0], m->tmp, 1, 0);
    }
    m->overflow = m->cut;
}

/* d = the stacks of src advanced by code point cp */
static void step(ts_gmatch *m, const sset *src, sset *d, uint32_t cp) {
    sset_clear(d);
    m->work = 0;
    for (size_t i = 0; i < src->n; i += (size_t)src->v[i] + 1) {
        const int len = src->v[i];
        if (len == 0) continue;
        const int32_t top = src->v[i + (size_t)len];
        if (!cls_has(m->g, (int32_t)VAL(m->g->el[top]), cp)) continue;
        memcpy(m->tmp, src->v + i + 1, (size_t)len * sizeof *m->tmp);
        m->tmp[len - 1] = top + 1;
        expand(m, d, m->tmp, len, 0);
    }
}

/* Code points an incomplete sequence may still become. */
static void pend_range(const uint8_t *b, int n, int need, uint32_t *lo, uint32_t *hi) {
    uint32_t v = need == 2 ? b[0] & 0x1F : need == 3 ? b[0] & 0x0F : b[0] & 0x07;
    uint32_t l = v, h = v;
    for (int i = 1; i < need; i++) {
        l = (l << 6) | (i < n ? b[i] & 0x3Fu : 0);
        h = (h << 6) | (i < n ? b[i] & 0x3Fu : 0x3F);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    *lo = l < min_cp[need] ? min_cp[need] : l;
    *hi = h > 0x10FFFF ? 0x10FFFF : h;
}

static bool any_top_meets(const ts_gmatch *m, const sset *s, uint32_t lo, uint32_t hi) {
    for (size_t i = 0; i < s->n; i += (size_t)s->v[i] + 1) {
        const int len = s->v[i];
        if (len && cls_meets(m->g, (int32_t)VAL(m->g->el[s->v[i + (size_t)len]]), lo, hi)) return true;
    }
    return false;
}

/* Runs the bytes from the current state; on success with commit, they
 * become the state. */
static bool run(ts_gmatch *m, const char *bytes, size_t n, bool commit) {
    const unsigned char *b = (const unsigned char *)bytes;
    uint8_t pend[4];
    int npend = m->npend, need = m->need;
    memcpy(pend, m->pend, sizeof pend);
    int src = m->cur, a = (m->cur + 1) % 3, bb = (m->cur + 2) % 3;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp;
        const unsigned c = b[i];
        if (npend == 0) {
            if (c < 0x80) {
                cp = c;
            } else {
                need = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
                if (!need) return false;
                pend[0] = (uint8_t)c;
                npend = 1;
                continue;
            }
        } else {
            if ((c & 0xC0) != 0x80) return false;
            pend[npend++] = (uint8_t)c;
            if (npend < need) continue;
            uint32_t lo, hi;
            pend_range(pend, npend, need, &lo, &hi);
            cp = lo;
            if (lo != hi || (cp >= 0xD800 && cp <= 0xDFFF)) return false; /* overlong, surrogate, > U+10FFFF */
            npend = 0;
        }
        sset *d = &m->s[src == m->cur ? a : (src == a ? bb : a)];
        m->cut = false;
        step(m, &m->s[src], d, cp);
        if (m->cut) { /* cut short: not a trustworthy answer */
            m->overflow = true;
            return false;
        }
        if (d->count == 0) return false;
        src = (int)(d - m->s);
    }
    if (npend) {
        uint32_t lo, hi;
        pend_range(pend, npend, need, &lo, &hi);
        if (lo > hi || !any_top_meets(m, &m->s[src], lo, hi)) return false;
    }
    if (commit) {
        m->cur = src;
        m->npend = npend;
        m->need = need;
        memcpy(m->pend, pend, sizeof pend);
    }
    return true;
}

bool ts_gmatch_check(ts_gmatch *m, const char *b, size_t n) { return run(m, b, n, false); }
bool ts_gmatch_accept(ts_gmatch *m, const char *b, size_t n) { return run(m, b, n, true); }

bool ts_gmatch_can_end(const ts_gmatch *m) {
    const sset *s = &m->s[m->cur];
    if (m->npend) return false;
    for (size_t i = 0; i < s->n; i += (size_t)s->v[i] + 1)
        if (s->v[i] == 0) return true;
    return false;
}

bool ts_gmatch_done(const ts_gmatch *m) { return m->s[m->cur].count == 1 && ts_gmatch_can_end(m); }

int ts_gmatch_n_stacks(const ts_gmatch *m) { return m->s[m->cur].count; }
bool ts_gmatch_overflow(const ts_gmatch *m) { return m->overflow; }

void ts_gmatch_first_bytes(const ts_gmatch *m, uint8_t first[256]) {
    memset(first, 0, 256);
    if (m->npend) {
        memset(first + 0x80, 1, 0x40); /* continuation bytes; run() checks the rest */
        return;
    }
    const sset *s = &m->s[m->cur];
    for (size_t i = 0; i < s->n; i += (size_t)s->v[i] + 1) {
        const int len = s->v[i];
        if (!len) continue;
        const int32_t c = (int32_t)VAL(m->g->el[s->v[i + (size_t)len]]);
        for (uint32_t x = 0; x < 0x80; x++)
            if (!first[x] && cls_has(m->g, c, x)) first[x] = 1;
        for (uint32_t x = 0xC2; x <= 0xF4; x++) {
            if (first[x]) continue;
            uint32_t lo, hi;
            const uint8_t lead = (uint8_t)x;
            pend_range(&lead, 1, x <= 0xDF ? 2 : x <= 0xEF ? 3 : 4, &lo, &hi);
            if (lo <= hi && cls_meets(m->g, c, lo, hi)) first[x] = 1;
        }
    }
}
