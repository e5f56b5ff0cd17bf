/* hostdev.c - queues, events and memory of host-thread devices (hostdev.h). */
#include "engine/hostdev/hostdev.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void ts_hostdev_init(ts_hostdev *h) {
    pthread_mutex_init(&h->compute, NULL);
    pthread_mutex_init(&h->ev_lock, NULL);
    pthread_cond_init(&h->ev_cond, NULL);
}

void ts_hostdev_fini(ts_hostdev *h) {
    pthread_mutex_destroy(&h->compute);
    pthread_mutex_destroy(&h->ev_lock);
    pthread_cond_destroy(&h->ev_cond);
}

typedef struct hd_ev {
    int refs; /* host handle + commands naming it; under ev_lock */
    bool done;
} hd_ev;

enum { C_WRITE, C_READ, C_WAIT, C_MARKER, C_GRAPH };

typedef struct hd_cmd {
    struct hd_cmd *next;
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
} hd_cmd;

typedef struct hd_q {
    ts_engine *eng;
    pthread_t th;
    pthread_mutex_t m;
    pthread_cond_t cv;          /* worker: work arrived; host: work done */
    hd_cmd *pend, *pend_tail; /* enqueued, not yet flushed (host side) */
    hd_cmd *run, *run_tail;   /* handed to the device */
    bool busy;                  /* the worker is executing a command */
    bool failed;                /* a command could not run since the last finish */
    bool stop;
} hd_q;

/* ---- events ---- */

static void ev_unref(ts_eng_event *ev) {
    ts_hostdev *L = ev->eng->impl;
    hd_ev *le = ev->impl;
    pthread_mutex_lock(&L->ev_lock);
    const int left = --le->refs;
    pthread_mutex_unlock(&L->ev_lock);
    if (left == 0) {
        free(le);
        free(ev);
    }
}

static void ev_ref(ts_eng_event *ev) {
    ts_hostdev *L = ev->eng->impl;
    pthread_mutex_lock(&L->ev_lock);
    ((hd_ev *)ev->impl)->refs++;
    pthread_mutex_unlock(&L->ev_lock);
}

static void ev_complete(ts_eng_event *ev) {
    ts_hostdev *L = ev->eng->impl;
    pthread_mutex_lock(&L->ev_lock);
    ((hd_ev *)ev->impl)->done = true;
    pthread_cond_broadcast(&L->ev_cond);
    pthread_mutex_unlock(&L->ev_lock);
}

/* ---- the worker ---- */

static int run_graph(ts_engine *e, hd_cmd *c) {
    ts_hostdev *L = e->impl;
    ts_eng_graph *g = c->g;
    uint8_t *stack_base[64] = {0};
    uint8_t **base = g->n_slots <= 64 ? stack_base : malloc((size_t)g->n_slots * sizeof *base);
    if (!base)
        return -1;
    for (int s = 0; s < g->n_slots; s++)
        base[s] = c->binds[s].buf ? (uint8_t *)c->binds[s].buf->impl + c->binds[s].off : NULL;
    pthread_mutex_lock(&L->compute);
    const uint64_t t0 = ts_now_ns();
    const int rc = L->run_graph(e, g, c->binds, base, c->pos0, c->n_tok, c->n_kv);
    const uint64_t dt = ts_now_ns() - t0;
    if (L->slow > 1)
        ts_sleep_us((int64_t)((uint64_t)(L->slow - 1) * dt / 1000u));
    TS_ENG_COUNT(e, busy_ns, ts_now_ns() - t0);
    pthread_mutex_unlock(&L->compute);
    if (base != stack_base)
        free(base);
    if (!rc)
        TS_ENG_COUNT(e, nodes, (uint64_t)g->n_nodes);
    return rc;
}

