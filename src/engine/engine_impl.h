/* engine_impl.h - what an engine implementation provides: the function
 * table behind engine.h and the common headers of its objects. engine.c does
 * every check that does not depend on the engine (names, options, ranges,
 * window accounting, counters) before calling into the table, so an
 * implementation can trust its arguments. Not for the runtime's eyes.
 */
#ifndef TS_ENGINE_IMPL_H
#define TS_ENGINE_IMPL_H

#include <pthread.h>

#include "engine/engine.h"
#include "core/clock.h"

/* Options parsed from the name ("loop:npu,window=64M,delay_us=200"): the
 * ones every engine takes, and the engine's own as key=value text (only keys
 * its registry entry lists get here; it reads them with ts_eng_opt_int). */
#define TS_ENG_MAX_OWN_OPTS 8
typedef struct ts_eng_opts {
    char base[16];    /* the registry entry's name: "cpu", "loop", "opencl" */
    char variant[16]; /* after ':' ("npu", "0"), or "" */
    uint64_t window;  /* 0 = the engine's default */
    uint64_t wtypes;  /* 0 = the engine's own; else a mask applied at open */
    bool nodrain;     /* test hook (TS_TEST_HOOKS builds): the runtime skips the wait at the end of a run */
    bool ooo_nowait;  /* test hook (TS_TEST_HOOKS builds): sched=ooo drops the KV dependency between chunks */
    int sched;        /* sched=S: a ts_eng_sched (engine.h), read by the runtime */
    int inflight;     /* inflight=N: chunks in flight with sched=ooo (0: the default, 4) */
    int slots;        /* slots=N: weight staging slots for the runtime (0: its default) */
    int place;        /* place=P: a ts_eng_place (engine.h), read by the runtime */
    int threads_hint; /* ts_eng_open_params.threads: the default of engines that take threads= */
    char calib[256];  /* calib=FILE (read by the runtime), or "" */
    float prune;      /* prune=P, 0..1 */
    uint32_t prune_keep; /* prune_keep=: bit i, input i (ts_rt_clip_input order) keeps its shadow in pruned layers */
    int n_own;
    struct {
        char key[24];
        char val[104];
    } own[TS_ENG_MAX_OWN_OPTS];
} ts_eng_opts;

/* The engine's own integer option `key` in [lo, hi]: *out = its value, or
 * dflt when the name did not set it. -1 with err on a bad value. */
int ts_eng_opt_int(const ts_eng_opts *o, const char *key, long long lo, long long hi, long long dflt, long long *out,
                   ts_err *err);

/* The engine's own option `key` naming one of choices (NULL-terminated):
 * *out = its index, or dflt when the name did not set it. -1 with err
 * listing the choices on another value. */
int ts_eng_opt_choice(const ts_eng_opts *o, const char *key, const char *const *choices, int dflt, int *out,
                      ts_err *err);

/* One registry entry (engines.def lists them): what the registry needs to
 * parse, open and list an engine. Everything engine-independent (common
 * options, window and weight-type caps, the listing's format) is done by
 * registry.c around these. */
typedef struct ts_eng_backend {
    const char *name;       /* base name before any ':' */
    const char *names_help; /* the names it answers to, for messages: "loop, loop:npu" */
    /* its own option keys (NULL-terminated; NULL: none). "threads" makes the
     * registry pass ts_eng_open_params.threads as threads_hint. */
    const char *const *options;
    /* the part after ':' ("" when none): 0 ok, else -1 with err */
    int (*check_variant)(const char *variant, ts_err *err);
    ts_engine *(*open)(const ts_eng_opts *o, ts_err *err);
    /* listing: fills up to cap entries and returns how many there are (>= 1;
     * an entry that did not open says why). NULL: list_names, each opened. */
    int (*list)(ts_eng_info *out, int cap);
    const char *const *list_names;
} ts_eng_backend;

/* Methods an engine may leave NULL, and what engine.c does instead:
 * close (frees the shell only), supports_op (the desc masks say it all),
 * check_node (no extra checks), enq_host_sync (memory simply shared: no-op),
 * graph_scratch (none), packed_bytes / pack (no layout of its own),
 * buf_init / queue_init / event_init / graph_init
 * (refused: "X has no buffers" ...; then the matching fini and the queue
 * methods are never called). */
