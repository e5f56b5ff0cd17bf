/* engine.c - the checked wrappers of engine.h (registry.c has the
 * registry: names, options, listing, fallback line): argument and range checks, window
 * accounting and counters common to every engine, so an implementation
 * (cpu/, loop/, opencl/) only does its own work. Also the load-time helpers:
 * the weight-type probe, row conversion, rope frequency packing.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/engine_impl.h"
#include "kernels/repack.h"
#include "quant/quant.h"

/* ---- names ------------------------------------------------------------- */

const char *ts_eng_kind_name(ts_eng_kind k) {
    switch (k) {
    case TS_ENG_KIND_CPU: return "cpu";
    case TS_ENG_KIND_LOOP: return "loop";
    case TS_ENG_KIND_GPU: return "gpu";
    case TS_ENG_KIND_NPU: return "npu";
    case TS_ENG_KIND_OTHER: return "other";
    }
    return "?";
}

const char *ts_op_name(ts_op op) {
    static const char *const names[TS_OP_COUNT] = {
        [TS_OP_MATMUL] = "matmul",       [TS_OP_RMSNORM] = "rmsnorm",
        [TS_OP_ROPE] = "rope",           [TS_OP_KV_STORE] = "kv_store",
        [TS_OP_ATTENTION] = "attention", [TS_OP_SWIGLU] = "swiglu",
        [TS_OP_GEGLU] = "geglu",         [TS_OP_ADD] = "add",
        [TS_OP_ADD_ROW] = "add_row",     [TS_OP_LAYERNORM] = "layernorm",
        [TS_OP_MUL] = "mul",             [TS_OP_MODULATE] = "modulate",
        [TS_OP_GATED_ADD] = "gated_add", [TS_OP_MOE_ROUTE] = "moe_route",
        [TS_OP_MOE_MATMUL] = "moe_matmul", [TS_OP_CROSS_ATTN] = "cross_attn",
        [TS_OP_GELU] = "gelu",           [TS_OP_ROPE_TAB] = "rope_tab",
        [TS_OP_REL_ATTN] = "rel_attn",
    };
    return (unsigned)op < TS_OP_COUNT ? names[op] : "?";
}

/* ---- small helpers ------------------------------------------------------ */

void ts_eng_count(ts_engine *e, uint64_t *field, uint64_t v) {
    pthread_mutex_lock(&e->lock);
    *field += v;
    pthread_mutex_unlock(&e->lock);
}

void ts_eng_fmt_bytes(uint64_t b, char *out, size_t n) {
    if (b >= (1ull << 30) && b % (1ull << 30) == 0)
        snprintf(out, n, "%" PRIu64 " GiB", b >> 30);
    else if (b >= (1ull << 20))
        snprintf(out, n, "%.1f MiB", (double)b / (1 << 20));
    else if (b >= 1024)
        snprintf(out, n, "%.1f KiB", (double)b / 1024);
    else
        snprintf(out, n, "%" PRIu64 " B", b);
}

int ts_eng_window_reserve(ts_engine *e, uint64_t bytes, const char *what, ts_err *err) {
    pthread_mutex_lock(&e->lock);
    const uint64_t used = e->stats.window_used, win = e->desc.window_bytes;
    if (bytes > win || used > win - bytes) {
        pthread_mutex_unlock(&e->lock);
        char a[32], b[32], c[32];
        ts_eng_fmt_bytes(bytes, a, sizeof a);
        ts_eng_fmt_bytes(used, b, sizeof b);
        ts_eng_fmt_bytes(win, c, sizeof c);
        return ts_err_set(err, "%s: memory window full: %s (%" PRIu64 " bytes) for %s with %s of %s in use",
                          e->desc.name, a, bytes, what, b, c);
    }
    e->stats.window_used = used + bytes;
    if (e->stats.window_used > e->stats.window_peak)
        e->stats.window_peak = e->stats.window_used;
    pthread_mutex_unlock(&e->lock);
    return 0;
}

void ts_eng_window_release(ts_engine *e, uint64_t bytes) {
    pthread_mutex_lock(&e->lock);
    e->stats.window_used = bytes > e->stats.window_used ? 0 : e->stats.window_used - bytes;
    pthread_mutex_unlock(&e->lock);
}

/* strncpy that always terminates and that the compiler does not warn about
 * truncating (messages are cut on purpose). */
void ts_eng_copy_str(char *dst, size_t n, const char *src) {
    if (!n)
        return;
    size_t l = strlen(src);
    if (l >= n)
        l = n - 1;
    memcpy(dst, src, l);
    dst[l] = 0;
}

static void objects_add(ts_engine *e, int d) {
    pthread_mutex_lock(&e->lock);
    e->n_objects += d;
    pthread_mutex_unlock(&e->lock);
}

int ts_eng_parse_size(const char *s, uint64_t *out) {
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || s[0] == '-')
        return -1;
    unsigned shift = 0;
    if (*end) {
        switch (*end) {
        case 'k':
        case 'K': shift = 10; break;
        case 'm':
        case 'M': shift = 20; break;
        case 'g':
        case 'G': shift = 30; break;
        default: return -1;
        }
        end++;
        if (*end == 'i' || *end == 'I')
            end++; /* "64MiB" */
        if (*end == 'b' || *end == 'B')
            end++;
        if (*end)
            return -1;
    }
    if (shift && v > (UINT64_MAX >> shift))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

/* ---- engine shell ------------------------------------------------------- */

ts_engine *ts_eng_alloc(const ts_eng_vt *vt, const ts_eng_opts *o, ts_err *err) {
    ts_engine *e = calloc(1, sizeof *e);
    if (!e) {
        ts_err_set(err, "out of memory opening an engine");
        return NULL;
    }
    e->vt = vt;
    if (o)
        e->opts = *o;
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->bridges_done, NULL);
    return e;
}

void ts_eng_dealloc(ts_engine *e) {
    if (!e)
        return;
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->bridges_done);
    free(e);
}

/* ---- engine objects ------------------------------------------------------ */

void ts_eng_close(ts_engine *e) {
    if (!e)
        return;
    pthread_mutex_lock(&e->lock);
    while (e->bridges)
        pthread_cond_wait(&e->bridges_done, &e->lock);
    pthread_mutex_unlock(&e->lock);
    if (e->vt->close)
        e->vt->close(e); /* frees impl and the shell */
    else
        ts_eng_dealloc(e);
}

const ts_eng_desc *ts_eng_describe(const ts_engine *e) { return &e->desc; }
bool ts_eng_test_nodrain(const ts_engine *e) { return e && e->opts.nodrain; }
bool ts_eng_test_ooo_nowait(const ts_engine *e) { return e && e->opts.ooo_nowait; }
ts_eng_sched ts_eng_schedule(const ts_engine *e) { return e ? (ts_eng_sched)e->opts.sched : TS_SCHED_INORDER; }
int ts_eng_inflight(const ts_engine *e) { return e && e->opts.inflight ? e->opts.inflight : 4; }
int ts_eng_staging_slots(const ts_engine *e) { return e && e->opts.slots >= 2 ? e->opts.slots : 2; }
ts_eng_place ts_eng_placement(const ts_engine *e) { return e ? (ts_eng_place)e->opts.place : TS_PLACE_AUTO; }

