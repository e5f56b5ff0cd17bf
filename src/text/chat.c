/* chat.c - native renderers for the ChatML, Gemma and Llama 3 chat templates
 * (see chat.h for what each family does and how BOS is handled). */
#include "text/chat.h"

#include <stdlib.h>
#include <string.h>

struct ts_chat_template {
    enum ts_chat_family family;
    bool wants_bos;
    char *default_system; /* ChatML only; NULL when the template injects none */
};

enum ts_chat_family ts_chat_detect(const char *jinja) {
    if (!jinja) return TS_CHAT_NONE;
    if (strstr(jinja, "<|im_start|>")) return TS_CHAT_CHATML;
    if (strstr(jinja, "<start_of_turn>")) return TS_CHAT_GEMMA;
    if (strstr(jinja, "<|start_header_id|>")) return TS_CHAT_LLAMA3;
    return TS_CHAT_NONE;
}

const char *ts_chat_family_name(enum ts_chat_family f) {
    switch (f) {
    case TS_CHAT_CHATML: return "chatml";
    case TS_CHAT_GEMMA: return "gemma";
    case TS_CHAT_LLAMA3: return "llama3";
    default: return "none";
    }
}

int ts_chat_family_parse(const char *name, enum ts_chat_family *out, ts_err *err) {
    static const enum ts_chat_family all[] = {TS_CHAT_CHATML, TS_CHAT_GEMMA, TS_CHAT_LLAMA3};
    for (size_t i = 0; name && i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(name, ts_chat_family_name(all[i]))) {
            *out = all[i];
            return 0;
        }
    return ts_err_set(err, "chat template '%s' is not one of chatml, gemma, llama3", name ? name : "(null)");
}

/* ChatML templates such as SmolLM2's and Qwen2.5's emit a literal
 *   '<|im_start|>system\n<DEFAULT><|im_end|>\n'
 * when the conversation has no system message. Find such a literal (no Jinja
 * expression inside: no quotes, braces or '+') and unescape it. */
static char *extract_default_system(const char *jinja) {
    static const char head[] = "<|im_start|>system";
    const char *p = jinja;
    while ((p = strstr(p, head)) != NULL) {
        p += sizeof head - 1;
        const char *q = p;
        if (*q == '\n') q += 1;
        else if (q[0] == '\\' && q[1] == 'n') q += 2;
        else continue;
        const char *end = strstr(q, "<|im_end|>");
        if (!end || end == q) continue;
        size_t n = (size_t)(end - q);
        if (memchr(q, '\'', n) || memchr(q, '"', n) || memchr(q, '{', n) || memchr(q, '}', n) ||
            memchr(q, '+', n))
            continue;
        char *out = malloc(n + 1);
        if (!out) return NULL;
        size_t j = 0;
        for (size_t i = 0; i < n; i++) {
            char ch = q[i];
            if (ch == '\\' && i + 1 < n) { /* Jinja string-literal escapes */
                char e = q[++i];
                ch = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
            }
            out[j++] = ch;
        }
        out[j] = '\0';
        return out;
    }
    return NULL;
}

ts_chat_template *ts_chat_template_new(const char *jinja, const char *override_name, ts_err *err) {
    enum ts_chat_family f = TS_CHAT_NONE;
    if (override_name) {
        if (ts_chat_family_parse(override_name, &f, err) < 0) return NULL;
    } else {
        if (!jinja) {
            ts_err_set(err, "the model has no tokenizer.chat_template; choose one with "
                            "--chat-template chatml|gemma|llama3");
            return NULL;
        }
        f = ts_chat_detect(jinja);
        if (f == TS_CHAT_NONE) {
            ts_err_set(err, "unrecognised tokenizer.chat_template (no <|im_start|>, <start_of_turn> or "
                            "<|start_header_id|> marker); choose one with --chat-template chatml|gemma|llama3");
            return NULL;
        }
    }
    ts_chat_template *t = calloc(1, sizeof *t);
    if (!t) {
        ts_err_set(err, "out of memory");
        return NULL;
    }
    t->family = f;
    t->wants_bos = f == TS_CHAT_GEMMA || f == TS_CHAT_LLAMA3 || (jinja && !override_name && strstr(jinja, "bos_token"));
    /* The default system turn is part of the model's own template; an override
     * names a bare family and has none. */
    if (f == TS_CHAT_CHATML && jinja && !override_name) t->default_system = extract_default_system(jinja);
    return t;
}

void ts_chat_template_free(ts_chat_template *t) {
    if (!t) return;
    free(t->default_system);
    free(t);
}

enum ts_chat_family ts_chat_template_family(const ts_chat_template *t) { return t->family; }
bool ts_chat_template_wants_bos(const ts_chat_template *t) { return t->wants_bos; }
const char *ts_chat_template_default_system(const ts_chat_template *t) { return t->default_system; }

const char *ts_chat_end_of_turn(const ts_chat_template *t) {
    switch (t->family) {
    case TS_CHAT_CHATML: return "<|im_end|>";
    case TS_CHAT_GEMMA: return "<end_of_turn>";
    case TS_CHAT_LLAMA3: return "<|eot_id|>";
    default: return "";
    }
}

