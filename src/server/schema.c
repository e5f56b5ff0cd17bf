/* schema.c - JSON Schema -> GBNF (docs/GRAMMAR.md), for response_format
 * json_schema, forced tool calls and `tessera run --json-schema`.
 *
 * Each schema node becomes a rule; the grammar's whitespace is bounded (one
 * space, or a newline and up to 20 spaces or tabs) so that a model cannot
 * spend its budget on indentation. Supported: type (one or a list), enum,
 * const, properties / required / additionalProperties, items / prefixItems
 * / minItems / maxItems, minLength / maxLength, anyOf / oneOf (as anyOf: a
 * grammar cannot enforce "exactly one"), a one-element allOf, $ref to
 * #/$defs/... or #/definitions/... (recursive structures work; a cycle that
 * matches nothing first is left recursion and refused), and the annotations
 * (title, description, default, examples, $schema, $id, $comment). Any
 * other keyword is refused with its name rather than ignored, since the
 * output would then not honour it.
 *
 * Objects list the required properties first, then the optional ones, each
 * group in the schema's order; an optional property may be left out.
 * additionalProperties false is the default when properties are given (as
 * llama.cpp and OpenAI's strict mode do); true or a schema allows extra
 * keys after the listed ones. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv.h"

#define MAX_DEPTH 32
#define MAX_RULES 2000
#define MAX_ENUM 1024
#define MAX_LITERAL 4096 /* bytes of one enum / const value */
#define MAX_REP 1000     /* the grammar's x{m,n} limit */

const char tsrv_json_gbnf_common[] =
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n"
    "json-char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
    "json-string ::= \"\\\"\" json-char* \"\\\"\" ws\n"
    "json-int ::= \"-\"? ([0-9] | [1-9] [0-9]{1,15})\n"
    "json-integer ::= json-int ws\n"
    "json-number ::= json-int (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,4})? ws\n"
    "json-boolean ::= (\"true\" | \"false\") ws\n"
    "json-null ::= \"null\" ws\n"
    "json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null\n"
    "json-object ::= \"{\" ws ( json-string \":\" ws json-value (\",\" ws json-string \":\" ws json-value)* )? "
    "\"}\" ws\n"
    "json-array ::= \"[\" ws ( json-value (\",\" ws json-value)* )? \"]\" ws\n";

typedef struct conv {
    tsrv_buf out;
    const char *prefix; /* of every rule name */
    const json_t *root;
    int n_rules;
    struct {
        char *ref;
        char name[32];
    } refs[256];
    int n_refs;
    tsrv_error *e;
} conv;