const char *ts_eng_calib_path(const ts_engine *e) { return e ? e->opts.calib : ""; }
float ts_eng_prune(const ts_engine *e) { return e ? e->opts.prune : 0.0f; }
uint32_t ts_eng_prune_keep(const ts_engine *e) { return e ? e->opts.prune_keep : 0u; }

/* ---- clip records ---- */

uint64_t ts_eng_clip_bytes(int64_t n_in) {
    const uint64_t n = n_in > 0 ? (uint64_t)n_in : 0;
    return (sizeof(ts_eng_clip) + 4 * ((n + 31) / 32) + 4 * (uint64_t)TS_CLIP_BINS + 4 * n + 7) & ~(uint64_t)7;
}

/* 32 bins per octave: the exponent and the top 5 mantissa bits of |v| */
int ts_eng_clip_bin(float v) {
    uint32_t b;
    memcpy(&b, &v, 4);
    b &= 0x7fffffffu;
    if (b > 0x7f800000u)
        return TS_CLIP_BINS - 1; /* NaN */
    const int64_t i = (int64_t)(b >> 18) - (int64_t)((127 - 16) << 5);
    return i < 0 ? 0 : i >= TS_CLIP_BINS ? TS_CLIP_BINS - 1 : (int)i;
}

float ts_eng_clip_bin_top(int b) {
    const uint32_t bits = ((uint32_t)(b + 1 + ((127 - 16) << 5))) << 18;
    float v;
    memcpy(&v, &bits, 4);
    return v;
}

void ts_eng_clip_collect(ts_eng_clip *c, const float *x, int n_tok) {
    uint32_t *hist = ts_eng_clip_hist(c);
    float *cm = ts_eng_clip_chan_max(c);
    for (int t = 0; t < n_tok; t++)
        for (uint32_t k = 0; k < c->n_in; k++) {
            const float a = fabsf(x[(size_t)t * c->n_in + k]);
            hist[ts_eng_clip_bin(a)]++;
            if (!(a <= cm[k]) && cm[k] == cm[k])
                cm[k] = a; /* a NaN sticks */
        }
    c->n_tok += (uint64_t)(n_tok > 0 ? n_tok : 0);
}

void ts_eng_get_stats(const ts_engine *e, ts_eng_stats *out) {
    pthread_mutex_lock((pthread_mutex_t *)&e->lock);
    *out = e->stats;
    pthread_mutex_unlock((pthread_mutex_t *)&e->lock);
}

void ts_eng_reset_stats(ts_engine *e) {
    pthread_mutex_lock(&e->lock);
    const uint64_t used = e->stats.window_used;
    memset(&e->stats, 0, sizeof e->stats);
    e->stats.window_used = e->stats.window_peak = used;
    pthread_mutex_unlock(&e->lock);
}


bool ts_eng_supports_op(const ts_engine *e, ts_op op, uint32_t wtype) {
    if (!e || (unsigned)op >= TS_OP_COUNT || !(e->desc.ops & (1u << op)))
        return false;
    if (op == TS_OP_MATMUL && wtype < TS_TYPE_COUNT && !(e->desc.weight_types & (1ull << wtype)))
        return false;
    return !e->vt->supports_op || e->vt->supports_op(e, op, wtype);
}

/* ---- buffers ------------------------------------------------------------ */

static ts_eng_buf *buf_make(ts_engine *e, ts_eng_mem mem, size_t bytes, void *host, ts_err *err) {
    if (!e) {
        ts_err_set(err, "engine is NULL");
        return NULL;
    }
    if (bytes == 0) {
        ts_err_set(err, "%s: buffer of 0 bytes", e->desc.name);
        return NULL;
    }
    if (bytes > e->desc.max_buf_bytes) {
        char a[32], b[32];
        ts_eng_fmt_bytes(bytes, a, sizeof a);
        ts_eng_fmt_bytes(e->desc.max_buf_bytes, b, sizeof b);
        ts_err_set(err, "%s: buffer of %s (%zu bytes) exceeds the largest allowed (%s)", e->desc.name, a, bytes, b);
        return NULL;
    }
    if (ts_eng_window_reserve(e, bytes, mem == TS_MEM_MAPPED ? "a mapped host range" : "a buffer", err))
        return NULL;
    ts_eng_buf *b = calloc(1, sizeof *b);
    if (!b) {
        ts_eng_window_release(e, bytes);
        ts_err_set(err, "out of memory");
        return NULL;
    }
    b->eng = e;
    b->mem = mem;
    b->size = bytes;
    b->host = host;
    if (!e->vt->buf_init ? ts_err_set(err, "%s has no buffers", e->desc.name) : e->vt->buf_init(e, b, err)) {
        ts_eng_window_release(e, bytes);
        free(b);
        return NULL;
    }
    objects_add(e, 1);
    return b;
}

ts_eng_buf *ts_eng_buf_alloc(ts_engine *e, ts_eng_mem mem, size_t bytes, ts_err *err) {
    if (mem != TS_MEM_DEVICE && mem != TS_MEM_HOST) {
        ts_err_set(err, "buffer kind %d: allocate DEVICE or HOST memory (MAPPED comes from ts_eng_buf_map)", (int)mem);
        return NULL;
    }
    return buf_make(e, mem, bytes, NULL, err);
}

ts_eng_buf *ts_eng_buf_map(ts_engine *e, void *host, size_t bytes, ts_err *err) {
    if (!host) {
        ts_err_set(err, "mapping a NULL host pointer");
        return NULL;
    }
    if ((uintptr_t)host % 16) {
        ts_err_set(err, "mapping host pointer %p: not 16-byte aligned", host);
        return NULL;
    }
    return buf_make(e, TS_MEM_MAPPED, bytes, host, err);
}

void ts_eng_buf_free(ts_eng_buf *b) {
    if (!b)
        return;
    ts_engine *e = b->eng;
    e->vt->buf_fini(b);
    ts_eng_window_release(e, b->size);
    objects_add(e, -1);
    free(b);
}

size_t ts_eng_buf_size(const ts_eng_buf *b) { return b->size; }
ts_eng_mem ts_eng_buf_mem(const ts_eng_buf *b) { return b->mem; }
void *ts_eng_buf_host(const ts_eng_buf *b) { return b->host; }

const void *ts_eng_buf_peer_bytes(const ts_eng_buf *b) {
    if (!b) return NULL;
    if (b->host) return b->host;
    return b->mem == TS_MEM_DEVICE && b->eng->vt->buf_peer_bytes ? b->eng->vt->buf_peer_bytes(b) : NULL;
}

/* ---- queues and events -------------------------------------------------- */

ts_eng_queue *ts_eng_queue_new(ts_engine *e, ts_err *err) {
    if (!e) {
        ts_err_set(err, "engine is NULL");
        return NULL;
    }
    ts_eng_queue *q = calloc(1, sizeof *q);
    if (!q) {
        ts_err_set(err, "out of memory");
        return NULL;
    }
    q->eng = e;
    if (!e->vt->queue_init ? ts_err_set(err, "%s has no queues", e->desc.name) : e->vt->queue_init(e, q, err)) {
        free(q);
        return NULL;
    }
    objects_add(e, 1);
    return q;
}