typedef struct ts_eng_vt {
    void (*close)(ts_engine *e);
    bool (*supports_op)(const ts_engine *e, ts_op op, uint32_t wtype);
    /* Extra engine-specific node checks at graph build (NULL: none). */
    int (*check_node)(const ts_engine *e, const ts_eng_node *n, int width, ts_err *err);

    /* b->eng, mem, size are set; for MAPPED b->host is the caller's pointer.
     * Sets b->impl and, where the host may touch it, b->host. */
    int (*buf_init)(ts_engine *e, ts_eng_buf *b, ts_err *err);
    void (*buf_fini)(ts_eng_buf *b);
    /* The host address of DEVICE buffer b's bytes where device memory is
     * host memory the host keeps hidden (NULL op: none; ts_eng_buf_peer_bytes). */
    const void *(*buf_peer_bytes)(const ts_eng_buf *b);

    int (*queue_init)(ts_engine *e, ts_eng_queue *q, ts_err *err);
    void (*queue_fini)(ts_eng_queue *q); /* after a finish */
    int (*enq_write)(ts_eng_queue *q, ts_eng_buf *b, size_t off, const void *src, size_t n, ts_err *err);
    int (*enq_read)(ts_eng_queue *q, ts_eng_buf *b, size_t off, void *dst, size_t n, ts_err *err);
    int (*enq_host_sync)(ts_eng_queue *q, ts_eng_buf *b, size_t off, size_t n, ts_eng_sync_dir dir, ts_err *err);
    int (*enq_wait)(ts_eng_queue *q, ts_eng_event *ev, unsigned flags, ts_err *err);
    int (*enq_marker)(ts_eng_queue *q, ts_eng_event *ev, ts_err *err); /* ev fresh from event_init */
    /* binds: the checked copy (n_slots entries), owned by the call; the
     * engine copies what it keeps. */
    /* n_kv: 0 causal attention; > 0 every query sees cache rows [0, n_kv) */
    int (*enq_graph)(ts_eng_queue *q, ts_eng_graph *g, const ts_eng_bind *binds, int64_t pos0, int n_tok,
                     int64_t n_kv, ts_err *err);
    int (*flush)(ts_eng_queue *q, ts_err *err);
    int (*finish)(ts_eng_queue *q, ts_err *err);

    int (*event_init)(ts_engine *e, ts_eng_event *ev, bool user, ts_err *err);
    void (*event_fini)(ts_eng_event *ev); /* last reference dropped */
    int (*event_signal)(ts_eng_event *ev, ts_err *err);
    int (*event_wait)(ts_eng_event *ev, ts_err *err);
    bool (*event_done)(ts_eng_event *ev);

    /* Sets g->impl and g->scratch_bytes (window space the engine needs for
     * the graph; engine.c reserves it before calling, see graph_scratch). */
    int (*graph_init)(ts_engine *e, ts_eng_graph *g, ts_err *err);
    void (*graph_fini)(ts_eng_graph *g);
    /* Bytes of scratch graph g will need (called before graph_init so the
     * window can refuse it first). */
    uint64_t (*graph_scratch)(const ts_engine *e, const ts_eng_graph *g);

    /* The engine's own weight layout (optional; NULL: none): bytes of a
     * matrix in it (0: not for this type/shape), and the packer from GGUF
     * rows (engine.h ts_eng_packed_bytes / ts_eng_pack). */
    uint64_t (*packed_bytes)(const ts_engine *e, uint32_t wtype, int64_t n_in, int64_t n_out);
    int (*pack)(const ts_engine *e, uint32_t wtype, const void *rows, size_t row_bytes, int64_t n_in, int64_t n_out,
                void *dst, ts_err *err);
} ts_eng_vt;

struct ts_engine {
    const ts_eng_vt *vt;
    void *impl;
    ts_eng_desc desc;
    ts_eng_opts opts;
    pthread_mutex_t lock; /* window accounting and counters */
    ts_eng_stats stats;
    int n_objects; /* live buffers, queues, events, graphs (close checks it) */
    /* cross-engine waits in flight that involve this engine (engine.c's
     * bridge threads); close waits for them */
    int bridges;
    pthread_cond_t bridges_done;
};

struct ts_eng_buf {
    ts_engine *eng;
    ts_eng_mem mem;
    size_t size;
    void *host; /* host pointer when the host may touch it, else NULL */
    void *impl; /* engine's handle (loop: the memory; opencl: cl_mem) */
};

struct ts_eng_queue {
    ts_engine *eng;
    void *impl;
};

struct ts_eng_event {
    ts_engine *eng;
    ts_eng_queue *queue; /* the queue that completes it, NULL for a user event */
    bool user;
    int handles; /* host references (the caller's, a bridge's): event_fini runs when the last goes; under eng->lock */
    void *impl;
};

struct ts_eng_graph {
    ts_engine *eng;
    ts_eng_node *nodes;
    int n_nodes;
    int n_slots;
    int width;
    uint64_t scratch_bytes;
    /* run limits from the nodes (engine.c, at build): the smallest cache of
     * a kv_store/attention node (INT32_MAX: none) and of an attention node,
     * the node that has it, the first sliding-window attention (-1: none) */
    int32_t kv_cap, attn_cap;
    int kv_cap_node, attn_cap_node, swa_node;
    void *impl;
};

/* ---- for implementations ---- */

/* Counter updates (thread-safe). */
void ts_eng_count(ts_engine *e, uint64_t *field, uint64_t v);
#define TS_ENG_COUNT(e, f, v) ts_eng_count((e), &(e)->stats.f, (v))

/* Window accounting: reserve fails (err) when there is no room. */
int ts_eng_window_reserve(ts_engine *e, uint64_t bytes, const char *what, ts_err *err);
void ts_eng_window_release(ts_engine *e, uint64_t bytes);

/* "64.0 MiB", "2 GiB", "512 B" */
void ts_eng_fmt_bytes(uint64_t b, char *out, size_t n);

/* Copies src into dst[n], cut and always terminated. */
void ts_eng_copy_str(char *dst, size_t n, const char *src);

/* Monotonic nanoseconds. */



/* Weight types the CPU kernels read (every type ts_dequant_row reads). */
uint64_t ts_eng_cpu_weight_types(void);

/* A fresh engine shell (lock initialised, n_objects 0). */
ts_engine *ts_eng_alloc(const ts_eng_vt *vt, const ts_eng_opts *o, ts_err *err);
void ts_eng_dealloc(ts_engine *e);

#endif