static int emit(conv *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int emit(conv *c, const char *fmt, ...) {
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return -1;
    if ((size_t)n < sizeof small) return tsrv_buf_add(&c->out, small, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big) return -1;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    int rc = tsrv_buf_add(&c->out, big, (size_t)n);
    free(big);
    return rc;
}

static int oom(conv *c) { return tsrv_fail(c->e, 500, TSRV_E_INTERNAL, NULL, "out of memory converting the schema"); }

static int bad(conv *c, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(conv *c, const char *path, const char *fmt, ...) {
    char m[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    return tsrv_fail(c->e, 400, TSRV_E_UNSUPPORTED, NULL, "json schema at %s: %s", path[0] ? path : "(root)", m);
}

static int new_rule(conv *c, char *name, size_t cap) {
    if (c->n_rules >= MAX_RULES)
        return tsrv_fail(c->e, 400, TSRV_E_INVALID_VALUE, NULL, "json schema: more than %d rules (too large)",
                         MAX_RULES);
    snprintf(name, cap, "%ss%d", c->prefix, c->n_rules++);
    return 0;
}

/* A JSON value as a GBNF literal ("..." with the grammar's escapes). */
static int literal(conv *c, const json_t *v, const char *path) {
    char *j = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!j) return oom(c);
    size_t n = strlen(j);
    if (n > MAX_LITERAL) {
        free(j);
        return bad(c, path, "an enum or const value of %zu bytes (at most %d)", n, MAX_LITERAL);
    }
    int rc = tsrv_buf_add(&c->out, "\"", 1);
    for (size_t i = 0; i < n && !rc; i++) {
        unsigned char ch = (unsigned char)j[i];
        if (ch == '"' || ch == '\\') rc = emit(c, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7F) rc = emit(c, "\\x%02X", ch);
        else rc = tsrv_buf_add(&c->out, (const char *)&ch, 1);
    }
    free(j);
    if (rc || tsrv_buf_add(&c->out, "\"", 1)) return oom(c);
    return 0;
}

static bool is_annotation(const char *k) {
    static const char *const a[] = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
                                    "deprecated", "readOnly", "writeOnly", NULL};
    for (int i = 0; a[i]; i++)
        if (!strcmp(a[i], k)) return true;
    return false;
}

static int gen(conv *c, const json_t *s, const char *path, int depth, char *name, size_t cap);

static void child_path(char *dst, size_t cap, const char *path, const char *part) {
    snprintf(dst, cap, "%s/%s", path, part);
}

static int want_count(conv *c, const json_t *s, const char *key, const char *path, long long *out) {
    const json_t *v = json_object_get(s, key);
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return tsrv_fail(c->e, 400, TSRV_E_INVALID_VALUE, NULL, "json schema at %s: '%s' must be a non-negative integer",
                         path[0] ? path : "(root)", key);
    *out = (long long)json_integer_value(v);
    return 0;
}

/* {m,n} of the grammar (n < 0: unbounded); a maximum above the grammar's
 * limit is cut to it (stricter, so every output still validates). */
static void rep(char *dst, size_t cap, long long m, long long n) {
    if (n > MAX_REP) n = MAX_REP;
    if (m > n && n >= 0) m = n;
    if (n < 0) snprintf(dst, cap, "{%lld,}", m);
    else snprintf(dst, cap, "{%lld,%lld}", m, n);
}

static int gen_object(conv *c, const json_t *s, const char *path, int depth, const char *name) {
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required"),
                 *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return bad(c, path, "'properties' must be an object");
    if (req && !json_is_array(req)) return bad(c, path, "'required' must be an array of names");
    if (addl && !json_is_boolean(addl) && !json_is_object(addl))
        return bad(c, path, "'additionalProperties' must be a boolean or a schema");
    if (!props || json_object_size(props) == 0) {
        if (addl && json_is_false(addl)) return emit(c, "%s ::= \"{\" ws \"}\" ws\n", name) ? oom(c) : 0;
        if (!addl || json_is_true(addl)) return emit(c, "%s ::= json-object\n", name) ? oom(c) : 0;
    }
    size_t np = props ? json_object_size(props) : 0;
    char(*kv)[32] = calloc(np ? np : 1, sizeof *kv);
    bool *is_req = calloc(np ? np : 1, sizeof *is_req);
    int rc = 0;
    if (!kv || !is_req) {
        rc = oom(c);
        goto done;
    }
    size_t i = 0;
    const char *key;
    json_t *ps;
    if (req) {
        size_t ri;
        json_t *rn;
        json_array_foreach(req, ri, rn) {
            if (!json_is_string(rn)) {
                rc = bad(c, path, "'required' must hold property names");
                goto done;
            }
            if (!props || !json_object_get(props, json_string_value(rn))) {
                rc = bad(c, path, "'required' names '%.60s', which is not in 'properties'", json_string_value(rn));
                goto done;
            }
        }
    }
    if (props) {
        json_object_foreach((json_t *)props, key, ps) {
            char sub[256], vname[32];
            child_path(sub, sizeof sub, path, key);
            if ((rc = gen(c, ps, sub, depth + 1, vname, sizeof vname)) < 0) goto done;
            if ((rc = new_rule(c, kv[i], sizeof kv[i])) < 0) goto done;
            json_t *kj = json_string(key);
            if (!kj || emit(c, "%s ::= ", kv[i]) || literal(c, kj, sub) < 0 || emit(c, " ws \":\" ws %s\n", vname)) {
                json_decref(kj);
                rc = c->e->http_status ? -1 : oom(c);
                goto done;
            }
            json_decref(kj);
            if (req) {
                size_t ri;
                json_t *rn;
                json_array_foreach(req, ri, rn) if (!strcmp(json_string_value(rn), key)) is_req[i] = true;
            }
            i++;
        }
    }
    /* extra keys: after the listed ones, when allowed */
    char extra[32] = "";
    if (addl && !json_is_false(addl)) {
        char vname[32];
        if (json_is_true(addl)) snprintf(vname, sizeof vname, "json-value");
        else if ((rc = gen(c, addl, path, depth + 1, vname, sizeof vname)) < 0) goto done;
        if ((rc = new_rule(c, extra, sizeof extra)) < 0) goto done;
        if (emit(c, "%s ::= json-string \":\" ws %s\n", extra, vname)) {
            rc = oom(c);
            goto done;
        }
    }
    /* the optional ones, in order, each may be left out: C_k ::= ("," ws kv_k)? C_(k+1) */
    char tail[32] = "";
    if (extra[0]) {
        if ((rc = new_rule(c, tail, sizeof tail)) < 0) goto done;
        if (emit(c, "%s ::= (\",\" ws %s)*\n", tail, extra)) {
            rc = oom(c);
            goto done;
        }
    }
    char next[32];
    snprintf(next, sizeof next, "%s", tail);
    char(*chain)[32] = calloc(np + 1, sizeof *chain); /* chain[k]: the rule from optional k on */
    if (!chain) {
        rc = oom(c);
        goto done;
    }
    for (size_t k = np; k-- > 0;) {
        if (is_req[k]) continue;
        if ((rc = new_rule(c, chain[k], sizeof chain[k])) < 0) break;
        if (emit(c, "%s ::= (\",\" ws %s)? %s\n", chain[k], kv[k], next)) {
            rc = oom(c);
            break;
        }
        snprintf(next, sizeof next, "%s", chain[k]);
    }
    if (rc < 0) {
        free(chain);
        goto done;
    }
    /* body: the required ones in order, then the optional chain; without a
     * required one, the first present property has no comma before it */
    int err = emit(c, "%s ::= \"{\" ws ", name);
    bool first = true;
    for (size_t k = 0; k < np && !err; k++)
        if (is_req[k]) {
            err = emit(c, "%s%s ", first ? "" : "\",\" ws ", kv[k]);
            first = false;
        }
    if (!first) {
        err = err || emit(c, "%s ", next);
    } else {
        /* ( kv_a C_(a+1) | kv_b C_(b+1) | ... | extra tail )? */
        err = err || emit(c, "( ");
        bool alt = false;
        for (size_t k = 0; k < np && !err; k++) {
            const char *after = "";
            for (size_t q = k + 1; q < np; q++)
                if (!is_req[q]) {
                    after = chain[q];
                    break;
                }
            if (!after[0]) after = tail;
            err = emit(c, "%s%s %s ", alt ? "| " : "", kv[k], after);
            alt = true;
        }
        if (extra[0] && !err) err = emit(c, "%s%s %s ", alt ? "| " : "", extra, tail);
        err = err || emit(c, ")? ");
    }
    err = err || emit(c, "\"}\" ws\n");
    free(chain);
    if (err) rc = oom(c);
done:
    free(kv), free(is_req);
    return rc < 0 ? -1 : 0;
}

static int gen_array(conv *c, const json_t *s, const char *path, int depth, const char *name) {
    const json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    long long mn = 0, mx = -1;
    if (want_count(c, s, "minItems", path, &mn) < 0 || want_count(c, s, "maxItems", path, &mx) < 0) return -1;
    if (mx >= 0 && mn > mx) return bad(c, path, "minItems %lld is above maxItems %lld", mn, mx);
    char sub[256];
    if (prefix) {
        if (!json_is_array(prefix) || json_array_size(prefix) == 0)
            return bad(c, path, "'prefixItems' must be a non-empty array of schemas");
        if (items && !json_is_false(items)) return bad(c, path, "'items' beside 'prefixItems' is not supported");
        if (json_object_get(s, "minItems") || json_object_get(s, "maxItems"))
            return bad(c, path, "minItems / maxItems beside 'prefixItems' are not supported");
        size_t k;
        json_t *it;
        char names[64][32];
        if (json_array_size(prefix) > 64) return bad(c, path, "more than 64 prefixItems");
        json_array_foreach(prefix, k, it) {
            char part[32];
            snprintf(part, sizeof part, "prefixItems/%zu", k);
            child_path(sub, sizeof sub, path, part);
            if (gen(c, it, sub, depth + 1, names[k], sizeof names[k]) < 0) return -1;
        }
        int err = emit(c, "%s ::= \"[\" ws ", name);
        for (k = 0; k < json_array_size(prefix) && !err; k++) err = emit(c, "%s%s ", k ? "\",\" ws " : "", names[k]);
        err = err || emit(c, "\"]\" ws\n");
        return err ? oom(c) : 0;
    }
    char item[32];
    if (!items || json_is_true(items)) {
        snprintf(item, sizeof item, "json-value");
    } else if (json_is_false(items)) {
        return emit(c, "%s ::= \"[\" ws \"]\" ws\n", name) ? oom(c) : 0;
    } else {
        child_path(sub, sizeof sub, path, "items");
        if (gen(c, items, sub, depth + 1, item, sizeof item) < 0) return -1;
    }
    char r[48];
    if (mn == 0) {
        if (mx == 0) return emit(c, "%s ::= \"[\" ws \"]\" ws\n", name) ? oom(c) : 0;
        rep(r, sizeof r, 0, mx < 0 ? -1 : mx - 1);
        return emit(c, "%s ::= \"[\" ws ( %s (\",\" ws %s)%s )? \"]\" ws\n", name, item, item, r) ? oom(c) : 0;
    }
    rep(r, sizeof r, mn - 1, mx < 0 ? -1 : mx - 1);
    return emit(c, "%s ::= \"[\" ws %s (\",\" ws %s)%s \"]\" ws\n", name, item, item, r) ? oom(c) : 0;
}

static int gen_string(conv *c, const json_t *s, const char *path, const char *name) {
    long long mn = 0, mx = -1;
    if (want_count(c, s, "minLength", path, &mn) < 0 || want_count(c, s, "maxLength", path, &mx) < 0) return -1;
    if (mx >= 0 && mn > mx) return bad(c, path, "minLength %lld is above maxLength %lld", mn, mx);
    if (mn > MAX_REP) return bad(c, path, "minLength %lld is above %d", mn, MAX_REP);
    if (mn == 0 && mx < 0) return emit(c, "%s ::= json-string\n", name) ? oom(c) : 0;
    char r[48];
    rep(r, sizeof r, mn, mx);
    return emit(c, "%s ::= \"\\\"\" json-char%s \"\\\"\" ws\n", name, r) ? oom(c) : 0;
}

/* #/$defs/X or #/definitions/X (with ~0 ~1 escapes) -> the schema node */
static const json_t *resolve(conv *c, const char *ref) {
    if (strncmp(ref, "#/", 2)) return NULL;
    const json_t *node = c->root;
    char part[256];
    const char *p = ref + 2;
    while (*p && node) {
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof part) {
            if (p[0] == '~' && (p[1] == '0' || p[1] == '1')) {
                part[n++] = p[1] == '0' ? '~' : '/';
                p += 2;
            } else {
                part[n++] = *p++;
            }
        }
        part[n] = '\0';
        if (*p == '/') p++;
        node = json_is_object(node) ? json_object_get(node, part) : NULL;
    }
    return node;
}

