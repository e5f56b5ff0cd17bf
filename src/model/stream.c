/* stream.c - a model under a memory budget (ts_mdl_params.mem_budget,
 * --mem-budget): the layers whose matrices do not fit stay in the file and
 * stream through each runner's arena (runtime/arena.h) every run.
 *
 * What stays in memory: everything that is not a layer matrix (token
 * embeddings, output, norms, biases), and as many layers as fit the budget
 * beside it. The streamed layers are spread evenly through the stack (as
 * the swap-optimized runtime of seed 000 spreads them), so the loaders read
 * one while the resident layers between two streamed ones compute.
 * Streamed matrices are never repacked at load and their file pages are
 * dropped; a loader reads a matrix from the file with O_DIRECT (no second
 * copy in the page cache; aligned reads into its scratch, one read per
 * expert of an expert array), and repacks it into the CPU kernels' panels
 * as it lands, so a streamed layer computes bit-identically to a resident
 * one. A filesystem that refuses O_DIRECT (tmpfs) is read through the page
 * cache instead, and the load note says so.
 *
 * Options (ts_mdl_params.stream_opts, comma-separated):
 *   loaders=N            loader threads per runner (default: ts_mdl_params.n_loaders, else 4)
 *   loader_delay_us=N    each fill sleeps N us first (a slow disk)
 *   direct=0             never O_DIRECT
 *   cache_mb=N           keep the N MiB of expert rows read most recently
 *                        (an LRU cache shared by the model's contexts: decode
 *                        reads a hit from memory, not the file)
 *   routed=0             MoE layers read whole (default 1: ahead of a layer's
 *                        routing node only the experts its previous run
 *                        routed to, the others on demand at the node)
 *   routed_full=F        a layer routing to more than F of its experts gets
 *                        the next layer read whole (default 0.85)
 * and in TS_TEST_HOOKS builds (broken on purpose, for the tests):
 *   skip_fill=1          the loaders report a layer filled without reading it
 *   skip_demand=1        the routing node neither reads nor checks the
 *                        routed experts not read ahead (results must change)
 *   fault=eio|short      the read number fault_at=N (from 0, counted over
 *                        the model) fails once with EIO, or returns short
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/linear.h"
#include "kernels/repack.h"
#include "model/model_impl.h"
#include "quant/quant.h"
#include "runtime/layers.h"

#define ALIGN_IO ((uint64_t)4096)

struct ts_mdl_stream {
    const ts_mdl *m;
    char *path;
    int fd, fd_direct; /* fd_direct: -1 when O_DIRECT is refused or off */
    atomic_bool direct_ok;
    int n_loaders;
    uint32_t delay_us;
    bool routed;       /* read ahead only the experts the previous run routed to (default) */
    float routed_full; /* a layer routing to more than this fraction gets the next read whole (0.85) */
    bool skip_fill, skip_demand;
    int fault;            /* 0 none, 1 EIO, 2 short */
    long long fault_at;
    atomic_llong reads;   /* reads issued (the fault hook counts them) */
    uint64_t max_read;    /* the largest single read */
    int n_streamed;
    uint64_t resident_bytes, streamed_bytes;
    char note[384];
    /* the expert cache (cache_mb=): the rows of recently read experts, one
     * entry per (layer, expert array, expert), least recently used out
     * first; shared by the model's contexts */
    pthread_mutex_t cache_mu;
    uint64_t cache_bytes;  /* asked for */
    uint64_t entry_bytes;  /* one entry: the largest expert slice */
    int n_entries, n_used;
    uint8_t *pool;         /* [n_entries][entry_bytes] */
    int32_t *index;        /* [n_layer][3][n_expert]: entry or -1 */
    int32_t *key;          /* [n_entries]: index position or -1 */
    int32_t *prev, *next;  /* LRU list over entries (head: most recent) */
    int head, tail;
    uint64_t hits, misses;
};

static const ts_wmat *slot_wmat(const ts_layer *L, int s);

static int cache_pos(const ts_mdl *m, int layer, int s, int e) {
    const int a = s == TS_LS_W_GATE_EXPS ? 0 : s == TS_LS_W_UP_EXPS ? 1 : 2;
    return (layer * 3 + a) * m->hp.n_expert + e;
}

static void lru_unlink(ts_mdl_stream *st, int i) {
    if (st->prev[i] >= 0) st->next[st->prev[i]] = st->next[i];
    else st->head = st->next[i];
    if (st->next[i] >= 0) st->prev[st->next[i]] = st->prev[i];
    else st->tail = st->prev[i];
}

