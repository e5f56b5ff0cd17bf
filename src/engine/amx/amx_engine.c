/* amx_engine.c - `amx`: Intel AMX, the CPU's tile unit, as a matrix-engine
 * device (kind NPU). The device boundary (memory, queues with their own
 * threads, batches, events) is engine/hostdev's; a graph runs on the
 * engine's thread pool with every matmul whose weights are in its own
 * layout on the tiles (kernels/amx/amx.h) and every other node on the
 * CPU's kernels (cpu_ops.c: the unit is attached to the cores that run
 * them, and weak at everything that is not a tile product).
 *
 * Options:
 *   act=exact|q8|int8  arithmetic (amx.h): exact (default) is the CPU's
 *                      own definition, so a run is bit-identical to the
 *                      CPU; q8 is the CPU's 8-bit one (TS_ACT=q8); int8 one
 *                      scale per token and per output row (an NPU's)
 *   scale=token|tensor int8: one activation scale per token (default) or
 *                      one per matmul input (ts_amx_matmul_pt from the
 *                      input's amax: plain per-tensor INT8, what an NPU
 *                      executes natively; a token's result then depends on
 *                      the other tokens of its chunk)
 *   calib=FILE         (the runtime's, act=int8 only) each matmul input with
 *                      its calibrated clip: one scale clip / 127, the
 *                      remainder beyond the clip computed here in float
 *                      (clipped_matmul below); prune=P drops that in the
 *                      least important layers (engine.h ts_eng_clip)
 *   emulate=1          the tiles of the scalar emulator: the whole engine
 *                      runs and is tested on machines without AMX (slow)
 *   threads=N          tile and kernel threads (default: the caller's)
 *   ops=all|matmul     the nodes it takes: all (default; the other nodes
 *                      on its own threads with the CPU's kernels) or only
 *                      the matmuls, an NPU's profile: norms, RoPE and
 *                      attention then run on the state's `cpu` engine, the
 *                      split that sched=ooo overlaps (one core on the
 *                      tiles, the other on the CPU's units of work)
 *   min_width=N        narrowest graph worth the device (default: measured
 *                      at open, below)
 *   nowait=1           test builds: waits skipped (hostdev.h)
 * Weights: packed once at load into the tile layout of the mode
 * (ts_eng_pack): one resident copy on the device, counted in its window.
 * Types without a kernel in the mode are converted by the runtime's probe.
 *
 * `vnni` (the same engine, another unit): AVX-512 VNNI on the CPU's vector
 * units reading the act=int8 tile layout as it is stored (kernels/amx/amx.h
 * TS_AMX_VNNI), so its outputs are the tiles' bit for bit and a matrix
 * packed for one is the other's (desc.layout "amx-int8": one copy for
 * both, the two-engine pipeline's premise). act is int8 only; no emulate=.
 *
 * min_width: where the unit is real, opening times one matmul (2048 x 2048
 * Q4_0, the engine's mode and threads) on the tiles and on the CPU's own
 * kernels at widths 1, 2, 4, .. 256 and takes the narrowest width from which
 * the tiles win at every width measured; decode (one token) stays on the
 * CPU whatever it says. The emulator is not a speed: its min_width is 32
 * unless set. crossing_ns is measured too (an empty batch's round trip).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "engine/cpu/cpu_ops.h"
#include "engine/engine_impl.h"
#include "engine/hostdev/hostdev.h"
#include "kernels/amx/amx.h"
#include "kernels/cpu.h"
#include "kernels/linear.h"
#include "quant/quant.h"

typedef struct amx_eng {
    ts_hostdev hd; /* first: the device boundary */
    ts_amx_act act;
    bool per_tensor; /* int8: one activation scale per matmul input (scale=tensor) */
    ts_amx_unit unit;
    int n_threads;
    ts_threadpool *pool; /* used under hd.compute */
} amx_eng;

typedef struct amx_graph {
    ts_cpu_exec *cpu;
    ts_amx_ws *ws; /* NULL: the graph has no matmul */
    ts_amx_outlier *out; /* [OUT_TOK * max matmul input]: a block of tokens' outliers */
    int32_t *out_idx;    /* [OUT_TOK * max input]: their order by channel */
    int32_t *out_start;  /* [max input] */
    float *out_col;      /* [max matmul output]: one dequantized weight column */
    amx_eng *A;
    ts_engine *e;
    ts_err err; /* the last tile call's failure */
} amx_graph;

