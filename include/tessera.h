/* tessera.h - the public C API of the tessera inference engine.
 *
 * One header, one library (libtessera.so / libtessera.a, pkg-config
 * "tessera"). The `tessera` command-line tool is itself a client of exactly
 * this API. docs/API.md has the overview; every declaration below says what
 * it does, how it fails and from which threads it may be called.
 *
 * Usage (compiles as is: cc app.c $(pkg-config --cflags --libs tessera)):
 *
 *   #include <stdio.h>
 *   #include <tessera.h>
 *
 *   static bool on_token(const char *piece, size_t len, int32_t token, void *ud) {
 *       (void)token; (void)ud;
 *       fwrite(piece, 1, len, stdout);   // complete UTF-8 only
 *       return true;                     // false stops the generation
 *   }
 *
 *   int main(void) {
 *       ts_error err;
 *       ts_model *model = NULL;
 *       ts_context *ctx = NULL;
 *       if (ts_model_load("model.gguf", NULL, &model, &err) != TS_OK) {
 *           fprintf(stderr, "%s\n", err.message);
 *           return 1;
 *       }
 *       ts_context_params cp = ts_context_default_params();
 *       cp.n_ctx = 512;
 *       if (ts_context_create(model, &cp, &ctx, &err) != TS_OK) {
 *           fprintf(stderr, "%s\n", err.message);
 *           ts_model_free(model);
 *           return 1;
 *       }
 *       ts_generate_params gp = ts_generate_default_params();
 *       gp.n_predict = 32;
 *       gp.on_token = on_token;
 *       if (ts_generate(ctx, "The capital of France is", &gp) != TS_OK)
 *           fprintf(stderr, "%s\n", ts_last_error(ctx));
 *       ts_stats st = TS_STRUCT_INIT(ts_stats);
 *       ts_context_get_stats(ctx, &st);
 *       fprintf(stderr, "\n%d tokens, %.1f tok/s\n", (int)st.n_gen_tokens, st.decode_tps);
 *       ts_context_free(ctx);
 *       ts_model_free(model);
 *       return 0;
 *   }
 *
 * Conventions
 *  - Handles are opaque; each has a create/free pair and free(NULL) is a no-op.
 *  - Every call that can fail returns a ts_status. Calls on a context record
 *    the message in the context (ts_last_error); calls without one take a
 *    `ts_error *` (may be NULL) that receives status and message.
 *  - Parameter structs begin with `struct_size` and come from a
 *    ts_*_default_params() function, so fields can be appended without
 *    breaking callers built against an older header. Output structs also
 *    begin with `struct_size`, which the caller sets (TS_STRUCT_INIT).
 *  - The library never prints, never exits or aborts on bad input, and keeps
 *    no global mutable state: everything it would say goes to the log
 *    callback given in the model/context parameters.
 *  - Text is UTF-8 bytes with explicit lengths where it may hold NUL bytes.
 *
 * Thread safety (also stated per function): a ts_model is read-only after
 * loading and may be used from any number of threads and contexts at once.
 * A ts_context belongs to one thread at a time (the caller serialises its
 * use), except ts_context_cancel, which any thread may call at any time
 * while the context exists. Calls that take neither are thread-safe.
 */
#ifndef TESSERA_H
#define TESSERA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- version ------------------------------------------------------------ */

#define TS_VERSION_MAJOR 0
#define TS_VERSION_MINOR 1
#define TS_VERSION_PATCH 0
/* The shared library's SONAME is libtessera.so.TS_VERSION_MAJOR. */

#if defined(__GNUC__) || defined(__clang__)
#define TS_API __attribute__((visibility("default")))
#else
#define TS_API
#endif

/* "MAJOR.MINOR.PATCH" of the library actually linked; thread-safe. */
TS_API const char *ts_version(void);

/* ---- status, errors, logging -------------------------------------------- */

typedef enum ts_status {
    TS_OK = 0,
    TS_ERR_INVALID_ARG,    /* NULL where a value is needed, a parameter out of range */
    TS_ERR_IO,             /* a file cannot be opened, read or written */
    TS_ERR_FORMAT,         /* a file is malformed or not a model tessera supports */
    TS_ERR_UNSUPPORTED,    /* valid request that this build cannot do (yet) */
    TS_ERR_NO_MEMORY,
    TS_ERR_CONTEXT_FULL,   /* the tokens do not fit in the context's KV cache */
    TS_ERR_CANCELLED,      /* ts_context_cancel stopped an evaluation */
    TS_ERR_INVALID_STATE,  /* the call does not fit the handle's state (e.g. no logits yet) */
    TS_ERR_INTERNAL
} ts_status;

/* Short constant name of a status ("ok", "invalid argument", ...); thread-safe. */
TS_API const char *ts_status_string(ts_status status);

#define TS_ERROR_MAX 512

/* Error out-parameter of calls that have no context. */
typedef struct ts_error {
    ts_status status;
    char message[TS_ERROR_MAX]; /* NUL-terminated; names the field and bad value */
} ts_error;

typedef enum ts_log_level { TS_LOG_DEBUG = 0, TS_LOG_INFO, TS_LOG_WARN, TS_LOG_ERROR } ts_log_level;

/* Receives every message the library has for the application (one line, no
 * trailing newline). Called on the thread that made the call that logs; may
 * be called from several threads at once when several contexts run. */
typedef void (*ts_log_fn)(ts_log_level level, const char *message, void *user_data);

/* Frees memory the library handed out (ts_context_chat_format); NULL is a no-op. */
TS_API void ts_free(void *p);

/* Initialiser for output structs: ts_stats st = TS_STRUCT_INIT(ts_stats); */
#define TS_STRUCT_INIT(type) { .struct_size = sizeof(type) }

/* Most worker threads a context or quantization may use. */
#define TS_THREADS_MAX 256

/* ---- GGUF files: metadata and tensor table (inspect) -------------------- */

typedef struct ts_file ts_file;

/* Metadata value types, numbered as in the GGUF specification. */
typedef enum ts_value_type {
    TS_VALUE_UINT8 = 0,
    TS_VALUE_INT8 = 1,
    TS_VALUE_UINT16 = 2,
    TS_VALUE_INT16 = 3,
    TS_VALUE_UINT32 = 4,
    TS_VALUE_INT32 = 5,
    TS_VALUE_FLOAT32 = 6,
    TS_VALUE_BOOL = 7,
    TS_VALUE_STRING = 8,
    TS_VALUE_ARRAY = 9,
    TS_VALUE_UINT64 = 10,
    TS_VALUE_INT64 = 11,
    TS_VALUE_FLOAT64 = 12
} ts_value_type;

/* A view of one metadata value (valid while its file or model is open).
 * Integers and BOOL are given in u64, i64 and f64 (u64 of a negative value
 * wraps); floats only in f64. Strings are raw bytes, not NUL-terminated, and
 * may hold any byte. A caller may also fill a STRING value itself to render
 * a string. */
typedef struct ts_value {
    ts_value_type type;
    uint64_t u64;            /* unsigned integers, BOOL (0/1) */
    int64_t i64;             /* signed integers */
    double f64;              /* FLOAT32, FLOAT64 */
    const char *str;         /* STRING: the bytes */
    uint64_t len;            /* STRING: byte count; ARRAY: element count */
    ts_value_type elem_type; /* ARRAY: element type */
    const void *impl_;       /* ARRAY: library-private */
} ts_value;

typedef struct ts_file_info {
    size_t struct_size;
    uint32_t version;        /* GGUF version (2 or 3) */
    uint64_t alignment;
    uint64_t data_offset;    /* file offset of the tensor data */
    uint64_t file_size;
    int64_t n_meta;          /* metadata key/value pairs */
    int64_t n_tensors;
} ts_file_info;

typedef struct ts_tensor_info {
    size_t struct_size;
    const char *name;        /* NUL-terminated (escape before printing: any byte but NUL) */
    uint32_t type;           /* ggml type id */
    const char *type_name;   /* "Q4_K", "F32", ... */
    uint32_t n_dims;         /* 1..4 */
    int64_t ne[4];           /* ne[0] is the row length; unused dims are 1 */
    int64_t n_elements;
    uint64_t offset;         /* relative to data_offset */
    uint64_t nbytes;
} ts_tensor_info;

/* Opens and validates any GGUF file (a model or not; untrusted input is
 * checked completely here). *out is NULL on failure. Thread-safe. */
