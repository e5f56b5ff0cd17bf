/* api_internal.h - what the files of src/api share: the inside of the public
 * handles (ts_model, ts_context, ts_file), error recording, logging and the
 * struct_size rules of include/tessera.h.
 *
 * The public handles wrap the internal modules: ts_model owns an internal
 * ts_mdl (weights + tokenizer, see model/model.h) or, for vocab_only, just
 * the GGUF file and tokenizer; ts_context owns a ts_state (KV cache,
 * activations, thread pool) and a ts_sampler.
 */
#ifndef TS_API_INTERNAL_H
#define TS_API_INTERNAL_H

#include <stdarg.h>
#include <stdatomic.h>

#include "core/err.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "tessera.h"
#include "text/chat.h"
#include "text/grammar.h"
#include "text/sampler.h"
#include "text/tokenizer.h"
#include "core/clock.h"

typedef struct ts_logger {
    ts_log_fn fn;
    void *user_data;
} ts_logger;

struct ts_file {
    ts_gguf *g;
    bool owned; /* false for the view inside a ts_model */
};

struct ts_model {
    ts_mdl *mdl;             /* NULL for vocab_only */
    ts_gguf *gguf_own;       /* vocab_only: the open file */
    ts_tokenizer *tok_own;   /* vocab_only: the tokenizer */
    const ts_tokenizer *tok;
    const char *chat_jinja;  /* tokenizer.chat_template or NULL (owned by mdl, or chat_own) */
    char *chat_own;
    ts_file file;            /* view of the model's GGUF file */
    char *arch, *name;       /* NUL-terminated copies of general.architecture / general.name */
    char *prefill_device;    /* ts_model_params.prefill_device (copy), or NULL */
    ts_logger log;
};

/* Counters of the current run (see ts_stats). */
typedef struct ts_run {
    bool done;               /* the run ended with a generation: the next eval starts a new one */
    int64_t n_prompt, n_gen;
    double prefill_ms, decode_ms;
    ts_stop_reason stop;
    /* prefill on a device: this run's share (deltas of ts_state_dev_stats) */
    int64_t dev_tokens, dev_nodes, crossings;
    uint64_t stall_ns;
    uint64_t busy_ns;
    int64_t ooo_chunks;      /* sched=ooo: chunks run several in flight */
    uint64_t host_wait_ns;   /* the CPU thread blocked on the device in those runs */
} ts_run;

/* constrain.c: a context's grammar (ts_context_set_grammar) */
typedef struct ts_constraint ts_constraint;
typedef struct ts_constraint_counts {
    int64_t checks; /* sampled tokens checked */
    int64_t masks;  /* steps that checked every token (the sampled one was refused) */
    double ms;      /* time in both */
} ts_constraint_counts;
/* Compiles gbnf into *k (creating it, with the token table, on first use;
 * NULL gbnf: off). -1 with err, *k unchanged, for a bad grammar. */
int ts_constraint_set(ts_constraint **k, const ts_tokenizer *tok, const char *gbnf, const char *root, ts_err *err);
bool ts_constraint_active(const ts_constraint *k); /* a grammar is set */
void ts_constraint_free(ts_constraint *k);
void ts_constraint_reset(ts_constraint *k);
bool ts_constraint_done(const ts_constraint *k); /* nothing more may follow */
bool ts_constraint_overflow(const ts_constraint *k); /* the matcher hit a limit (ts_gmatch_overflow) */
/* The next token: one the grammar allows (end-of-generation ids and stop_id
 * only once the text is complete), or -1 when it allows none. */
int32_t ts_constraint_sample(ts_constraint *k, ts_sampler *smpl, const float *logits, const ts_tokenizer *tok,
                             int32_t stop_id, ts_constraint_counts *cnt);
/* Advances the grammar by a token ts_constraint_sample gave (not for
 * end-of-generation ids); false if it does not fit. */
bool ts_constraint_accept(ts_constraint *k, int32_t id);

struct ts_context {
    const ts_model *model;
    ts_state *st;
    ts_sampler *smpl;
    ts_sampling_params sp;   /* as given */
    int32_t n_vocab;
    ts_logger log;
    char *chat_override;     /* ts_context_params.chat_template copy, or NULL */
    ts_chat_template *tmpl;  /* built on first use */
    atomic_bool cancel;
    bool has_logits;
    ts_constraint *cons;     /* ts_context_set_grammar, or NULL */
    ts_constraint_counts cons_run; /* this run's */
    char *piece;             /* streaming detokenizer output, big enough for any token */
    size_t piece_cap;
    ts_run run;
    ts_status status;
    char msg[TS_ERROR_MAX];
};

/* Sends a formatted line to the logger (no-op without a callback). */
void ts_api_log(const ts_logger *lg, ts_log_level level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Records a failure in err (may be NULL), logs it at ERROR and returns status. */
ts_status ts_api_fail(ts_error *err, const ts_logger *lg, ts_status status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Same for a context: the message is kept for ts_last_error. */
ts_status ts_ctx_fail(ts_context *ctx, ts_status status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Clears a context's last error at the start of a call; returns TS_OK. */
ts_status ts_ctx_ok(ts_context *ctx);
/* Clears an error out-parameter; returns TS_OK. */
ts_status ts_api_ok(ts_error *err);

/* Status for an internal load failure on path: TS_ERR_IO when the file cannot
 * be read at all, TS_ERR_NO_MEMORY for allocation failures, else TS_ERR_FORMAT. */
ts_status ts_api_load_status(const char *path, const char *msg);

/* Copies a caller's parameter struct over the library defaults in dst
 * (dst_size bytes, beginning with struct_size). A smaller struct_size (older
 * header) keeps the defaults of the fields it lacks; a larger one (newer
 * header) is accepted only when the unknown tail is all zero bytes. */
ts_status ts_params_in(void *dst, size_t dst_size, const void *src, const char *what, ts_error *err,
                       const ts_logger *lg);
/* Copies a filled output struct (full, full_size bytes) to the caller's out,
 * as much as out->struct_size holds. */
ts_status ts_struct_out(void *out, const void *full, size_t full_size);

/* Worker threads for a request (0 = physical cores, capped at TS_THREADS_MAX). */
int32_t ts_api_threads(int32_t n);

#endif
