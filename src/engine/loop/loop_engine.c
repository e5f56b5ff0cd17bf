/* loop_engine.c - the `loop` test device: the CPU's own kernels behind a
 * real device boundary, so that placement is the only difference from a
 * CPU run and outputs must match it bit for bit.
 *
 * The boundary:
 *   - memory: DEVICE buffers are memory the host never gets a pointer to
 *     (filled with 0xFF, i.e. NaN, so a missing upload shows); data moves
 *     only by enqueued writes/reads. HOST and MAPPED buffers are host
 *     memory it addresses. Everything counts against its window.
 *   - queues: each queue has its own worker thread. Enqueued commands wait
 *     on the host until a flush hands them over as one batch; the worker
 *     charges the crossing delay (delay_us, slept) per batch, then runs the
 *     commands in order. Waits block the worker on the event.
 *   - compute: graph nodes run through cpu_ops.c (the CPU kernels) on the
 *     device's own thread pool, one graph at a time per device (its compute
 *     unit); transfers on other queues proceed meanwhile.
 *
 * Profiles: "loop" takes every op and weight type the CPU does, any width,
 * a 2 GiB window, no crossing delay. "loop:npu" is NPU-like: matmul only,
 * widths of exactly 32/64/128/256 tokens, F16/Q8_0/Q4_0 weights, a 256 MiB
 * window, 300 us per crossing. Options override window and delay.
 *
 * nowait=1 breaks the device on purpose: its queues skip every wait, so a
 * graph can run before the upload it depends on. The ordering gate uses it
 * to prove it would notice.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/cpu/cpu_ops.h"
#include "engine/engine_impl.h"
#include "kernels/cpu.h"
#include "quant/quant.h"

typedef struct loop_eng {
    bool npu;
    bool nowait;
    bool own_layout; /* test hook: its own weight layout (rows padded to 64 bytes) */
    int64_t delay_us;
    int n_threads;
    ts_threadpool *pool;     /* used under compute */
    pthread_mutex_t compute; /* one graph at a time */
    pthread_mutex_t ev_lock; /* every event of the device */
    pthread_cond_t ev_cond;
} loop_eng;

typedef struct loop_ev {
    int refs; /* host handle + commands naming it; under ev_lock */
    bool done;
} loop_ev;

enum { C_WRITE, C_READ, C_WAIT, C_MARKER, C_GRAPH };

typedef struct loop_cmd {
    struct loop_cmd *next;
    int kind;
    bool batch_start; /* first command of a flushed batch: one crossing */
    ts_eng_buf *buf;
    size_t off, n;
    const void *src;
    void *dst;
    ts_eng_event *ev;
    unsigned flags;
    ts_eng_graph *g;
    ts_eng_bind *binds; /* owned copy */
    int64_t pos0;
    int64_t n_kv; /* 0 causal, > 0 window attention over rows [0, n_kv) */
    int n_tok;
} loop_cmd;

typedef struct loop_q {
    ts_engine *eng;
    pthread_t th;
    pthread_mutex_t m;
    pthread_cond_t cv;          /* worker: work arrived; host: work done */
    loop_cmd *pend, *pend_tail; /* enqueued, not yet flushed (host side) */
    loop_cmd *run, *run_tail;   /* handed to the device */
    bool busy;                  /* the worker is executing a command */
    bool failed;                /* a command could not run since the last finish */
    bool stop;
} loop_q;

/* ---- events ---- */

static void ev_unref(ts_eng_event *ev) {
    loop_eng *L = ev->eng->impl;
    loop_ev *le = ev->impl;
    pthread_mutex_lock(&L->ev_lock);
    const int left = --le->refs;
    pthread_mutex_unlock(&L->ev_lock);
    if (left == 0) {
        free(le);
        free(ev);
    }
}