TS_API ts_status ts_file_open(const char *path, ts_file **out, ts_error *err);
/* Closes a file from ts_file_open (not one from ts_model_file). Thread-safe. */
TS_API void ts_file_close(ts_file *f);

/* The accessors below only read: thread-safe on one handle. */
TS_API ts_status ts_file_get_info(const ts_file *f, ts_file_info *out);
/* Key i (0 <= i < n_meta) and its value. */
TS_API ts_status ts_file_meta(const ts_file *f, int64_t i, const char **key, ts_value *value);
/* Index of a key, or -1 when absent (or f/key NULL). */
TS_API int64_t ts_file_find_meta(const ts_file *f, const char *key);
/* Element i of an ARRAY value. */
TS_API ts_status ts_value_array_get(const ts_value *array, uint64_t i, ts_value *out);
/* "UINT32", "STRING", ...; "?" for an unknown type. */
TS_API const char *ts_value_type_name(ts_value_type type);
TS_API ts_status ts_file_tensor(const ts_file *f, int64_t i, ts_tensor_info *out);

typedef enum ts_render_format {
    /* Human text: strings quoted with C escapes and cut after 160 bytes
     * ("..."(N bytes)), arrays as [array of N TYPE: a, b, ... ] (first 8). */
    TS_RENDER_TEXT = 0,
    /* JSON: strings escaped (invalid UTF-8 as U+FFFD), non-finite floats as
     * null, arrays as {"type":"ARRAY","elem_type":T,"n":N,"head":[first 8]}. */
    TS_RENDER_JSON = 1
} ts_render_format;

/* Renders a value as `tessera inspect` prints it. Writes at most cap bytes,
 * NUL-terminated when the text fits (length < cap), and returns the length
 * the full text needs (so call with cap 0 to size a buffer); -1 for a NULL or
 * malformed value. Thread-safe. */
TS_API int64_t ts_value_render(const ts_value *value, ts_render_format format, char *buf, size_t cap);

/* ---- models ------------------------------------------------------------- */

typedef struct ts_model ts_model;

typedef struct ts_model_params {
    size_t struct_size;
    bool use_mmap;           /* map the file (default) instead of reading it into memory */
    bool vocab_only;         /* tokenizer, metadata and chat template only: no weights, no contexts */
    ts_log_fn log;           /* NULL: messages are dropped */
    void *log_user_data;
    /* The model's device (docs/ENGINE.md): the default of
     * ts_context_params.prefill_device for its contexts (NULL: none, CPU
     * only). Its name carries what is per model, the placement of the
     * weights (",window=...,slots=...,wtypes=..."); the contexts that use it
     * share one opened device and one device copy of the weights, made when
     * the first of them is created. A context passes "none" to stay on the
     * CPU, or another name for a device of its own. */
    const char *prefill_device;
    /* A memory budget (docs/MOE.md "Memory budget"): bytes of weights kept
     * in memory; 0 (default) keeps them all. Everything that is not a layer
     * matrix stays, and as many layers as fit beside it; the others stay in
     * the file and every context streams them through two layer-sized slots
     * of its own, filled by n_loaders threads (0: 4) while the layers
     * before them compute. Logits are bit-identical to the model in memory.
     * A prefill device gets only its two slots (a device that converts or
     * packs weights makes its form of each layer as it uploads it; one that
     * would leave a streamed matmul to the CPU falls back to the CPU).
     * Needs use_mmap. stream_options: "loaders=N,loader_delay_us=N,direct=0"
     * (NULL: none). */
    uint64_t mem_budget;
    int32_t n_loaders;
    const char *stream_options;
} ts_model_params;

/* Defaults; thread-safe. */
TS_API ts_model_params ts_model_default_params(void);

/* Loads a GGUF model (weights, tokenizer, chat template). params may be NULL
 * for the defaults. On failure *out is NULL, err says why (TS_ERR_IO for a
 * file that cannot be opened, TS_ERR_FORMAT for one that is malformed or of an
 * unsupported architecture) and the message is also logged. Thread-safe; two
 * or more models may be loaded and used in one process at once. */
TS_API ts_status ts_model_load(const char *path, const ts_model_params *params, ts_model **out, ts_error *err);
/* Frees a model; every context made from it must be freed first, and no
 * other thread may be using it. */
TS_API void ts_model_free(ts_model *model);

typedef struct ts_model_info {
    size_t struct_size;
    const char *arch;          /* general.architecture ("llama", "gemma3", ...) */
    const char *name;          /* general.name, or "" */
    int32_t n_vocab;
    int32_t n_ctx_train;       /* 0 for a vocab_only model */
    int32_t n_embd, n_layer, n_head, n_head_kv, n_ff; /* 0 for vocab_only */
    uint64_t size_bytes;       /* bytes of all tensors */
    uint64_t n_params;         /* elements of all tensors */
    int32_t token_bos, token_eos, token_eot; /* -1 when the vocabulary has none */
    bool add_bos, add_eos;     /* tokenizer metadata: tokenization adds them */
    int64_t max_token_bytes;   /* longest piece any token decodes to */
    const char *chat_template; /* family of the model's template ("chatml", "gemma", "llama3") or NULL */
} ts_model_info;

/* Fills info (strings owned by the model). Thread-safe. */
TS_API ts_status ts_model_get_info(const ts_model *model, ts_model_info *out);
/* The model's GGUF file for metadata and tensor-table access (owned by the
 * model: do not close). NULL for a NULL model. Thread-safe. */
TS_API const ts_file *ts_model_file(const ts_model *model);

/* Tokenizes len bytes of text. add_special: BOS/EOS as the metadata says;
 * parse_special: control-token text such as "<|im_start|>" becomes that
 * token. Invalid UTF-8 is replaced by U+FFFD first (not an error). Writes at
 * most cap ids and sets *n_tokens to the full count, which may exceed cap
 * (call again with a larger buffer; tokens may be NULL when cap is 0).
 * Thread-safe. */
TS_API ts_status ts_model_tokenize(const ts_model *model, const char *text, size_t len, bool add_special,
                                   bool parse_special, int32_t *tokens, int64_t cap, int64_t *n_tokens,
                                   ts_error *err);
/* The concatenated text of n tokens (detokenize(tokenize(s)) == s for valid
 * UTF-8 s). Special tokens are rendered only with render_special. Writes at
 * most cap bytes (NUL-terminated when they fit) and sets *len to the full
 * length. Thread-safe. */
TS_API ts_status ts_model_detokenize(const ts_model *model, const int32_t *tokens, int64_t n, bool render_special,
                                     char *buf, size_t cap, size_t *len, ts_error *err);
/* The raw bytes of one token (may be an incomplete UTF-8 sequence: use the
 * streaming calls of a context for text). Same buffer rules. Thread-safe. */
TS_API ts_status ts_model_token_piece(const ts_model *model, int32_t token, bool render_special, char *buf,
                                      size_t cap, size_t *len, ts_error *err);
/* True when token ends generation (EOS, end-of-turn, ...); false for ids out
 * of range. Thread-safe. */
TS_API bool ts_model_token_is_eog(const ts_model *model, int32_t token);

/* ---- contexts ----------------------------------------------------------- */

typedef struct ts_context ts_context;

/* How a context produces tokens: autoregressive (ts_generate) or, for a
 * diffusion LLM (llada, dream), iterative unmasking (ts_context_diffuse with
 * its own ts_diffusion_params; see the diffusion section below). */
typedef enum ts_decoder_type { TS_DECODER_AUTOREGRESSIVE = 0, TS_DECODER_DIFFUSION = 1 } ts_decoder_type;

/* Sampling chain, applied in this order: repetition/presence penalties over
 * the last repeat_last_n tokens, top-k, top-p, min-p, temperature. */
typedef struct ts_sampling_params {
    size_t struct_size;
    float temp;              /* <= 0: greedy argmax. Default 0.8 */
    int32_t top_k;           /* <= 0: off. Default 40 */
    float top_p;             /* in [0, 1]; 1: off. Default 0.95 */
    float min_p;             /* in [0, 1]; 0: off. Default 0.05 */
    float repeat_penalty;    /* > 0; 1: off (default) */
    int32_t repeat_last_n;   /* penalty window; 0: off, -1: the context size. Default 64 */
    float presence_penalty;  /* 0: off (default) */
    uint64_t seed;           /* RNG seed; default 0xC0FFEE (fixed: runs repeat) */
} ts_sampling_params;