int32_t ts_chat_end_of_turn_id(const ts_chat_template *t, const ts_tokenizer *tok) {
    const char *s = ts_chat_end_of_turn(t);
    return *s ? ts_tok_find(tok, s) : -1;
}

/* ---- growable output ---- */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

/* ---- Jinja's `trim` filter is Python's str.strip(): Unicode whitespace ---- */

static bool is_py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

/* Decodes one well-formed UTF-8 sequence at s[0..n); returns its length or 0. */
static size_t utf8_at(const unsigned char *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    unsigned char c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || len > n) return 0;
    uint32_t v = c & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

static void sb_trimmed(sbuf *b, const char *s) {
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strlen(s), lo = 0, hi = n;
    uint32_t cp;
    for (size_t k; lo < n && (k = utf8_at(u + lo, n - lo, &cp)) > 0 && is_py_space(cp);) lo += k;
    while (hi > lo) { /* step back to the start of the last sequence */
        size_t st = hi - 1;
        while (st > lo && hi - st < 4 && (u[st] & 0xC0) == 0x80) st--;
        size_t k = utf8_at(u + st, hi - st, &cp);
        if (k != hi - st || !is_py_space(cp)) break;
        hi = st;
    }
    sb_add(b, s + lo, hi - lo);
}

/* ---- renderers ---- */

static void render_chatml(const ts_chat_template *t, sbuf *b, const ts_chat_msg *m, size_t n, bool gen) {
    if (n > 0 && t->default_system && strcmp(m[0].role, "system") != 0) {
        sb_str(b, "<|im_start|>system\n");
        sb_str(b, t->default_system);
        sb_str(b, "<|im_end|>\n");
    }
    for (size_t i = 0; i < n; i++) {
        sb_str(b, "<|im_start|>");
        sb_str(b, m[i].role);
        sb_str(b, "\n");
        sb_str(b, m[i].content);
        sb_str(b, "<|im_end|>\n");
    }
    if (gen) sb_str(b, "<|im_start|>assistant\n");
}

static int render_gemma(sbuf *b, const ts_chat_msg *m, size_t n, bool gen, ts_err *err) {
    const char *prefix = NULL; /* system content, merged into the first turn */
    if (n > 0 && !strcmp(m[0].role, "system")) {
        prefix = m[0].content;
        m++;
        n--;
    }
    for (size_t i = 0; i < n; i++) {
        bool is_user = !strcmp(m[i].role, "user");
        if (is_user != (i % 2 == 0))
            return ts_err_set(err, "gemma chat template: conversation roles must alternate "
                                   "user/assistant/user/assistant/... (message %zu has role '%s')",
                              i + (prefix ? 1 : 0), m[i].role);
        sb_str(b, "<start_of_turn>");
        sb_str(b, !strcmp(m[i].role, "assistant") ? "model" : m[i].role);
        sb_str(b, "\n");
        if (i == 0 && prefix) {
            sb_str(b, prefix);
            sb_str(b, "\n\n");
        }
        sb_trimmed(b, m[i].content);
        sb_str(b, "<end_of_turn>\n");
    }
    if (gen) sb_str(b, "<start_of_turn>model\n");
    return 0;
}

static void render_llama3(sbuf *b, const ts_chat_msg *m, size_t n, bool gen) {
    for (size_t i = 0; i < n; i++) {
        sb_str(b, "<|start_header_id|>");
        sb_str(b, m[i].role);
        sb_str(b, "<|end_header_id|>\n\n");
        sb_trimmed(b, m[i].content);
        sb_str(b, "<|eot_id|>");
    }
    if (gen) sb_str(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

char *ts_chat_render(const ts_chat_template *t, const ts_chat_msg *msgs, size_t n,
                     bool add_generation_prompt, const char *bos_text, size_t *out_len, ts_err *err) {
    for (size_t i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content) {
            ts_err_set(err, "chat message %zu has no %s", i, msgs[i].role ? "content" : "role");
            return NULL;
        }
    sbuf b = {0};
    sb_add(&b, "", 0); /* an empty conversation still yields "" */
    /* Llama 3's template prepends bos_token to the first message only. */
    if (bos_text && t->wants_bos && (t->family != TS_CHAT_LLAMA3 || n > 0)) sb_str(&b, bos_text);
    int rc = 0;
    switch (t->family) {
    case TS_CHAT_CHATML: render_chatml(t, &b, msgs, n, add_generation_prompt); break;
    case TS_CHAT_GEMMA: rc = render_gemma(&b, msgs, n, add_generation_prompt, err); break;
    case TS_CHAT_LLAMA3: render_llama3(&b, msgs, n, add_generation_prompt); break;
    default: rc = ts_err_set(err, "chat template family %d is not renderable", (int)t->family);
    }
    if (rc == 0 && b.oom) rc = ts_err_set(err, "out of memory rendering the chat template");
    if (rc < 0) {
        free(b.p);
        return NULL;
    }
    if (out_len) *out_len = b.len;
    return b.p;
}
