/* cmd_serve.c - `tessera serve`: command-line options of the OpenAI-compatible
 * HTTP server. The server itself is src/server/ (tsrv_run, see serve.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_util.h"
#include "serve.h"

static void serve_usage(FILE *f) {
    fprintf(f,
            "usage: tessera serve -m FILE [options]\n\n"
            "OpenAI-compatible HTTP server: POST /v1/chat/completions, POST /v1/completions\n"
            "(stream: true for Server-Sent Events), GET /v1/models, /health, /metrics,\n"
            "and a chat page at /. A diffusion LLM (llada, dream) is decoded by ts_context_diffuse,\n"
            "its decoder options as extra body fields (docs/SERVER.md).\n\n"
            "options:\n"
            "  -m, --model FILE      GGUF model (required)\n"
            "  --host ADDR           address to bind (default 127.0.0.1: this machine only)\n"
            "  --port N              TCP port (default 8080; 0 picks a free port)\n"
            "  --parallel N          requests generated at once, each with its own KV cache (default 1)\n"
            "  -c, --ctx N           KV capacity per slot in tokens (default: min(trained, 4096))\n"
            "  -t, --threads N       worker threads per slot (default: the physical cores)\n"
            "  --api-key KEY         require 'Authorization: Bearer KEY' (except / and /health)\n"
            "  --max-body BYTES      largest request body (default 1048576); larger gets 413\n"
            "  --max-queue N         requests waiting for a slot before 503 (default 64)\n"
            "  --chat-template NAME  chatml | gemma | llama3 instead of the model's template\n"
            "  --alias NAME          model id reported to clients (default: the file name)\n"
            "  --prefill-device DEV  run prompt prefill on a device (loop, loop:npu, opencl[:N]; see\n"
            "                        `tessera devices`); decode stays on the CPU; the slots share one copy of\n"
            "                        the weights on it. /health says if it opened\n"
            "  --act MODE            exact (default) or q8: the CPU's activation precision (8-bit: faster,\n"
            "                        llama.cpp's precision)\n"
            "  -v, --verbose         also print the library's informational messages\n"
            "every slot streams the layers beyond the budget through two slots of its own:\n" CLI_MEM_HELP);
}

static int parse_long(const char *opt, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "error: %s expects an integer in [%ld, %ld], got '%s'\n", opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_serve(int argc, char **argv) {
    tsrv_config cfg = tsrv_default_config();
    static cli_mem_opts mo = CLI_MEM_INIT; /* outlives tsrv_run: cfg.stream_opts may point into it */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            serve_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            cfg.verbose = true;
            continue;
        }
        if (!strcmp(a, "--no-prefill-routed")) {
            mo.no_routed = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "error: unknown option or missing value: '%s'\n", a);
            serve_usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        long n;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) cfg.model_path = v;
        else if (!strcmp(a, "--host")) cfg.host = v;
        else if (!strcmp(a, "--api-key")) cfg.api_key = v;
        else if (!strcmp(a, "--chat-template")) cfg.chat_template = v;
        else if (!strcmp(a, "--alias")) cfg.alias = v;
        else if (!strcmp(a, "--prefill-device")) cfg.prefill_device = v;
        else if (!strcmp(a, "--act")) {
            if (cli_parse_act(a, v, &cfg.activations)) return 2;
        }
        else if (cli_mem_flag(a)) {
            if (cli_mem_parse(a, v, &mo)) return 2;
        }
        else if (!strcmp(a, "--port")) {
            if (parse_long(a, v, 0, 65535, &n) < 0) return 2;
            cfg.port = (int)n;
        } else if (!strcmp(a, "--parallel")) {
            if (parse_long(a, v, 1, 64, &n) < 0) return 2;
            cfg.parallel = (int)n;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) {
            if (parse_long(a, v, 0, INT32_MAX, &n) < 0) return 2;
            cfg.n_ctx = (int32_t)n;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (parse_long(a, v, 0, 256, &n) < 0) return 2;
            cfg.n_threads = (int32_t)n;
        } else if (!strcmp(a, "--max-body")) {
            if (parse_long(a, v, 64, 1L << 30, &n) < 0) return 2;
            cfg.max_body = (size_t)n;
        } else if (!strcmp(a, "--max-queue")) {
            if (parse_long(a, v, 0, 100000, &n) < 0) return 2;
            cfg.max_queue = (int)n;
        } else {
            fprintf(stderr, "error: unknown option '%s'\n", a);
            serve_usage(stderr);
            return 2;
        }
    }
    cfg.mem_budget = mo.mem_budget;
    cfg.n_loaders = mo.n_loaders;
    cfg.stream_opts = cli_mem_stream_opts(&mo);
    if (!cfg.model_path) {
        fprintf(stderr, "error: -m FILE is required\n");
        serve_usage(stderr);
        return 2;
    }
    if (cfg.api_key && !cfg.api_key[0]) {
        fprintf(stderr, "error: --api-key must not be empty\n");
        return 2;
    }
    return tsrv_run(&cfg);
}