static int gen(conv *c, const json_t *s, const char *path, int depth, char *name, size_t cap) {
    if (depth > MAX_DEPTH) return bad(c, path, "nested deeper than %d", MAX_DEPTH);
    if (json_is_true(s) || (json_is_object(s) && json_object_size(s) == 0)) {
        snprintf(name, cap, "json-value");
        return 0;
    }
    if (!json_is_object(s)) return bad(c, path, "a schema must be an object or true");
    /* every keyword must be one we honour */
    static const char *const known[] = {"type", "enum", "const", "properties", "required", "additionalProperties",
                                        "items", "prefixItems", "minItems", "maxItems", "minLength", "maxLength",
                                        "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions", NULL};
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)s, key, v) {
        bool ok = is_annotation(key);
        for (int i = 0; known[i] && !ok; i++) ok = !strcmp(known[i], key);
        if (!ok) return bad(c, path, "the keyword '%.60s' is not supported", key);
    }
    const json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        if (!json_is_string(ref)) return bad(c, path, "'$ref' must be a string");
        if (json_object_size(s) > 1) {
            json_object_foreach((json_t *)s, key, v) if (strcmp(key, "$ref") && !is_annotation(key) &&
                                                         strcmp(key, "$defs") && strcmp(key, "definitions"))
                return bad(c, path, "keywords beside '$ref' ('%.60s') are not supported", key);
        }
        const char *r = json_string_value(ref);
        for (int i = 0; i < c->n_refs; i++)
            if (!strcmp(c->refs[i].ref, r)) {
                snprintf(name, cap, "%s", c->refs[i].name);
                return 0;
            }
        const json_t *target = resolve(c, r);
        if (!target) return bad(c, path, "'$ref' '%.80s' does not resolve (only local #/... references)", r);
        if (c->n_refs >= (int)(sizeof c->refs / sizeof c->refs[0])) return bad(c, path, "more than 256 $refs");
        /* named before its body, so a recursive reference finds it */
        int k = c->n_refs++;
        if (!(c->refs[k].ref = strdup(r))) return oom(c);
        if (new_rule(c, c->refs[k].name, sizeof c->refs[k].name) < 0) return -1;
        char body[32];
        if (gen(c, target, r + 1, depth + 1, body, sizeof body) < 0) return -1;
        if (emit(c, "%s ::= %s\n", c->refs[k].name, body)) return oom(c);
        snprintf(name, cap, "%s", c->refs[k].name);
        return 0;
    }
    if (new_rule(c, name, cap) < 0) return -1;
    char sub[256];
    const json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (en || cn) {
        if (en && (!json_is_array(en) || json_array_size(en) == 0)) return bad(c, path, "'enum' must be a non-empty array");
        if (en && json_array_size(en) > MAX_ENUM)
            return bad(c, path, "'enum' has %zu values (at most %d)", json_array_size(en), MAX_ENUM);
        if (emit(c, "%s ::= (", name)) return oom(c);
        if (cn) {
            if (literal(c, cn, path) < 0) return -1;
        } else {
            size_t i;
            json_t *it;
            json_array_foreach(en, i, it) {
                if ((i && emit(c, " | ")) || literal(c, it, path) < 0) return c->e->http_status ? -1 : oom(c);
            }
        }
        return emit(c, ") ws\n") ? oom(c) : 0;
    }
    const json_t *any = json_object_get(s, "anyOf"), *one = json_object_get(s, "oneOf"),
                 *all = json_object_get(s, "allOf");
    if (all) {
        if (!json_is_array(all) || json_array_size(all) != 1)
            return bad(c, path, "'allOf' with more than one schema is not supported");
        char inner[32];
        child_path(sub, sizeof sub, path, "allOf/0");
        if (gen(c, json_array_get(all, 0), sub, depth + 1, inner, sizeof inner) < 0) return -1;
        return emit(c, "%s ::= %s\n", name, inner) ? oom(c) : 0;
    }
    if (any || one) {
        const json_t *list = any ? any : one;
        if (!json_is_array(list) || json_array_size(list) == 0)
            return bad(c, path, "'%s' must be a non-empty array of schemas", any ? "anyOf" : "oneOf");
        if (json_array_size(list) > 64) return bad(c, path, "more than 64 alternatives");
        char alts[64][32];
        size_t i;
        json_t *it;
        json_array_foreach(list, i, it) {
            char part[32];
            snprintf(part, sizeof part, "%s/%zu", any ? "anyOf" : "oneOf", i);
            child_path(sub, sizeof sub, path, part);
            if (gen(c, it, sub, depth + 1, alts[i], sizeof alts[i]) < 0) return -1;
        }
        int err = emit(c, "%s ::= ", name);
        for (i = 0; i < json_array_size(list) && !err; i++) err = emit(c, "%s%s", i ? " | " : "", alts[i]);
        return err || emit(c, "\n") ? oom(c) : 0;
    }
    const json_t *type = json_object_get(s, "type");
    if (!type) { /* no type: infer from the keywords, else any value */
        if (json_object_get(s, "properties") || json_object_get(s, "additionalProperties"))
            return gen_object(c, s, path, depth, name);
        if (json_object_get(s, "items") || json_object_get(s, "prefixItems")) return gen_array(c, s, path, depth, name);
        return emit(c, "%s ::= json-value\n", name) ? oom(c) : 0;
    }
    if (json_is_array(type)) { /* a union of types: one rule per type */
        if (json_array_size(type) == 0 || json_array_size(type) > 7) return bad(c, path, "'type' list of 1..7 names");
        char alts[7][32];
        size_t i;
        json_t *t;
        json_array_foreach(type, i, t) {
            json_t *one_t = json_deep_copy(s);
            if (!one_t) return oom(c);
            json_object_set(one_t, "type", t);
            int rc = gen(c, one_t, path, depth + 1, alts[i], sizeof alts[i]);
            json_decref(one_t);
            if (rc < 0) return -1;
        }
        int err = emit(c, "%s ::= ", name);
        for (i = 0; i < json_array_size(type) && !err; i++) err = emit(c, "%s%s", i ? " | " : "", alts[i]);
        return err || emit(c, "\n") ? oom(c) : 0;
    }
    if (!json_is_string(type)) return bad(c, path, "'type' must be a string or a list of strings");
    const char *t = json_string_value(type);
    if (!strcmp(t, "object")) return gen_object(c, s, path, depth, name);
    if (!strcmp(t, "array")) return gen_array(c, s, path, depth, name);
    if (!strcmp(t, "string")) return gen_string(c, s, path, name);
    static const struct {
        const char *type, *rule;
    } prim[] = {{"number", "json-number"}, {"integer", "json-integer"}, {"boolean", "json-boolean"},
                {"null", "json-null"}};
    for (size_t i = 0; i < sizeof prim / sizeof prim[0]; i++)
        if (!strcmp(t, prim[i].type)) return emit(c, "%s ::= %s\n", name, prim[i].rule) ? oom(c) : 0;
    return bad(c, path, "unknown type '%.40s'", t);
}