static void lru_front(ts_mdl_stream *st, int i) {
    st->prev[i] = -1;
    st->next[i] = st->head;
    if (st->head >= 0) st->prev[st->head] = i;
    st->head = i;
    if (st->tail < 0) st->tail = i;
}

/* A cached expert slice into dst: true on a hit (under cache_mu). */
static bool cache_get(ts_mdl_stream *st, int pos, void *dst, uint64_t n) {
    const int i = st->index[pos];
    if (i < 0) {
        st->misses++;
        return false;
    }
    memcpy(dst, st->pool + (size_t)i * st->entry_bytes, (size_t)n);
    lru_unlink(st, i);
    lru_front(st, i);
    st->hits++;
    return true;
}

/* Keeps an expert slice read from the file (under cache_mu). */
static void cache_put(ts_mdl_stream *st, int pos, const void *src, uint64_t n) {
    if (st->index[pos] >= 0 || n > st->entry_bytes) return;
    int i;
    if (st->n_used < st->n_entries) {
        i = st->n_used++;
    } else {
        i = st->tail;
        lru_unlink(st, i);
        st->index[st->key[i]] = -1;
    }
    memcpy(st->pool + (size_t)i * st->entry_bytes, src, (size_t)n);
    st->key[i] = pos;
    st->index[pos] = i;
    lru_front(st, i);
}

static int cache_setup(ts_mdl_stream *st, ts_err *err) {
    const ts_mdl *m = st->m;
    uint64_t eb = 0;
    for (int l = 0; l < m->hp.n_layer; l++)
        for (int s = TS_LS_W_GATE_EXPS; s <= TS_LS_W_DOWN_EXPS; s++) {
            const ts_wmat *w = slot_wmat(&m->layers[l], s);
            if (w && w->data && (uint64_t)w->row_bytes * (uint64_t)w->n_out > eb)
                eb = (uint64_t)w->row_bytes * (uint64_t)w->n_out;
        }
    if (!eb || st->cache_bytes < eb) return 0; /* no experts, or not one fits: no cache */
    st->entry_bytes = (eb + 63) & ~(uint64_t)63;
    st->n_entries = (int)(st->cache_bytes / st->entry_bytes > 1000000 ? 1000000 : st->cache_bytes / st->entry_bytes);
    const size_t ni = (size_t)m->hp.n_layer * 3 * (size_t)m->hp.n_expert;
    st->pool = aligned_alloc(64, (size_t)st->n_entries * (size_t)st->entry_bytes);
    st->index = malloc(ni * sizeof *st->index);
    st->key = malloc((size_t)st->n_entries * sizeof *st->key);
    st->prev = malloc((size_t)st->n_entries * sizeof *st->prev);
    st->next = malloc((size_t)st->n_entries * sizeof *st->next);
    if (!st->pool || !st->index || !st->key || !st->prev || !st->next)
        return ts_err_set(err, "out of memory: an expert cache of %.1f MiB", (double)st->cache_bytes / 1048576.0);
    for (size_t i = 0; i < ni; i++) st->index[i] = -1;
    st->head = st->tail = -1;
    return 0;
}

/* The matrix in weight slot s of a layer (NULL: not a matrix). */
static const ts_wmat *slot_wmat(const ts_layer *L, int s) {
    switch (s) {
    case TS_LS_WQ: return &L->wq;
    case TS_LS_WK: return &L->wk;
    case TS_LS_WV: return &L->wv;
    case TS_LS_WO: return &L->wo;
    case TS_LS_W_GATE: return &L->w_gate;
    case TS_LS_W_UP: return &L->w_up;
    case TS_LS_W_DOWN: return &L->w_down;
    case TS_LS_W_ROUTER: return &L->w_router;
    case TS_LS_W_GATE_EXPS: return &L->w_gate_exps;
    case TS_LS_W_UP_EXPS: return &L->w_up_exps;
    case TS_LS_W_DOWN_EXPS: return &L->w_down_exps;
    default: return NULL;
    }
}

static bool is_expert_slot(int s) {
    return s == TS_LS_W_GATE_EXPS || s == TS_LS_W_UP_EXPS || s == TS_LS_W_DOWN_EXPS;
}

/* Bytes of a slot's matrix in the file. */
static uint64_t file_bytes(const ts_mdl *m, int s, const ts_wmat *w) {
    const uint64_t b = (uint64_t)w->row_bytes * (uint64_t)w->n_out;
    return is_expert_slot(s) ? b * (uint64_t)m->hp.n_expert : b;
}