/* Defaults; thread-safe. */
TS_API ts_sampling_params ts_sampling_default_params(void);

/* The precision of the activations a quantized matmul multiplies on the CPU
 * (docs/FIDELITY.md "Two modes"). */
typedef enum ts_activations {
    TS_ACTIVATIONS_EXACT = 0, /* default: 16-bit activations (two int8 planes), within the logit bounds of the
                                 oracle tests */
    TS_ACTIVATIONS_Q8 = 1     /* 8-bit activations per 32 values, as llama.cpp computes (or finer: it
                                 takes 256 for K-quants): faster, judged by KL divergence against the
                                 exact mode */
} ts_activations;

typedef struct ts_context_params {
    size_t struct_size;
    int32_t n_ctx;           /* KV capacity in tokens; 0: min(n_ctx_train, 4096) */
    int32_t n_batch;         /* prompt micro-batch; 0: 512 (capped at n_ctx) */
    int32_t n_threads;       /* worker threads; 0: the physical cores */
    bool kv_f32;             /* KV cache in f32 instead of f16 */
    ts_decoder_type decoder;
    const ts_sampling_params *sampling; /* copied; NULL: ts_sampling_default_params() */
    const char *chat_template; /* "chatml" | "gemma" | "llama3" overrides the model's template; NULL: the model's */
    ts_log_fn log;           /* NULL: the model's log callback */
    void *log_user_data;
    /* Prefill on a device, decode on the CPU (docs/ENGINE.md). A prompt is
     * cut into chunks of `chunk` tokens; chunks of at least
     * prefill_min_tokens run their layers on the device, a shorter tail and
     * every decode step on the CPU. A device that does not open, or cannot
     * take the model, leaves the context on the CPU: creation still
     * succeeds and ts_stats.device_fallback holds the one line to show. */
    const char *prefill_device; /* NULL (default): the model's (ts_model_params.prefill_device), else
                                   CPU only; "none": CPU only. "loop", "loop:npu", "opencl", "opencl:0",
                                   optionally with ",key=value" options (window=64M, ...) */
    int32_t chunk;              /* tokens per chunk; default 256 (0: the default); a device that
                                   requires widths gets the largest of its widths <= chunk */
    int32_t prefill_min_tokens; /* narrower chunks stay on the CPU; default 32; 0: the device's min_width where it
                                   names one (> 1; loop:npu 32), else 32; -1 (auto): a chunk goes to the device
                                   when the CPU's measured time for it exceeds the crossings it would cost there
                                   (the device's crossing cost x crossings per chunk; until the CPU has run a
                                   batch, chunks stay on the CPU) */
    ts_activations activations; /* the CPU's matmul arithmetic (TS_ACTIVATIONS_EXACT, the default, or _Q8); the
                                   environment variable TS_ACT=q8|exact overrides it (debugging). A prefill
                                   device keeps its own (amx: its act= option) */
} ts_context_params;

/* Defaults; thread-safe. */
TS_API ts_context_params ts_context_default_params(void);

/* Creates a context (KV cache, sampler, counters, worker threads) on a model.
 * Any number of contexts may share one model and run in parallel threads.
 * *out is NULL on failure. Thread-safe (the model is only read). */
TS_API ts_status ts_context_create(const ts_model *model, const ts_context_params *params, ts_context **out,
                                   ts_error *err);
/* Frees a context (no call on it, ts_context_cancel included, may be running). */
TS_API void ts_context_free(ts_context *ctx);

/* Message of the last failed call on ctx ("" when none; "context is NULL"
 * for a NULL ctx). Valid until the next call on ctx. Same thread as ctx. */
TS_API const char *ts_last_error(const ts_context *ctx);
/* Status of that call (TS_OK when none). */
TS_API ts_status ts_last_status(const ts_context *ctx);

/* Stops the ts_context_eval / ts_context_generate / ts_generate running on
 * ctx at its next token (or micro-batch) boundary: generation returns TS_OK
 * with stop reason TS_STOP_CANCELLED, evaluation TS_ERR_CANCELLED. A call
 * that starts after the cancel is not affected. Any thread, any time while
 * ctx exists (an atomic flag). */
TS_API void ts_context_cancel(ts_context *ctx);

/* Sizes and position; same thread as ctx. */
TS_API int32_t ts_context_n_ctx(const ts_context *ctx);     /* KV capacity */
TS_API int32_t ts_context_n_past(const ts_context *ctx);    /* tokens in the KV cache */
TS_API int32_t ts_context_n_batch(const ts_context *ctx);
TS_API int32_t ts_context_n_threads(const ts_context *ctx);
TS_API const ts_model *ts_context_model(const ts_context *ctx);

/* The calls below, up to ts_context_get_stats, use ctx from one thread at a
 * time (the thread that owns ctx); failures are described by ts_last_error. */

/* Forgets everything: empty KV cache, sampler history and RNG back to the
 * seed, counters zeroed. Same thread as ctx. */
TS_API ts_status ts_context_reset(ts_context *ctx);
/* Keeps the first n cached tokens (0 <= n <= n_past) and drops the rest, to
 * reuse a common prefix. The logits stay valid only when n == n_past. Same
 * thread as ctx. */
TS_API ts_status ts_context_kv_truncate(ts_context *ctx, int32_t n);
/* Replaces the sampling parameters (and restarts the sampler from the new
 * seed, with an empty penalty history). Same thread as ctx. */
TS_API ts_status ts_context_set_sampling(ts_context *ctx, const ts_sampling_params *params);

/* Evaluates n tokens at positions n_past .. n_past+n-1, appending them to the
 * KV cache and to the sampler's penalty history. logits may be NULL, or
 * receive n rows of n_vocab floats (row i predicts the token after tokens[i]).
 * Fails with TS_ERR_CONTEXT_FULL when n_past + n > n_ctx (nothing evaluated),
 * TS_ERR_INVALID_ARG for an id outside the vocabulary, TS_ERR_CANCELLED when
 * cancelled between micro-batches (the micro-batches done stay cached).
 * Time and count add to the prompt counters of the current run. Same thread
 * as ctx (ts_context_cancel excepted). */
TS_API ts_status ts_context_eval(ts_context *ctx, const int32_t *tokens, int32_t n, float *logits);
/* The n_vocab logits of the last evaluated token, or NULL when there are none
 * (nothing evaluated since creation, reset or a truncation). Valid until the
 * next call on ctx. Same thread as ctx. */
TS_API const float *ts_context_logits(const ts_context *ctx);
/* Samples the next token from those logits with the context's sampler (the
 * token is recorded in the penalty history when it is evaluated). Same
 * thread as ctx. */
TS_API ts_status ts_context_sample(ts_context *ctx, int32_t *token);

/* Constrains what ts_context_generate may produce to the texts a grammar
 * accepts (docs/GRAMMAR.md): GBNF as llama.cpp reads it, starting at rule
 * `root` (NULL: "root"). Each generation starts at the grammar's start; a
 * token that cannot continue an accepted text is never chosen, an
 * end-of-generation token only once the text is complete, and generation
 * ends (TS_STOP_EOS) when the grammar allows nothing more. A run that hits
 * n_predict first ends with an incomplete text (TS_STOP_LENGTH). gbnf NULL
 * removes the grammar. TS_ERR_INVALID_ARG with the line and column of what
 * is wrong for a bad grammar (the previous one is kept). Same thread as ctx. */
TS_API ts_status ts_context_set_grammar(ts_context *ctx, const char *gbnf, const char *root);
/* Whether gbnf compiles (err says why not). Thread-safe. */
TS_API ts_status ts_grammar_check(const char *gbnf, const char *root, ts_error *err);

/* How ts_context_embed pools the final hidden states of a text's tokens. */
typedef enum ts_pooling {
    TS_POOLING_MEAN = 0, /* the mean over every token */
    TS_POOLING_LAST = 1  /* the last token's (what a causal model has read all of the text into) */
} ts_pooling;

/* An embedding of n tokens: evaluates them from an empty KV cache (the
 * context is reset first and holds them afterwards) and writes the pooled
 * final hidden state, after the output norm (what the output projection
 * reads), to out[n_embd] (ts_model_info.n_embd), scaled to unit length when
 * normalize. Refused for diffusion models (TS_ERR_UNSUPPORTED). Same thread
 * as ctx. */
