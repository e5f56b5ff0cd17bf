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

/* Options parsed from the name ("loop:npu,window=64M,delay_us=200"). */
typedef struct ts_eng_opts {
    char base[16];    /* "cpu", "loop", "opencl" */
    char variant[16]; /* after ':' ("npu", "0"), or "" */
    uint64_t window;  /* 0 = the engine's default */
    int threads;      /* 0 = default */
    int64_t delay_us; /* -1 = default */
    bool nowait;
    bool nodrain;          /* prefill.c reads it: skip the wait at the end of a run */
    uint64_t wtypes;       /* 0 = the engine's own; else a mask applied at open */
} ts_eng_opts;

typedef struct ts_eng_vt {
    void (*close)(ts_engine *e);
    bool (*supports_op)(const ts_engine *e, ts_op op, uint32_t wtype);
    /* Extra engine-specific node checks at graph build (NULL: none). */
    int (*check_node)(const ts_engine *e, const ts_eng_node *n, int width, ts_err *err);

    /* b->eng, mem, size are set; for MAPPED b->host is the caller's pointer.
     * Sets b->impl and, where the host may touch it, b->host. */
    int (*buf_init)(ts_engine *e, ts_eng_buf *b, ts_err *err);
    void (*buf_fini)(ts_eng_buf *b);

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
} ts_eng_vt;

struct ts_engine {
    const ts_eng_vt *vt;
    void *impl;
    ts_eng_desc desc;
    ts_eng_opts opts;
    pthread_mutex_t lock; /* window accounting and counters */
    ts_eng_stats stats;
    int n_objects; /* live buffers, queues, events, graphs (close checks it) */
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
    void *impl;
};

struct ts_eng_graph {
    ts_engine *eng;
    ts_eng_node *nodes;
    int n_nodes;
    int n_slots;
    int width;
    uint64_t scratch_bytes;
    void *impl;
};

/* ---- for implementations ---- */

/* Counter updates (thread-safe). */
void ts_eng_count(ts_engine *e, uint64_t *field, uint64_t v);
#define TS_ENG_COUNT(e, f, v) ts_eng_count((e), &(e)->stats.f, (v))

/* Window accounting: reserve fails (err) when there is no room. */
int ts_eng_window_reserve(ts_engine *e, uint64_t bytes, const char *what, ts_err *err);
void ts_eng_window_release(ts_engine *e, uint64_t bytes);

/* Copies src into dst[n], cut and always terminated. */
void ts_eng_copy_str(char *dst, size_t n, const char *src);

/* Monotonic nanoseconds. */

/* Bytes node n reads/writes through each of its refs for n_tok rows and
 * cache capacity; used by engine.c's checks and by probes. Returns the
 * number of refs written into refs[]/bytes[]/align[] (at most 6). */
int ts_eng_node_refs(const ts_eng_node *n, int n_tok, ts_eng_ref *refs, uint64_t *bytes, uint32_t *align,
                     bool *is_weight);

/* The engines this build has. */
ts_engine *ts_eng_cpu_open(const ts_eng_opts *o, ts_err *err);
ts_engine *ts_eng_loop_open(const ts_eng_opts *o, ts_err *err);
ts_engine *ts_eng_opencl_open(const ts_eng_opts *o, ts_err *err);
/* OpenCL devices for ts_eng_list: fills up to cap entries, returns the count
 * (>= 1: with no device, one entry saying why). */
int ts_eng_opencl_list(ts_eng_info *out, int cap);

/* Weight types the CPU kernels read (every type ts_dequant_row reads). */
uint64_t ts_eng_cpu_weight_types(void);

/* A fresh engine shell (lock initialised, n_objects 0). */
ts_engine *ts_eng_alloc(const ts_eng_vt *vt, const ts_eng_opts *o, ts_err *err);
void ts_eng_dealloc(ts_engine *e);

#endif