void ts_eng_queue_free(ts_eng_queue *q) {
    if (!q)
        return;
    ts_engine *e = q->eng;
    (void)e->vt->finish(q, NULL);
    e->vt->queue_fini(q);
    objects_add(e, -1);
    free(q);
}

static int check_range(const ts_eng_queue *q, const ts_eng_buf *b, size_t off, size_t n, const char *what,
                       ts_err *err) {
    if (!q)
        return ts_err_set(err, "%s: queue is NULL", what);
    if (!b)
        return ts_err_set(err, "%s: buffer is NULL", what);
    if (b->eng != q->eng)
        return ts_err_set(err, "%s: buffer belongs to another engine", what);
    if (off > b->size || n > b->size - off)
        return ts_err_set(err, "%s: %s: range [%zu, %zu+%zu) past the end of a %zu-byte buffer (refused)",
                          q->eng->desc.name, what, off, off, n, b->size);
    return 0;
}

int ts_eng_enqueue_write(ts_eng_queue *q, ts_eng_buf *b, size_t off, const void *src, size_t n, ts_err *err) {
    if (check_range(q, b, off, n, "upload", err))
        return -1;
    if (!src && n)
        return ts_err_set(err, "upload: source is NULL");
    if (!n)
        return 0;
    if (q->eng->vt->enq_write(q, b, off, src, n, err))
        return -1;
    TS_ENG_COUNT(q->eng, upload_bytes, n);
    return 0;
}

int ts_eng_enqueue_read(ts_eng_queue *q, ts_eng_buf *b, size_t off, void *dst, size_t n, ts_err *err) {
    if (check_range(q, b, off, n, "download", err))
        return -1;
    if (!dst && n)
        return ts_err_set(err, "download: destination is NULL");
    if (!n)
        return 0;
    if (q->eng->vt->enq_read(q, b, off, dst, n, err))
        return -1;
    TS_ENG_COUNT(q->eng, download_bytes, n);
    return 0;
}

int ts_eng_enqueue_host_sync(ts_eng_queue *q, ts_eng_buf *b, size_t off, size_t n, ts_eng_sync_dir dir, ts_err *err) {
    if (check_range(q, b, off, n, "host sync", err))
        return -1;
    if (b->mem == TS_MEM_DEVICE)
        return ts_err_set(err, "host sync: a DEVICE buffer has no host side");
    if (dir != TS_SYNC_TO_DEVICE && dir != TS_SYNC_TO_HOST)
        return ts_err_set(err, "host sync: bad direction %d", (int)dir);
    if (!n)
        return 0;
    return q->eng->vt->enq_host_sync ? q->eng->vt->enq_host_sync(q, b, off, n, dir, err) : 0;
}

/* ---- waits across engines ----------------------------------------------- */

static void bridges_add(ts_engine *e, int d) {
    pthread_mutex_lock(&e->lock);
    e->bridges += d;
    if (!e->bridges)
        pthread_cond_broadcast(&e->bridges_done);
    pthread_mutex_unlock(&e->lock);
}

static void event_hold(ts_eng_event *ev) {
    pthread_mutex_lock(&ev->eng->lock);
    ev->handles++;
    pthread_mutex_unlock(&ev->eng->lock);
}

typedef struct bridge {
    ts_eng_event *from; /* the other engine's event (held) */
    ts_eng_event *to;   /* a user event of the waiting queue's engine (held) */
} bridge;

static void *bridge_main(void *p) {
    bridge *b = p;
    ts_engine *fe = b->from->eng, *te = b->to->eng;
    (void)ts_eng_event_wait(b->from, NULL); /* a failed wait still releases the queue */
    ts_eng_event_free(b->from);
    (void)ts_eng_event_signal(b->to, NULL);
    ts_eng_event_free(b->to);
    free(b);
    bridges_add(fe, -1);
    bridges_add(te, -1);
    return NULL;
}

/* q waits on ev of another engine (see engine.h). */
static int wait_foreign(ts_eng_queue *q, ts_eng_event *ev, unsigned flags, ts_err *err) {
    ts_engine *e = q->eng;
    if (e->desc.sync_queue) {
        /* q runs on the host as commands come: waiting here is the wait */
        const uint64_t t0 = ts_now_ns();
        const int rc = ts_eng_event_wait(ev, err);
        const uint64_t dt = ts_now_ns() - t0;
        if (flags & TS_WAIT_WEIGHTS)
            TS_ENG_COUNT(e, stall_ns, dt);
        else
            TS_ENG_COUNT(e, wait_ns, dt);
        return rc;
    }
    ts_eng_event *u = ts_eng_user_event(e, err);
    if (!u)
        return -1;
    if (e->vt->enq_wait(q, u, flags, err)) {
        ts_eng_event_free(u);
        return -1;
    }
    bridge *b = malloc(sizeof *b);
    if (!b) {
        (void)ts_eng_event_signal(u, NULL); /* never leave q blocked */
        ts_eng_event_free(u);
        return ts_err_set(err, "out of memory bridging a wait across engines");
    }
    event_hold(ev);
    b->from = ev;
    b->to = u;
    bridges_add(e, 1);
    bridges_add(ev->eng, 1);
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    const int rc = pthread_create(&th, &at, bridge_main, b);
    pthread_attr_destroy(&at);
    if (rc) {
        /* no thread: wait on the host instead, then release q */
        bridge_main(b);
        return 0;
    }
    return 0;
}

int ts_eng_enqueue_wait(ts_eng_queue *q, ts_eng_event *ev, unsigned flags, ts_err *err) {
    if (!q || !ev)
        return ts_err_set(err, "wait: queue or event is NULL");
    if (flags & ~TS_WAIT_WEIGHTS)
        return ts_err_set(err, "wait: unknown flags 0x%x", flags);
    if (ev->eng != q->eng)
        return wait_foreign(q, ev, flags, err);
    return q->eng->vt->enq_wait(q, ev, flags, err);
}

static ts_eng_event *event_make(ts_engine *e, ts_eng_queue *q, bool user, ts_err *err) {
    ts_eng_event *ev = calloc(1, sizeof *ev);
    if (!ev) {
        ts_err_set(err, "out of memory");
        return NULL;
    }
    ev->eng = e;
    ev->queue = q;
    ev->user = user;
    ev->handles = 1;
    if (!e->vt->event_init ? ts_err_set(err, "%s has no events", e->desc.name) : e->vt->event_init(e, ev, user, err)) {
        free(ev);
        return NULL;
    }
    objects_add(e, 1);
    return ev;
}

ts_eng_event *ts_eng_enqueue_marker(ts_eng_queue *q, ts_err *err) {
    if (!q) {
        ts_err_set(err, "marker: queue is NULL");
        return NULL;
    }
    ts_eng_event *ev = event_make(q->eng, q, false, err);
    if (!ev)
        return NULL;
    if (q->eng->vt->enq_marker(q, ev, err)) {
        ts_eng_event_free(ev);
        return NULL;
    }
    return ev;
}

