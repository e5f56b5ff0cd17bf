/* loop_engine.c - the `loop` test device: the CPU's own kernels behind a
 * real device boundary, so that placement is the only difference from a
 * CPU run and outputs must match it bit for bit.
 *
 * The boundary (memory, queues with worker threads, batches, events) is
 * engine/hostdev/hostdev.h's; graph nodes run through cpu_ops.c (the CPU
 * kernels) on the device's own thread pool.
 *
 * Profiles: "loop" takes every op and weight type the CPU does, any width,
 * a 2 GiB window, no crossing delay. "loop:npu" is NPU-like: matmul only,
 * widths of exactly 32/64/128/256 tokens, F16/Q8_0/Q4_0 weights, a 256 MiB
 * window, 300 us per crossing. Options override window and delay;
 * slow=N makes every graph take N times its computation (the device's
 * relative speed, for the scheduling sweeps; ts_eng_stats.busy_ns counts it).
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
#include "engine/hostdev/hostdev.h"
#include "kernels/cpu.h"
#include "quant/quant.h"

typedef struct loop_eng {
    ts_hostdev hd; /* first: the device boundary */
    bool npu;
    bool own_layout; /* test hook: its own weight layout (rows padded to 64 bytes) */
    int n_threads;
    ts_threadpool *pool; /* used under hd.compute */
} loop_eng;

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

static int loop_run_graph(ts_engine *e, ts_eng_graph *g, ts_eng_bind *binds, uint8_t *const *base, int64_t pos0,
                          int n_tok, int64_t n_kv) {
    loop_eng *L = e->impl;
    /* its own layout is rows at a padded stride: what the CPU kernels read
     * as rows of that stride (the copy of the bindings is ours) */
    for (int s = 0; s < g->n_slots; s++)
        if (binds[s].layout == TS_WL_ENGINE) {
            binds[s].layout = TS_WL_ROWS;
            binds[s].row_bytes = own_stride(binds[s].row_bytes);
        }
    return ts_cpu_exec_run(g->impl, L->pool, g->nodes, g->n_nodes, binds, base, pos0, n_tok, n_kv);
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
    /* the CPU's exact arithmetic, the reference the device is compared with (TS_ACT=q8 still overrides) */
    g->impl = ts_cpu_exec_new(g->nodes, g->n_nodes, g->width, L->n_threads, 1, err);
    return g->impl ? 0 : -1;
}

static void loop_graph_fini(ts_eng_graph *g) { ts_cpu_exec_free(g->impl); }

static void loop_close(ts_engine *e) {
    loop_eng *L = e->impl;
    if (L) {
        ts_threadpool_free(L->pool);
        ts_hostdev_fini(&L->hd);
        free(L);
    }
    ts_eng_dealloc(e);
}

static const ts_eng_vt loop_vt = {
    .close = loop_close,
    .supports_op = loop_supports,
    TS_HOSTDEV_METHODS,
    .graph_init = loop_graph_init,
    .graph_fini = loop_graph_fini,
    .graph_scratch = loop_graph_scratch,
    .packed_bytes = loop_packed_bytes,
    .pack = loop_pack,
};

static ts_engine *loop_open(const ts_eng_opts *o, ts_err *err) {
    long long threads = 1, delay_us = -1, copy_mbps = 0, slow = 1, nowait = 0, own_layout = 0;
    if (ts_eng_opt_int(o, "threads", 1, 256, o->threads_hint > 0 ? o->threads_hint : 1, &threads, err) ||
        ts_eng_opt_int(o, "delay_us", 0, 10000000, -1, &delay_us, err) ||
        ts_eng_opt_int(o, "copy_mbps", 0, 1000000000, 0, &copy_mbps, err) ||
        ts_eng_opt_int(o, "slow", 1, 1000, 1, &slow, err) ||
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
    ts_hostdev_init(&L->hd);
    L->hd.run_graph = loop_run_graph;
    L->npu = !strcmp(o->variant, "npu");
    L->hd.nowait = nowait != 0;      /* only reachable in a TS_TEST_HOOKS build */
    L->own_layout = own_layout != 0; /* likewise */
    L->hd.delay_us = delay_us >= 0 ? delay_us : (L->npu ? 300 : 0);
    L->hd.copy_mbps = copy_mbps;
    L->hd.slow = slow;
    L->n_threads = (int)threads;
    L->pool = ts_threadpool_new(L->n_threads, err);
    if (!L->pool) {
        loop_close(e);
        return NULL;
    }
    L->n_threads = ts_threadpool_n_threads(L->pool);

    ts_eng_desc *d = &e->desc;
    snprintf(d->name, sizeof d->name, "%s", L->npu ? "loop:npu" : "loop");
    d->crossing_ns = (uint64_t)L->hd.delay_us * 1000;
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
             "loopback test device: the CPU's %s kernels behind a queue thread, %d thread%s%s%s%s%s",
             ts_cpu_level_name(ts_cpu_level_active()), L->n_threads, L->n_threads == 1 ? "" : "s",
             L->npu ? "; NPU profile" : "", copy_mbps ? "; copies at most copy_mbps MB/s" : "",
             slow > 1 ? "; slowed" : "",
             L->hd.nowait ? "; NOWAIT (broken on purpose)" : "");
    return e;
}

static int loop_check_variant(const char *variant, ts_err *err) {
    if (variant[0] && strcmp(variant, "npu"))
        return ts_err_set(err, "device 'loop' has no profile '%s' (known: loop, loop:npu)", variant);
    return 0;
}

static const char *const loop_options[] = {"threads", "delay_us", "copy_mbps", "slow",
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