/* Tokens whose outliers are gathered and added together: each channel's
 * weight column is read once per block (ts_amx_outliers_add_grouped). */
#define OUT_TOK 32

/* A calibrated input (act=int8 and a clip record with a clip): one scale
 * clip / 127 for the whole input, then, OUT_TOK tokens at a time, the
 * elements beyond the clip found in the actual input: their remainders
 * multiplied on this thread in float from the same packed weights and
 * added (TS_CLIP_SHADOW; each token's in ascending channel order, as the
 * per-token reference adds them), or, in a pruned layer, only counted: the
 * input is quantized whole with the scale of its own amax (plain
 * per-tensor). */
static int clipped_matmul(amx_graph *g, ts_threadpool *pool, int k, const void *const *w, float *const *y,
                          const float *x, int n_tok, const ts_eng_clip *c) {
    int64_t n_in = 0, n_out[4] = {0};
    for (int i = 0; i < k; i++)
        if (ts_amx_packed_info(w[i], NULL, NULL, &n_in, &n_out[i]))
            return ts_err_set(&g->err, "amx: a clipped matmul's weight is not a packed matrix");
    if ((int64_t)c->n_in != n_in)
        return ts_err_set(&g->err, "amx: clip record of %u inputs on a matmul of %lld (layer %d input %d)", c->n_in,
                          (long long)n_in, c->layer, c->input);
    /* a pruned layer (no shadow) takes its scale from the input's own
     * amax: nothing is clamped (clamping at a clip that leaves the
     * remainder to the CPU loses the outliers outright: SmolLM2's
     * perplexity 17.7 -> 693 at p99.9, docs/FIDELITY.md) */
    const bool shadow = (c->flags & TS_CLIP_SHADOW) != 0;
    if (ts_amx_matmul_pt(pool, g->ws, g->A->unit, k, w, y, x, n_tok, shadow ? c->clip : 0.0f, NULL, &g->err))
        return -1;
    const uint64_t t0 = ts_now_ns();
    const uint32_t *hot = ts_eng_clip_hot((ts_eng_clip *)c);
    uint64_t found = 0, unprofiled = 0;
    for (int t0 = 0; t0 < n_tok; t0 += OUT_TOK) {
        const int nb = n_tok - t0 < OUT_TOK ? n_tok - t0 : OUT_TOK;
        const int64_t n =
            ts_amx_outliers_find(x + (size_t)t0 * (size_t)n_in, nb, n_in, c->clip, g->out, (int64_t)nb * n_in);
        found += (uint64_t)n;
        if (!shadow || !n)
            continue;
        for (int64_t j = 0; j < n; j++)
            unprofiled += !((hot[g->out[j].k >> 5] >> (g->out[j].k & 31)) & 1u);
        for (int i = 0; i < k; i++)
            if (ts_amx_outliers_add_grouped(w[i], g->out, n, y[i] + (size_t)t0 * (size_t)n_out[i], g->out_idx,
                                            g->out_start, g->out_col, &g->err))
                return -1;
    }
    if (shadow) {
        TS_ENG_COUNT(g->e, outliers, found);
        TS_ENG_COUNT(g->e, outliers_unprofiled, unprofiled);
        TS_ENG_COUNT(g->e, outlier_ns, ts_now_ns() - t0);
    } else {
        TS_ENG_COUNT(g->e, outliers_pruned, found);
    }
    return 0;
}

static int tile_matmul(void *ctx, ts_threadpool *pool, int k, const void *const *w, float *const *y, const float *x,
                       int n_tok, const ts_eng_clip *clip) {
    amx_graph *g = ctx;
    if (!g->ws)
        return -1;
    if (g->A->act == TS_AMX_INT8 && clip && clip->clip > 0)
        return clipped_matmul(g, pool, k, w, y, x, n_tok, clip);
    if (g->A->per_tensor) /* plain per-tensor INT8: the scale from the input's amax, nothing clipped */
        return ts_amx_matmul_pt(pool, g->ws, g->A->unit, k, w, y, x, n_tok, 0.0f, NULL, &g->err);
    return ts_amx_matmul(pool, g->ws, g->A->unit, k, w, y, x, n_tok, &g->err);
}