TS_API ts_status ts_context_embed(ts_context *ctx, const int32_t *tokens, int32_t n, ts_pooling pooling,
                                  bool normalize, float *out);

/* ---- generation ----------------------------------------------------------- */

typedef enum ts_stop_reason {
    TS_STOP_NONE = 0,        /* no generation yet */
    TS_STOP_EOS,             /* an end-of-generation token (not emitted) */
    TS_STOP_LENGTH,          /* n_predict tokens emitted */
    TS_STOP_CONTEXT_FULL,    /* the KV cache is full */
    TS_STOP_CANCELLED,       /* ts_context_cancel, or on_token returned false */
    TS_STOP_ERROR            /* the call failed (see ts_last_error) */
} ts_stop_reason;

/* "none", "eos", "length", "context_full", "cancelled", "error"; thread-safe. */
TS_API const char *ts_stop_reason_name(ts_stop_reason reason);

/* Called once per emitted token with the text it completes: only whole UTF-8
 * sequences are handed out (a token ending in the middle of one gives len 0
 * and its bytes come with a later piece). At the end a final call with token
 * -1 flushes a held incomplete sequence (as U+FFFD) if there is one. Return
 * false to stop (stop reason TS_STOP_CANCELLED). Runs on the generating thread. */
typedef bool (*ts_token_fn)(const char *piece, size_t len, int32_t token, void *user_data);
/* Called after each generated token is evaluated, with its n_vocab logits
 * (the prediction for the next token). Return false to stop. */
typedef bool (*ts_logits_fn)(const float *logits, int32_t n_vocab, void *user_data);

typedef struct ts_generate_params {
    size_t struct_size;
    int32_t n_predict;         /* tokens to emit; -1: until EOS or the context is full. Default 128 */
    bool stop_at_end_of_turn;  /* also stop at the chat template's end-of-turn token */
    bool eval_last;            /* on a length stop, also evaluate the last token so the KV cache
                                  holds all emitted text (a conversation continues from it) */
    ts_token_fn on_token;      /* may be NULL */
    ts_logits_fn on_logits;    /* may be NULL */
    void *user_data;
} ts_generate_params;

/* Defaults; thread-safe. */
TS_API ts_generate_params ts_generate_default_params(void);

/* Generates from the logits of the last evaluated token (after
 * ts_context_eval): sample, emit, evaluate, until a stop. Returns TS_OK for
 * every stop except TS_STOP_ERROR; the reason is in ts_context_get_stats.
 * Needs logits (TS_ERR_INVALID_STATE otherwise). Same thread as ctx
 * (ts_context_cancel excepted); the callbacks run on that thread. */
TS_API ts_status ts_context_generate(ts_context *ctx, const ts_generate_params *params);

/* Convenience: tokenizes prompt (BOS as the metadata says when the context is
 * empty; special-token text recognised), evaluates it after what the context
 * holds, then ts_context_generate. TS_ERR_CONTEXT_FULL when the prompt does
 * not fit; TS_ERR_INVALID_ARG for an empty prompt. params NULL: defaults. A
 * cancel during the prompt also gives TS_OK with TS_STOP_CANCELLED. Same
 * thread as ctx (ts_context_cancel excepted). */
TS_API ts_status ts_generate(ts_context *ctx, const char *prompt, const ts_generate_params *params);

/* ---- chat templates ------------------------------------------------------- */

typedef struct ts_chat_message {
    const char *role;        /* "system", "user", "assistant" */
    const char *content;
} ts_chat_message;

/* Renders a conversation with the context's chat template (the model's, or
 * the family named in ts_context_params.chat_template), natively and
 * byte-for-byte as the model's Jinja template would, plus the assistant
 * header when add_generation_prompt. BOS text is included only when the
 * template wants it and tokenization will not add it. *out is malloc'ed
 * (free with ts_free), *out_len (may be NULL) its length. Fails when the
 * model has no recognised template and no override was given
 * (TS_ERR_UNSUPPORTED). Same thread as ctx. */
TS_API ts_status ts_context_chat_format(ts_context *ctx, const ts_chat_message *messages, size_t n,
                                        bool add_generation_prompt, char **out, size_t *out_len);
/* Name of the i-th chat template family that ts_context_params.chat_template
 * accepts (i = 0, 1, ...: "chatml", "gemma", "llama3"), NULL past the end.
 * Thread-safe. */
TS_API const char *ts_chat_template_name(int i);
/* Family name of the context's chat template ("chatml", ...) or NULL (with
 * the reason in ts_last_error) when there is none. Same thread as ctx. */
TS_API const char *ts_context_chat_template(ts_context *ctx);

/* ---- counters ------------------------------------------------------------- */

/* The counters of the last run: a run is the ts_context_eval calls since the
 * previous generation, plus the ts_context_generate that follows them. */
typedef struct ts_stats {
    size_t struct_size;
    int64_t n_prompt_tokens;   /* tokens evaluated by ts_context_eval in this run */
    int64_t n_gen_tokens;      /* tokens emitted (an end-of-generation token is not counted) */
    double prefill_ms;         /* wall time of those evaluations */
    double decode_ms;          /* wall time of the generation loop */
    double prefill_tps;        /* n_prompt_tokens per second of prefill_ms (0 when no time) */
    double decode_tps;         /* n_gen_tokens per second of decode_ms */
    ts_stop_reason stop_reason;
    int32_t n_past;            /* tokens in the KV cache now */
    int32_t n_ctx, n_batch, n_threads;
    uint64_t seed;
    double peak_rss_mib;       /* peak resident memory of the whole process */
    const char *engine;        /* where decoding (and any CPU prefill) ran: "cpu"; prefill chunks on a device: `device` below */
    /* Prefill on a device (ts_context_params.prefill_device). Token and
     * device counts are of this run's evaluations; upload, builds and the
     * window peak count since the context was created (setup included). */
    /* (the two strings below are owned by the context: valid until it is freed) */
    const char *device;        /* the device that ran prefill chunks; NULL when none (not asked, or a fallback) */
    const char *device_fallback; /* the line to show when the device asked for is not used, else NULL */
    int64_t prefill_dev_tokens;  /* prompt tokens whose layers ran on the device */
    int64_t prefill_cpu_tokens;  /* prompt tokens computed on the CPU (tails, short prompts) */
    int64_t prefill_dev_nodes;   /* graph nodes (stages) the device computed */
    double dev_upload_mib;       /* host -> device */
    double dev_stall_ms;         /* time the device waited on weight uploads */
    int64_t graph_builds;        /* chunk graphs built (once per width and layer variant) */
    int64_t crossings;           /* hand-offs to the device */
    uint64_t dev_window_bytes;   /* the device's memory window */
    uint64_t dev_window_peak;    /* most of it in use at once (never above the window) */
    /* The device session: contexts of one model asking for the same device
     * (name and thread count) share one opened device and one device copy
     * of the weights, so dev_upload_mib, dev_stall_ms and dev_window_peak
     * are the session's, over all of them. */
    double dev_weight_mib;       /* the weights' device copy, uploaded once for all of them (0 when streamed) */
    int32_t dev_sharing;         /* contexts sharing that session now (this one included; 0: no device) */
    /* A calibrated INT8 device (calib=FILE): elements of matmul inputs
     * beyond their clip, over the session (the shadow's CPU work). */
    int64_t dev_outliers;            /* computed exactly on the CPU and added (shadow outliers) */
    int64_t dev_outliers_unprofiled; /* of those, in channels the calibration never saw beyond the clip */
    int64_t dev_outliers_pruned;     /* beyond the clip in layers prune= took the shadow from (quantized at
                                        the input's own amax scale instead) */
    double dev_outlier_ms;           /* CPU time finding and adding them */
    /* The device's compute unit running this run's graphs, measured on
     * the device's thread (loop's slow= included); 0 where the device does
     * not measure it (opencl). Prefill wall time minus this is the time
     * the device sat idle or crossing. */
    double dev_busy_ms;
    /* sched=ooo (docs/ENGINE.md "Out-of-order prefill"): prompt chunks this
     * run computed several in flight, and the time the CPU thread sat
     * blocked on the device with none of its own units ready */
    int64_t dev_ooo_chunks;
    double dev_host_wait_ms;
    /* Under a memory budget (ts_model_params.mem_budget): the layers this
     * context streams from the file, its slots, and since it was created
     * what its loaders read, the layers they filled, and the time the
     * forward waited at a layer whose slot was not filled yet. */
    int32_t stream_layers;     /* 0: everything in memory */
    int32_t stream_loaders;
    double stream_slot_mib;    /* one of its two slots */
    double stream_read_mib;
    int64_t stream_fills;
    double stream_stall_ms;
    /* MoE layers that stream (docs/MOE.md "Routed reads"): experts read
     * ahead of the routing node (whole layers, or those the layer's
     * previous run routed to), read at the node because it routed to them
     * and they were not read ahead (demand), routed to in all; of the
     * routed experts of layers read by prediction, the fraction that was
     * read ahead; and the layer fills that read every expert ahead. */
    int64_t stream_experts_ahead;
    int64_t stream_experts_demand;
    int64_t stream_experts_routed;
    double stream_predict_hit_rate; /* 0 when nothing was read by prediction */
    int64_t stream_whole_layers;
    /* The model's expert cache (stream_options cache_mb=, --cache-mb),
     * over all its contexts since the load: expert slices found in it and
     * read from the file instead, and its size. */
    int64_t stream_cache_hits, stream_cache_misses;
    double stream_cache_mib;
    ts_activations activations; /* the precision the CPU's matmuls ran at (TS_ACT may have overridden the
                                   context's parameter) */
    /* The last generation under a grammar (ts_context_set_grammar): sampled
     * tokens checked against it, steps where the sampled token was refused
     * and every token was checked (the mask), and the time in both. */
    int64_t grammar_checks;
    int64_t grammar_masks;
    double grammar_ms;
} ts_stats;

