/* tools.c - OpenAI function calling on the chat endpoint (docs/SERVER.md
 * "Tools").
 *
 * The format is Qwen2.5's (the Hermes format): the tool list goes into the
 * system message as JSON lines between <tools></tools>, the model answers a
 * call as <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, and
 * results come back as <tool_response> blocks in a user turn. These are
 * rendered here as plain messages, so the chat template renders them; for
 * a chatml model whose template has this tool format (Qwen2.5) the prompt is
 * the template's own rendering byte for byte (tests/test_server_tools.py
 * compares with transformers' apply_chat_template). Models whose template
 * has no tool format get the same blocks in their system message.
 *
 * tool_choice "required" or a named function constrains the reply with a
 * grammar (a <tool_call> block whose arguments follow the function's
 * parameter schema), so the arguments always parse; "auto" leaves the model
 * free and parses what it writes; "none" leaves the tools out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv.h"

static const char tools_head[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function "
    "signatures within <tools></tools> XML tags:\n<tools>";
static const char tools_tail[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}}\n</tool_call>";
/* (the doubled braces are in Qwen2.5's prompt as its template writes it:
 * inside a Jinja string literal they are not an expression) */

const char tsrv_tool_open[] = "<tool_call>";

/* JSON as Python's json.dumps writes it by default (", " and ": "), which
 * is what the template's tojson gives: jansson's non-compact output. */
static char *pydump(const json_t *v) { return json_dumps(v, JSON_ENCODE_ANY | JSON_REAL_PRECISION(17)); }

static bool name_ok(const char *n) {
    size_t l = strlen(n);
    if (l == 0 || l > 64) return false;
    for (size_t i = 0; i < l; i++) {
        char c = n[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

int tsrv_tools_parse(tsrv_job *j, const json_t *tools, const json_t *choice, tsrv_error *e) {
    if (!tools || json_is_null(tools)) {
        if (choice && !json_is_null(choice))
            return tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, "tool_choice", "'tool_choice' needs 'tools'");
        return 0;
    }
    if (!json_is_array(tools))
        return tsrv_fail(e, 400, TSRV_E_INVALID_TYPE, "tools", "'tools' must be an array of {\"type\": \"function\", ...}");
    if (json_array_size(tools) > 128) return tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, "tools", "at most 128 tools");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const json_t *type = json_object_get(t, "type"), *fn = json_object_get(t, "function");
        if (!json_is_object(t) || !json_is_string(type) || strcmp(json_string_value(type), "function") ||
            !json_is_object(fn))
            return tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, "tools",
                             "'tools[%zu]' must be {\"type\": \"function\", \"function\": {\"name\", ...}}", i);
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)fn, key, v) if (strcmp(key, "name") && strcmp(key, "description") &&
                                                      strcmp(key, "parameters") && strcmp(key, "strict"))
            return tsrv_fail(e, 400, TSRV_E_UNKNOWN_FIELD, "tools",
                             "unknown field '%.60s' in 'tools[%zu].function' (known: name, description, parameters, "
                             "strict)",
                             key, i);
        const json_t *name = json_object_get(fn, "name");
        if (!json_is_string(name) || !name_ok(json_string_value(name)))
            return tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, "tools",
                             "'tools[%zu].function.name' must be 1 to 64 of a-z, A-Z, 0-9, _ and -", i);
        for (size_t k = 0; k < i; k++)
            if (!strcmp(json_string_value(json_object_get(json_object_get(json_array_get(tools, k), "function"), "name")),
                        json_string_value(name)))
                return tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, "tools", "two tools are named '%s'",
                                 json_string_value(name));
        const json_t *params = json_object_get(fn, "parameters");
        if (params && !json_is_object(params))
            return tsrv_fail(e, 400, TSRV_E_INVALID_TYPE, "tools", "'tools[%zu].function.parameters' must be a schema",
                             i);
    }
    /* tool_choice */
    int mode = 1; /* 0 none, 1 auto, 2 required, 3 named */
    const char *named = NULL;
    if (choice && !json_is_null(choice)) {
        if (json_is_string(choice)) {
            const char *c = json_string_value(choice);
            mode = !strcmp(c, "none") ? 0 : !strcmp(c, "auto") ? 1 : !strcmp(c, "required") ? 2 : -1;
            if (mode < 0)
                return tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, "tool_choice",
                                 "'tool_choice' is '%.40s': expected none, auto, required or {\"type\": \"function\", "
                                 "\"function\": {\"name\": ...}}",
                                 c);
        } else {
            const json_t *fn = json_object_get(choice, "function");
            const json_t *nm = fn ? json_object_get(fn, "name") : NULL;
            if (!json_is_string(nm))
                return tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, "tool_choice",
                                 "'tool_choice' must be a string or {\"type\": \"function\", \"function\": {\"name\": ...}}");
            named = json_string_value(nm);
            mode = 3;
            bool found = false;
            json_array_foreach(tools, i, t) found |=
                !strcmp(json_string_value(json_object_get(json_object_get(t, "function"), "name")), named);
            if (!found) return tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, "tool_choice", "no tool is named '%.64s'", named);
        }
    }
    if (mode == 0) return 0; /* the tools are left out */
    j->tools = json_incref((json_t *)tools);
    j->tools_parse = true;
    if (mode == 1) return 0;
    /* required / named: the reply is one tool call, its arguments following the schema */
    static const char root_open[] = "root ::= \"<tool_call>\\n\" ( ", root_close[] = ") \"\\n</tool_call>\"\n";
    tsrv_buf g = {0}, all_rules = {0};
    int err = tsrv_buf_add(&g, root_open, sizeof root_open - 1);
    int n_alt = 0;
    json_array_foreach(tools, i, t) {
        const json_t *fn = json_object_get(t, "function");
        const char *nm = json_string_value(json_object_get(fn, "name"));
        if (named && strcmp(nm, named)) continue;
        const json_t *params = json_object_get(fn, "parameters");
        char prefix[32];
        snprintf(prefix, sizeof prefix, "t%zu-", i);
        char *rules = NULL, top[48];
        tsrv_error se;
        if (!(rules = tsrv_schema_rules(params ? params : json_true(), prefix, top, sizeof top, &se))) {
            tsrv_buf_free(&g);
            tsrv_buf_free(&all_rules);
            *e = se;
            snprintf(e->param, sizeof e->param, "tools");
            snprintf(e->message, sizeof e->message, "tool '%.64s' parameters: %.290s", nm, se.message);
            return -1;
        }
        char line[256];
        snprintf(line, sizeof line, "%s\"{\\\"name\\\": \\\"%s\\\", \\\"arguments\\\": \" %s \"}\" ", n_alt ? "| " : "",
                 nm, top);
        err |= tsrv_buf_add(&g, line, strlen(line));
        err |= tsrv_buf_add(&all_rules, rules, strlen(rules)); /* they follow the root rule */
        free(rules);
        n_alt++;
    }
    err |= tsrv_buf_add(&g, root_close, sizeof root_close - 1);
    err |= tsrv_buf_add(&g, all_rules.p ? all_rules.p : "", all_rules.len);
    err |= tsrv_buf_add(&g, tsrv_json_gbnf_common, strlen(tsrv_json_gbnf_common));
    tsrv_buf_free(&all_rules);
    if (err) {
        tsrv_buf_free(&g);
        return tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
    }
    ts_error ge;
    if (ts_grammar_check(g.p, "root", &ge) != TS_OK) {
        tsrv_buf_free(&g);
        return tsrv_fail(e, 400, TSRV_E_UNSUPPORTED, "tools", "the tools' parameters: %s", ge.message);
    }
    j->grammar = g.p;
    return 0;
}