static void ev_ref(ts_eng_event *ev) {
    loop_eng *L = ev->eng->impl;
    pthread_mutex_lock(&L->ev_lock);
    ((loop_ev *)ev->impl)->refs++;
    pthread_mutex_unlock(&L->ev_lock);
}

static void ev_complete(ts_eng_event *ev) {
    loop_eng *L = ev->eng->impl;
    pthread_mutex_lock(&L->ev_lock);
    ((loop_ev *)ev->impl)->done = true;
    pthread_cond_broadcast(&L->ev_cond);
    pthread_mutex_unlock(&L->ev_lock);
}

/* ---- the worker ---- */

static void sleep_us(int64_t us) {
    if (us <= 0)
        return;
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* The own layout (own_layout=1): each row padded to 64 bytes. */
static uint64_t own_stride(uint64_t row_bytes) { return (row_bytes + 63) & ~(uint64_t)63; }

static uint64_t loop_packed_bytes(const ts_engine *e, uint32_t wtype, int64_t n_in, int64_t n_out) {
    const loop_eng *L = e->impl;
    const size_t rb = ts_row_size(wtype, n_in);
    return L->own_layout && rb ? own_stride(rb) * (uint64_t)n_out : 0;
}

static int loop_pack(const ts_engine *e, uint32_t wtype, const void *rows, size_t row_bytes, int64_t n_in,
                     int64_t n_out, void *dst, ts_err *err) {
    (void)e, (void)err;
    const size_t rb = ts_row_size(wtype, n_in), st = (size_t)own_stride(rb);
    for (int64_t r = 0; r < n_out; r++) {
        memcpy((uint8_t *)dst + (size_t)r * st, (const uint8_t *)rows + (size_t)r * row_bytes, rb);
        memset((uint8_t *)dst + (size_t)r * st + rb, 0xA5, st - rb); /* padding no kernel may read */
    }
    return 0;
}

static int run_graph(ts_engine *e, loop_cmd *c) {
    loop_eng *L = e->impl;
    ts_eng_graph *g = c->g;
    uint8_t *stack_base[64] = {0};
    uint8_t **base = g->n_slots <= 64 ? stack_base : malloc((size_t)g->n_slots * sizeof *base);
    if (!base)
        return -1;
    for (int s = 0; s < g->n_slots; s++) {
        base[s] = c->binds[s].buf ? (uint8_t *)c->binds[s].buf->impl + c->binds[s].off : NULL;
        /* its own layout is rows at a padded stride: what the CPU kernels
         * read as rows of that stride (the copy of the bindings is ours) */
        if (c->binds[s].layout == TS_WL_ENGINE) {
            c->binds[s].layout = TS_WL_ROWS;
            c->binds[s].row_bytes = own_stride(c->binds[s].row_bytes);
        }
    }
    pthread_mutex_lock(&L->compute);
    ts_cpu_exec_run(g->impl, L->pool, g->nodes, g->n_nodes, c->binds, base, c->pos0, c->n_tok, c->n_kv);
    pthread_mutex_unlock(&L->compute);
    if (base != stack_base)
        free(base);
    TS_ENG_COUNT(e, nodes, (uint64_t)g->n_nodes);
    return 0;
}

/* 0, or -1 when the command could not run (reported by the next finish) */
static int exec_cmd(ts_engine *e, loop_cmd *c) {
    loop_eng *L = e->impl;
    switch (c->kind) {
    case C_WRITE: memcpy((uint8_t *)c->buf->impl + c->off, c->src, c->n); break;
    case C_READ: memcpy(c->dst, (const uint8_t *)c->buf->impl + c->off, c->n); break;
    case C_MARKER: ev_complete(c->ev); break;
    case C_WAIT: {
        if (L->nowait)
            break; /* the broken hook: ordering is lost */
        const uint64_t t0 = ts_now_ns();
        pthread_mutex_lock(&L->ev_lock);
        while (!((loop_ev *)c->ev->impl)->done)
            pthread_cond_wait(&L->ev_cond, &L->ev_lock);
        pthread_mutex_unlock(&L->ev_lock);
        const uint64_t dt = ts_now_ns() - t0;
        if (c->flags & TS_WAIT_WEIGHTS)
            TS_ENG_COUNT(e, stall_ns, dt);
        else
            TS_ENG_COUNT(e, wait_ns, dt);
        break;
    }
    case C_GRAPH: return run_graph(e, c);
    default: break;
    }
    return 0;
}

static void cmd_free(loop_cmd *c) {
    if (c->ev)
        ev_unref(c->ev);
    free(c->binds);
    free(c);
}

static void *worker(void *arg) {
    loop_q *q = arg;
    ts_engine *e = q->eng;
    loop_eng *L = e->impl;
    pthread_mutex_lock(&q->m);
    for (;;) {
        while (!q->run && !q->stop)
            pthread_cond_wait(&q->cv, &q->m);
        if (!q->run)
            break; /* stop with nothing left */
        loop_cmd *c = q->run;
        q->run = c->next;
        if (!q->run)
            q->run_tail = NULL;
        q->busy = true;
        pthread_mutex_unlock(&q->m);
        if (c->batch_start) {
            sleep_us(L->delay_us); /* the cost of the crossing */
            TS_ENG_COUNT(e, crossings, 1);
        }
        const int rc = exec_cmd(e, c);
        cmd_free(c);
        pthread_mutex_lock(&q->m);
        if (rc)
            q->failed = true;
        q->busy = false;
        pthread_cond_broadcast(&q->cv);
    }
    pthread_mutex_unlock(&q->m);
    return NULL;
}

/* ---- host side of a queue ---- */

static int push(ts_eng_queue *qq, loop_cmd *c) {
    loop_q *q = qq->impl;
    pthread_mutex_lock(&q->m);
    if (q->pend_tail)
        q->pend_tail->next = c;
    else
        q->pend = c;
    q->pend_tail = c;
    pthread_mutex_unlock(&q->m);
    return 0;
}

static loop_cmd *new_cmd(int kind, ts_err *err) {
    loop_cmd *c = calloc(1, sizeof *c);
    if (!c)
        ts_err_set(err, "out of memory enqueuing a command");
    else
        c->kind = kind;
    return c;
}

static void flush_locked(loop_q *q) {
    if (!q->pend)
        return;
    q->pend->batch_start = true;
    if (q->run_tail)
        q->run_tail->next = q->pend;
    else
        q->run = q->pend;
    q->run_tail = q->pend_tail;
    q->pend = q->pend_tail = NULL;
    pthread_cond_broadcast(&q->cv);
}

static int loop_flush(ts_eng_queue *qq, ts_err *err) {
    (void)err;
    loop_q *q = qq->impl;
    pthread_mutex_lock(&q->m);
    flush_locked(q);
    pthread_mutex_unlock(&q->m);
    return 0;
}

static int loop_finish(ts_eng_queue *qq, ts_err *err) {
    loop_q *q = qq->impl;
    pthread_mutex_lock(&q->m);
    flush_locked(q);
    while (q->run || q->busy)
        pthread_cond_wait(&q->cv, &q->m);
    const bool failed = q->failed;
    q->failed = false;
    pthread_mutex_unlock(&q->m);
    if (failed)
        return ts_err_set(err, "%s: a graph could not run (out of memory on the device thread)", qq->eng->desc.name);
    return 0;
}

static int loop_queue_init(ts_engine *e, ts_eng_queue *qq, ts_err *err) {
    loop_q *q = calloc(1, sizeof *q);
    if (!q)
        return ts_err_set(err, "out of memory");
    q->eng = e;
    pthread_mutex_init(&q->m, NULL);
    pthread_cond_init(&q->cv, NULL);
    if (pthread_create(&q->th, NULL, worker, q)) {
        pthread_mutex_destroy(&q->m);
        pthread_cond_destroy(&q->cv);
        free(q);
        return ts_err_set(err, "%s: cannot start the queue thread", e->desc.name);
    }
    qq->impl = q;
    return 0;
}

static void loop_queue_fini(ts_eng_queue *qq) {
    loop_q *q = qq->impl;
    pthread_mutex_lock(&q->m);
    flush_locked(q);
    q->stop = true;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->m);
    pthread_join(q->th, NULL);
    pthread_mutex_destroy(&q->m);
    pthread_cond_destroy(&q->cv);
    free(q);
}