char *tsrv_schema_rules(const json_t *schema, const char *prefix, char *top, size_t cap, tsrv_error *e) {
    conv c = {.root = schema, .e = e, .prefix = prefix};
    memset(e, 0, sizeof *e);
    char *out = NULL;
    if (gen(&c, schema, "", 0, top, cap) == 0 && tsrv_buf_add(&c.out, "", 0) == 0) {
        out = c.out.p ? c.out.p : strdup("");
        c.out.p = NULL;
        if (!out) oom(&c);
    } else if (!e->http_status) {
        oom(&c);
    }
    tsrv_buf_free(&c.out);
    for (int i = 0; i < c.n_refs; i++) free(c.refs[i].ref);
    return out;
}

char *tsrv_schema_gbnf(const json_t *schema, tsrv_error *e) {
    char top[48];
    char *rules = tsrv_schema_rules(schema, "", top, sizeof top, e);
    if (!rules) return NULL;
    tsrv_buf b = {0};
    char root[80];
    snprintf(root, sizeof root, "root ::= %s\n", top);
    char *out = NULL;
    if (!tsrv_buf_add(&b, root, strlen(root)) && !tsrv_buf_add(&b, rules, strlen(rules)) &&
        !tsrv_buf_add(&b, tsrv_json_gbnf_common, sizeof tsrv_json_gbnf_common - 1)) {
        out = b.p;
        b.p = NULL;
    } else {
        tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory converting the schema");
    }
    tsrv_buf_free(&b);
    free(rules);
    if (out) {
        ts_error ge;
        if (ts_grammar_check(out, "root", &ge) != TS_OK) {
            /* what the converter cannot see: a $ref cycle that matches nothing first */
            tsrv_fail(e, 400, TSRV_E_UNSUPPORTED, NULL, "json schema: %s", ge.message);
            free(out);
            out = NULL;
        }
    }
    return out;
}

char *tsrv_json_schema_text_gbnf(const char *text, char *err, size_t cap) {
    json_error_t je;
    json_t *s = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    if (!s) {
        snprintf(err, cap, "the JSON schema is not valid JSON (line %d, column %d: %s)", je.line, je.column, je.text);
        return NULL;
    }
    tsrv_error e;
    char *g = tsrv_schema_gbnf(s, &e);
    json_decref(s);
    if (!g) snprintf(err, cap, "%s", e.message);
    return g;
}