ts_eng_event *ts_eng_user_event(ts_engine *e, ts_err *err) {
    if (!e) {
        ts_err_set(err, "engine is NULL");
        return NULL;
    }
    return event_make(e, NULL, true, err);
}

int ts_eng_event_signal(ts_eng_event *ev, ts_err *err) {
    if (!ev)
        return ts_err_set(err, "signal: event is NULL");
    if (!ev->user)
        return ts_err_set(err, "signal: only a user event can be signalled by the host");
    return ev->eng->vt->event_signal(ev, err);
}

int ts_eng_event_wait(ts_eng_event *ev, ts_err *err) {
    if (!ev)
        return ts_err_set(err, "event wait: event is NULL");
    return ev->eng->vt->event_wait(ev, err);
}

bool ts_eng_event_done(ts_eng_event *ev) { return ev && ev->eng->vt->event_done(ev); }

void ts_eng_event_free(ts_eng_event *ev) {
    if (!ev)
        return;
    ts_engine *e = ev->eng;
    pthread_mutex_lock(&e->lock);
    const int left = --ev->handles;
    pthread_mutex_unlock(&e->lock);
    if (left > 0)
        return; /* a bridge still holds it */
    e->vt->event_fini(ev); /* the engine frees ev once nothing refers to it */
    objects_add(e, -1);
}

int ts_eng_queue_flush(ts_eng_queue *q, ts_err *err) {
    if (!q)
        return ts_err_set(err, "flush: queue is NULL");
    return q->eng->vt->flush(q, err);
}

int ts_eng_queue_finish(ts_eng_queue *q, ts_err *err) {
    if (!q)
        return ts_err_set(err, "finish: queue is NULL");
    return q->eng->vt->finish(q, err);
}

/* ---- graphs ------------------------------------------------------------- */

int ts_eng_node_refs(const ts_eng_node *n, int n_tok, ts_eng_ref *refs, uint64_t *bytes, uint32_t *align,
                     bool *is_weight) {
    int k = 0;
    const uint64_t T = (uint64_t)(n_tok > 0 ? n_tok : 0);
#define REF(r, b, a, w) (refs[k] = (r), bytes[k] = (b), align[k] = (a), is_weight[k] = (w), k++)
    switch (n->op) {
    case TS_OP_MATMUL:
        REF(n->matmul.w, 0, 1, true); /* size from the binding */
        REF(n->matmul.x, T * (uint64_t)n->matmul.n_in * 4, 4, false);
        REF(n->matmul.y, T * (uint64_t)n->matmul.n_out * 4, 4, false);
        REF(n->matmul.clipped ? n->matmul.clip : TS_ENG_NOREF, ts_eng_clip_bytes(n->matmul.n_in), 8, false);
        break;
    case TS_OP_RMSNORM: {
        const uint64_t b = T * (uint64_t)n->rmsnorm.rows_per_tok * (uint64_t)n->rmsnorm.n * 4;
        REF(n->rmsnorm.x, b, 4, false);
        REF(n->rmsnorm.y, b, 4, false);
        REF(n->rmsnorm.w, (uint64_t)n->rmsnorm.n * 4, 4, false);
        break;
    }
    case TS_OP_ROPE:
        REF(n->rope.x, T * (uint64_t)n->rope.n_head * (uint64_t)n->rope.head_dim * 4, 4, false);
        REF(n->rope.freq, ts_eng_rope_freq_bytes(n->rope.n_rot), 8, false);
        break;
    case TS_OP_KV_STORE: {
        const uint64_t es = n->kv_store.f16 ? 2 : 4;
        REF(n->kv_store.k, T * (uint64_t)n->kv_store.dim * 4, 4, false);
        REF(n->kv_store.v, T * (uint64_t)n->kv_store.dim * 4, 4, false);
        REF(n->kv_store.kc, (uint64_t)n->kv_store.n_ctx * (uint64_t)n->kv_store.dim * es, (uint32_t)es, false);
        REF(n->kv_store.vc, (uint64_t)n->kv_store.n_ctx * (uint64_t)n->kv_store.dim * es, (uint32_t)es, false);
        break;
    }
    case TS_OP_ATTENTION: {
        const uint64_t es = n->attention.kv_f16 ? 2 : 4;
        const uint64_t qb = T * (uint64_t)n->attention.n_head * (uint64_t)n->attention.head_dim * 4;
        const uint64_t cb =
            (uint64_t)n->attention.n_ctx * (uint64_t)n->attention.n_head_kv * (uint64_t)n->attention.head_dim * es;
        REF(n->attention.q, qb, 4, false);
        REF(n->attention.kc, cb, (uint32_t)es, false);
        REF(n->attention.vc, cb, (uint32_t)es, false);
        REF(n->attention.out, qb, 4, false);
        break;
    }
    case TS_OP_SWIGLU:
    case TS_OP_GEGLU: {
        const uint64_t b = T * (uint64_t)n->glu.n * 4;
        REF(n->glu.gate, b, 4, false);
        REF(n->glu.up, b, 4, false);
        REF(n->glu.out, b, 4, false);
        break;
    }
    case TS_OP_ADD:
    case TS_OP_ADD_ROW:
        REF(n->add.y, T * (uint64_t)n->add.n * 4, 4, false);
        REF(n->add.x, (n->op == TS_OP_ADD ? T : 1) * (uint64_t)n->add.n * 4, 4, false);
        break;
    case TS_OP_LAYERNORM: {
        const uint64_t b = T * (uint64_t)n->layernorm.n * 4;
        REF(n->layernorm.x, b, 4, false);
        REF(n->layernorm.y, b, 4, false);
        REF(n->layernorm.w, (uint64_t)n->layernorm.n * 4, 4, false);
        REF(n->layernorm.b, (uint64_t)n->layernorm.n * 4, 4, false);
        break;
    }
    case TS_OP_MUL:
        REF(n->mul.y, T * (uint64_t)n->mul.n * 4, 4, false);
        REF(n->mul.a, T * (uint64_t)n->mul.n * 4, 4, false);
        REF(n->mul.b, (n->mul.b_row ? 1 : T) * (uint64_t)n->mul.n * 4, 4, false);
        break;
    case TS_OP_MODULATE:
    case TS_OP_GATED_ADD: {
        /* modulation rows: one per sample of tok_per_sample tokens */
        const uint64_t tps = n->modulate.tok_per_sample > 0 ? (uint64_t)n->modulate.tok_per_sample : 1;
        const uint64_t samples = T ? (T + tps - 1) / tps : 0;
        const uint64_t mb = samples ? ((samples - 1) * (uint64_t)n->modulate.mod_stride + (uint64_t)n->modulate.n) * 4 : 0;
        REF(n->modulate.x, T * (uint64_t)n->modulate.n * 4, 4, false);
        REF(n->modulate.y, T * (uint64_t)n->modulate.n * 4, 4, false);
        REF(n->modulate.shift, mb, 4, false);
        REF(n->modulate.scale, mb, 4, false);
        break;
    }
    case TS_OP_MOE_ROUTE:
        REF(n->route.logits, T * (uint64_t)n->route.n_expert * 4, 4, false);
        REF(n->route.ids, T * (uint64_t)n->route.k * 4, 4, false);
        REF(n->route.weights, T * (uint64_t)n->route.k * 4, 4, false);
        break;
    case TS_OP_MOE_MATMUL: {
        const uint64_t K = (uint64_t)n->moe.k;
        REF(n->moe.w, 0, 1, true); /* size from the binding */
        REF(n->moe.x, (n->moe.x_by_pair ? T * K : T) * (uint64_t)n->moe.n_in * 4, 4, false);
        REF(n->moe.y, (n->moe.y_by_pair ? T * K : T) * (uint64_t)n->moe.n_out * 4, 4, false);
        REF(n->moe.ids, T * K * 4, 4, false);
        REF(n->moe.weights, T * K * 4, 4, false);
        break;
    }
    case TS_OP_CROSS_ATTN: {
        const uint64_t qb = T * (uint64_t)n->xattn.n_head * (uint64_t)n->xattn.head_dim * 4;
        const uint64_t kb = (uint64_t)n->xattn.n_kv * (uint64_t)n->xattn.n_head_kv * (uint64_t)n->xattn.head_dim * 4;
        REF(n->xattn.q, qb, 4, false);
        REF(n->xattn.k, kb, 4, false);
        REF(n->xattn.v, kb, 4, false);
        REF(n->xattn.out, qb, 4, false);
        break;
    }
    case TS_OP_GELU:
        REF(n->act.x, T * (uint64_t)n->act.n * 4, 4, false);
        REF(n->act.y, T * (uint64_t)n->act.n * 4, 4, false);
        break;
    case TS_OP_ROPE_TAB:
        REF(n->rope_tab.x, T * (uint64_t)n->rope_tab.n_head * (uint64_t)n->rope_tab.head_dim * 4, 4, false);
        REF(n->rope_tab.tab, T * (uint64_t)n->rope_tab.head_dim * 8, 8, false);
        break;
    case TS_OP_REL_ATTN: {
        const uint64_t qb = T * (uint64_t)n->relattn.n_head * (uint64_t)n->relattn.head_dim * 4;
        REF(n->relattn.q, qb, 4, false);
        REF(n->relattn.k, qb, 4, false);
        REF(n->relattn.v, qb, 4, false);
        REF(n->relattn.out, qb, 4, false);
        REF(n->relattn.bias, (uint64_t)n->relattn.n_head * (2 * (uint64_t)n->relattn.max_rel + 1) * 4, 4, false);
        break;
    }
    default: break;
    }
#undef REF
    return k;
}

