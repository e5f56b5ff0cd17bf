/* chat_render_tool.c - renders a conversation with ts_chat_render for the
 * jinja2 oracle test (tests/test_chat_template_oracle.py).
 *
 * usage: chat_render_tool TEMPLATE_FILE|- FAMILY|- BOS_TEXT|- GEN(0|1) [ROLE CONTENT]...
 *   TEMPLATE_FILE  Jinja source to detect the family from ('-' = none)
 *   FAMILY         --chat-template override ('-' = detect)
 *   BOS_TEXT       text passed as bos_text ('-' = NULL)
 * Writes the rendered bytes to stdout; errors go to stderr with exit 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat.h"

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    return buf;
}

int main(int argc, char **argv) {
    if (argc < 5 || (argc - 5) % 2) {
        fprintf(stderr, "usage: %s TEMPLATE_FILE|- FAMILY|- BOS|- GEN [ROLE CONTENT]...\n", argv[0]);
        return 2;
    }
    char *jinja = strcmp(argv[1], "-") ? slurp(argv[1]) : NULL;
    if (strcmp(argv[1], "-") && !jinja) {
        fprintf(stderr, "cannot read %s\n", argv[1]);
        return 1;
    }
    const char *family = strcmp(argv[2], "-") ? argv[2] : NULL;
    const char *bos = strcmp(argv[3], "-") ? argv[3] : NULL;
    int gen = atoi(argv[4]);
    size_t n = (size_t)(argc - 5) / 2;
    ts_chat_msg *m = calloc(n + 1, sizeof *m);
    for (size_t i = 0; i < n; i++) m[i] = (ts_chat_msg){argv[5 + 2 * i], argv[6 + 2 * i]};
    ts_err err = {{0}};
    ts_chat_template *t = ts_chat_template_new(jinja, family, &err);
    char *out = NULL;
    size_t len = 0;
    if (t) out = ts_chat_render(t, m, n, gen != 0, bos, &len, &err);
    int rc = 0;
    if (!out) {
        fprintf(stderr, "error: %s\n", err.msg);
        rc = 1;
    } else {
        fwrite(out, 1, len, stdout);
    }
    free(out);
    ts_chat_template_free(t);
    free(m);
    free(jinja);
    return rc;
}
