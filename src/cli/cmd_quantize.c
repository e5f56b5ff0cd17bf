/* cmd_quantize.c - `tessera quantize IN.gguf OUT.gguf TYPE [-t N]`: rewrites a
 * model's 2-D weight matrices in another element type.
 *
 * Every tensor whose name ends in ".weight", with n_dims == 2 and a row length
 * divisible by TYPE's block size (token_embd included, as llama.cpp does), is
 * dequantized row by row from its stored type to f32 and quantized to TYPE with
 * the reference quantizers of src/quant. Everything else (norms, biases, any
 * 1-D tensor) is copied byte for byte. All metadata is copied; general.file_type
 * is set to TYPE's llama.cpp LLAMA_FTYPE number and general.quantization_version
 * to 2 (ggml's current block format version).
 *
 * Converted tensors are held in memory until the file is written (the output
 * is at most the f32 size of the weights); copied tensors are written straight
 * from the input's mmap.
 */
/* cmd_quantize.c - `tessera quantize IN.gguf OUT.gguf TYPE [-t N]`: rewrites a
 * model's 2-D weight matrices in another element type (ts_quantize; the rules
 * are in include/tessera.h and src/api/quantize.c). Progress lines come
 * through the library's log callback and go to stderr.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "tessera.h"

static void list_targets(FILE *f) {
    for (int i = 0; ts_quantize_type_name(i); i++) fprintf(f, "%s%s", i ? ", " : "", ts_quantize_type_name(i));
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: tessera quantize IN.gguf OUT.gguf TYPE [-t N]\n"
            "  Rewrite every 2-D weight matrix (name ending in .weight, row length a\n"
            "  multiple of TYPE's block size, token_embd included) in TYPE; norms and\n"
            "  other 1-D tensors are copied unchanged. Sets general.file_type.\n"
            "  TYPE             one of: ");
    list_targets(f);
    fprintf(f,
            "\n"
            "  -t, --threads N  worker threads (default: physical cores)\n"
            "  -h, --help       show this help\n");
}

/* Progress and summary lines, as the library words them. */
static void log_stderr(ts_log_level level, const char *msg, void *ud) {
    (void)ud;
    if (level == TS_LOG_INFO) fprintf(stderr, "%s\n", msg);
    else if (level == TS_LOG_WARN) fprintf(stderr, "warning: %s\n", msg);
}

int cli_quantize(int argc, char **argv) {
    const char *pos[3];
    int n_pos = 0, n_threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "tessera quantize: %s needs a value\n", a);
                return 2;
            }
            char *end;
            errno = 0;
            long v = strtol(argv[++i], &end, 10);
            if (errno || *end || end == argv[i] || v < 1 || v > TS_THREADS_MAX) {
                fprintf(stderr, "tessera quantize: bad thread count '%s' (expected 1..%d)\n", argv[i],
                        TS_THREADS_MAX);
                return 2;
            }
            n_threads = (int)v;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "tessera quantize: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (n_pos < 3) {
            pos[n_pos++] = a;
        } else {
            fprintf(stderr, "tessera quantize: unexpected argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (n_pos != 3) {
        fprintf(stderr, "tessera quantize: expected IN.gguf OUT.gguf TYPE\n");
        usage(stderr);
        return 2;
    }
    const char *in_path = pos[0], *out_path = pos[1], *type_name = pos[2];

    int ti = 0;
    while (ts_quantize_type_name(ti) && strcasecmp(ts_quantize_type_name(ti), type_name) != 0) ti++;
    if (!ts_quantize_type_name(ti)) {
        fprintf(stderr, "tessera quantize: unknown output type '%s'; accepted: ", type_name);
        list_targets(stderr);
        fprintf(stderr, "\n");
        return 2;
    }

    ts_quantize_params qp = ts_quantize_default_params();
    qp.n_threads = n_threads;
    qp.log = log_stderr;
    ts_error err;
    ts_status st = ts_quantize(in_path, out_path, type_name, &qp, &err);
    if (st != TS_OK) {
        fprintf(stderr, "tessera quantize: %s\n", err.message);
        return st == TS_ERR_INVALID_ARG ? 2 : 1; /* a bad request is a usage error */
    }
    return 0;
}