/* Shape checks of one node that do not depend on the engine. */
static int check_node_shape(const ts_eng_node *n, int idx, int n_slots, ts_err *err) {
    const char *nm = ts_op_name(n->op);
    if ((unsigned)n->op >= TS_OP_COUNT)
        return ts_err_set(err, "node %d: unknown op %d", idx, (int)n->op);
    const int64_t lim = (int64_t)1 << 30;
#define BAD(cond, ...) \
    do { \
        if (cond) { \
            ts_err_set(err, __VA_ARGS__); \
            return ts_err_prefix(err, "node %d (%s)", idx, nm); \
        } \
    } while (0)
    switch (n->op) {
    case TS_OP_MATMUL:
        BAD(n->matmul.n_in < 1 || n->matmul.n_in > lim, "n_in %lld out of range", (long long)n->matmul.n_in);
        BAD(n->matmul.n_out < 1 || n->matmul.n_out > lim, "n_out %lld out of range", (long long)n->matmul.n_out);
        break;
    case TS_OP_RMSNORM:
        BAD(n->rmsnorm.n < 1 || n->rmsnorm.n > lim, "n %lld out of range", (long long)n->rmsnorm.n);
        BAD(n->rmsnorm.rows_per_tok < 1 || n->rmsnorm.rows_per_tok > 65536, "rows_per_tok %d out of range",
            n->rmsnorm.rows_per_tok);
        BAD(!(n->rmsnorm.eps >= 0.0f) || !isfinite(n->rmsnorm.eps), "eps %g is not a finite value >= 0",
            (double)n->rmsnorm.eps);
        break;
    case TS_OP_ROPE:
        BAD(n->rope.n_head < 1 || n->rope.n_head > 65536, "n_head %d out of range", n->rope.n_head);
        BAD(n->rope.head_dim < 2 || n->rope.head_dim > 65536, "head_dim %d out of range", n->rope.head_dim);
        BAD(n->rope.n_rot < 2 || n->rope.n_rot > n->rope.head_dim || n->rope.n_rot % 2,
            "n_rot %d must be even and in [2, head_dim %d]", n->rope.n_rot, n->rope.head_dim);
        break;
    case TS_OP_KV_STORE:
        BAD(n->kv_store.dim < 1 || n->kv_store.dim > lim, "dim %lld out of range", (long long)n->kv_store.dim);
        BAD(n->kv_store.n_ctx < 1, "n_ctx %d out of range", n->kv_store.n_ctx);
        break;
    case TS_OP_ATTENTION:
        BAD(n->attention.n_head < 1 || n->attention.n_head_kv < 1 || n->attention.n_head % n->attention.n_head_kv,
            "n_head %d is not a positive multiple of n_head_kv %d", n->attention.n_head, n->attention.n_head_kv);
        BAD(n->attention.head_dim < 1 || n->attention.head_dim > 65536, "head_dim %d out of range",
            n->attention.head_dim);
        BAD(n->attention.n_ctx < 1, "n_ctx %d out of range", n->attention.n_ctx);
        BAD(n->attention.n_swa < 0, "n_swa %d is negative", n->attention.n_swa);
        BAD(!isfinite(n->attention.scale) || !(n->attention.softcap >= 0.0f) || !isfinite(n->attention.softcap),
            "scale %g / softcap %g not finite (softcap >= 0)", (double)n->attention.scale,
            (double)n->attention.softcap);
        break;
    case TS_OP_SWIGLU:
    case TS_OP_GEGLU: BAD(n->glu.n < 1 || n->glu.n > lim, "n %lld out of range", (long long)n->glu.n); break;
    case TS_OP_ADD:
    case TS_OP_ADD_ROW: BAD(n->add.n < 1 || n->add.n > lim, "n %lld out of range", (long long)n->add.n); break;
    case TS_OP_LAYERNORM:
        BAD(n->layernorm.n < 1 || n->layernorm.n > lim, "n %lld out of range", (long long)n->layernorm.n);
        BAD(!(n->layernorm.eps >= 0.0f) || !isfinite(n->layernorm.eps), "eps %g is not a finite value >= 0",
            (double)n->layernorm.eps);
        break;
    case TS_OP_MUL: BAD(n->mul.n < 1 || n->mul.n > lim, "n %lld out of range", (long long)n->mul.n); break;
    case TS_OP_MODULATE:
    case TS_OP_GATED_ADD:
        BAD(n->modulate.n < 1 || n->modulate.n > lim, "n %lld out of range", (long long)n->modulate.n);
        BAD(n->modulate.tok_per_sample < 1, "tok_per_sample %d must be >= 1", n->modulate.tok_per_sample);
        BAD(n->modulate.mod_stride < n->modulate.n || n->modulate.mod_stride > lim,
            "mod_stride %lld must be in [n %lld, 2^30]", (long long)n->modulate.mod_stride, (long long)n->modulate.n);
        break;
    case TS_OP_MOE_ROUTE:
        BAD(n->route.n_expert < 1 || n->route.n_expert > 65536, "n_expert %d out of range", n->route.n_expert);
        BAD(n->route.k < 1 || n->route.k > n->route.n_expert, "k %d must be in [1, n_expert %d]", n->route.k,
            n->route.n_expert);
        BAD(n->route.score > 2, "score %d unknown (0 top-k softmax, 1 softmax top-k, 2 sigmoid top-k)",
            (int)n->route.score);
        break;
    case TS_OP_MOE_MATMUL:
        BAD(n->moe.n_in < 1 || n->moe.n_in > lim, "n_in %lld out of range", (long long)n->moe.n_in);
        BAD(n->moe.n_out < 1 || n->moe.n_out > lim, "n_out %lld out of range", (long long)n->moe.n_out);
        BAD(n->moe.n_expert < 1 || n->moe.n_expert > 65536, "n_expert %d out of range", n->moe.n_expert);
        BAD(n->moe.k < 1 || n->moe.k > n->moe.n_expert, "k %d must be in [1, n_expert %d]", n->moe.k,
            n->moe.n_expert);
        break;
    case TS_OP_CROSS_ATTN:
        BAD(n->xattn.n_head < 1 || n->xattn.n_head_kv < 1 || n->xattn.n_head % n->xattn.n_head_kv,
            "n_head %d is not a positive multiple of n_head_kv %d", n->xattn.n_head, n->xattn.n_head_kv);
        BAD(n->xattn.head_dim < 1 || n->xattn.head_dim > 65536, "head_dim %d out of range", n->xattn.head_dim);
        BAD(n->xattn.n_kv < 1 || n->xattn.n_kv > (1 << 24), "n_kv %d out of range", n->xattn.n_kv);
        BAD(!isfinite(n->xattn.scale), "scale %g not finite", (double)n->xattn.scale);
        break;
    case TS_OP_GELU: BAD(n->act.n < 1 || n->act.n > lim, "n %lld out of range", (long long)n->act.n); break;
    case TS_OP_ROPE_TAB:
        BAD(n->rope_tab.n_head < 1 || n->rope_tab.n_head > 65536, "n_head %d out of range", n->rope_tab.n_head);
        BAD(n->rope_tab.head_dim < 2 || n->rope_tab.head_dim > 65536 || n->rope_tab.head_dim % 2,
            "head_dim %d must be even and in [2, 65536]", n->rope_tab.head_dim);
        break;
    case TS_OP_REL_ATTN:
        BAD(n->relattn.n_head < 1 || n->relattn.n_head > 65536, "n_head %d out of range", n->relattn.n_head);
        BAD(n->relattn.head_dim < 1 || n->relattn.head_dim > 65536, "head_dim %d out of range", n->relattn.head_dim);
        BAD(n->relattn.max_rel < 0 || n->relattn.max_rel > (1 << 24), "max_rel %d out of range [0, 2^24]",
            n->relattn.max_rel);
        BAD(!isfinite(n->relattn.scale), "scale %g not finite", (double)n->relattn.scale);
        break;
    default: break;
    }
    ts_eng_ref refs[6] = {{0}};
    uint64_t bytes[6] = {0};
    uint32_t align[6] = {0};
    bool isw[6] = {0};
    const int k = ts_eng_node_refs(n, 1, refs, bytes, align, isw);
    for (int i = 0; i < k; i++) {
        /* optional operands: norm weights and bias, modulation shift/scale,
         * the routing weights of a grouped matmul */
        const bool optional = (n->op == TS_OP_RMSNORM && i == 2) || (n->op == TS_OP_LAYERNORM && i >= 2) ||
                              (n->op == TS_OP_MODULATE && i >= 2) || (n->op == TS_OP_GATED_ADD && i == 2) ||
                              (n->op == TS_OP_MOE_MATMUL && i == 4) || (n->op == TS_OP_MATMUL && i == 3);
        BAD(refs[i].slot < 0 && !optional, "operand %d has no slot", i);
        BAD(refs[i].slot >= n_slots, "operand %d uses slot %d of %d", i, refs[i].slot, n_slots);
    }
#undef BAD
    return 0;
}