static int loop_write(ts_eng_queue *q, ts_eng_buf *b, size_t off, const void *src, size_t n, ts_err *err) {
    loop_cmd *c = new_cmd(C_WRITE, err);
    if (!c)
        return -1;
    c->buf = b, c->off = off, c->src = src, c->n = n;
    return push(q, c);
}

static int loop_read(ts_eng_queue *q, ts_eng_buf *b, size_t off, void *dst, size_t n, ts_err *err) {
    loop_cmd *c = new_cmd(C_READ, err);
    if (!c)
        return -1;
    c->buf = b, c->off = off, c->dst = dst, c->n = n;
    return push(q, c);
}

static int loop_host_sync(ts_eng_queue *q, ts_eng_buf *b, size_t off, size_t n, ts_eng_sync_dir dir, ts_err *err) {
    (void)q, (void)b, (void)off, (void)n, (void)dir, (void)err;
    return 0; /* HOST/MAPPED memory is the host's own: nothing to copy */
}

static int loop_wait(ts_eng_queue *q, ts_eng_event *ev, unsigned flags, ts_err *err) {
    /* A marker of another queue completes only once that queue hands it to
     * its worker: flush it, or this wait could never end. */
    if (ev->queue && ev->queue != q)
        (void)loop_flush(ev->queue, NULL);
    loop_cmd *c = new_cmd(C_WAIT, err);
    if (!c)
        return -1;
    ev_ref(ev);
    c->ev = ev;
    c->flags = flags;
    return push(q, c);
}