static int amx_run_graph(ts_engine *e, ts_eng_graph *g, ts_eng_bind *binds, uint8_t *const *base, int64_t pos0,
                         int n_tok, int64_t n_kv) {
    amx_eng *A = e->impl;
    amx_graph *ag = g->impl;
    return ts_cpu_exec_run(ag->cpu, A->pool, g->nodes, g->n_nodes, binds, base, pos0, n_tok, n_kv);
}

static int64_t max_matmul_dim(const ts_eng_graph *g, bool out) {
    int64_t m = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == TS_OP_MATMUL) {
            const int64_t d = out ? g->nodes[i].matmul.n_out : g->nodes[i].matmul.n_in;
            if (d > m)
                m = d;
        }
    return m;
}
static int64_t max_matmul_in(const ts_eng_graph *g) { return max_matmul_dim(g, false); }

/* the outlier lists of clipped matmuls (only graphs with clip records) */
static bool has_clips(const ts_eng_graph *g) {
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == TS_OP_MATMUL && g->nodes[i].matmul.clipped)
            return true;
    return false;
}
static uint64_t outlier_bytes(const ts_eng_graph *g) {
    if (!has_clips(g))
        return 0;
    const uint64_t mi = (uint64_t)max_matmul_in(g), mo = (uint64_t)max_matmul_dim(g, true);
    return OUT_TOK * mi * (sizeof(ts_amx_outlier) + sizeof(int32_t)) + mi * sizeof(int32_t) + mo * sizeof(float);
}

static uint64_t amx_graph_scratch(const ts_engine *e, const ts_eng_graph *g) {
    const amx_eng *A = e->impl;
    const int64_t mi = max_matmul_in(g);
    return ts_cpu_exec_bytes(g->nodes, g->n_nodes, g->width, A->n_threads) +
           (mi ? ts_amx_ws_bytes(mi, g->width) : 0) + outlier_bytes(g);
}

static void amx_graph_fini(ts_eng_graph *g) {
    amx_graph *ag = g->impl;
    if (!ag)
        return;
    ts_cpu_exec_free(ag->cpu);
    ts_amx_ws_free(ag->ws);
    free(ag->out);
    free(ag->out_idx);
    free(ag->out_start);
    free(ag->out_col);
    free(ag);
}

static int amx_graph_init(ts_engine *e, ts_eng_graph *g, ts_err *err) {
    amx_eng *A = e->impl;
    amx_graph *ag = calloc(1, sizeof *ag);
    if (!ag)
        return ts_err_set(err, "out of memory building a graph");
    ag->A = A;
    ag->e = e;
    g->impl = ag;
    const int64_t mi = max_matmul_in(g);
    const size_t mo = (size_t)max_matmul_dim(g, true);
    if (has_clips(g) && (!(ag->out = malloc(OUT_TOK * (size_t)mi * sizeof *ag->out)) ||
                         !(ag->out_idx = malloc(OUT_TOK * (size_t)mi * sizeof *ag->out_idx)) ||
                         !(ag->out_start = malloc((size_t)mi * sizeof *ag->out_start)) ||
                         !(ag->out_col = malloc(mo * sizeof *ag->out_col)))) {
        ts_err_set(err, "out of memory building a graph");
        amx_graph_fini(g);
        g->impl = NULL;
        return -1;
    }
    if (!(ag->cpu = ts_cpu_exec_new(g->nodes, g->n_nodes, g->width, A->n_threads, A->act != TS_AMX_Q8, err)) ||
        (mi && !(ag->ws = ts_amx_ws_new(mi, g->width, err)))) {
        amx_graph_fini(g);
        g->impl = NULL;
        return -1;
    }
    ts_cpu_exec_set_matmul(ag->cpu, tile_matmul, ag);
    return 0;
}

static uint64_t amx_packed_bytes(const ts_engine *e, uint32_t wtype, int64_t n_in, int64_t n_out) {
    const amx_eng *A = e->impl;
    return ts_amx_packed_bytes(A->act, wtype, n_in, n_out);
}