static uint64_t layer_bytes(const ts_mdl *m, int l) {
    uint64_t b = 0;
    for (int s = 0; s < TS_LS_COUNT; s++) {
        const ts_wmat *w = slot_wmat(&m->layers[l], s);
        if (w && w->data) b += file_bytes(m, s, w);
    }
    return b;
}

/* A streamed matrix (or an expert array's experts) is repacked into
 * panels exactly when fast.c would repack it resident. */
static bool stream_panels(const ts_mdl *m, const ts_wmat *w) {
    return !m->ref_kernels && ts_linear_wants_pack(w);
}

static const char *tensor_name(const ts_mdl *m, const void *data) {
    for (int64_t i = 0; i < ts_gguf_n_tensors(m->gguf); i++) {
        const ts_gguf_tensor *t = ts_gguf_tensor_at(m->gguf, i);
        if (t->data == data) return t->name;
    }
    return "?";
}

static int parse_opts(ts_mdl_stream *st, const char *opts, ts_err *err) {
    const char *p = opts;
    while (p && *p) {
        const char *end = strchr(p, ',');
        const size_t n = end ? (size_t)(end - p) : strlen(p);
        char kv[96];
        if (n == 0 || n >= sizeof kv) return ts_err_set(err, "stream options: empty or overlong entry in '%s'", opts);
        memcpy(kv, p, n);
        kv[n] = 0;
        char *eq = strchr(kv, '=');
        if (!eq) return ts_err_set(err, "stream options: '%s' is not key=value", kv);
        *eq = 0;
        const char *key = kv, *val = eq + 1;
        char *e = NULL;
        errno = 0;
        const long long v = strtoll(val, &e, 10);
        const bool num = e != val && *e == 0 && errno == 0;
        char *ef = NULL;
        const float f = strtof(val, &ef);
        const bool flt = ef != val && *ef == 0;
        bool hook = false;
        if (!strcmp(key, "loaders") && num && v >= 1 && v <= 64)
            st->n_loaders = (int)v;
        else if (!strcmp(key, "loader_delay_us") && num && v >= 0 && v <= 10000000)
            st->delay_us = (uint32_t)v;
        else if (!strcmp(key, "direct") && num && (v == 0 || v == 1))
            st->fd_direct = v ? st->fd_direct : -2; /* -2: off by request */
        else if (!strcmp(key, "cache_mb") && num && v >= 0 && v <= 1 << 20)
            st->cache_bytes = (uint64_t)v << 20;
        else if (!strcmp(key, "routed") && num && (v == 0 || v == 1))
            st->routed = v;
        else if (!strcmp(key, "routed_full") && flt && f >= 0.0f && f <= 1.0f)
            st->routed_full = f;
        else if (!strcmp(key, "skip_fill") && num && (v == 0 || v == 1))
            st->skip_fill = v, hook = true;
        else if (!strcmp(key, "skip_demand") && num && (v == 0 || v == 1))
            st->skip_demand = v, hook = true;
        else if (!strcmp(key, "fault") && (!strcmp(val, "eio") || !strcmp(val, "short")))
            st->fault = !strcmp(val, "eio") ? 1 : 2, hook = true;
        else if (!strcmp(key, "fault_at") && num && v >= 0)
            st->fault_at = v, hook = true;
        else
            return ts_err_set(err,
                              "stream options: '%s=%s' is not one of loaders=1..64, loader_delay_us=N, direct=0|1, "
                              "routed=0|1, routed_full=0..1, cache_mb=N"
#ifdef TS_TEST_HOOKS
                              ", skip_fill=0|1, skip_demand=0|1, fault=eio|short, fault_at=N"
#endif
                              ,
                              key, val);
#ifndef TS_TEST_HOOKS
        if (hook) return ts_err_set(err, "stream options: '%s' is a test hook, not in this build", key);
#else
        (void)hook;
#endif
        p = end ? end + 1 : NULL;
    }
    return 0;
}

