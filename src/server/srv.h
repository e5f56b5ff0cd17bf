/* srv.h - internals shared by the server's modules (the .c files of src/server):
 *   server.c    lifecycle (model, slots, daemon, signals) and HTTP routing
 *   request.c   OpenAI request bodies -> validated generation jobs
 *   sched.c     the queue, the slots and their worker threads, KV prefix reuse
 *   respond.c   JSON answers and Server-Sent Events chunks
 *   metrics.c   counters and the Prometheus text of /metrics
 *   ui_page.c   the chat page served at /
 * The server is a client of tessera.h only (like the CLI); HTTP is
 * libmicrohttpd's, JSON jansson's. */
#ifndef TS_SRV_H
#define TS_SRV_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "serve.h"
#include "tessera.h"

/* ---- errors: an OpenAI error object plus the metric kind it counts as ---- */

typedef enum tsrv_err_kind {
    TSRV_E_INVALID_JSON = 0,
    TSRV_E_INVALID_UTF8,
    TSRV_E_INVALID_TYPE,
    TSRV_E_INVALID_VALUE,
    TSRV_E_UNKNOWN_FIELD,
    TSRV_E_MISSING_FIELD,
    TSRV_E_BODY_TOO_LARGE,
    TSRV_E_CONTEXT_EXCEEDED,
    TSRV_E_UNSUPPORTED,
    TSRV_E_AUTH,
    TSRV_E_NOT_FOUND,
    TSRV_E_METHOD,
    TSRV_E_OVERLOADED,
    TSRV_E_INTERNAL,
    TSRV_E_COUNT
} tsrv_err_kind;

/* Name of a kind as /metrics labels it ("invalid_json", ...). */
const char *tsrv_err_kind_name(tsrv_err_kind k);

typedef struct tsrv_error {
    int http_status;     /* 400, 401, 404, 405, 413, 500, 503 */
    tsrv_err_kind kind;
    const char *type;    /* "invalid_request_error", "authentication_error", "server_error" */
    const char *code;    /* OpenAI-style code ("context_length_exceeded", ...) or NULL */
    char param[64];      /* offending field, "" when none */
    char message[384];
} tsrv_error;