static int amx_pack(const ts_engine *e, uint32_t wtype, const void *rows, size_t row_bytes, int64_t n_in,
                    int64_t n_out, void *dst, ts_err *err) {
    const amx_eng *A = e->impl;
    return ts_amx_pack(A->act, wtype, rows, row_bytes, n_in, n_out, dst, err);
}

static bool amx_supports(const ts_engine *e, ts_op op, uint32_t wtype) {
    (void)e, (void)op, (void)wtype;
    return true; /* the desc masks say it all */
}

static void amx_close(ts_engine *e) {
    amx_eng *A = e->impl;
    if (A) {
        ts_threadpool_free(A->pool);
        ts_hostdev_fini(&A->hd);
        free(A);
    }
    ts_eng_dealloc(e);
}

static const ts_eng_vt amx_vt = {
    .close = amx_close,
    .supports_op = amx_supports,
    TS_HOSTDEV_METHODS,
    .graph_init = amx_graph_init,
    .graph_fini = amx_graph_fini,
    .graph_scratch = amx_graph_scratch,
    .packed_bytes = amx_packed_bytes,
    .pack = amx_pack,
};

/* ---- what opening measures ---- */

static uint64_t median3(uint64_t a, uint64_t b, uint64_t c) {
    return a > b ? (b > c ? b : a > c ? c : a) : (a > c ? a : b > c ? c : b);
}

/* The narrowest width from which the tiles beat the CPU kernels on one
 * 2048 x 2048 Q4_0 matmul at every width measured; 0 when they never do. */
static int measure_min_width(amx_eng *A, ts_err *err) {
    const int64_t n = 2048;
    const int max_w = 256;
    const size_t rb = ts_row_size(TS_TYPE_Q4_0, n);
    uint8_t *rows = malloc(rb * (size_t)n);
    float *x = malloc(sizeof(float) * (size_t)(n * max_w)), *y = malloc(sizeof(float) * (size_t)(n * max_w));
    const uint64_t pb = ts_amx_packed_bytes(A->act, TS_TYPE_Q4_0, n, n);
    void *packed = aligned_alloc(64, (size_t)(pb + 63) / 64 * 64);
    uint8_t *panels = malloc(ts_rp_matrix_bytes(TS_TYPE_Q4_0, n, n) + 64);
    ts_linear_ws *lin = ts_linear_ws_new(n, max_w, A->n_threads, err);
    ts_amx_ws *ws = ts_amx_ws_new(n, max_w, err);
    int result = -1;
    if (!rows || !x || !y || !packed || !panels || !lin || !ws)
        goto done;
    uint64_t s = 0x243F6A8885A308D3ull;
    for (size_t i = 0; i < rb * (size_t)n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        rows[i] = (uint8_t)(s >> 56);
    }
    for (int64_t r = 0; r < n; r++) { /* sane f16 scales: 2^-8 */
        for (int64_t b = 0; b < n / 32; b++) {
            rows[(size_t)r * rb + (size_t)b * 18] = 0x00;
            rows[(size_t)r * rb + (size_t)b * 18 + 1] = 0x1c;
        }
    }
    for (int64_t i = 0; i < n * max_w; i++) x[i] = (float)((i * 7919) % 2001 - 1000) * 1e-3f;
    if (ts_amx_pack(A->act, TS_TYPE_Q4_0, rows, rb, n, n, packed, err))
        goto done;
    ts_wmat w = {.type = TS_TYPE_Q4_0, .data = rows, .n_in = n, .n_out = n, .row_bytes = rb};
    if (ts_linear_wants_pack(&w) && ts_linear_pack(&w, panels, NULL) == 0)
        w.packed = panels;
    result = 0;
    for (int width = max_w; width >= 1; width /= 2) {
        uint64_t t_amx[3], t_cpu[3];
        for (int rep = 0; rep < 3; rep++) {
            uint64_t t0 = ts_now_ns();
            const void *wp = packed;
            if (ts_amx_matmul(A->pool, ws, A->unit, 1, &wp, &y, x, width, err)) {
                result = -1;
                goto done;
            }
            t_amx[rep] = ts_now_ns() - t0;
            t0 = ts_now_ns();
            const ts_wmat *wl = &w;
            ts_linear(A->pool, lin, 1, &wl, &y, x, width);
            t_cpu[rep] = ts_now_ns() - t0;
        }
        if (median3(t_amx[0], t_amx[1], t_amx[2]) >= median3(t_cpu[0], t_cpu[1], t_cpu[2]))
            break; /* from here down the CPU wins */
        result = width;
    }
done:
    free(rows), free(x), free(y), free(packed), free(panels);
    ts_linear_ws_free(lin);
    ts_amx_ws_free(ws);
    return result;
}