ts_eng_graph *ts_eng_graph_new(ts_engine *e, const ts_eng_node *nodes, int n_nodes, int n_slots, int width,
                               ts_err *err) {
    if (!e || !nodes) {
        ts_err_set(err, "graph: engine or nodes is NULL");
        return NULL;
    }
    const ts_eng_desc *d = &e->desc;
    if (n_nodes < 1 || n_nodes > 1 << 20) {
        ts_err_set(err, "graph: %d nodes", n_nodes);
        return NULL;
    }
    if (n_slots < 1 || n_slots > 4096) {
        ts_err_set(err, "graph: %d slots (1..4096)", n_slots);
        return NULL;
    }
    if (width < 1 || width > d->max_width) {
        ts_err_set(err, "%s: graph width %d outside [1, %d]", d->name, width, d->max_width);
        return NULL;
    }
    if (d->widths_required) {
        bool ok = false;
        for (int i = 0; i < d->n_widths; i++)
            ok |= d->widths[i] == width;
        if (!ok) {
            ts_err_set(err, "%s: graph width %d refused: this device runs only widths of %d..%d from its list", d->name,
                       width, d->n_widths ? d->widths[0] : 0, d->n_widths ? d->widths[d->n_widths - 1] : 0);
            return NULL;
        }
    }
    for (int i = 0; i < n_nodes; i++) {
        if (check_node_shape(&nodes[i], i, n_slots, err))
            return NULL;
        if (!ts_eng_supports_op(e, nodes[i].op, TS_ENG_ANY_WTYPE)) {
            ts_err_set(err, "%s: node %d: op %s is not supported by this device", d->name, i, ts_op_name(nodes[i].op));
            return NULL;
        }
        if (e->vt->check_node && e->vt->check_node(e, &nodes[i], width, err)) {
            ts_err_prefix(err, "%s: node %d (%s)", d->name, i, ts_op_name(nodes[i].op));
            return NULL;
        }
    }
    ts_eng_graph *g = calloc(1, sizeof *g);
    if (g)
        g->nodes = malloc((size_t)n_nodes * sizeof *nodes);
    if (!g || !g->nodes) {
        if (g)
            free(g);
        ts_err_set(err, "out of memory building a graph");
        return NULL;
    }
    memcpy(g->nodes, nodes, (size_t)n_nodes * sizeof *nodes);
    g->eng = e;
    g->n_nodes = n_nodes;
    g->n_slots = n_slots;
    g->width = width;
    g->kv_cap = g->attn_cap = INT32_MAX;
    g->swa_node = -1;
    for (int i = 0; i < n_nodes; i++) {
        const ts_eng_node *n = &nodes[i];
        if (n->op != TS_OP_KV_STORE && n->op != TS_OP_ATTENTION)
            continue;
        const int32_t cap = n->op == TS_OP_KV_STORE ? n->kv_store.n_ctx : n->attention.n_ctx;
        if (cap < g->kv_cap)
            g->kv_cap = cap, g->kv_cap_node = i;
        if (n->op == TS_OP_ATTENTION && cap < g->attn_cap)
            g->attn_cap = cap, g->attn_cap_node = i;
        if (n->op == TS_OP_ATTENTION && n->attention.n_swa > 0 && g->swa_node < 0)
            g->swa_node = i;
    }
    g->scratch_bytes = e->vt->graph_scratch ? e->vt->graph_scratch(e, g) : 0;
    if (g->scratch_bytes && ts_eng_window_reserve(e, g->scratch_bytes, "graph scratch", err))
        goto fail;
    if (!e->vt->graph_init ? ts_err_set(err, "%s takes no graphs", e->desc.name) : e->vt->graph_init(e, g, err)) {
        ts_eng_window_release(e, g->scratch_bytes);
        goto fail;
    }
    objects_add(e, 1);
    TS_ENG_COUNT(e, graph_builds, 1);
    return g;
fail:
    free(g->nodes);
    free(g);
    return NULL;
}