char *tsrv_tools_system(const tsrv_server *s, const json_t *tools, const char *system) {
    tsrv_buf b = {0};
    int err = 0;
    if (system) err |= tsrv_buf_add(&b, system, strlen(system));
    else if (s->default_system[0]) err |= tsrv_buf_add(&b, s->default_system, strlen(s->default_system));
    if (b.len) err |= tsrv_buf_add(&b, "\n\n", 2);
    err |= tsrv_buf_add(&b, tools_head, sizeof tools_head - 1);
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char *d = pydump(t);
        err |= !d || tsrv_buf_add(&b, "\n", 1) || tsrv_buf_add(&b, d, strlen(d));
        free(d);
    }
    err |= tsrv_buf_add(&b, tools_tail, sizeof tools_tail - 1);
    if (err) {
        tsrv_buf_free(&b);
        return NULL;
    }
    return b.p;
}

char *tsrv_tools_assistant(const json_t *msg, const char *content, tsrv_error *e, const char *param) {
    const json_t *calls = json_object_get(msg, "tool_calls");
    if (!json_is_array(calls)) {
        tsrv_fail(e, 400, TSRV_E_INVALID_TYPE, param, "'%s.tool_calls' must be an array", param);
        return NULL;
    }
    tsrv_buf b = {0};
    int err = 0;
    if (content && content[0]) err |= tsrv_buf_add(&b, content, strlen(content)) || tsrv_buf_add(&b, "\n", 1);
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        const json_t *fn = json_object_get(c, "function");
        const json_t *nm = fn ? json_object_get(fn, "name") : NULL, *args = fn ? json_object_get(fn, "arguments") : NULL;
        if (!json_is_string(nm) || (args && !json_is_string(args) && !json_is_object(args))) {
            tsrv_buf_free(&b);
            tsrv_fail(e, 400, TSRV_E_INVALID_VALUE, param,
                      "'%s.tool_calls[%zu]' must be {\"id\", \"type\": \"function\", \"function\": {\"name\", "
                      "\"arguments\": a JSON string}}",
                      param, i);
            return NULL;
        }
        /* the template writes the arguments object (tojson); OpenAI sends a JSON string of it */
        json_t *obj = NULL;
        if (json_is_string(args)) obj = json_loads(json_string_value(args), JSON_DECODE_ANY, NULL);
        char *a = pydump(obj ? obj : args ? args : json_object());
        json_decref(obj);
        char head[160];
        snprintf(head, sizeof head, "%s<tool_call>\n{\"name\": \"", i ? "\n" : "");
        err |= !a || tsrv_buf_add(&b, head, strlen(head)) || tsrv_buf_add(&b, json_string_value(nm), json_string_length(nm)) ||
               tsrv_buf_add(&b, "\", \"arguments\": ", 16) || tsrv_buf_add(&b, a, strlen(a)) ||
               tsrv_buf_add(&b, "}\n</tool_call>", 14);
        free(a);
    }
    if (err || !b.p) {
        tsrv_buf_free(&b);
        tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
        return NULL;
    }
    return b.p;
}