/* One empty batch's round trip: marker, flush, wait (median of 5). */
static uint64_t measure_crossing(ts_engine *e) {
    ts_eng_queue *q = ts_eng_queue_new(e, NULL);
    if (!q)
        return 0;
    uint64_t t[5] = {0};
    for (int i = 0; i < 5; i++) {
        const uint64_t t0 = ts_now_ns();
        ts_eng_event *ev = ts_eng_enqueue_marker(q, NULL);
        if (ev) {
            (void)ts_eng_event_wait(ev, NULL);
            ts_eng_event_free(ev);
        }
        t[i] = ts_now_ns() - t0;
    }
    ts_eng_queue_free(q);
    for (int i = 0; i < 5; i++) /* sort: 5 values */
        for (int j = i + 1; j < 5; j++)
            if (t[j] < t[i]) {
                const uint64_t tmp = t[i];
                t[i] = t[j], t[j] = tmp;
            }
    return t[2];
}

static uint64_t types_mask(ts_amx_act act) {
    uint64_t m = 0;
    for (uint32_t t = 0; t < TS_TYPE_COUNT && t < 64; t++)
        if (ts_amx_packed_bytes(act, t, 256, 16)) /* 256: every block size divides it */
            m |= 1ull << t;
    return m;
}

static const char *const act_names[] = {"exact", "q8", "int8", NULL};
static const char *const scale_names[] = {"token", "tensor", NULL};
static const char *const ops_names[] = {"all", "matmul", NULL};