/* Fills e (printf-style message) and returns -1. */
int tsrv_fail(tsrv_error *e, int http_status, tsrv_err_kind kind, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* ---- jobs: one generation request, shared by its HTTP thread and a slot ---- */

typedef enum tsrv_kind { TSRV_CHAT = 0, TSRV_COMPLETION, TSRV_EMBED } tsrv_kind;
typedef enum tsrv_job_state { TSRV_QUEUED = 0, TSRV_RUNNING, TSRV_DONE } tsrv_job_state;

#define TSRV_MAX_STOPS 4
#define TSRV_MAX_STOP_LEN 128
#define TSRV_MAX_CHOICES 16      /* n */
#define TSRV_MAX_TOP_LOGPROBS 20 /* top_logprobs (chat); completions' logprobs takes up to 5 */

/* One generated token's log-probability under the model (log-softmax of the
 * raw logits it was sampled from, before any sampler setting) and the
 * n_top most likely tokens there. */
typedef struct tsrv_logprob {
    int32_t token;
    float logprob;
    size_t offset; /* where its text starts in the choice's text */
    int32_t top_id[TSRV_MAX_TOP_LOGPROBS];
    float top_lp[TSRV_MAX_TOP_LOGPROBS];
} tsrv_logprob;

/* One of a job's n answers; the choices are generated one after another on
 * the job's slot, each from the prompt's KV cache (guarded by job->mu). */
typedef struct tsrv_choice {
    bool stop_hit;              /* a stop string ended the text */
    char *text;                 /* generated text, cut at a stop string */
    size_t len, cap;
    size_t visible;             /* text[0..visible) can be sent: no stop string can start in it */
    int32_t n_gen;              /* tokens generated */
    const char *finish;         /* "stop" / "length" once this choice is done, else NULL */
    json_t *tool_calls;         /* tools: the reply's calls once it is done (text[0..visible) is the content) */
    tsrv_logprob *lp;           /* with logprobs: one per generated token whose text is kept */
    size_t n_lp, cap_lp;
} tsrv_choice;

typedef struct tsrv_job {
    /* request: fixed once queued */
    uint64_t id;
    tsrv_kind kind;
    bool stream, include_usage;
    int32_t *prompt;            /* [n_prompt] token ids */
    int32_t n_prompt;
    int32_t max_tokens;
    ts_sampling_params sp;
    char *stops[TSRV_MAX_STOPS];
    size_t stop_len[TSRV_MAX_STOPS];
    int n_stops;
    int n_choices;              /* n (choice i samples with seed + i) */
    char *grammar;              /* GBNF that constrains the reply (response_format, grammar, tools), or NULL */
    json_t *tools;              /* chat with tools (not tool_choice none): the list, else NULL */
    /* /v1/embeddings: the inputs' tokens (prompt = all of them back to back),
     * each input's count, the pooling, and the result [n_inputs][n_embd] */
    int32_t *input_len;
    int n_inputs;
    ts_pooling pooling;
    bool embd_base64;           /* encoding_format base64 (the openai client's default) */
    float *embd;
    bool tools_parse;           /* hold <tool_call> blocks back and answer them as tool_calls */
    bool logprobs;              /* report each token's log-probability */
    int top_logprobs;           /* ... and this many alternatives (0..TSRV_MAX_TOP_LOGPROBS) */
    /* diffusion models (srv->diffusion): the decoder's parameters, n_gen =
     * max_tokens; on_token / user_data are set by the slot */
    bool diffusion;
    ts_diffusion_params dp;

    /* progress: guarded by mu, signalled on cv */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    tsrv_job_state state;       /* QUEUED -> RUNNING also under the server's mutex */
    bool cancel;                /* the client went away (or the server stops) */
    tsrv_choice choices[TSRV_MAX_CHOICES]; /* [n_choices] */
    int cur;                    /* the choice being generated */
    int32_t n_gen;              /* tokens generated, all choices */
    int32_t n_cached;           /* prompt tokens reused from the slot's KV cache */
    int32_t n_evaluated;        /* prompt tokens evaluated for this request */
    int64_t n_dev_tokens;       /* of those, tokens whose layers ran on the prefill device */
    double prefill_ms, decode_ms;
    int64_t grammar_checks, grammar_masks; /* with a grammar: ts_stats grammar_*, all choices */
    double grammar_ms;
    ts_diffusion_stats ds;      /* diffusion jobs: the decoder's counters once DONE */
    const char *finish;         /* "stop", "length", "cancelled", "error" once DONE */
    char errmsg[256];           /* when finish is "error" */
    int slot;                   /* slot that ran it, -1 before */
    int refs;                   /* owners: the HTTP side and the scheduler */
    struct tsrv_job *next;      /* queue link (server mutex) */
} tsrv_job;

/* ---- the server ---- */

typedef struct tsrv_slot {
    struct tsrv_server *srv;
    int index;
    ts_context *ctx;
    pthread_t thread;
    bool thread_started;
    pthread_cond_t wake;        /* with srv->mu: a job was assigned, or stop */
    tsrv_job *job;              /* assigned job (srv->mu) */
    int32_t *cache;             /* [n_ctx] token ids held by the KV cache (in order) */
    int32_t n_cache;            /* read by the dispatcher only while the slot is idle */
    int32_t n_ctx;
} tsrv_slot;

/* Counters of /metrics; guarded by their own mutex. */
#define TSRV_N_ENDPOINTS 11 /* enum tsrv_endpoint below, OTHER included */
typedef struct tsrv_metrics {
    pthread_mutex_t mu;
    uint64_t requests[TSRV_N_ENDPOINTS][6]; /* [endpoint][status / 100] */
    uint64_t errors[TSRV_E_COUNT];
    uint64_t cancelled;                     /* generations stopped because the client left */
    uint64_t prompt_tokens, cached_tokens, evaluated_tokens, completion_tokens, device_tokens;
    double prefill_s, decode_s;
    double last_prefill_tps, last_decode_tps;
    uint64_t generations;
    /* under a memory budget: each slot's streaming counters since its
     * context was made (ts_stats stream_*), as of its last generation */
    struct {
        double read_mib, stall_ms;
        int64_t fills, ahead, demand, routed, cache_hits, cache_misses;
    } stream[64];
    int stream_layers;
} tsrv_metrics;

typedef struct tsrv_server {
    tsrv_config cfg;
    ts_model *model;
    ts_model_info info;
    char model_id[256];
    char default_system[512];   /* what the chat template adds without a system message ("" when nothing) */
    bool diffusion;             /* a diffusion LLM (llada, dream): requests run ts_context_diffuse */
    ts_diffusion_params diffusion_defaults; /* what a request without decoder fields gets */
    int32_t n_batch;            /* per slot; diffusion: n_ctx, so that any canvas that fits is one window */
    const char *engine_prefill, *engine_decode;
    char prefill_device[64];    /* the device that opened for prefill ("" when none) */
    char device_fallback[256];  /* why the requested device is not used ("" when it is, or none asked) */
    /* the device session of the slots, once they all exist (ts_stats) */
    double dev_upload_mib, dev_weight_mib, dev_window_peak_mib;
    int dev_sharing;
    int32_t n_ctx;              /* per slot */
    time_t started;

    /* chat rendering needs a context; this one holds no real KV and is only
     * used for ts_context_chat_format, under fmt_mu */
    ts_context *fmt_ctx;
    pthread_mutex_t fmt_mu;

    pthread_mutex_t mu;         /* queue, slots' job/idle state, stopping */
    tsrv_job *queue_head, *queue_tail;
    int queue_len;
    int busy;
    bool stopping;
    tsrv_slot *slots;
    int n_slots;
    uint64_t next_id;

    tsrv_metrics metrics;
} tsrv_server;

/* request.c: the body as a JSON object (valid UTF-8, no duplicate keys),
 * every key in known[] (NULL: any); NULL with e (400 naming what is wrong) */
json_t *tsrv_body_object(const char *body, size_t len, const char *const *known, tsrv_error *e);
/* request.c: parses and validates a body for kind, renders and tokenizes the
 * prompt, and returns a new job (refs 1) or NULL with e filled. */
tsrv_job *tsrv_request_parse(tsrv_server *s, tsrv_kind kind, const char *body, size_t len, tsrv_error *e);
/* POST /v1/embeddings: a job of kind TSRV_EMBED (refs 1), or NULL with e */
tsrv_job *tsrv_embed_parse(tsrv_server *s, const char *body, size_t len, tsrv_error *e);
char *tsrv_embeddings_json(const tsrv_server *s, const tsrv_job *job);
/* POST /apply-template (llama-server's): {"messages", "tools", "tool_choice"}
 * -> {"prompt": the rendered text}; NULL with e */
char *tsrv_apply_template(tsrv_server *s, const char *body, size_t len, tsrv_error *e);
/* Names of the diffusion decoder's options as the body fields spell them. */
const char *tsrv_diff_decoder_name(ts_diffusion_decoder d);
const char *tsrv_diff_cache_name(ts_diffusion_cache c);
const char *tsrv_diff_alg_name(ts_diffusion_alg a);
/* True when b[0..n) is valid UTF-8 (no overlongs, surrogates or > U+10FFFF). */
bool tsrv_utf8_valid(const char *b, size_t n);

/* sched.c */
int tsrv_sched_start(tsrv_server *s, tsrv_error *e);  /* slots' contexts and threads */
void tsrv_sched_stop(tsrv_server *s);                /* cancel everything, join, free */
/* Queues a job (takes a second reference for the scheduler); -1 with e
 * (503) when the queue is full or the server stops. */
int tsrv_submit(tsrv_server *s, tsrv_job *job, tsrv_error *e);
/* The client is gone: drop the job from the queue or stop its generation. */
void tsrv_job_cancel(tsrv_server *s, tsrv_job *job);
void tsrv_job_release(tsrv_job *job);
tsrv_job *tsrv_job_new(void);
void tsrv_sched_counts(tsrv_server *s, int *queued, int *busy);

/* respond.c: JSON bodies (malloc'ed strings) */
char *tsrv_error_json(const tsrv_error *e);
char *tsrv_completion_json(const tsrv_server *s, const tsrv_job *job, time_t created);
/* SSE: appends "data: {...}\n\n" events to *buf for text[from..to) or the end */
typedef struct tsrv_buf {
    char *p;
    size_t len, cap;
} tsrv_buf;
int tsrv_buf_add(tsrv_buf *b, const char *s, size_t n);
void tsrv_buf_free(tsrv_buf *b);
/* text[from..to) of choice ci, with the logprobs of its tokens whose text
 * starts before byte lp_upto (*lp_sent: entries already sent, advanced;
 * NULL: none) */
int tsrv_sse_delta(tsrv_buf *b, const tsrv_server *s, const tsrv_job *job, time_t created, int ci, size_t from,
                   size_t to, size_t *lp_sent, size_t lp_upto, bool first);
/* choice ci's tool calls as one delta */
int tsrv_sse_tool_calls(tsrv_buf *b, const tsrv_server *s, const tsrv_job *job, time_t created, int ci);
/* choice ci's finish_reason chunk */
int tsrv_sse_choice_end(tsrv_buf *b, const tsrv_server *s, const tsrv_job *job, time_t created, int ci);
/* the end of the stream: timings, usage, [DONE] (or the error event) */
int tsrv_sse_final(tsrv_buf *b, const tsrv_server *s, const tsrv_job *job, time_t created);
char *tsrv_models_json(const tsrv_server *s);
/* schema.c: a JSON schema as GBNF (malloc'ed; rule root), or NULL with e
 * (400 naming the keyword that is not supported) */
char *tsrv_schema_gbnf(const json_t *schema, tsrv_error *e);
/* Only the schema's rules, each name starting with prefix; *top names the
 * schema's own (malloc'ed; NULL with e). */
char *tsrv_schema_rules(const json_t *schema, const char *prefix, char *top, size_t cap, tsrv_error *e);
/* the JSON rules every converted grammar ends with (json-object, ws, ...) */
extern const char tsrv_json_gbnf_common[];

/* tools.c (docs/SERVER.md "Tools") */
extern const char tsrv_tool_open[]; /* "<tool_call>" */
/* tools / tool_choice of a chat request into j (tools, tools_parse, and for
 * required / a named function the grammar); -1 with e */
int tsrv_tools_parse(tsrv_job *j, const json_t *tools, const json_t *choice, tsrv_error *e);
/* The system message with the tool list (system: the request's, or NULL
 * for the template's default); malloc'ed */
char *tsrv_tools_system(const tsrv_server *s, const json_t *tools, const char *system);
/* An assistant message with tool_calls as the template writes it */
char *tsrv_tools_assistant(const json_t *msg, const char *content, tsrv_error *e, const char *param);
/* The reply's tool calls: returns the length of the content before them
 * and sets *calls (an array of OpenAI tool_call objects, ids id_prefix_K)
 * when every <tool_call> block after it parses and names a tool (or the
 * whole reply is one bare {"name", "arguments"} object naming a tool, or
 * such an object in one ```json fenced block),
 * else returns len and sets *calls NULL (the reply is plain text). */
size_t tsrv_tools_parse_reply(const json_t *tools, const char *text, size_t len, json_t **calls, const char *id_prefix);

/* tokens.c: POST /tokenize and /detokenize (llama-server's shapes); the
 * answer body, or NULL with e filled */
char *tsrv_tokenize(tsrv_server *s, const char *body, size_t len, tsrv_error *e);
char *tsrv_detokenize(tsrv_server *s, const char *body, size_t len, tsrv_error *e);
/* A JSON string of bytes that may not be valid UTF-8 (each invalid byte
 * becomes U+FFFD) */
json_t *tsrv_json_text(const char *b, size_t n);
char *tsrv_health_json(tsrv_server *s);

/* metrics.c */
enum tsrv_endpoint {
    TSRV_EP_ROOT = 0, TSRV_EP_HEALTH, TSRV_EP_MODELS, TSRV_EP_METRICS, TSRV_EP_CHAT, TSRV_EP_COMPLETIONS,
    TSRV_EP_TOKENIZE, TSRV_EP_DETOKENIZE, TSRV_EP_APPLY_TEMPLATE, TSRV_EP_EMBEDDINGS, TSRV_EP_OTHER
};
const char *tsrv_endpoint_name(int ep);
void tsrv_metrics_init(tsrv_metrics *m);
void tsrv_metrics_destroy(tsrv_metrics *m);
void tsrv_metrics_request(tsrv_metrics *m, int endpoint, int http_status);
void tsrv_metrics_error(tsrv_metrics *m, tsrv_err_kind kind);
void tsrv_metrics_cancel(tsrv_metrics *m);
void tsrv_metrics_generation(tsrv_metrics *m, const tsrv_job *job);
/* A slot's streaming counters after a generation (its context's ts_stats). */
void tsrv_metrics_stream(tsrv_metrics *m, int slot, const ts_stats *st);
char *tsrv_metrics_text(tsrv_server *s);

/* ui_page.c */
extern const char tsrv_ui_page[];

/* server.c: one log line to stderr with a timestamp */
void tsrv_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
double tsrv_now_ms(void);

#endif