/* Same thread as ctx. */
TS_API ts_status ts_context_get_stats(const ts_context *ctx, ts_stats *out);

/* ---- calibration (per-tensor INT8 with shadow outliers) -------------------- */

/* Gathers the activations of every matmul input of a model's layers for
 * `--prefill-device amx,act=int8,calib=FILE` (docs/ENGINE.md "Calibration").
 * Call ts_calib_begin while the model has no context open (and no other
 * calibration): the CPU forward of every context created after it adds
 * each evaluated token's inputs (slower) until ts_calib_free, which frees
 * the calibration and, once the model's contexts are closed, stops the
 * gathering for contexts created after it. Free a calibration before its
 * model. ts_calib_end_chunk closes one calibration chunk (a sample of which
 * channels went beyond the clip); ts_calib_write picks each input's clip
 * as the `percentile` of |x| over everything gathered and writes the
 * sidecar, filling stats[n_layer * 4] (may be NULL). ts_calib_edit copies a
 * sidecar with one layer's outlier handling pruned (clip_layer >= 0; -1: none)
 * and/or the layers' importance set (n_layer values, or NULL). Not
 * thread-safe against the model's contexts. */
typedef struct ts_calib ts_calib;
typedef struct ts_calib_input_stats {
    int32_t layer, input; /* input: 0 q/k/v, 1 o, 2 gate/up, 3 down */
    int32_t n_in;
    float clip, amax;       /* the clip, and the largest |x| seen */
    float frac_beyond;      /* fraction of the elements beyond the clip */
    int32_t hot_channels;   /* channels beyond the clip in at least one chunk */
    int32_t stable_channels; /* ... in at least half of the chunks */
} ts_calib_input_stats;
TS_API ts_status ts_calib_begin(ts_model *model, ts_calib **out, ts_error *err);
TS_API ts_status ts_calib_end_chunk(ts_calib *calib);
TS_API ts_status ts_calib_write(ts_calib *calib, float percentile, const char *path, ts_calib_input_stats *stats,
                                ts_error *err);
TS_API ts_status ts_calib_edit(const char *in_path, const char *out_path, int32_t clip_layer, const float *importance,
                               ts_error *err);
TS_API void ts_calib_free(ts_calib *calib);

/* ---- compute devices ------------------------------------------------------ */

/* Lists the compute engines this machine has (cpu, loop, loop:npu and each
 * OpenCL device, or one "opencl" line saying why there is none), one line
 * each ending in '\n': the name, "ok" with the kind and the device's
 * self-description, or "unavailable: <why>". Opens and closes each device.
 * Writes at most cap bytes, NUL-terminated when the text fits (length <
 * cap), and returns the length the full text needs (call with cap 0 to size
 * a buffer; buf may then be NULL), -1 when out of memory. The text of two
 * calls may differ (measured crossing costs), so a caller that sizes first
 * should check the second call's length too. Thread-safe. */
TS_API int64_t ts_devices_list(char *buf, size_t cap);

/* The same listing as data. */
typedef enum ts_device_kind {
    TS_DEVICE_CPU = 0, /* the host CPU */
    TS_DEVICE_LOOP,    /* loopback test device (the CPU's kernels behind a device boundary) */
    TS_DEVICE_GPU,
    TS_DEVICE_NPU,     /* a matrix engine (loop:npu emulates one) */
    TS_DEVICE_OTHER,   /* e.g. an OpenCL device of CPU type */
} ts_device_kind;

typedef struct ts_device_info {
    size_t struct_size;
    char name[48];          /* what ts_context_params.prefill_device takes */
    bool ok;                /* it opened; the profile below is valid */
    char reason[256];       /* why it did not open, when !ok */
    ts_device_kind kind;
    char kind_name[8];      /* "cpu", "loop", "gpu", "npu", "other" */
    char detail[160];       /* one line: what it is */
    uint64_t window_bytes;  /* memory it can address, all buffers together */
    uint64_t max_buf_bytes; /* largest single buffer */
    int32_t n_widths;       /* graph widths (tokens per chunk) it names */
    int32_t widths[8];
    bool widths_required;   /* a chunk must be exactly one of widths (else: preferred) */
    int32_t max_width, min_width;
    uint64_t crossing_ns;   /* cost of one hand-off to the device and back */
    char ops[160];          /* the ops it runs, comma-separated ("matmul,rmsnorm,...") */
    char weight_types[256]; /* the matmul weight types it takes, comma-separated ("f16,q8_0,...") */
} ts_device_info;

/* Fills out[0 .. cap) with the devices ts_devices_list shows, in its order,
 * and returns how many there are (may exceed cap; -1 when out of memory).
 * Set out[0].struct_size (TS_STRUCT_INIT): the elements are that many bytes
 * apart, and each gets the fields a struct of that size has. cap 0 (out may
 * be NULL) counts only. Opens and closes each device. Thread-safe. */
TS_API int32_t ts_devices(ts_device_info *out, int32_t cap);

/* One transformer layer (attention + SwiGLU FFN, llama-shaped) for
 * ts_device_profile. Zero fields take the defaults
 * (ts_layer_shape_default: SmolLM2-135M's layer, Q4_0, 1024 cache rows). */
typedef struct ts_layer_shape {
    size_t struct_size;
    int32_t n_embd, n_head, n_head_kv, head_dim, n_ff;
    bool qkv_bias;           /* qwen2's q/k/v biases */
    int32_t n_ctx;           /* KV cache rows */
    const char *weight_type; /* the matmuls' weights: "Q4_0", "Q4_K", "F16", ... */
    int32_t n_threads;       /* the device's threads where it takes threads= (0: physical cores) */
    int32_t reps;            /* timed runs per width; the median is reported */
} ts_layer_shape;
TS_API ts_layer_shape ts_layer_shape_default(void);

/* The latency of one layer graph of `shape` on `device` (a name as
 * ts_context_params.prefill_device takes) at each of the n widths
 * (tokens per graph): random weights of the type (converted to the type the
 * device takes for it, as a model's are at load), packed as the device
 * packs a model's; the nodes the device does not take are left out (a
 * matmul-only device times its matmuls). ms[i]: the median of reps runs
 * after a warm-up. The curve a matrix engine has: flat while its tiles
 * are not full, then a step. Not thread-safe with other calls that open
 * the same device. */
TS_API ts_status ts_device_profile(const char *device, const ts_layer_shape *shape, const int32_t *widths, int32_t n,
                                   double *ms, ts_error *err);

/* ---- quantization --------------------------------------------------------- */

typedef struct ts_quantize_params {
    size_t struct_size;
    int32_t n_threads;       /* 0: the physical cores */
    ts_log_fn log;           /* INFO: one line per tensor and a summary */
    void *log_user_data;
} ts_quantize_params;