void ts_eng_graph_free(ts_eng_graph *g) {
    if (!g)
        return;
    ts_engine *e = g->eng;
    e->vt->graph_fini(g);
    ts_eng_window_release(e, g->scratch_bytes);
    objects_add(e, -1);
    free(g->nodes);
    free(g);
}

int ts_eng_graph_width(const ts_eng_graph *g) { return g->width; }

/* Checks one binding of a weight slot for a matmul of n_in x n_out. */
static int check_weight(const ts_engine *e, const ts_eng_bind *b, int64_t n_in, int64_t n_out, uint64_t *bytes,
                        ts_err *err) {
    const ts_type_traits *tt = ts_type_info(b->wtype);
    if (!tt)
        return ts_err_set(err, "weight type id %u unknown", b->wtype);
    if (!ts_eng_supports_op(e, TS_OP_MATMUL, b->wtype))
        return ts_err_set(err, "%s does not take %s weights (convert them at load: ts_eng_probe_weight_type)",
                          e->desc.name, tt->name);
    const size_t rb = ts_row_size(b->wtype, n_in);
    if (!rb || rb != b->row_bytes)
        return ts_err_set(err, "%s weight with rows of %lld: row_bytes %" PRIu64 ", expected %zu", tt->name,
                          (long long)n_in, b->row_bytes, rb);
    if (b->layout == TS_WL_ROWS) {
        *bytes = (uint64_t)n_out * rb;
    } else if (b->layout == TS_WL_PANELS) {
        if (!e->desc.cpu_layouts)
            return ts_err_set(err, "%s does not take CPU panel layouts", e->desc.name);
        *bytes = ts_rp_matrix_bytes(b->wtype, n_in, n_out);
        if (!*bytes)
            return ts_err_set(err, "%s cannot be in panel layout", tt->name);
    } else if (b->layout == TS_WL_ENGINE) {
        *bytes = ts_eng_packed_bytes(e, b->wtype, n_in, n_out);
        if (!*bytes)
            return ts_err_set(err, "%s has no weight layout of its own for %s rows of %lld", e->desc.name, tt->name,
                              (long long)n_in);
    } else {
        return ts_err_set(err, "weight layout %d unknown", (int)b->layout);
    }
    return 0;
}

uint64_t ts_eng_packed_bytes(const ts_engine *e, uint32_t wtype, int64_t n_in, int64_t n_out) {
    if (!e || !e->vt->packed_bytes || !ts_type_info(wtype) || n_in < 1 || n_out < 1)
        return 0;
    return e->vt->packed_bytes(e, wtype, n_in, n_out);
}

int ts_eng_pack(const ts_engine *e, uint32_t wtype, const void *rows, size_t row_bytes, int64_t n_in, int64_t n_out,
                void *dst, ts_err *err) {
    if (!ts_eng_packed_bytes(e, wtype, n_in, n_out))
        return ts_err_set(err, "%s: no weight layout of its own for type %u rows of %lld", e ? e->desc.name : "?",
                          wtype, (long long)n_in);
    if (!rows || !dst || row_bytes < ts_row_size(wtype, n_in))
        return ts_err_set(err, "%s: pack: rows or destination missing, or rows of %zu bytes too short",
                          e->desc.name, row_bytes);
    return e->vt->pack(e, wtype, rows, row_bytes, n_in, n_out, dst, err);
}

int ts_eng_enqueue_graph(ts_eng_queue *q, ts_eng_graph *g, const ts_eng_bind *binds, int n_binds, int64_t pos0,
                         int n_tok, ts_err *err) {
    return ts_eng_enqueue_graph_window(q, g, binds, n_binds, pos0, n_tok, 0, err);
}

/* The checks of one run that do not depend on the bindings. */
static int run_checks(const ts_engine *e, const ts_eng_graph *g, int64_t pos0, int n_tok, int64_t n_kv, ts_err *err) {
    if (n_tok < 1 || n_tok > g->width)
        return ts_err_set(err, "graph run: n_tok %d outside [1, %d]", n_tok, g->width);
    if (e->desc.widths_required && n_tok != g->width)
        return ts_err_set(err, "%s: graph run of %d tokens: this device requires exactly the graph width %d",
                          e->desc.name, n_tok, g->width);
    if (pos0 < 0 || pos0 > (int64_t)1 << 40)
        return ts_err_set(err, "graph run: pos0 %lld out of range", (long long)pos0);
    /* rows at or past n_kv are padding: the window's first row must be a key */
    if (n_kv != 0 && n_kv <= pos0)
        return ts_err_set(err, "graph run: n_kv %lld does not reach the window start pos0 %lld (0 = causal)",
                          (long long)n_kv, (long long)pos0);
    if (pos0 + n_tok > g->kv_cap)
        return ts_err_set(err, "graph run: node %d (%s): positions up to %lld past the cache's %d rows", g->kv_cap_node,
                          ts_op_name(g->nodes[g->kv_cap_node].op), (long long)(pos0 + n_tok), g->kv_cap);
    if (n_kv > g->attn_cap)
        return ts_err_set(err, "graph run: node %d (attention): n_kv %lld past the cache's %d rows", g->attn_cap_node,
                          (long long)n_kv, g->attn_cap);
    if (n_kv > 0 && g->swa_node >= 0)
        return ts_err_set(err, "graph run: node %d (attention): window mode (n_kv %lld) with n_swa %d", g->swa_node,
                          (long long)n_kv, g->nodes[g->swa_node].attention.n_swa);
    return 0;
}