static ts_engine *open_unit(const ts_eng_opts *o, bool vnni, ts_err *err) {
    long long threads = 1, emulate = 0, nowait = 0, min_width = -1;
    int act = vnni ? TS_AMX_INT8 : 0, scale = 0, ops = 0;
    if (ts_eng_opt_int(o, "threads", 1, 256, o->threads_hint > 0 ? o->threads_hint : 1, &threads, err) ||
        ts_eng_opt_int(o, "emulate", 0, 1, 0, &emulate, err) || ts_eng_opt_int(o, "nowait", 0, 1, 0, &nowait, err) ||
        ts_eng_opt_int(o, "min_width", 1, 4096, -1, &min_width, err) ||
        (!vnni && ts_eng_opt_choice(o, "act", act_names, 0, &act, err)) ||
        ts_eng_opt_choice(o, "scale", scale_names, 0, &scale, err) ||
        ts_eng_opt_choice(o, "ops", ops_names, 0, &ops, err))
        return NULL;
    if (scale == 1 && act != TS_AMX_INT8) {
        ts_err_set(err, "amx: scale=tensor is the int8 mode's (act=int8,scale=tensor); act=%s has its own scales",
                   act_names[act]);
        return NULL;
    }
    char why[200];
    if (vnni && !ts_amx_vnni_status(why, sizeof why)) {
        ts_err_set(err, "vnni: %s (it needs AVX-512 VNNI; amx,act=int8,emulate=1 computes the same on an emulator)",
                   why);
        return NULL;
    }
    if (!vnni && !emulate && !ts_amx_hw_status(why, sizeof why)) {
        ts_err_set(err, "amx: %s (amx,emulate=1 runs the engine on an emulator of the tiles)", why);
        return NULL;
    }
    ts_engine *e = ts_eng_alloc(&amx_vt, o, err);
    if (!e)
        return NULL;
    amx_eng *A = calloc(1, sizeof *A);
    if (!A) {
        ts_eng_dealloc(e);
        ts_err_set(err, "out of memory");
        return NULL;
    }
    e->impl = A;
    ts_hostdev_init(&A->hd);
    A->hd.run_graph = amx_run_graph;
    A->hd.nowait = nowait != 0; /* only reachable in a TS_TEST_HOOKS build */
    A->act = (ts_amx_act)act;
    A->per_tensor = scale == 1;
    A->unit = vnni ? TS_AMX_VNNI : emulate ? TS_AMX_EMU : TS_AMX_HW;
    A->n_threads = (int)threads;
    if (!(A->pool = ts_threadpool_new(A->n_threads, err))) {
        amx_close(e);
        return NULL;
    }
    A->n_threads = ts_threadpool_n_threads(A->pool);

    ts_eng_desc *d = &e->desc;
    snprintf(d->name, sizeof d->name, "%s", vnni ? "vnni" : "amx");
    snprintf(d->layout, sizeof d->layout, "amx-%s", ts_amx_act_name(A->act));
    d->kind = TS_ENG_KIND_NPU;
    d->window_bytes = o->window ? o->window : (uint64_t)8 << 30; /* host memory: a cap, not a size */
    d->max_buf_bytes = d->window_bytes;
    d->max_width = 2048;
    d->ops = ops ? 1u << TS_OP_MATMUL : (1u << TS_OP_COUNT) - 1;
    d->weight_types = types_mask(A->act);
    d->cpu_layouts = true; /* what it does not pack runs on the CPU kernels */
    d->stall_measured = true;
    d->clips = A->act == TS_AMX_INT8; /* calib=: one clipped scale per input + shadow outliers */
    int mw = (int)min_width;
    const char *how = "set";
    if (min_width < 0 && emulate) {
        mw = 32, how = "emulated: not measured";
    } else if (min_width < 0) {
        const int m = measure_min_width(A, err);
        if (m < 0) {
            amx_close(e);
            return NULL;
        }
        mw = m ? m : d->max_width;
        how = m ? "measured crossover vs the CPU kernels" : "the CPU kernels won at every width measured";
    }
    d->min_width = mw;
    d->crossing_ns = measure_crossing(e);
    /* a detail past its 160 bytes is cut (the longest, emulated with nowait, fits) */
    char detail[256];
    snprintf(detail, sizeof detail, "%s%s, act=%s%s%s, %d thread%s, min_width %d (%s)%s",
             vnni ? "AVX-512 VNNI (amx layout)" : "Intel AMX tiles", emulate ? " (EMULATED)" : "",
             ts_amx_act_name(A->act), A->per_tensor ? " (per tensor)" : "", ops ? ", matmuls only" : "", A->n_threads,
             A->n_threads == 1 ? "" : "s", mw, how, A->hd.nowait ? "; NOWAIT (broken on purpose)" : "");
    ts_eng_copy_str(d->detail, sizeof d->detail, detail);
    return e;
}

static ts_engine *amx_open(const ts_eng_opts *o, ts_err *err) { return open_unit(o, false, err); }
static ts_engine *vnni_open(const ts_eng_opts *o, ts_err *err) { return open_unit(o, true, err); }

static int amx_check_variant(const char *variant, ts_err *err) {
    if (variant[0])
        return ts_err_set(err, "device 'amx' has no variant '%s' (options: act=, scale=, ops=, emulate=1, threads=, min_width=)",
                          variant);
    return 0;
}

static const char *const amx_options[] = {"threads", "act", "scale", "ops", "emulate", "min_width",
#ifdef TS_TEST_HOOKS
                                          "nowait",
#endif
                                          NULL};
static const char *const amx_names[] = {"amx", "amx,emulate=1", NULL};
const ts_eng_backend ts_eng_backend_amx = {
    .name = "amx",
    .names_help = "amx",
    .options = amx_options,
    .check_variant = amx_check_variant,
    .open = amx_open,
    .list_names = amx_names,
};

static int vnni_check_variant(const char *variant, ts_err *err) {
    if (variant[0])
        return ts_err_set(err, "device 'vnni' has no variant '%s' (options: scale=, ops=, threads=, min_width=)", variant);
    return 0;
}

static const char *const vnni_options[] = {"threads", "scale", "ops", "min_width",
#ifdef TS_TEST_HOOKS
                                           "nowait",
#endif
                                           NULL};
static const char *const vnni_names[] = {"vnni", NULL};
const ts_eng_backend ts_eng_backend_vnni = {
    .name = "vnni",
    .names_help = "vnni",
    .options = vnni_options,
    .check_variant = vnni_check_variant,
    .open = vnni_open,
    .list_names = vnni_names,
};