/* ---- the reply ---- */

static bool known_tool(const json_t *tools, const char *name) {
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) if (!strcmp(json_string_value(json_object_get(json_object_get(t, "function"), "name")),
                                                name)) return true;
    return false;
}

/* {"name": a known tool, "arguments": {...}} -> an OpenAI tool_call, or NULL */
static json_t *one_call(const json_t *tools, const char *p, size_t n, const char *id) {
    json_t *obj = json_loadb(p, n, 0, NULL);
    const json_t *nm = obj ? json_object_get(obj, "name") : NULL, *args = obj ? json_object_get(obj, "arguments") : NULL;
    json_t *call = NULL;
    if (json_is_string(nm) && known_tool(tools, json_string_value(nm)) && (!args || json_is_object(args))) {
        char *a = json_dumps(args ? args : json_object(), JSON_COMPACT);
        if (a) call = json_pack("{s:s, s:s, s:{s:O, s:s}}", "id", id, "type", "function", "function", "name", nm,
                                "arguments", a);
        free(a);
    }
    json_decref(obj);
    return call;
}

size_t tsrv_tools_parse_reply(const json_t *tools, const char *text, size_t len, json_t **calls_out,
                              const char *id_prefix) {
    *calls_out = NULL;
    json_t *calls = json_array();
    char id[64];
    const char *open = memmem(text, len, tsrv_tool_open, sizeof tsrv_tool_open - 1);
    size_t content_len = open ? (size_t)(open - text) : 0;
    if (!open) {
        /* a reply that is one bare call object (what some models write
         * without the tags): {"name": a known tool, "arguments": {...}} */
        size_t a = 0, b = len;
        while (a < b && strchr(" \n\t\r", text[a])) a++;
        while (b > a && strchr(" \n\t\r", text[b - 1])) b--;
        /* ... also inside one fenced code block (```json ... ```) */
        if (b - a >= 6 && !memcmp(text + a, "```", 3) && !memcmp(text + b - 3, "```", 3)) {
            a += 3;
            b -= 3;
            if (b - a >= 4 && !memcmp(text + a, "json", 4)) a += 4;
            while (a < b && strchr(" \n\t\r", text[a])) a++;
            while (b > a && strchr(" \n\t\r", text[b - 1])) b--;
        }
        snprintf(id, sizeof id, "%s_0", id_prefix);
        json_t *c = b > a && text[a] == '{' ? one_call(tools, text + a, b - a, id) : NULL;
        if (!c) goto plain;
        json_array_append_new(calls, c);
        *calls_out = calls;
        return 0;
    }
    const char *p = open, *end = text + len;
    int k = 0;
    while (p < end) {
        while (p < end && strchr(" \n\t\r", *p)) p++;
        if (p == end) break;
        if ((size_t)(end - p) < sizeof tsrv_tool_open - 1 || memcmp(p, tsrv_tool_open, sizeof tsrv_tool_open - 1))
            goto plain; /* text after a call: not a clean tool-call reply */
        p += sizeof tsrv_tool_open - 1;
        const char *close = memmem(p, (size_t)(end - p), "</tool_call>", 12);
        if (!close) goto plain;
        snprintf(id, sizeof id, "%s_%d", id_prefix, k++);
        json_t *c = one_call(tools, p, (size_t)(close - p), id);
        if (!c) goto plain;
        json_array_append_new(calls, c);
        p = close + 12;
    }
    if (json_array_size(calls) == 0) goto plain;
    while (content_len > 0 && strchr(" \n\t\r", text[content_len - 1])) content_len--;
    *calls_out = calls;
    return content_len;
plain:
    json_decref(calls);
    return len;
}
