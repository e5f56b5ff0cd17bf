/* gen_common.h - what `tessera run`, `chat` and `perplexity` share: option
 * parsing and help, model/state setup, tokenizing, the streaming generation
 * loop, timing and memory counters. */
#ifndef TS_CLI_GEN_COMMON_H
#define TS_CLI_GEN_COMMON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "model/model.h"
#include "text/chat.h"
#include "text/sampler.h"
#include "text/tokenizer.h"

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
    bool seed_set;
    ts_sampler_params sp;
} gen_opts;

/* Parses argv (argv[0] = subcommand). Returns 0 to go on, 1 when --help was
 * printed (exit 0), -1 on a usage error (message printed; exit 2). */
int gen_parse(enum gen_cmd cmd, int argc, char **argv, gen_opts *o);

/* Loads the model and makes a state; prints the error and returns -1 on failure. */
int gen_load(const gen_opts *o, ts_model **m, ts_state **s);

/* Whole file into a NUL-terminated malloc'ed buffer; NULL (message printed) on error. */
char *gen_read_file(const char *path, size_t *len);

/* Tokenizes text into a malloc'ed array (*n ids); NULL (message printed) on error. */
int32_t *gen_tokenize(const ts_tokenizer *tok, const char *text, size_t len, bool add_special,
                      bool parse_special, int64_t *n);

double gen_now_ms(void);
double gen_peak_rss_mib(void);

/* Evaluates tokens at the end of the KV cache. When lf is non-NULL every row of
 * logits is appended to it (evaluation order). Prints the error, returns -1. */
int gen_eval(ts_state *s, const int32_t *ids, int32_t n, int32_t n_batch, int32_t n_vocab, FILE *lf,
             float *rowbuf);

/* Streaming generation from the logits of the last evaluated token. */
typedef struct gen_result {
    int32_t n_gen;          /* tokens sampled and emitted (EOG not counted) */
    const char *stop;       /* "eos", "length", "context_full", or "error" */
    double ms;              /* wall time of the loop */
    char *text;             /* emitted bytes (malloc'ed, NUL-terminated) */
    size_t text_len;
    int32_t *ids;           /* the n_gen emitted ids (malloc'ed) */
    bool last_evaluated;    /* the final emitted token is in the KV cache */
} gen_result;

typedef struct gen_ctx {
    ts_state *state;
    const ts_tokenizer *tok;
    ts_sampler *smpl;
    int32_t stop_id;        /* extra stop token (template end-of-turn) or -1 */
    int32_t n_vocab;        /* logits row length */
    FILE *logits_out;       /* may be NULL */
    float *rowbuf;          /* n_batch rows of n_vocab when logits_out */
    int32_t n_batch;
    char *piece;            /* detokenizer output, big enough for any token */
    size_t piece_cap;
    FILE *out;              /* where the text streams (stdout) */
} gen_ctx;

/* Fills g and allocates its buffers; prints the error and returns -1. */
int gen_ctx_init(gen_ctx *g, ts_state *s, const ts_tokenizer *tok, ts_sampler *smpl, int32_t n_vocab,
                 int32_t n_batch, FILE *logits_out);
void gen_ctx_free(gen_ctx *g);

/* n_predict < 0: until EOG / context full. eval_last: also evaluate the final
 * token on a length stop (chat keeps the KV cache equal to the text).
 * Free r with gen_result_free. Returns -1 on an error (printed). */
int gen_generate(gen_ctx *g, int32_t n_predict, bool eval_last, gen_result *r);
void gen_result_free(gen_result *r);

/* The stop/BOS policy for chat templates: the BOS text to pass to
 * ts_chat_render (NULL when the tokenizer adds BOS itself, so it appears once). */
const char *gen_chat_bos_text(const ts_chat_template *t, const ts_tokenizer *tok);

/* Builds the template from --chat-template or the model's metadata; prints the error. */
ts_chat_template *gen_chat_template(const gen_opts *o, const ts_model *m);

#endif