static int loop_marker(ts_eng_queue *q, ts_eng_event *ev, ts_err *err) {
    loop_cmd *c = new_cmd(C_MARKER, err);
    if (!c)
        return -1;
    ev_ref(ev);
    c->ev = ev;
    return push(q, c);
}

static int loop_graph(ts_eng_queue *q, ts_eng_graph *g, const ts_eng_bind *binds, int64_t pos0, int n_tok,
                      int64_t n_kv, ts_err *err) {
    loop_cmd *c = new_cmd(C_GRAPH, err);
    if (!c)
        return -1;
    c->binds = malloc((size_t)g->n_slots * sizeof *binds);
    if (!c->binds) {
        free(c);
        return ts_err_set(err, "out of memory enqueuing a graph");
    }
    memcpy(c->binds, binds, (size_t)g->n_slots * sizeof *binds);
    c->g = g, c->pos0 = pos0, c->n_tok = n_tok, c->n_kv = n_kv;
    return push(q, c);
}

/* ---- events (engine side) ---- */

static int loop_event_init(ts_engine *e, ts_eng_event *ev, bool user, ts_err *err) {
    (void)e;
    (void)user;
    loop_ev *le = calloc(1, sizeof *le);
    if (!le)
        return ts_err_set(err, "out of memory");
    le->refs = 1;
    ev->impl = le;
    return 0;
}

static void loop_event_fini(ts_eng_event *ev) { ev_unref(ev); }

static int loop_event_signal(ts_eng_event *ev, ts_err *err) {
    (void)err;
    ev_complete(ev);
    return 0;
}

static int loop_event_wait(ts_eng_event *ev, ts_err *err) {
    (void)err;
    loop_eng *L = ev->eng->impl;
    if (ev->queue)
        (void)loop_flush(ev->queue, NULL);
    pthread_mutex_lock(&L->ev_lock);
    while (!((loop_ev *)ev->impl)->done)
        pthread_cond_wait(&L->ev_cond, &L->ev_lock);
    pthread_mutex_unlock(&L->ev_lock);
    return 0;
}

