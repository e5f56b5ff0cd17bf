/* cpu_engine.c - the `cpu` engine: the host itself behind the engine
 * interface. Buffers are plain host memory (DEVICE memory is host memory
 * too, so every buffer has a host pointer), the queue is synchronous (a
 * command runs on the calling thread when it is enqueued, so events are
 * complete as soon as they exist) and nodes run on the CPU kernels through
 * cpu_ops.c with the engine's own thread pool. It exists so that the
 * runtime can treat "run this stage on the CPU" like any other placement,
 * and as the reference the loop device is compared with.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/cpu/cpu_engine.h"
#include "engine/cpu/cpu_ops.h"
#include "engine/engine_impl.h"
#include "kernels/cpu.h"
#include "quant/quant.h"

typedef struct cpu_eng {
    ts_threadpool *pool;
    int n_threads;
    bool own_pool; /* false: the caller's (ts_eng_cpu_open_pool) */
    bool act_q8;   /* act=q8: the matmuls at 8-bit activations (linear.h; TS_ACT overrides) */
} cpu_eng;

typedef struct cpu_ev {
    bool done;
} cpu_ev;

static void cpu_close(ts_engine *e) {
    cpu_eng *c = e->impl;
    if (c && c->own_pool)
        ts_threadpool_free(c->pool);
    free(c);
    ts_eng_dealloc(e);
}

static bool cpu_supports(const ts_engine *e, ts_op op, uint32_t wtype) {
    (void)e;
    (void)op;
    (void)wtype;
    return true; /* the desc masks say it all */
}

static int cpu_buf_init(ts_engine *e, ts_eng_buf *b, ts_err *err) {
    (void)e;
    if (b->mem == TS_MEM_MAPPED) {
        b->impl = b->host;
        return 0;
    }
    void *p = aligned_alloc(64, (b->size + 63) / 64 * 64);
    if (!p)
        return ts_err_set(err, "cpu: out of memory allocating %zu bytes", b->size);
    memset(p, 0, b->size);
    b->impl = b->host = p;
    return 0;
}

static void cpu_buf_fini(ts_eng_buf *b) {
    if (b->mem != TS_MEM_MAPPED)
        free(b->impl);
}

static int cpu_queue_init(ts_engine *e, ts_eng_queue *q, ts_err *err) {
    (void)e;
    (void)err;
    q->impl = NULL;
    return 0;
}
static void cpu_queue_fini(ts_eng_queue *q) { (void)q; }

static int cpu_write(ts_eng_queue *q, ts_eng_buf *b, size_t off, const void *src, size_t n, ts_err *err) {
    (void)q;
    (void)err;
    memcpy((uint8_t *)b->impl + off, src, n);
    return 0;
}

static int cpu_read(ts_eng_queue *q, ts_eng_buf *b, size_t off, void *dst, size_t n, ts_err *err) {
    (void)q;
    (void)err;
    memcpy(dst, (const uint8_t *)b->impl + off, n);
    return 0;
}

static int cpu_host_sync(ts_eng_queue *q, ts_eng_buf *b, size_t off, size_t n, ts_eng_sync_dir dir, ts_err *err) {
    (void)q, (void)b, (void)off, (void)n, (void)dir, (void)err;
    return 0; /* the same memory */
}

static int cpu_wait(ts_eng_queue *q, ts_eng_event *ev, unsigned flags, ts_err *err) {
    (void)q;
    (void)flags;
    const cpu_ev *c = ev->impl;
    if (!c->done)
        return ts_err_set(err, "cpu: the queue is synchronous and cannot wait for an event that has not completed "
                               "(signal the user event first)");
    return 0;
}

static int cpu_marker(ts_eng_queue *q, ts_eng_event *ev, ts_err *err) {
    (void)q;
    (void)err;
    ((cpu_ev *)ev->impl)->done = true;
    return 0;
}

static int cpu_graph_run(ts_eng_queue *q, ts_eng_graph *g, const ts_eng_bind *binds, int64_t pos0, int n_tok,
                         int64_t n_kv, ts_err *err) {
    ts_engine *e = q->eng;
    cpu_eng *c = e->impl;
    uint8_t *stack_base[64] = {0};
    uint8_t **base = g->n_slots <= 64 ? stack_base : malloc((size_t)g->n_slots * sizeof *base);
    if (!base)
        return ts_err_set(err, "out of memory running a graph");
    for (int s = 0; s < g->n_slots; s++)
        base[s] = binds[s].buf ? (uint8_t *)binds[s].buf->impl + binds[s].off : NULL;
    const int rc = ts_cpu_exec_run(g->impl, c->pool, g->nodes, g->n_nodes, binds, base, pos0, n_tok, n_kv);
    if (base != stack_base)
        free(base);
    if (rc)
        return ts_err_set(err, "%s: a matmul's weights are in a layout the cpu does not read", e->desc.name);
    TS_ENG_COUNT(e, nodes, (uint64_t)g->n_nodes);
    return 0;
}

static int cpu_flush(ts_eng_queue *q, ts_err *err) {
    (void)q;
    (void)err;
    return 0; /* nothing crosses */
}

static int cpu_event_init(ts_engine *e, ts_eng_event *ev, bool user, ts_err *err) {
    (void)e;
    (void)user;
    cpu_ev *c = calloc(1, sizeof *c);
    if (!c)
        return ts_err_set(err, "out of memory");
    ev->impl = c;
    return 0;
}

static void cpu_event_fini(ts_eng_event *ev) {
    free(ev->impl);
    free(ev);
}