/* 0, or -1 when the command could not run (reported by the next finish) */
static int exec_cmd(ts_engine *e, hd_cmd *c) {
    ts_hostdev *L = e->impl;
    switch (c->kind) {
    case C_WRITE:
    case C_READ: {
        const uint64_t t0 = ts_now_ns();
        if (c->kind == C_WRITE)
            memcpy((uint8_t *)c->buf->impl + c->off, c->src, c->n);
        else
            memcpy(c->dst, (const uint8_t *)c->buf->impl + c->off, c->n);
        if (L->copy_mbps > 0) {
            /* bytes / (MB/s) = microseconds */
            const uint64_t want_ns = (uint64_t)c->n * 1000u / (uint64_t)L->copy_mbps, dt = ts_now_ns() - t0;
            if (want_ns > dt)
                ts_sleep_us((int64_t)((want_ns - dt) / 1000));
        }
        break;
    }
    case C_MARKER: ev_complete(c->ev); break;
    case C_WAIT: {
        if (L->nowait)
            break; /* the broken hook: ordering is lost */
        const uint64_t t0 = ts_now_ns();
        pthread_mutex_lock(&L->ev_lock);
        while (!((hd_ev *)c->ev->impl)->done)
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

static void cmd_free(hd_cmd *c) {
    if (c->ev)
        ev_unref(c->ev);
    free(c->binds);
    free(c);
}

static void *worker(void *arg) {
    hd_q *q = arg;
    ts_engine *e = q->eng;
    ts_hostdev *L = e->impl;
    pthread_mutex_lock(&q->m);
    for (;;) {
        while (!q->run && !q->stop)
            pthread_cond_wait(&q->cv, &q->m);
        if (!q->run)
            break; /* stop with nothing left */
        hd_cmd *c = q->run;
        q->run = c->next;
        if (!q->run)
            q->run_tail = NULL;
        q->busy = true;
        pthread_mutex_unlock(&q->m);
        if (c->batch_start) {
            ts_sleep_us(L->delay_us); /* the cost of the crossing */
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

static int push(ts_eng_queue *qq, hd_cmd *c) {
    hd_q *q = qq->impl;
    pthread_mutex_lock(&q->m);
    if (q->pend_tail)
        q->pend_tail->next = c;
    else
        q->pend = c;
    q->pend_tail = c;
    pthread_mutex_unlock(&q->m);
    return 0;
}

static hd_cmd *new_cmd(int kind, ts_err *err) {
    hd_cmd *c = calloc(1, sizeof *c);
    if (!c)
        ts_err_set(err, "out of memory enqueuing a command");
    else
        c->kind = kind;
    return c;
}

static void flush_locked(hd_q *q) {
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

int ts_hostdev_flush(ts_eng_queue *qq, ts_err *err) {
    (void)err;
    hd_q *q = qq->impl;
    pthread_mutex_lock(&q->m);
    flush_locked(q);
    pthread_mutex_unlock(&q->m);
    return 0;
}

int ts_hostdev_finish(ts_eng_queue *qq, ts_err *err) {
    hd_q *q = qq->impl;
    pthread_mutex_lock(&q->m);
    flush_locked(q);
    while (q->run || q->busy)
        pthread_cond_wait(&q->cv, &q->m);
    const bool failed = q->failed;
    q->failed = false;
    pthread_mutex_unlock(&q->m);
    if (failed)
        return ts_err_set(err, "%s: a graph could not run (out of memory on the device thread, or a kernel refused "
                               "its operands)", qq->eng->desc.name);
    return 0;
}

int ts_hostdev_queue_init(ts_engine *e, ts_eng_queue *qq, ts_err *err) {
    hd_q *q = calloc(1, sizeof *q);
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

void ts_hostdev_queue_fini(ts_eng_queue *qq) {
    hd_q *q = qq->impl;
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

int ts_hostdev_write(ts_eng_queue *q, ts_eng_buf *b, size_t off, const void *src, size_t n, ts_err *err) {
    hd_cmd *c = new_cmd(C_WRITE, err);
    if (!c)
        return -1;
    c->buf = b, c->off = off, c->src = src, c->n = n;
    return push(q, c);
}

int ts_hostdev_read(ts_eng_queue *q, ts_eng_buf *b, size_t off, void *dst, size_t n, ts_err *err) {
    hd_cmd *c = new_cmd(C_READ, err);
    if (!c)
        return -1;
    c->buf = b, c->off = off, c->dst = dst, c->n = n;
    return push(q, c);
}

int ts_hostdev_host_sync(ts_eng_queue *q, ts_eng_buf *b, size_t off, size_t n, ts_eng_sync_dir dir, ts_err *err) {
    (void)q, (void)b, (void)off, (void)n, (void)dir, (void)err;
    return 0; /* HOST/MAPPED memory is the host's own: nothing to copy */
}

int ts_hostdev_wait(ts_eng_queue *q, ts_eng_event *ev, unsigned flags, ts_err *err) {
    /* A marker of another queue completes only once that queue hands it to
     * its worker: flush it, or this wait could never end. */
    if (ev->queue && ev->queue != q)
        (void)ts_hostdev_flush(ev->queue, NULL);
    hd_cmd *c = new_cmd(C_WAIT, err);
    if (!c)
        return -1;
    ev_ref(ev);
    c->ev = ev;
    c->flags = flags;
    return push(q, c);
}

int ts_hostdev_marker(ts_eng_queue *q, ts_eng_event *ev, ts_err *err) {
    hd_cmd *c = new_cmd(C_MARKER, err);
    if (!c)
        return -1;
    ev_ref(ev);
    c->ev = ev;
    return push(q, c);
}

int ts_hostdev_graph(ts_eng_queue *q, ts_eng_graph *g, const ts_eng_bind *binds, int64_t pos0, int n_tok,
                      int64_t n_kv, ts_err *err) {
    hd_cmd *c = new_cmd(C_GRAPH, err);
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

int ts_hostdev_event_init(ts_engine *e, ts_eng_event *ev, bool user, ts_err *err) {
    (void)e;
    (void)user;
    hd_ev *le = calloc(1, sizeof *le);
    if (!le)
        return ts_err_set(err, "out of memory");
    le->refs = 1;
    ev->impl = le;
    return 0;
}

void ts_hostdev_event_fini(ts_eng_event *ev) { ev_unref(ev); }

int ts_hostdev_event_signal(ts_eng_event *ev, ts_err *err) {
    (void)err;
    ev_complete(ev);
    return 0;
}

int ts_hostdev_event_wait(ts_eng_event *ev, ts_err *err) {
    (void)err;
    ts_hostdev *L = ev->eng->impl;
    if (ev->queue)
        (void)ts_hostdev_flush(ev->queue, NULL);
    pthread_mutex_lock(&L->ev_lock);
    while (!((hd_ev *)ev->impl)->done)
        pthread_cond_wait(&L->ev_cond, &L->ev_lock);
    pthread_mutex_unlock(&L->ev_lock);
    return 0;
}

bool ts_hostdev_event_done(ts_eng_event *ev) {
    ts_hostdev *L = ev->eng->impl;
    pthread_mutex_lock(&L->ev_lock);
    const bool d = ((hd_ev *)ev->impl)->done;
    pthread_mutex_unlock(&L->ev_lock);
    return d;
}

/* ---- buffers, graphs, engine ---- */

int ts_hostdev_buf_init(ts_engine *e, ts_eng_buf *b, ts_err *err) {
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

/* device memory here is host memory: another engine of the process may
 * read a weight buffer's bytes in place once they are uploaded */
const void *ts_hostdev_buf_peer_bytes(const ts_eng_buf *b) { return b->impl; }

void ts_hostdev_buf_fini(ts_eng_buf *b) {
    if (b->mem != TS_MEM_MAPPED)
        free(b->impl);
}

