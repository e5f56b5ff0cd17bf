/* gen_common.h - what `tessera run`, `chat` and `perplexity` share: option
 * parsing and help, and making the model and context from the options. The
 * generation loop itself is the library's (ts_context_generate). */
#ifndef TS_CLI_GEN_COMMON_H
#define TS_CLI_GEN_COMMON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "cli_util.h"
#include "tessera.h"

enum gen_cmd { GEN_RUN, GEN_CHAT, GEN_PPL };

typedef struct gen_opts {
    const char *model;
    const char *prompt;       /* -p */
    const char *file;         /* -f: prompt file (run) or text file (perplexity) */
    const char *system;       /* --system */
    const char *chat_template;/* --chat-template override */
    const char *logits_out;   /* --logits-out */
    bool stats_json;          /* --stats json */
    bool chat;                /* run --chat */
    bool display_prompt;      /* run: echo the prompt first (default on) */
    int32_t n_predict;        /* -n; -1 = until EOS / context full */
    int32_t n_threads, n_ctx, n_batch; /* 0 = library default */
    int32_t chunks;           /* perplexity --chunks; -1 = all */
    bool ctx_set;             /* -c given */
    const char *kld_base;     /* perplexity --kl-divergence-base FILE */
    bool kld;                 /* perplexity --kl-divergence: compare with kld_base */
    bool seed_set;
    ts_sampling_params sp;
    const char *prefill_device; /* --prefill-device, or NULL */
    const char *sched;          /* --sched inorder|ooo, or NULL */
    char device_buf[512];       /* prefill_device with ",sched=" */
    int32_t chunk;              /* --chunk; 0 = library default (256) */
    int32_t prefill_min_tokens; /* --prefill-min-tokens; 0 = library default (32) */
    cli_mem_opts mem;           /* --mem-budget, --loaders, --stream-opts */
    ts_activations act;         /* --act */
    const char *grammar;        /* run --grammar TEXT (GBNF) */
    const char *grammar_file;   /* run --grammar-file FILE */
    const char *json_schema;    /* run --json-schema TEXT|@FILE */
} gen_opts;

/* Parses argv (argv[0] = subcommand). Returns 0 to go on, 1 when --help was
 * printed (exit 0), -1 on a usage error (message printed; exit 2). */
int gen_parse(enum gen_cmd cmd, int argc, char **argv, gen_opts *o);

/* Loads the model and creates a context from the options; prints the error
 * and returns -1 on failure (nothing to free then). */
int gen_load(gen_opts *o, ts_model **m, ts_context **ctx);

/* The prefill-device counters of --stats json as a JSON fragment that
 * continues an object: ,"prefill_dev_tokens":N,...,"device":"loop"|null */
void gen_print_dev_json(FILE *f, const ts_stats *st);

#endif