static bool loop_event_done(ts_eng_event *ev) {
    loop_eng *L = ev->eng->impl;
    pthread_mutex_lock(&L->ev_lock);
    const bool d = ((loop_ev *)ev->impl)->done;
    pthread_mutex_unlock(&L->ev_lock);
    return d;
}

/* ---- buffers, graphs, engine ---- */

static int loop_buf_init(ts_engine *e, ts_eng_buf *b, ts_err *err) {
    if (b->mem == TS_MEM_MAPPED) {
        b->impl = b->host; /* the device addresses the caller's memory */
        return 0;
    }
    void *p = aligned_alloc(64, (b->size + 63) / 64 * 64);
    if (!p)
        return ts_err_set(err, "%s: out of host memory backing %zu bytes", e->desc.name, b->size);
    if (b->mem == TS_MEM_DEVICE) {
        memset(p, 0xFF, b->size); /* NaN everywhere until uploaded */
        b->host = NULL;           /* the host has no pointer into device memory */
    } else {
        memset(p, 0, b->size);
        b->host = p;
    }
    b->impl = p;
    return 0;
}

static void loop_buf_fini(ts_eng_buf *b) {
    if (b->mem != TS_MEM_MAPPED)
        free(b->impl);
}

static bool loop_supports(const ts_engine *e, ts_op op, uint32_t wtype) {
    (void)e, (void)op, (void)wtype;
    return true; /* the profile's masks in the desc decide */
}

static uint64_t loop_graph_scratch(const ts_engine *e, const ts_eng_graph *g) {
    const loop_eng *L = e->impl;
    return ts_cpu_exec_bytes(g->nodes, g->n_nodes, g->width, L->n_threads);
}

static int loop_graph_init(ts_engine *e, ts_eng_graph *g, ts_err *err) {
    const loop_eng *L = e->impl;
    g->impl = ts_cpu_exec_new(g->nodes, g->n_nodes, g->width, L->n_threads, err);
    return g->impl ? 0 : -1;
}

static void loop_graph_fini(ts_eng_graph *g) { ts_cpu_exec_free(g->impl); }

static void loop_close(ts_engine *e) {
    loop_eng *L = e->impl;
    if (L) {
        ts_threadpool_free(L->pool);
        pthread_mutex_destroy(&L->compute);
        pthread_mutex_destroy(&L->ev_lock);
        pthread_cond_destroy(&L->ev_cond);
        free(L);
    }
    ts_eng_dealloc(e);
}

static const ts_eng_vt loop_vt = {
    .close = loop_close,
    .supports_op = loop_supports,
    .buf_init = loop_buf_init,
    .buf_fini = loop_buf_fini,
    .queue_init = loop_queue_init,
    .queue_fini = loop_queue_fini,
    .enq_write = loop_write,
    .enq_read = loop_read,
    .enq_host_sync = loop_host_sync,
    .enq_wait = loop_wait,
    .enq_marker = loop_marker,
    .enq_graph = loop_graph,
    .flush = loop_flush,
    .finish = loop_finish,
    .event_init = loop_event_init,
    .event_fini = loop_event_fini,
    .event_signal = loop_event_signal,
    .event_wait = loop_event_wait,
    .event_done = loop_event_done,
    .graph_init = loop_graph_init,
    .graph_fini = loop_graph_fini,
    .graph_scratch = loop_graph_scratch,
    .packed_bytes = loop_packed_bytes,
    .pack = loop_pack,
};