int ts_mdl_stream_plan(ts_mdl *m, const char *path, const ts_mdl_params *p, ts_err *err) {
    if (!p->mem_budget) {
        if (p->stream_opts && *p->stream_opts)
            return ts_err_set(err, "stream options given without a memory budget (--mem-budget)");
        return 0;
    }
    if (!p->use_mmap) return ts_err_set(err, "--mem-budget streams from the mapped file: drop --no-mmap");
    const int nl = m->hp.n_layer;
    ts_mdl_stream *st = calloc(1, sizeof *st);
    if (!st || !(m->streamed = calloc((size_t)(nl > 0 ? nl : 1), sizeof *m->streamed)) ||
        !(st->path = strdup(path))) {
        free(st);
        return ts_err_set(err, "out of memory");
    }
    m->stream = st;
    st->m = m;
    st->fd = st->fd_direct = -1;
    st->n_loaders = p->n_loaders > 0 ? p->n_loaders : 4; /* docs/PERFORMANCE.md: 4 beat 2 on both models */
    st->routed = true;
    st->routed_full = 0.85f;
    pthread_mutex_init(&st->cache_mu, NULL);
    if (parse_opts(st, p->stream_opts, err)) return -1;

    uint64_t layers = 0;
    for (int l = 0; l < nl; l++) layers += layer_bytes(m, l);
    const uint64_t fixed = m->size_bytes - layers; /* embeddings, output, vectors */
    if (fixed > p->mem_budget)
        return ts_err_set(err,
                          "--mem-budget %.1f MiB (%llu bytes) is below what always stays in memory (%.1f MiB: token "
                          "embeddings, output and norms); give at least that, plus room for the layers to keep",
                          (double)p->mem_budget / 1048576.0, (unsigned long long)p->mem_budget,
                          (double)fixed / 1048576.0);
    /* the fewest layers to stream, spread evenly, that bring the rest under the budget */
    for (int S = 0; S <= nl; S++) {
        uint64_t out = 0;
        for (int l = 0; l < nl; l++) {
            m->streamed[l] = (int64_t)(l + 1) * S / nl != (int64_t)l * S / nl;
            if (m->streamed[l]) out += layer_bytes(m, l);
        }
        if (fixed + layers - out <= p->mem_budget) {
            st->n_streamed = S;
            st->streamed_bytes = out;
            st->resident_bytes = fixed + layers - out;
            break;
        }
    }
    if (st->n_streamed == 0) {
        snprintf(st->note, sizeof st->note, "memory budget %.1f MiB: the whole model (%.1f MiB) fits; nothing streams",
                 (double)p->mem_budget / 1048576.0, (double)m->size_bytes / 1048576.0);
        return 0;
    }
    for (int l = 0; l < nl; l++)
        for (int s = 0; s < TS_LS_COUNT && m->streamed[l]; s++) {
            const ts_wmat *w = slot_wmat(&m->layers[l], s);
            if (!w || !w->data) continue;
            const uint8_t *base = ts_gguf_base(m->gguf);
            if ((const uint8_t *)w->data < base || (const uint8_t *)w->data >= base + ts_gguf_file_size(m->gguf))
                return ts_err_set(err, "--mem-budget: tensor '%s' of layer %d is not in the file", tensor_name(m, w->data), l);
            const uint64_t one = is_expert_slot(s) ? (uint64_t)w->row_bytes * (uint64_t)w->n_out : file_bytes(m, s, w);
            if (one > st->max_read) st->max_read = one;
        }
    if (cache_setup(st, err)) return -1;
    if (!(st->fd_direct == -2)) {
        st->fd_direct = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
        atomic_store(&st->direct_ok, st->fd_direct >= 0);
    } else {
        st->fd_direct = -1;
    }
    if ((st->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return ts_err_set(err, "--mem-budget: cannot open %s for streaming: %s", path, strerror(errno));
    snprintf(st->note, sizeof st->note,
             "memory budget %.1f MiB: %.1f MiB in memory, %d of %d layers (%.1f MiB) stream from the file through two "
             "slots per context, %d loader%s, %s%s",
             (double)p->mem_budget / 1048576.0, (double)st->resident_bytes / 1048576.0, st->n_streamed, nl,
             (double)st->streamed_bytes / 1048576.0, st->n_loaders, st->n_loaders == 1 ? "" : "s",
             st->fd_direct >= 0 ? "O_DIRECT reads"
             : p->stream_opts && strstr(p->stream_opts, "direct=0") ? "reads through the page cache (direct=0)"
                                                                     : "reads through the page cache (O_DIRECT refused)",
             !st->cache_bytes ? ""
             : st->pool ? ", an expert cache"
                        : ", no expert cache (no experts, or cache_mb below one expert)");
    if (st->pool) {
        const size_t n = strlen(st->note);
        snprintf(st->note + n, sizeof st->note - n, " of %.1f MiB (%d experts)",
                 (double)st->n_entries * (double)st->entry_bytes / 1048576.0, st->n_entries);
    }
    return 0;
}

bool ts_mdl_layer_streamed(const ts_mdl *m, int l) { return m->streamed && m->stream && m->stream->n_streamed && m->streamed[l]; }

/* Reads [off, off + len) of the file; *p points at its first byte in
 * scratch. */
static int read_range(ts_mdl_stream *st, uint8_t *scratch, uint64_t off, uint64_t len, const uint8_t **p,
                      uint64_t *got_bytes, const void *tensor, ts_err *err) {
    const long long nr = atomic_fetch_add(&st->reads, 1);
    int fault = 0;
#ifdef TS_TEST_HOOKS
    if (st->fault && nr == st->fault_at) fault = st->fault;
#else
    (void)nr;
#endif
    const bool direct = atomic_load(&st->direct_ok);
    const uint64_t a = direct ? off & ~(ALIGN_IO - 1) : off;
    const uint64_t end = direct ? (off + len + ALIGN_IO - 1) & ~(ALIGN_IO - 1) : off + len;
    const int fd = direct ? st->fd_direct : st->fd;
    uint64_t done = 0;
    while (done < end - a) {
        ssize_t r = pread(fd, scratch + done, (size_t)(end - a - done), (off_t)(a + done));
        if (fault == 1) r = -1, errno = EIO;
        if (fault == 2 && r > 0) r = r / 2, fault = 3; /* short once; the next pread would finish it: stop there */
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && errno == EINVAL && direct && done == 0) {
            /* the filesystem takes the open but not the read: through the page cache from now on */
            atomic_store(&st->direct_ok, false);
            return read_range(st, scratch, off, len, p, got_bytes, tensor, err);
        }
        if (r < 0)
            return ts_err_set(err, "reading tensor '%s' (%llu bytes at file offset %llu) from %s: %s",
                              tensor_name(st->m, tensor), (unsigned long long)len, (unsigned long long)off, st->path,
                              strerror(errno));
        *got_bytes += (uint64_t)r;
        done += (uint64_t)r;
        if (r == 0 || fault == 3) break;
    }
    if (a + done < off + len)
        return ts_err_set(err,
                          "reading tensor '%s' (%llu bytes at file offset %llu) from %s: short read, the file ends "
                          "(or the read stopped) at byte %llu",
                          tensor_name(st->m, tensor), (unsigned long long)len, (unsigned long long)off, st->path,
                          (unsigned long long)(a + done));
    *p = scratch + (off - a);
    return 0;
}

/* w's rows as read (p) into dst: repacked into panels as fast.c packs the
 * resident matrices, or as they are. */
static int out_rows(const ts_wmat *w, const uint8_t *p, void *dst, bool panels, ts_err *err) {
    if (!panels) {
        memcpy(dst, p, (size_t)w->row_bytes * (size_t)w->n_out);
        return 0;
    }
    const ts_wmat rows = {w->type, p, w->n_in, w->n_out, w->row_bytes, NULL};
    return ts_linear_pack(&rows, dst, err);
}

/* ts_rt_source.fill: layer l's weight slot s into dst, repacked as the
 * resident copy would be. */
static int stream_fill(void *user, void *scratch, int layer, int s, int expert, void *dst, uint64_t bytes,
                       uint64_t *read_bytes, ts_err *err) {
    ts_mdl_stream *st = user;
    const ts_mdl *m = st->m;
    const ts_wmat *w = slot_wmat(&m->layers[layer], s);
    if (!w || !w->data) return ts_err_set(err, "layer %d: weight slot %d is not a streamed matrix", layer, s);
    const uint64_t foff = (uint64_t)((const uint8_t *)w->data - ts_gguf_base(m->gguf));
    const uint64_t mb = (uint64_t)w->row_bytes * (uint64_t)w->n_out;
    const uint8_t *p;
    const bool panels = stream_panels(m, w);
    const uint64_t out_b = panels ? ts_rp_matrix_bytes(w->type, w->n_in, w->n_out) : mb;
    if (is_expert_slot(s) && expert >= 0) { /* one expert: one read (or the cache), then its panels */
        if (expert >= m->hp.n_expert || bytes != out_b)
            return ts_err_set(err, "layer %d: expert %d of slot %d: bad request", layer, expert, s);
        const int pos = cache_pos(m, layer, s, expert);
        bool hit = false;
        if (st->pool) {
            pthread_mutex_lock(&st->cache_mu);
            hit = cache_get(st, pos, scratch, mb); /* the rows, into the scratch */
            pthread_mutex_unlock(&st->cache_mu);
            p = scratch;
        }
        if (!hit) {
            if (read_range(st, scratch, foff + (uint64_t)expert * mb, mb, &p, read_bytes, w->data, err)) return -1;
            if (st->pool) {
                pthread_mutex_lock(&st->cache_mu);
                cache_put(st, pos, p, mb);
                pthread_mutex_unlock(&st->cache_mu);
            }
        }
        return out_rows(w, p, dst, panels, err);
    }
    if (is_expert_slot(s)) return ts_err_set(err, "layer %d: an expert array streams one expert at a time", layer);
    if (read_range(st, scratch, foff, mb, &p, read_bytes, w->data, err)) return -1;
    if (bytes != out_b) return ts_err_set(err, "layer %d: weight slot %d size mismatch", layer, s);
    return out_rows(w, p, dst, panels, err);
}

void ts_mdl_stream_drop_layer(const ts_mdl *m, int l) {
    if (!ts_mdl_layer_streamed(m, l)) return;
    for (int s = 0; s < TS_LS_COUNT; s++) {
        const ts_wmat *w = slot_wmat(&m->layers[l], s);
        if (w && w->data) ts_gguf_drop_pages(w->data, (size_t)file_bytes(m, s, w));
    }
}

void ts_mdl_stream_describe(const ts_mdl *m, int l, ts_rt_host_slot *S) {
    if (!ts_mdl_layer_streamed(m, l)) return;
    for (int s = 0; s < TS_LS_COUNT; s++) {
        const ts_wmat *w = slot_wmat(&m->layers[l], s);
        if (!w || !w->data) continue;
        const bool panels = stream_panels(m, w);
        const uint64_t one = panels ? ts_rp_matrix_bytes(w->type, w->n_in, w->n_out)
                                    : (uint64_t)w->row_bytes * (uint64_t)w->n_out;
        S[s].data = NULL;
        S[s].rows = NULL; /* only the arena slot's bytes: the file's pages stay out */
        S[s].streamed = true;
        S[s].layout = panels ? TS_WL_PANELS : TS_WL_ROWS;
        S[s].bytes = is_expert_slot(s) ? one * (uint64_t)m->hp.n_expert : one;
        if (is_expert_slot(s)) S[s].expert_bytes = one;
    }
    ts_mdl_stream_drop_layer(m, l);
}

int ts_mdl_stream_attach(ts_mdl *m, ts_err *err) { return ts_mdl_stream_attach_to(m, m->host_w, err); }

int ts_mdl_stream_attach_to(const ts_mdl *m, struct ts_rt_weights *w, ts_err *err) {
    ts_mdl_stream *st = m->stream;
    if (!st || !st->n_streamed) return 0;
    const ts_rt_source src = {.fill = stream_fill,
                              .user = st,
                              .n_loaders = st->n_loaders,
                              .scratch_bytes = st->max_read + 2 * ALIGN_IO,
                              .delay_us = st->delay_us,
                              .routed = st->routed,
                              .full = st->routed_full,
                              .skip_fill = st->skip_fill,
                              .skip_demand = st->skip_demand};
    return ts_rt_weights_set_source(w, &src, err);
}

void ts_mdl_stream_cache_stats(const ts_mdl *m, uint64_t *hits, uint64_t *misses, uint64_t *bytes) {
    ts_mdl_stream *st = m->stream;
    *hits = *misses = *bytes = 0;
    if (!st || !st->pool) return;
    pthread_mutex_lock(&st->cache_mu);
    *hits = st->hits, *misses = st->misses;
    *bytes = (uint64_t)st->n_entries * st->entry_bytes;
    pthread_mutex_unlock(&st->cache_mu);
}

const char *ts_mdl_stream_note(const ts_mdl *m) { return m->stream && m->stream->note[0] ? m->stream->note : NULL; }
int ts_mdl_stream_layers(const ts_mdl *m) { return m->stream ? m->stream->n_streamed : 0; }

void ts_mdl_stream_free(ts_mdl *m) {
    ts_mdl_stream *st = m->stream;
    if (st) {
        if (st->fd >= 0) close(st->fd);
        if (st->fd_direct >= 0) close(st->fd_direct);
        free(st->path);
        free(st->pool);
        free(st->index);
        free(st->key);
        free(st->prev);
        free(st->next);
        pthread_mutex_destroy(&st->cache_mu);
        free(st);
    }
    free(m->streamed);
    m->stream = NULL;
    m->streamed = NULL;
}