/* Every binding of g against its buffer for runs of n_tok tokens (ranges
 * grow with n_tok, so a check at the width holds for every narrower run). */
static int bind_checks(const ts_engine *e, const ts_eng_graph *g, const ts_eng_bind *binds, int n_binds, int n_tok,
                       ts_err *err) {
    if (n_binds < g->n_slots || !binds)
        return ts_err_set(err, "graph run: %d bindings for %d slots", n_binds, g->n_slots);
    for (int i = 0; i < g->n_slots; i++) {
        const ts_eng_bind *b = &binds[i];
        if (b->buf && b->buf->eng != e)
            return ts_err_set(err, "graph run: slot %d is bound to another engine's buffer", i);
        if (b->buf && b->off > b->buf->size)
            return ts_err_set(err, "graph run: slot %d offset %" PRIu64 " past its %zu-byte buffer", i, b->off,
                              b->buf->size);
    }
    for (int ni = 0; ni < g->n_nodes; ni++) {
        const ts_eng_node *n = &g->nodes[ni];
        ts_eng_ref refs[6] = {{0}};
        uint64_t bytes[6] = {0};
        uint32_t align[6] = {0};
        bool isw[6] = {0};
        const int k = ts_eng_node_refs(n, n_tok, refs, bytes, align, isw);
        for (int i = 0; i < k; i++) {
            if (refs[i].slot < 0)
                continue;
            const ts_eng_bind *b = &binds[refs[i].slot];
            if (!b->buf)
                return ts_err_set(err, "graph run: node %d (%s): slot %d is not bound", ni, ts_op_name(n->op),
                                  refs[i].slot);
            uint64_t need = bytes[i];
            if (isw[i] && n->op == TS_OP_MOE_MATMUL) {
                uint64_t one = 0;
                if (check_weight(e, b, n->moe.n_in, n->moe.n_out, &one, err))
                    return ts_err_prefix(err, "graph run: node %d (moe_matmul), slot %d", ni, refs[i].slot);
                if (b->n_expert != n->moe.n_expert || b->expert_bytes < one)
                    return ts_err_set(err,
                                      "graph run: node %d (moe_matmul), slot %d: bound to %d experts of %" PRIu64
                                      " bytes, the node needs %d of >= %" PRIu64,
                                      ni, refs[i].slot, b->n_expert, b->expert_bytes, n->moe.n_expert, one);
                need = (uint64_t)(n->moe.n_expert - 1) * b->expert_bytes + one;
            } else if (isw[i] && check_weight(e, b, n->matmul.n_in, n->matmul.n_out, &need, err)) {
                return ts_err_prefix(err, "graph run: node %d (matmul), slot %d", ni, refs[i].slot);
            }
            uint64_t start, end;
            if (ts_add_overflow_u64(b->off, refs[i].off, &start) || ts_add_overflow_u64(start, need, &end) ||
                end > b->buf->size)
                return ts_err_set(err,
                                  "graph run: node %d (%s) operand %d: bytes [%" PRIu64 ", +%" PRIu64
                                  ") past slot %d's %zu-byte buffer",
                                  ni, ts_op_name(n->op), i, b->off + refs[i].off, need, refs[i].slot, b->buf->size);
            if (start % align[i])
                return ts_err_set(err, "graph run: node %d (%s) operand %d: offset %" PRIu64 " not %u-byte aligned", ni,
                                  ts_op_name(n->op), i, start, align[i]);
        }
    }
    return 0;
}

int ts_eng_enqueue_graph_window(ts_eng_queue *q, ts_eng_graph *g, const ts_eng_bind *binds, int n_binds,
                                int64_t pos0, int n_tok, int64_t n_kv, ts_err *err) {
    if (!q || !g)
        return ts_err_set(err, "graph run: queue or graph is NULL");
    ts_engine *e = q->eng;
    if (g->eng != e)
        return ts_err_set(err, "graph run: the graph belongs to another engine");
    if (run_checks(e, g, pos0, n_tok, n_kv, err) || bind_checks(e, g, binds, n_binds, n_tok, err))
        return -1;
    if (e->vt->enq_graph(q, g, binds, pos0, n_tok, n_kv, err))
        return -1;
    TS_ENG_COUNT(e, graph_runs, 1);
    return 0;
}


struct ts_eng_bindset {
    ts_eng_graph *g;
    ts_eng_bind *binds; /* [g->n_slots] */
};

ts_eng_bindset *ts_eng_bindset_new(ts_eng_graph *g, const ts_eng_bind *binds, int n_binds, ts_err *err) {
    if (!g) {
        ts_err_set(err, "binding set: graph is NULL");
        return NULL;
    }
    if (bind_checks(g->eng, g, binds, n_binds, g->width, err))
        return NULL;
    ts_eng_bindset *bs = calloc(1, sizeof *bs);
    if (bs)
        bs->binds = malloc((size_t)(g->n_slots ? g->n_slots : 1) * sizeof *bs->binds);
    if (!bs || !bs->binds) {
        free(bs);
        ts_err_set(err, "out of memory");
        return NULL;
    }
    memcpy(bs->binds, binds, (size_t)g->n_slots * sizeof *bs->binds);
    bs->g = g;
    return bs;
}

void ts_eng_bindset_free(ts_eng_bindset *bs) {
    if (!bs)
        return;
    free(bs->binds);
    free(bs);
}

int ts_eng_enqueue_bound(ts_eng_queue *q, ts_eng_bindset *bs, int64_t pos0, int n_tok, int64_t n_kv, ts_err *err) {
    if (!q || !bs)
        return ts_err_set(err, "graph run: queue or binding set is NULL");
    ts_engine *e = q->eng;
    ts_eng_graph *g = bs->g;
    if (g->eng != e)
        return ts_err_set(err, "graph run: the graph belongs to another engine");
    if (run_checks(e, g, pos0, n_tok, n_kv, err))
        return -1;
    if (e->vt->enq_graph(q, g, bs->binds, pos0, n_tok, n_kv, err))
        return -1;
    TS_ENG_COUNT(e, graph_runs, 1);
    return 0;
}

/* ---- helpers for the runtime ------------------------------------------- */

size_t ts_eng_rope_freq_bytes(int n_rot) {
    const size_t pairs = n_rot > 0 ? (size_t)n_rot / 2 : 0;
    return pairs * (sizeof(double) + 2 * sizeof(float));
}

void ts_eng_rope_freq_pack(const double *inv_freq, int n_rot, void *dst) {
    const int pairs = n_rot / 2;
    uint8_t *p = dst;
    memcpy(p, inv_freq, (size_t)pairs * sizeof(double));
    float *hl = (float *)(void *)(p + (size_t)pairs * sizeof(double));
    for (int i = 0; i < pairs; i++) {
        const float hi = (float)inv_freq[i];
        hl[2 * i] = hi;
        hl[2 * i + 1] = (float)(inv_freq[i] - (double)hi);
    }
}

double ts_eng_nmse(const float *a, const float *b, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    if (isnan(num) || isnan(den))
        return INFINITY;
    if (den == 0.0)
        return num == 0.0 ? 0.0 : INFINITY;
    return num / den;
}