static ts_engine *loop_open(const ts_eng_opts *o, ts_err *err) {
    long long threads = 1, delay_us = -1, nowait = 0, own_layout = 0;
    if (ts_eng_opt_int(o, "threads", 1, 256, o->threads_hint > 0 ? o->threads_hint : 1, &threads, err) ||
        ts_eng_opt_int(o, "delay_us", 0, 10000000, -1, &delay_us, err) ||
        ts_eng_opt_int(o, "nowait", 0, 1, 0, &nowait, err) || ts_eng_opt_int(o, "own_layout", 0, 1, 0, &own_layout, err))
        return NULL;
    ts_engine *e = ts_eng_alloc(&loop_vt, o, err);
    if (!e)
        return NULL;
    loop_eng *L = calloc(1, sizeof *L);
    if (!L) {
        ts_eng_dealloc(e);
        ts_err_set(err, "out of memory");
        return NULL;
    }
    e->impl = L;
    pthread_mutex_init(&L->compute, NULL);
    pthread_mutex_init(&L->ev_lock, NULL);
    pthread_cond_init(&L->ev_cond, NULL);
    L->npu = !strcmp(o->variant, "npu");
    L->nowait = nowait != 0; /* only reachable in a TS_TEST_HOOKS build */
    L->own_layout = own_layout != 0; /* likewise */
    L->delay_us = delay_us >= 0 ? delay_us : (L->npu ? 300 : 0);
    L->n_threads = (int)threads;
    L->pool = ts_threadpool_new(L->n_threads, err);
    if (!L->pool) {
        loop_close(e);
        return NULL;
    }
    L->n_threads = ts_threadpool_n_threads(L->pool);

    ts_eng_desc *d = &e->desc;
    snprintf(d->name, sizeof d->name, "%s", L->npu ? "loop:npu" : "loop");
    d->crossing_ns = (uint64_t)L->delay_us * 1000;
    d->cpu_layouts = true;
    d->stall_measured = true;
    if (L->npu) {
        static const int w[] = {32, 64, 128, 256};
        d->kind = TS_ENG_KIND_NPU;
        d->window_bytes = (uint64_t)256 << 20;
        d->n_widths = 4;
        memcpy(d->widths, w, sizeof w);
        d->widths_required = true;
        d->max_width = 256;
        d->min_width = 32;
        d->ops = 1u << TS_OP_MATMUL;
        d->weight_types = (1ull << TS_TYPE_F16) | (1ull << TS_TYPE_Q8_0) | (1ull << TS_TYPE_Q4_0);
    } else {
        d->kind = TS_ENG_KIND_LOOP;
        d->window_bytes = (uint64_t)2 << 30;
        d->max_width = 4096;
        d->min_width = 1;
        d->ops = (1u << TS_OP_COUNT) - 1;
        d->weight_types = ts_eng_cpu_weight_types();
    }
    if (o->window) d->window_bytes = o->window; /* emulated: any size can be asked for */
    d->max_buf_bytes = d->window_bytes;
    snprintf(d->detail, sizeof d->detail,
             "loopback test device: the CPU's %s kernels behind a queue thread, %d thread%s%s%s",
             ts_cpu_level_name(ts_cpu_level_active()), L->n_threads, L->n_threads == 1 ? "" : "s",
             L->npu ? "; NPU profile" : "", L->nowait ? "; NOWAIT (broken on purpose)" : "");
    return e;
}

static int loop_check_variant(const char *variant, ts_err *err) {
    if (variant[0] && strcmp(variant, "npu"))
        return ts_err_set(err, "device 'loop' has no profile '%s' (known: loop, loop:npu)", variant);
    return 0;
}

static const char *const loop_options[] = {"threads", "delay_us",
#ifdef TS_TEST_HOOKS
                                           "nowait", "own_layout",
#endif
                                           NULL};
static const char *const loop_names[] = {"loop", "loop:npu", NULL};
const ts_eng_backend ts_eng_backend_loop = {
    .name = "loop",
    .names_help = "loop, loop:npu",
    .options = loop_options,
    .check_variant = loop_check_variant,
    .open = loop_open,
    .list_names = loop_names,
};
