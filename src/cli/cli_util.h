/* cli_util.h - small helpers the subcommands share: reading files, UTF-8
 * decoding for display, and the log callback that routes the library's
 * messages to stderr. */
#ifndef TS_CLI_UTIL_H
#define TS_CLI_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tessera.h"

/* Whole stream into a NUL-terminated malloc'ed buffer (*len bytes); NULL on error. */
char *cli_read_stream(FILE *f, size_t *len);
/* Whole file; NULL with a message printed on error. */
char *cli_read_file(const char *path, size_t *len);

/* Length of the complete, valid UTF-8 sequence at s[0..n) and its code point,
 * or 0 when it is invalid or incomplete (overlong forms, surrogates and code
 * points above U+10FFFF are invalid). */
size_t cli_utf8_len(const unsigned char *s, size_t n, uint32_t *cp);

/* Log callback for the library: warnings to stderr ("warning: ..."); errors
 * are not printed here because every command prints the returned message. */
void cli_log(ts_log_level level, const char *msg, void *user_data);

/* Tokenizes text into a malloc'ed array (*n ids); NULL (message printed) on error. */
int32_t *cli_tokenize_text(const ts_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                      int64_t *n);

/* Option values: the number in s, or -1 with "error: FLAG: ..." printed.
 * Integers in [lo, INT32_MAX]; floats in [lo, hi] (NaN refused); unsigned
 * 64-bit integers in any base strtoull takes (a leading '-' refused). */
int cli_parse_i32(const char *flag, const char *s, int32_t lo, int32_t *out);
/* --sched S with --prefill-device DEV: "DEV,sched=S" in buf (the engine
 * option the runtime reads), or DEV itself when S is NULL. NULL with a
 * message on stderr when S is given without a device, is not inorder or
 * ooo, or does not fit. */
const char *cli_device_sched(const char *cmd, const char *dev, const char *sched, char *buf, size_t n);
int cli_parse_f32(const char *flag, const char *s, float lo, float hi, float *out);
int cli_parse_u64(const char *flag, const char *s, uint64_t *out);
/* A size: a number with an optional unit K, M, G (powers of 1024; KiB,
 * MiB, GiB and KB, MB, GB read the same), e.g. "300M", "1.5G", "4096". */
int cli_parse_size(const char *flag, const char *s, uint64_t *out);

/* --act exact|q8 (run, chat, perplexity, bench, serve): the CPU's activation
 * precision (ts_context_params.activations). 0, or -1 with a message. */
#define CLI_ACT_HELP                                                                                           \
    "      --act MODE           exact (default: 16-bit activations) or q8 (8-bit, llama.cpp's precision:\n"   \
    "                           faster; its KL divergence from exact: docs/FIDELITY.md)\n"
int cli_parse_act(const char *flag, const char *val, ts_activations *out);

/* The memory budget flags every command that loads a model for generation
 * takes (run, chat, perplexity, bench, serve): --mem-budget SIZE,
 * --loaders N, --stream-opts S (ts_model_params.mem_budget, n_loaders,
 * stream_options). */
typedef struct cli_mem_opts {
    uint64_t mem_budget;
    int32_t n_loaders;
    const char *stream_opts;
    int32_t cache_mb;    /* --cache-mb (-1: not given) */
    bool no_routed;      /* --no-prefill-routed */
    float routed_full;   /* --prefill-routed-full (< 0: not given) */
    char buf[512];       /* the stream options cli_mem_apply composes */
} cli_mem_opts;
#define CLI_MEM_INIT {.cache_mb = -1, .routed_full = -1.0f}
#define CLI_MEM_HELP                                                                                           \
    "      --mem-budget SIZE    keep at most SIZE of weights in memory (e.g. 300M, 2G); the layers beyond it\n"  \
    "                           stay in the file and stream through two layer slots (CPU; docs/MOE.md)\n"         \
    "      --loaders N          threads reading streamed layers (default 4)\n"                                   \
    "      --cache-mb N         MoE: keep the N MiB of expert rows read last in memory (LRU; default 0)\n"      \
    "      --no-prefill-routed  MoE: read streamed layers whole, not only the routed experts\n"                 \
    "      --prefill-routed-full F  MoE: a layer routing to more than F of its experts gets the next\n"         \
    "                           read whole (default 0.85)\n"                                                   \
    "      --stream-opts S      streaming options: loader_delay_us=N, direct=0 (docs/MOE.md)\n"
/* Whether name is one of those flags. */
bool cli_mem_flag(const char *name);
/* Parses one of them (name, val); 0 or -1 with a message printed.
 * --no-prefill-routed takes no value: call with val NULL. */
int cli_mem_parse(const char *name, const char *val, cli_mem_opts *o);
void cli_mem_apply(cli_mem_opts *o, ts_model_params *mp);
/* The stream options the flags make (--cache-mb and the routed flags
 * before --stream-opts), in o->buf or --stream-opts itself; NULL: none. */
const char *cli_mem_stream_opts(cli_mem_opts *o);

/* llama-perplexity's scoring of one window: win = ids[0 .. n_ctx) with its
 * first token replaced by bos when bos >= 0, from an empty KV cache, in
 * batches of n_batch (rows holds n_batch * n_vocab logits); the logits at
 * positions n_ctx/2 .. n_ctx-2 score the next of ids. Adds each score's NLL
 * to *nll, its square to *nll2, counts them, and calls acc->row with each
 * where given. 0, or -1 with a message printed. */
typedef struct cli_ppl_acc {
    double nll, nll2;
    int64_t count;
    /* optional: called with each scored row (logits [n_vocab]) and its
     * target, in order (the KL-divergence file); nonzero stops with -1 */
    int (*row)(void *u, const float *logits, int32_t target);
    void *row_u;
} cli_ppl_acc;
int cli_score_window(ts_context *ctx, const int32_t *ids, int32_t n_ctx, int32_t bos, int32_t n_vocab, int32_t n_batch,
                     int32_t *win, float *rows, cli_ppl_acc *acc);

/* s as a JSON string literal (control bytes escaped, bytes >= 0x80 passed
 * through as they are: paths and names may hold any byte). */
void cli_json_str(FILE *f, const char *s);

/* One of model m's layers as ts_device_profile takes it: its widths, and
 * the type of its FFN up-projection (blk.0.ffn_up.weight; "Q4_0" when the
 * file has none). The type string is the model's. */
void cli_layer_shape_of(const ts_model *m, ts_layer_shape *ls);

#endif
