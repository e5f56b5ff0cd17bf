/* cmd_tokenize.c - `tessera tokenize`: shows how a model's tokenizer splits a text.
 *
 *   tessera tokenize -m MODEL.gguf (-p TEXT | -p - | -f FILE) [--ids] [--no-bos] [--no-special]
 *
 * Default output is one line per token: `id<TAB>'piece'`, where piece is the
 * bytes the token stands for, escaped C-style (\n, \t, \\, \', \xNN for other
 * control bytes and for bytes that are not complete UTF-8 on their own).
 * --ids prints the ids as a Python list: [1, 2, 3].
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "gguf/gguf.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tessera tokenize -m MODEL.gguf (-p TEXT | -p - | -f FILE) [options]\n"
            "  Tokenize a text with the model's tokenizer and print the tokens.\n"
            "  -m, --model FILE   GGUF model whose tokenizer to use\n"
            "  -p, --prompt TEXT  text to tokenize ('-' reads standard input)\n"
            "  -f, --file FILE    read the text from FILE\n"
            "  --ids              print only the ids, as a Python list: [1, 2, 3]\n"
            "  --no-bos           do not add BOS/EOS even if the model asks for them\n"
            "  --no-special       treat control-token text (<|im_start|>, <bos>...) as plain text\n"
            "  -h, --help         show this help\n"
            "Default output: one line per token, id<TAB>'piece' (non-printable bytes escaped).\n");
}

/* Reads a whole stream; NULL on error. */
static char *read_all(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    for (;;) {
        if (n == cap) {
            char *nb = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    if (ferror(f)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* Prints bytes between single quotes, escaping what a terminal would not show. */
static void print_piece(const char *p, size_t n) {
    const unsigned char *s = (const unsigned char *)p;
    putchar('\'');
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        if (c >= 0x80) {
            uint32_t cp;
            int r = ts_utf8_next(s + i, n - i, &cp, NULL);
            if (r > 0 && cp >= 0xA0) {
                fwrite(s + i, 1, (size_t)r, stdout);
                i += (size_t)r;
            } else { /* partial, invalid, or a C1 control */
                int k = r > 0 ? r : 1;
                for (int j = 0; j < k; j++) printf("\\x%02x", s[i + (size_t)j]);
                i += (size_t)k;
            }
            continue;
        }
        switch (c) {
        case '\n': fputs("\\n", stdout); break;
        case '\t': fputs("\\t", stdout); break;
        case '\r': fputs("\\r", stdout); break;
        case '\\': fputs("\\\\", stdout); break;
        case '\'': fputs("\\'", stdout); break;
        default:
            if (c < 0x20 || c == 0x7F) printf("\\x%02x", c);
            else putchar((int)c);
        }
        i++;
    }
    putchar('\'');
}

int cli_tokenize(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *file = NULL;
    bool ids_only = false, add_special = true, parse_special = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) {
            model = argv[++i];
        } else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && i + 1 < argc) {
            prompt = argv[++i];
        } else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && i + 1 < argc) {
            file = argv[++i];
        } else if (!strcmp(a, "--ids")) {
            ids_only = true;
        } else if (!strcmp(a, "--no-bos")) {
            add_special = false;
        } else if (!strcmp(a, "--no-special")) {
            parse_special = false;
        } else {
            fprintf(stderr, "tessera tokenize: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!model || (!prompt && !file) || (prompt && file)) {
        fprintf(stderr, "tessera tokenize: need -m MODEL and exactly one of -p TEXT or -f FILE\n");
        usage(stderr);
        return 2;
    }

    char *text = NULL;
    size_t len = 0;
    if (file || !strcmp(prompt, "-")) {
        FILE *f = file ? fopen(file, "rb") : stdin;
        if (!f) {
            perror(file);
            return 1;
        }
        text = read_all(f, &len);
        if (file) fclose(f);
        if (!text) {
            fprintf(stderr, "tessera tokenize: cannot read %s\n", file ? file : "standard input");
            return 1;
        }
    } else {
        len = strlen(prompt);
        text = malloc(len + 1);
        if (!text) return 1;
        memcpy(text, prompt, len + 1);
    }

    ts_err err = {{0}};
    int status = 1;
    int32_t *ids = NULL;
    ts_tokenizer *tok = NULL;
    ts_gguf *g = ts_gguf_open(model, &err);
    if (!g) goto done;
    tok = ts_tokenizer_load(g, &err);
    ts_gguf_close(g); /* the tokenizer keeps copies */
    if (!tok) goto done;

    int64_t n = ts_tokenize(tok, text, len, add_special, parse_special, NULL, 0, &err);
    if (n < 0) goto done;
    ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
    if (!ids) {
        ts_err_set(&err, "out of memory for %lld tokens", (long long)n);
        goto done;
    }
    if (ts_tokenize(tok, text, len, add_special, parse_special, ids, n, &err) != n) goto done;

    if (ids_only) {
        putchar('[');
        for (int64_t i = 0; i < n; i++) printf("%s%d", i ? ", " : "", ids[i]);
        puts("]");
    } else {
        size_t cap = (size_t)ts_tok_max_piece(tok) + 1;
        char *piece = malloc(cap);
        if (!piece) goto done;
        for (int64_t i = 0; i < n; i++) {
            int64_t pl = ts_token_piece(tok, ids[i], true, piece, cap);
            printf("%d\t", ids[i]);
            print_piece(piece, pl > 0 ? (size_t)pl : 0);
            putchar('\n');
        }
        free(piece);
    }
    status = 0;
done:
    if (status) fprintf(stderr, "tessera tokenize: %s\n", err.msg[0] ? err.msg : "failed");
    free(ids);
    ts_tokenizer_free(tok);
    free(text);
    return status;
}