/* Defaults; thread-safe. */
TS_API ts_quantize_params ts_quantize_default_params(void);

/* Name of the i-th output type ts_quantize accepts (i = 0, 1, ...), NULL past
 * the end. Thread-safe. */
TS_API const char *ts_quantize_type_name(int i);

/* Rewrites every 2-D weight matrix (name ending in ".weight", row length a
 * multiple of the type's block) of in_path in `type` (a name from
 * ts_quantize_type_name, any case) and writes out_path; other tensors and all
 * metadata are copied, general.file_type is set. A failed write leaves no
 * partial out_path. Thread-safe. */
TS_API ts_status ts_quantize(const char *in_path, const char *out_path, const char *type,
                             const ts_quantize_params *params, ts_error *err);

/* ---- diffusion LLMs (LLaDA, Dream) ---------------------------------------- */

/* A masked-diffusion LM writes n_gen tokens after the prompt by turning a
 * canvas of [MASK] tokens into text over several bidirectional forwards,
 * committing (unmasking) the positions it is most confident about at each
 * step. docs/DIFFUSION.md describes the decoders and their costs. */

typedef enum ts_diffusion_decoder {
    /* default: the prompt's KV computed once, each block of `block` tokens
     * denoised by forwards over the block only, committing every masked
     * position with confidence >= threshold (at least the most confident) */
    TS_DIFFUSION_BLOCK = 0,
    /* LLaDA's generate(): every step one forward over prompt + whole canvas,
     * `steps` spread over the blocks, a scheduled count committed per step */
    TS_DIFFUSION_VANILLA = 1
} ts_diffusion_decoder;

typedef enum ts_diffusion_cache {      /* block decoder only */
    TS_DIFFUSION_CACHE_PREFIX = 0,     /* prompt + finished blocks cached (default) */
    TS_DIFFUSION_CACHE_DUAL = 1,       /* also the masked suffix's K/V, from each block's first step */
    TS_DIFFUSION_CACHE_NONE = 2        /* recompute prompt + finished blocks + block each step (exact) */
} ts_diffusion_cache;

typedef enum ts_diffusion_alg {        /* a masked position's confidence (higher commits first) */
    TS_DIFFUSION_LOW_CONFIDENCE = 0,   /* LLaDA: probability of the predicted token */
    TS_DIFFUSION_MASKGIT_PLUS = 1,     /* Dream: the same under the temperature */
    TS_DIFFUSION_TOPK_MARGIN = 2,      /* Dream: top-1 minus top-2 probability */
    TS_DIFFUSION_ENTROPY = 3           /* Dream: minus the entropy (<= 0) */
} ts_diffusion_alg;

typedef struct ts_diffusion_params {
    size_t struct_size;
    ts_diffusion_decoder decoder;  /* default TS_DIFFUSION_BLOCK */
    ts_diffusion_cache cache;      /* default TS_DIFFUSION_CACHE_PREFIX */
    ts_diffusion_alg alg;          /* default TS_DIFFUSION_LOW_CONFIDENCE */
    int32_t n_gen;                 /* canvas tokens after the prompt; default 128 */
    int32_t block;                 /* block length; default 32 (the last block may be shorter) */
    int32_t steps;                 /* vanilla: total steps (>= blocks); 0: n_gen */
    float threshold;               /* block: default 0.9 (entropy: a value <= 0) */
    float eps;                     /* vanilla: 0 = LLaDA's even schedule; in (0, 1): Dream's timesteps */
    float temp;                    /* 0 (default): argmax; > 0: Gumbel-max sampling */
    uint64_t seed;                 /* noise seed; default 0xC0FFEE */
    bool early_stop;               /* default true: stop after a block holding EOS/EoT */
    ts_token_fn on_token;          /* text of each finished block, as ts_generate's; may be NULL */
    void *user_data;
    /* Multi-block speculative decoding (block decoder, prefix cache;
     * docs/DIFFUSION.md): a decoding window sliding with the commit frontier
     * into future blocks, whose positions are drafts (never committed out of
     * order, never in the prefix cache), accepted when their block becomes
     * current if they pass the threshold. */
    int32_t window;                /* 0 (default): off; >= block: the window */
    int32_t lookahead;             /* 0 (default): off; K > 0: K more positions; -1: auto (latency table) */
    int32_t lookahead_trigger;     /* lookahead once the block has <= this many masked; default 4 */
    float lookahead_slack;         /* auto: a wider width may cost this fraction more; default 0.05 */
    const int32_t *latency_widths; /* auto: the window device's width -> ms table (ts_device_profile) */
    const double *latency_ms;
    int32_t n_latency;
    bool skip_logits;              /* selective logits skipping: logits only for rows predicting a masked position
                                      (with sts: or a visible one) */
    /* Staged token stabilization (block decoder, prefix cache;
     * docs/DIFFUSION.md): positions are masked, visible (context, still
     * revisable) or stable; `threshold` is not used. */
    bool sts;                      /* default false */
    float visible;                 /* masked -> visible at a confidence >= this; default 0.7 */
    float stable;                  /* -> stable at >= this (>= visible); default 0.9 */
    /* Sparse cache refresh (needs sts; docs/DIFFUSION.md): while each
     * step's forward runs, up to scr_max visible positions of finished
     * blocks are recomputed on the CPU (a second KV cache), revised or made
     * stable, and their K/V rows merged at the next step boundary. The
     * text is handed out (on_token) when decoding ends. */
    bool scr;                      /* default false */
    int32_t scr_max;               /* positions refreshed per step; default 8 */
} ts_diffusion_params;

/* Defaults; thread-safe. */
TS_API ts_diffusion_params ts_diffusion_default_params(void);

#define TS_DIFFUSION_HIST_LEN 129

typedef struct ts_diffusion_stats {
    size_t struct_size;
    int64_t forwards;              /* forward passes: prompt, denoising steps, block KV refreshes */
    int64_t denoise_forwards;      /* those whose logits chose commits */
    int64_t tokens_evaluated;      /* positions computed, summed over the forwards */
    int64_t tokens_committed;      /* positions unmasked */
    int64_t commit_per_forward_hist[TS_DIFFUSION_HIST_LEN]; /* [k]: denoising forwards committing k (last: >= 128) */
    double prefill_ms;             /* the prompt's forward (block decoder with a cache) */
    double denoise_ms;             /* everything after it */
    int32_t early_stop_at;         /* generated index of the EOS/EoT that ended it, -1 for none */
    int32_t n_prompt_tokens;
    int32_t n_gen_tokens;          /* tokens handed out (before any EOS/EoT) */
    int32_t n_blocks;              /* blocks finished */
    ts_stop_reason stop_reason;    /* eos (early stop), length, cancelled, error */
    /* window forwards on the prefill device (ts_context_params.prefill_device;
     * a window of >= prefill_min_tokens and <= the chunk width) */
    int64_t dev_forwards;          /* forwards whose layers ran on the device */
    int64_t dev_tokens;            /* positions of those forwards (of tokens_evaluated) */
    /* multi-block speculative decoding */
    int64_t window_max;            /* the widest denoising forward (positions) */
    int64_t draft_evals;           /* future-block positions evaluated (drafts computed) */
    int64_t draft_accepted;        /* drafts committed when their block became current */
    int64_t lookahead_tokens;      /* positions lookahead added to windows */
    int64_t logits_skipped;        /* rows whose output projection skip_logits skipped */
    /* staged token stabilization */
    int64_t sts_visible;           /* masked positions made visible (forced ones included) */
    int64_t sts_forced;            /* of those, by the at-least-one rule */
    int64_t sts_stable;            /* positions that became stable */
    int64_t revisions;             /* visible positions whose token a later prediction changed */
    int64_t unstable_at_block_end; /* positions still visible when their block finished */
    int64_t visible_at_end;        /* positions still visible when decoding ended */
    /* sparse cache refresh */
    int64_t scr_refreshed;         /* positions recomputed on the CPU */
    int64_t scr_revisions;         /* of revisions, those a refresh made */
    int64_t scr_stabilized;        /* positions a refresh made stable */
    int64_t scr_merged;            /* K/V rows merged at step boundaries */
    double scr_ms;                 /* time in the CPU refreshes */
    double scr_overlap_ms;         /* of it, while the step's forward was still running on the device */
    /* weight staging on the prefill device during this run (streamed
     * layers: the device option place=, docs/ENGINE.md) */
    int64_t dev_upload_bytes;      /* host -> device bytes (weights staged, K/V rows synced) */
    double dev_stall_ms;           /* time the device waited on weight uploads */
    int32_t dev_resident_layers;   /* layers whose weights stay on the device */
    int32_t dev_streamed_layers;   /* layers staged through the slots every forward */
    /* padding rows the device computed beside dev_tokens: a window narrower
     * than the width a device requires (loop:npu) runs padded to it */
    int64_t dev_pad_tokens;
} ts_diffusion_stats;