static int cpu_event_signal(ts_eng_event *ev, ts_err *err) {
    (void)err;
    ((cpu_ev *)ev->impl)->done = true;
    return 0;
}

static int cpu_event_wait(ts_eng_event *ev, ts_err *err) {
    if (!((cpu_ev *)ev->impl)->done)
        return ts_err_set(err, "cpu: waiting for a user event nobody can signal on this thread");
    return 0;
}

static bool cpu_event_done(ts_eng_event *ev) { return ((cpu_ev *)ev->impl)->done; }

static uint64_t cpu_graph_scratch(const ts_engine *e, const ts_eng_graph *g) {
    const cpu_eng *c = e->impl;
    return ts_cpu_exec_bytes(g->nodes, g->n_nodes, g->width, c->n_threads);
}

static int cpu_graph_init(ts_engine *e, ts_eng_graph *g, ts_err *err) {
    const cpu_eng *c = e->impl;
    g->impl = ts_cpu_exec_new(g->nodes, g->n_nodes, g->width, c->n_threads, !c->act_q8, err);
    return g->impl ? 0 : -1;
}

static void cpu_graph_fini(ts_eng_graph *g) { ts_cpu_exec_free(g->impl); }

static const ts_eng_vt cpu_vt = {
    .close = cpu_close,
    .supports_op = cpu_supports,
    .buf_init = cpu_buf_init,
    .buf_fini = cpu_buf_fini,
    .queue_init = cpu_queue_init,
    .queue_fini = cpu_queue_fini,
    .enq_write = cpu_write,
    .enq_read = cpu_read,
    .enq_host_sync = cpu_host_sync,
    .enq_wait = cpu_wait,
    .enq_marker = cpu_marker,
    .enq_graph = cpu_graph_run,
    .flush = cpu_flush,
    .finish = cpu_flush,
    .event_init = cpu_event_init,
    .event_fini = cpu_event_fini,
    .event_signal = cpu_event_signal,
    .event_wait = cpu_event_wait,
    .event_done = cpu_event_done,
    .graph_init = cpu_graph_init,
    .graph_fini = cpu_graph_fini,
    .graph_scratch = cpu_graph_scratch,
};

/* Every type the CPU can read: ts_linear has a fast kernel for most and
 * falls back to the reference matmul (dequantize a row, f32 dot) for the
 * rest. Shared with the loop device. */
uint64_t ts_eng_cpu_weight_types(void) {
    uint64_t m = 0;
    for (uint32_t t = 0; t < TS_TYPE_COUNT; t++) {
        const ts_type_traits *tt = ts_type_info(t);
        if (tt && tt->can_dequant)
            m |= 1ull << t;
    }
    return m;
}

/* The engine over pool (owned when own). */
static const char *const act_names[] = {"exact", "q8", NULL};

static ts_engine *cpu_make(const ts_eng_opts *o, ts_threadpool *pool, bool own, bool act_q8, ts_err *err) {
    ts_engine *e = ts_eng_alloc(&cpu_vt, o, err);
    cpu_eng *c = e ? calloc(1, sizeof *c) : NULL;
    if (!c) {
        if (own)
            ts_threadpool_free(pool);
        ts_eng_dealloc(e);
        ts_err_set(err, "out of memory");
        return NULL;
    }
    e->impl = c;
    c->pool = pool;
    c->own_pool = own;
    c->n_threads = ts_threadpool_n_threads(pool);
    c->act_q8 = act_q8;
    ts_eng_desc *d = &e->desc;
    snprintf(d->name, sizeof d->name, "cpu");
    snprintf(d->detail, sizeof d->detail, "the host CPU (%s kernels, %d thread%s%s), synchronous queue",
             ts_cpu_level_name(ts_cpu_level_active()), c->n_threads, c->n_threads == 1 ? "" : "s",
             act_q8 ? ", 8-bit activations" : "");
    d->kind = TS_ENG_KIND_CPU;
    const long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    d->window_bytes = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : (uint64_t)1 << 34;
    d->max_buf_bytes = d->window_bytes;
    d->max_width = 1 << 16;
    d->min_width = 1;
    d->ops = (1u << TS_OP_COUNT) - 1;
    d->weight_types = ts_eng_cpu_weight_types();
    d->crossing_ns = 0;
    d->host_visible_device_mem = true;
    d->cpu_layouts = true;
    d->stall_measured = true;
    d->sync_queue = true;
    return e;
}

static ts_engine *cpu_open(const ts_eng_opts *o, ts_err *err) {
    long long threads = 1;
    int act = 0;
    if (ts_eng_opt_int(o, "threads", 1, 256, o->threads_hint > 0 ? o->threads_hint : 1, &threads, err) ||
        ts_eng_opt_choice(o, "act", act_names, 0, &act, err))
        return NULL;
    ts_threadpool *pool = ts_threadpool_new((int)threads, err);
    return pool ? cpu_make(o, pool, true, act == 1, err) : NULL;
}

ts_engine *ts_eng_cpu_open_pool(ts_threadpool *pool, bool act_q8, ts_err *err) {
    if (!pool) {
        ts_err_set(err, "cpu engine: thread pool is NULL");
        return NULL;
    }
    ts_eng_opts o;
    memset(&o, 0, sizeof o);
    snprintf(o.base, sizeof o.base, "cpu");
    return cpu_make(&o, pool, false, act_q8, err);
}

static const char *const cpu_options[] = {"threads", "act", NULL};
const ts_eng_backend ts_eng_backend_cpu = {
    .name = "cpu",
    .options = cpu_options,
    .open = cpu_open,
};
