/* serve.h - the contract between `tessera serve` (src/cli/cmd_serve.c, which
 * parses the command line) and the HTTP server (src/server/, which
 * implements tsrv_run). It lives in src/cli because the CLI may include only
 * tessera.h and its own headers; the server, a client of tessera.h too,
 * includes it from here. */
#ifndef TS_CLI_SERVE_H
#define TS_CLI_SERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera.h"

typedef struct tsrv_config {
    const char *model_path;    /* -m */
    const char *host;          /* --host; numeric IPv4/IPv6 or a name; default 127.0.0.1 */
    int port;                  /* --port; 0 picks a free one (printed); default 8080 */
    int parallel;              /* --parallel: generation slots, each its own context */
    int32_t n_ctx;             /* --ctx: KV capacity per slot; 0: library default */
    int32_t n_threads;         /* -t: worker threads per slot; 0: library default */
    const char *api_key;       /* --api-key: NULL means no authentication */
    size_t max_body;           /* --max-body: largest request body in bytes */
    int max_queue;             /* --max-queue: requests waiting for a slot before 503 */
    const char *chat_template; /* --chat-template override, NULL: the model's */
    const char *alias;         /* --alias: model id reported to clients; NULL: file name */
    const char *prefill_device;/* --prefill-device: ts_context_params.prefill_device; NULL: CPU only */
    ts_activations activations;/* --act: ts_context_params.activations */
    bool verbose;              /* -v: library INFO messages too */
    uint64_t mem_budget;       /* --mem-budget: ts_model_params.mem_budget; 0: every weight in memory */
    int32_t n_loaders;         /* --loaders */
    const char *stream_opts;   /* --stream-opts */
} tsrv_config;

/* Defaults for every field (model_path NULL). */
tsrv_config tsrv_default_config(void);

/* Loads the model, starts the slots and the HTTP daemon, serves until
 * SIGINT/SIGTERM, then shuts down cleanly. Returns the process exit status
 * (0 after a clean shutdown; 1 when the model or the socket fails). */
int tsrv_run(const tsrv_config *cfg);

/* A JSON schema (text) as a GBNF grammar whose start rule is "root"
 * (docs/GRAMMAR.md), malloc'ed; NULL with the reason in err (cap bytes). */
char *tsrv_json_schema_text_gbnf(const char *text, char *err, size_t cap);

#endif