/* n_batch a context needs for these parameters and an n_prompt-token prompt
 * on this model: a diffusion window is evaluated in one batch. -1 for
 * invalid parameters or a model that is not a diffusion LLM. Thread-safe. */
TS_API int32_t ts_diffusion_n_batch(const ts_model *model, const ts_diffusion_params *params, int32_t n_prompt);

/* Diffusion decoding of a diffusion LLM (llada, dream: a mask token and
 * bidirectional attention) from the prompt's tokens, starting from an empty
 * KV cache (whatever ctx held is dropped). tokens (may be NULL when cap is
 * 0) receives at most cap generated ids and *n_tokens (may be NULL) the
 * count handed out. stats (may be NULL; caller sets struct_size) receives
 * the counters, also on failure. Fails with TS_ERR_UNSUPPORTED for a model
 * that is not a diffusion LLM, TS_ERR_CONTEXT_FULL when prompt + n_gen
 * exceed n_ctx, TS_ERR_INVALID_ARG for bad parameters or an n_batch below
 * ts_diffusion_n_batch. A cancel (or on_token returning false) stops at the
 * next forward with TS_OK and stop reason cancelled. Also sets the context's
 * ts_stats. Same thread as ctx (ts_context_cancel excepted). */
TS_API ts_status ts_context_diffuse(ts_context *ctx, const int32_t *prompt, int32_t n_prompt,
                                    const ts_diffusion_params *params, int32_t *tokens, int32_t cap,
                                    int32_t *n_tokens, ts_diffusion_stats *stats);

/* ---- video diffusion (Wan2.1 text-to-video) ------------------------------
 *
 * A Wan2.1 diffusion transformer (the GGUF conversions with the original
 * tensor names, general.architecture "wan"), denoising a latent video by
 * flow matching; docs/VIDEO.md. The text conditioning is given as text
 * encoder states (the umT5 encoder's output, [n_text][text_dim]).
 * Latents are [16][T][H/8][W/8] f32 with T = (frames - 1) / 4 + 1. */

typedef struct ts_video ts_video;

typedef struct ts_video_params {
    const char *engine; /* engine for the transformer's graphs (NULL: "cpu"; "amx", ...) */
    int32_t n_threads;  /* <= 0: physical cores */
    const char *vae_path;  /* the Wan2.1 VAE (its decoder; GGUF with the original names): frames out;
                              NULL: latents only */
    const char *t5_path;   /* the umT5 text encoder (a t5encoder GGUF with its tokenizer: city96's
                              umt5-xxl-encoder files); NULL: text states are given */
    const char *lora_path; /* DCM's detail expert: a low-rank adapter GGUF on the attention projections
                              (docs/VIDEO.md), applied at the steps below detail_below; NULL: none */
    float lora_scale;      /* times the file's alpha / rank (<= 0: 1) */
    ts_log_fn log;
    void *log_user;
} ts_video_params;
TS_API ts_video_params ts_video_default_params(void);
TS_API ts_status ts_video_load(const char *dit_path, const ts_video_params *params, ts_video **out, ts_error *err);
TS_API void ts_video_free(ts_video *v);

typedef struct ts_video_info {
    int32_t dim, n_layer, n_head, ffn, in_channels, out_channels, text_dim;
    int32_t patch[3];
    int64_t weight_bytes;
} ts_video_info;
TS_API ts_status ts_video_get_info(const ts_video *v, ts_video_info *out);

typedef enum ts_video_sampler { TS_VIDEO_UNIPC = 0, TS_VIDEO_EULER = 1 } ts_video_sampler;

/* Called after each denoising step; return false to stop (TS_ERR_CANCELLED). */
typedef bool (*ts_video_step_fn)(int32_t step, int32_t n_steps, double step_ms, void *user_data);

typedef struct ts_video_gen_params {
    int32_t frames;        /* 4k + 1 (default 17) */
    int32_t height, width; /* multiples of 16 (default 480 x 832) */
    int32_t steps;         /* default 50 */
    ts_video_sampler sampler;
    float shift;           /* flow shift (default 3.0; 1.0 with custom timesteps) */
    const float *timesteps; int32_t n_timesteps; /* custom schedule (Euler), decreasing in (0, 1000] */
    float cfg;             /* classifier-free guidance scale; <= 1: off (default 1) */
    float detail_below;    /* steps whose timestep is below this run the detail expert (the adapter
                              of ts_video_params.lora_path); 0: never (default) */
    uint64_t seed;         /* Gaussian noise */
    const float *text; int32_t n_text;         /* [n_text][text_dim], or NULL with prompt */
    const float *neg_text; int32_t n_neg_text; /* cfg > 1: the negative text (NULL: zeros, n_text rows) */
    const char *prompt;          /* with a text encoder and no text: encoded as the Wan pipeline does */
    const char *negative_prompt; /* cfg > 1 with a prompt: the negative one (NULL: "") */
    const float *init_latents;  /* NULL: noise from seed; else [16][T][H/8][W/8] */
    float *trajectory;          /* NULL, or [steps][16][T][H/8][W/8]: the latents after each step */
    float *video;               /* NULL, or [3][frames][height][width]: the decoded video in [-1, 1]
                                   (needs ts_video_params.vae_path) */
    ts_video_step_fn on_step;
    void *user_data;
} ts_video_gen_params;
TS_API ts_video_gen_params ts_video_gen_default_params(void);

typedef struct ts_video_stats {
    size_t struct_size;
    int32_t steps, forwards;
    int32_t detail_steps;  /* of steps, those run by the detail expert */
    int64_t tokens;        /* per block run */
    double total_ms, dit_ms, block_ms, embed_ms, head_ms, text_ms, sampler_ms;
    double encoder_ms;     /* the text encoder (prompts) */
    double vae_ms;         /* the VAE decoder */
    double vae_flops;      /* its multiply-adds x 2 */
    int32_t prompt_tokens; /* the prompt's, EOS included */
    double block_flops;    /* of one block run */
    int64_t peak_rss_bytes;
} ts_video_stats;

/* Denoises a video's latents: latents (caller's, [16][T][H/8][W/8]) receive
 * the result; stats (may be NULL; struct_size set) the timings. */
TS_API ts_status ts_video_generate(ts_video *v, const ts_video_gen_params *params, float *latents,
                                   ts_video_stats *stats, ts_error *err);
/* The text encoder's states of a prompt as the Wan pipeline makes them:
 * whitespace collapsed, tokenized with EOS, at most 512 tokens, encoded, the
 * real tokens' states then zero rows: out [512][text_dim]. *n_tokens (may
 * be NULL) gets the real count. TS_ERR_INVALID_STATE without an encoder. */
TS_API ts_status ts_video_encode_text(ts_video *v, const char *prompt, float *out, int32_t *n_tokens, ts_error *err);
#define TS_VIDEO_TEXT_LEN 512

/* Latent grid of a video size: channels x T x h x w values. */
TS_API int64_t ts_video_latent_count(const ts_video *v, int32_t frames, int32_t height, int32_t width);

/* ---- streams on two engines: one weight copy, one cut (seed 002) --------
 *
 * A stream of requests whose work flattens into B block executions (a
 * video: steps x DiT blocks) and a tail (the VAE decoder) runs as a
 * two-stage pipeline: engine A runs blocks [0, k) of request i and hands
 * the hidden state over once, then starts request i + 1 while engine B runs
 * [k, B) and the tail of request i. One thread per engine (one core each
 * with threads 1). B maps the weights A packed wherever it reads their
 * layout (amx,act=int8 and vnni share "amx-int8"; cpu and loop the CPU's
 * panels): one copy. The cut comes from measured seconds per block:
 *   period(k) = max(k a, (B - k) b + tail), crossing k = (B b + tail) / (a + b)
 * docs/PIPE.md. */
