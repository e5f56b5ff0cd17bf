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

#include "cli.h"
#include "cli_util.h"

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

/* Prints bytes between single quotes, escaping what a terminal would not show. */
static void print_piece(const char *p, size_t n) {
    const unsigned char *s = (const unsigned char *)p;
    putchar('\'');
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        if (c >= 0x80) {
            uint32_t cp = 0;
            size_t r = cli_utf8_len(s + i, n - i, &cp);
            if (r > 0 && cp >= 0xA0) {
                fwrite(s + i, 1, r, stdout);
                i += r;
            } else { /* partial, invalid, or a C1 control */
                size_t k = r > 0 ? r : 1;
                for (size_t j = 0; j < k; j++) printf("\\x%02x", s[i + j]);
                i += k;
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
        text = cli_read_stream(f, &len);
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

    ts_error err;
    err.message[0] = '\0';
    int status = 1;
    int32_t *ids = NULL;
    ts_model *m = NULL;
    ts_model_params mp = ts_model_default_params();
    mp.vocab_only = true; /* the tokenizer is all this needs */
    mp.log = cli_log;
    if (ts_model_load(model, &mp, &m, &err) != TS_OK) goto done;

    int64_t n = 0;
    if (ts_model_tokenize(m, text, len, add_special, parse_special, NULL, 0, &n, &err) != TS_OK) goto done;
    ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
    if (!ids) {
        snprintf(err.message, sizeof err.message, "out of memory for %lld tokens", (long long)n);
        goto done;
    }
    int64_t n2 = 0;
    if (ts_model_tokenize(m, text, len, add_special, parse_special, ids, n, &n2, &err) != TS_OK) goto done;
    if (n2 != n) {
        snprintf(err.message, sizeof err.message, "inconsistent token count");
        goto done;
    }

    if (ids_only) {
        putchar('[');
        for (int64_t i = 0; i < n; i++) printf("%s%d", i ? ", " : "", ids[i]);
        puts("]");
    } else {
        ts_model_info info = TS_STRUCT_INIT(ts_model_info);
        ts_model_get_info(m, &info);
        size_t cap = (size_t)info.max_token_bytes + 1;
        char *piece = malloc(cap);
        if (!piece) goto done;
        for (int64_t i = 0; i < n; i++) {
            size_t pl = 0;
            if (ts_model_token_piece(m, ids[i], true, piece, cap, &pl, NULL) != TS_OK || pl > cap) pl = 0;
            printf("%d\t", ids[i]);
            print_piece(piece, pl);
            putchar('\n');
        }
        free(piece);
    }
    status = 0;
done:
    if (status) fprintf(stderr, "tessera tokenize: %s\n", err.message[0] ? err.message : "failed");
    free(ids);
    ts_model_free(m);
    free(text);
    return status;
}