typedef struct ts_stream_rates {
    double block_a_s, block_b_s; /* seconds per block execution on A, on B */
    double tail_s;               /* the tail on B */
} ts_stream_rates;

/* Eq. 4: the predicted period of cut k (0 <= k <= n_blocks). */
TS_API double ts_stream_period(const ts_stream_rates *r, int32_t n_blocks, int32_t cut);
/* Eq. 5's crossing (B b + tail) / (a + b), fractional. */
TS_API double ts_stream_crossing(const ts_stream_rates *r, int32_t n_blocks);
/* One request's latency through cut k when nothing waits. */
TS_API double ts_stream_latency(const ts_stream_rates *r, int32_t n_blocks, int32_t cut);
/* Eq. 5's cut: the better integer next to the crossing, among multiples of
 * step (1: any block boundary; the blocks per step: the step-boundary cut).
 * slo_s > 0: the smallest period among the cuts whose latency <= slo_s (-1:
 * none meets it). */
TS_API int32_t ts_stream_best_cut(const ts_stream_rates *r, int32_t n_blocks, int32_t step, double slo_s);

typedef struct ts_stream_result {
    int32_t n_requests, cut; /* cut -1: whole requests per engine (ts_video_pipe_run_whole) */
    double total_s;          /* first start to last completion */
    double period_s;         /* median interval between completions */
    double latency_s, max_latency_s; /* per request: its start to its completion (median, worst) */
    double a_busy_s, b_busy_s;       /* each engine's thread in its work */
    double tail_s, handoff_s;        /* B's tails; the hand-offs */
    int32_t slo_met;                 /* requests within slo_s */
} ts_stream_result;

typedef struct ts_video_pipe ts_video_pipe;
typedef struct ts_video_pipe_params {
    const char *engine_a;      /* stage A (the prefix); required */
    const char *engine_b;      /* stage B (the suffix and the VAE); required */
    int32_t threads_a, threads_b; /* <= 0: 1 each */
    bool own_copies;           /* true: each engine packs its own weights (the data-parallel baseline's memory) */
    bool decode;               /* the tail: each video's frames through the VAE on B (needs vae_path) */
    /* each finished video, on B's thread (or the engine's that finished it):
     * latents [16][T][h][w], video [3][frames][height][width] or NULL
     * without a VAE; return false to stop the stream (TS_ERR_CANCELLED) */
    bool (*on_video)(int32_t index, const float *latents, const float *video, void *user_data);
    void *user_data;
} ts_video_pipe_params;
TS_API ts_video_pipe_params ts_video_pipe_default_params(void);

/* Both engines set up for gen's grid, schedule, detail expert and text
 * (the prompt encoded once; cfg must be off, as DCM runs); video i of a
 * stream has seed gen->seed + i. The frames come to on_video (pp->decode);
 * gen->video, trajectory and init_latents are single-video fields, unused. */
TS_API ts_status ts_video_pipe_open(ts_video *v, const ts_video_gen_params *gen, const ts_video_pipe_params *pp,
                                    ts_video_pipe **out, ts_error *err);
TS_API void ts_video_pipe_free(ts_video_pipe *p);

typedef struct ts_stream_info {
    int32_t n_blocks, step_blocks; /* B = steps x blocks (prompts: chunks x layers); blocks per step (chunk) */
    int64_t tokens;                /* per block (prompts: the chunk width) */
    int64_t weight_bytes;          /* the model file's */
    int64_t shared_bytes;          /* packed bytes B maps from A instead of holding */
    int64_t pss_bytes;             /* the process's proportional set size after setup (-1: unknown) */
    char engine_a[48], engine_b[48];
} ts_stream_info;
typedef ts_stream_info ts_video_pipe_info;
TS_API ts_status ts_video_pipe_get_info(const ts_video_pipe *p, ts_video_pipe_info *out);

/* The rates over probe blocks (<= 0: one step's) on each engine alone and
 * on both at once (each engine's blocks timed while the other's run; the
 * tail while A runs blocks). */
TS_API ts_status ts_video_pipe_measure(ts_video_pipe *p, int32_t probe_blocks, ts_stream_rates *solo,
                                       ts_stream_rates *corun, ts_error *err);
/* n_videos through cut k; pace (may be NULL) admits each video just in
 * time for B (the SLO mode); slo_s > 0 counts the videos within it. */
TS_API ts_status ts_video_pipe_run(ts_video_pipe *p, int32_t cut, int32_t n_videos, const ts_stream_rates *pace,
                                   double slo_s, ts_stream_result *res, ts_error *err);
/* The baselines: whole videos on engine A (stages 1), B (2) or both side
 * by side (3: data parallelism). */
TS_API ts_status ts_video_pipe_run_whole(ts_video_pipe *p, uint32_t stages, int32_t n_videos, ts_stream_result *res,
                                         ts_error *err);

/* A stream of prompts (prefill, or a diffusion LLM's decode: below):
 * request i is prompt i % n_prompts, its
 * work chunks x layers block executions (block b: layer b % L of chunk
 * b / L); each request runs in its own inference state (KV cache and
 * activations in host memory), whose residual stream is the hand-off both
 * engines address; the tail is the output work, the last row's logits (the
 * next token's distribution), on B. Engines: "cpu" (the model's CPU
 * layers at `activations`) or a prefill device ("amx,act=int8", "vnni",
 * "loop", ...; each of the model's states shares one copy of its
 * weights), one thread each. The same calls as the video stream's. */
typedef struct ts_prompt_pipe ts_prompt_pipe;
typedef struct ts_prompt_pipe_params {
    const char *engine_a, *engine_b; /* required */
    int32_t chunk;                   /* tokens per chunk (0: 256); every prompt must fill as many chunks */
    ts_activations activations;      /* the cpu engine's arithmetic */
    /* each finished prompt's next-token logits [n_vocab], on the thread of the
     * engine that finished it; return false to stop the stream */
    bool (*on_logits)(int32_t index, const float *logits, int32_t n_vocab, void *user_data);
    void *user_data;
    /* A diffusion LLM (llada, dream): each request is the vanilla decoder's
     * run on the prompt (params copied; decoder must be TS_DIFFUSION_VANILLA,
     * a fixed number of forwards: steps x layers block executions, each
     * forward over prompt + n_gen tokens, one chunk; early_stop is off). The
     * decoder runs on a thread of the request's own; each forward's layers
     * run on the engine whose side of the cut they fall on, and a step's
     * commit on the engine that ran its last layer. NULL: prefill. */
    const ts_diffusion_params *diffusion;
    /* each finished request's n_gen decoded tokens (diffusion), as on_logits */
    bool (*on_tokens)(int32_t index, const int32_t *tokens, int32_t n, void *user_data);
    /* false (default): where the two engines read one layout (amx,act=int8
     * and vnni: "amx-int8"), B maps A's packed weights, one stored copy;
     * true: B packs its own (the data-parallel baseline's memory) */
    bool own_copies;
} ts_prompt_pipe_params;
TS_API ts_prompt_pipe_params ts_prompt_pipe_default_params(void);
/* tokens: the n_prompts prompts concatenated, n_tokens[i] each (copied).
 * ts_prompt_pipe_measure's probe_blocks <= 0 times a whole request (a
 * prompt's later chunks attend to more keys: its blocks differ). */
TS_API ts_status ts_prompt_pipe_open(const ts_model *model, const int32_t *tokens, const int32_t *n_tokens,
                                     int32_t n_prompts, const ts_prompt_pipe_params *pp, ts_prompt_pipe **out,
                                     ts_error *err);
TS_API void ts_prompt_pipe_free(ts_prompt_pipe *p);
TS_API ts_status ts_prompt_pipe_get_info(const ts_prompt_pipe *p, ts_stream_info *out);
TS_API ts_status ts_prompt_pipe_measure(ts_prompt_pipe *p, int32_t probe_blocks, ts_stream_rates *solo,
                                        ts_stream_rates *corun, ts_error *err);
TS_API ts_status ts_prompt_pipe_run(ts_prompt_pipe *p, int32_t cut, int32_t n_requests, const ts_stream_rates *pace,
                                    double slo_s, ts_stream_result *res, ts_error *err);
TS_API ts_status ts_prompt_pipe_run_whole(ts_prompt_pipe *p, uint32_t stages, int32_t n_requests,
                                          ts_stream_result *res, ts_error *err);

#ifdef __cplusplus
}
#endif

#endif
