/* profile.c - one layer's latency by width on a device (profile.h). */
#include "runtime/profile.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "kernels/linear.h"
#include "kernels/repack.h"
#include "quant/quant.h"

typedef struct prof {
    ts_eng_buf *buf[TS_LS_COUNT];
    ts_eng_bind bind[TS_LS_COUNT];
    void *host[TS_LS_COUNT]; /* what was uploaded (kept until the queue is done) */
} prof;

static uint64_t rng_next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 11;
}
static float rng_f(uint64_t *s) { return (float)((double)rng_next(s) * 0x1p-53 * 2.0 - 1.0); }

/* one slot's device buffer of `bytes`, uploaded from host (taken over) */
static int put(ts_engine *e, ts_eng_queue *q, prof *p, int slot, void *host, size_t bytes, ts_err *err) {
    if (p->buf[slot]) { /* a slot two nodes name: the first one's buffer */
        free(host);
        return 0;
    }
    if (!(p->buf[slot] = ts_eng_buf_alloc(e, TS_MEM_DEVICE, bytes, err))) {
        free(host);
        return -1;
    }
    p->bind[slot].buf = p->buf[slot];
    p->host[slot] = host;
    return host ? ts_eng_enqueue_write(q, p->buf[slot], 0, host, bytes, err) : 0;
}

static float *randf(int64_t n, float scale, uint64_t *s) {
    float *v = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (v)
        for (int64_t i = 0; i < n; i++) v[i] = rng_f(s) * scale;
    return v;
}

/* a matrix slot: random rows of wtype, in the engine's layout or the CPU's panels */
static int put_matrix(ts_engine *e, ts_eng_queue *q, prof *p, int slot, uint32_t wtype, int64_t n_in, int64_t n_out,
                      uint64_t *s, ts_err *err) {
    if (p->buf[slot])
        return 0;
    const size_t rb = ts_row_size(wtype, n_in);
    if (!rb)
        return ts_err_set(err, "profile: %s rows of %lld do not fit the type", ts_type_info(wtype)->name, (long long)n_in);
    uint8_t *rows = malloc(rb * (size_t)n_out);
    float *row = randf(n_in, 0.05f, s);
    if (!rows || !row) {
        free(rows), free(row);
        return ts_err_set(err, "out of memory making profile weights");
    }
    int rc = 0;
    for (int64_t r = 0; r < n_out && !rc; r++) {
        for (int64_t i = 0; i < n_in; i++) row[i] = rng_f(s) * 0.05f;
        rc = ts_quant_row(wtype, row, rows + (size_t)r * rb, n_in, err);
    }
    free(row);
    if (rc) {
        free(rows);
        return -1;
    }
    ts_eng_bind *b = &p->bind[slot];
    b->wtype = wtype, b->row_bytes = rb, b->layout = TS_WL_ROWS;
    const uint64_t own = ts_eng_packed_bytes(e, wtype, n_in, n_out);
    void *dev = rows;
    size_t bytes = rb * (size_t)n_out;
    const ts_wmat w = {.type = wtype, .data = rows, .n_in = n_in, .n_out = n_out, .row_bytes = rb};
    if (own) {
        void *pk = malloc((size_t)own);
        if (!pk || ts_eng_pack(e, wtype, rows, rb, n_in, n_out, pk, err)) {
            free(pk), free(rows);
            return pk ? -1 : ts_err_set(err, "out of memory packing profile weights");
        }
        free(rows);
        dev = pk, bytes = (size_t)own, b->layout = TS_WL_ENGINE;
    } else if (ts_eng_describe(e)->cpu_layouts && ts_linear_wants_pack(&w)) {
        const size_t pb = ts_rp_matrix_bytes(wtype, n_in, n_out);
        uint8_t *panels = malloc(pb);
        if (panels && ts_linear_pack(&w, panels, NULL) == 0) {
            free(rows);
            dev = panels, bytes = pb, b->layout = TS_WL_PANELS;
        } else {
            free(panels);
        }
    }
    return put(e, q, p, slot, dev, bytes, err);
}

static int cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int ts_rt_profile_layer(ts_engine *dev, const ts_rt_block_shape *s, uint32_t wtype, const int *widths, int n,
                        int reps, double *ms, ts_err *err) {
    ts_eng_node nodes[TS_LS_MAX_NODES];
    const int nn = ts_rt_block_nodes(s, nodes);
    ts_rt_segment segs[TS_LS_MAX_NODES];
    const int ns = nn ? ts_rt_split_nodes(dev, nodes, nn, segs) : 0;
    int max_w = 0;
    for (int i = 0; i < n; i++) max_w = widths[i] > max_w ? widths[i] : max_w;
    if (!nn || n < 1 || max_w < 1 || reps < 1)
        return ts_err_set(err, "profile: nothing to run (%d nodes, %d widths)", nn, n);
    bool any = false;
    for (int i = 0; i < ns; i++) any |= segs[i].on_device;
    if (!any)
        return ts_err_set(err, "profile: %s takes no node of the layer", ts_eng_describe(dev)->name);
    prof p;
    memset(&p, 0, sizeof p);
    ts_eng_graph *graphs[TS_LS_MAX_NODES] = {0};
    uint64_t *t = calloc((size_t)reps, sizeof *t);
    ts_eng_queue *q = ts_eng_queue_new(dev, err);
    uint64_t seed = 0x853c49e6748fea9bull;
    int rc = q && t ? 0 : -1;
    if (!t && q) ts_err_set(err, "out of memory");
    /* the buffers every node names, sized for the widest run */
    uint64_t act[TS_LS_N_ACT];
    ts_rt_block_act_rows(s, act);
    for (int i = 0; i < nn && !rc; i++) {
        const ts_eng_node *nd = &nodes[i];
        switch (nd->op) {
        case TS_OP_MATMUL:
            rc = put_matrix(dev, q, &p, nd->matmul.w.slot, wtype, nd->matmul.n_in, nd->matmul.n_out, &seed, err);
            break;
        case TS_OP_RMSNORM:
            if (nd->rmsnorm.w.slot >= 0) {
                float *w = randf(nd->rmsnorm.n, 0.1f, &seed);
                for (int64_t k = 0; w && k < nd->rmsnorm.n; k++) w[k] += 1.0f;
                rc = put(dev, q, &p, nd->rmsnorm.w.slot, w, sizeof(float) * (size_t)nd->rmsnorm.n, err);
            }
            break;
        case TS_OP_ROPE: {
            const size_t fb = ts_eng_rope_freq_bytes(nd->rope.n_rot);
            double *f = malloc(sizeof(double) * (size_t)(nd->rope.n_rot / 2 + 1));
            void *packed = malloc(fb);
            for (int k = 0; f && k < nd->rope.n_rot / 2; k++) f[k] = pow(10000.0, -2.0 * k / nd->rope.n_rot);
            if (f && packed) ts_eng_rope_freq_pack(f, nd->rope.n_rot, packed);
            free(f);
            rc = put(dev, q, &p, nd->rope.freq.slot, packed, fb, err);
            break;
        }
        case TS_OP_ADD_ROW:
            rc = put(dev, q, &p, nd->add.x.slot, randf(nd->add.n, 0.1f, &seed), sizeof(float) * (size_t)nd->add.n, err);
            break;
        default: break;
        }
    }
    const size_t kv_bytes = (size_t)s->n_ctx * (size_t)s->n_head_kv * (size_t)s->head_dim * (s->kv_f16 ? 2 : 4);
    if (!rc) rc = put(dev, q, &p, TS_LS_KC, calloc(1, kv_bytes), kv_bytes, err);
    if (!rc) rc = put(dev, q, &p, TS_LS_VC, calloc(1, kv_bytes), kv_bytes, err);
    for (int a = 0; a < TS_LS_N_ACT && !rc; a++) {
        const size_t bytes = (size_t)act[a] * (size_t)max_w;
        float *h = a == TS_LS_X ? randf((int64_t)(bytes / 4), 1.0f, &seed) : NULL;
        rc = put(dev, q, &p, a, h, bytes, err);
    }
    if (!rc) rc = ts_eng_queue_finish(q, err);
    for (int i = 0; i < n && !rc; i++) {
        const ts_eng_desc *d = ts_eng_describe(dev);
        const int gw = d->widths_required ? widths[i] : max_w;
        for (int sg = 0; sg < ns && !rc && (i == 0 || d->widths_required); sg++) { /* once, or per required width */
            ts_eng_graph_free(graphs[sg]);
            graphs[sg] = NULL;
            if (segs[sg].on_device &&
                !(graphs[sg] = ts_eng_graph_new(dev, nodes + segs[sg].first, segs[sg].count, TS_LS_COUNT, gw, err)))
                rc = -1;
        }
        for (int r = -1; r < reps && !rc; r++) { /* r = -1: the warm-up */
            const uint64_t t0 = ts_now_ns();
            for (int sg = 0; sg < ns && !rc; sg++)
                if (graphs[sg]) rc = ts_eng_enqueue_graph(q, graphs[sg], p.bind, TS_LS_COUNT, 0, widths[i], err);
            if (!rc) rc = ts_eng_queue_finish(q, err);
            if (r >= 0) t[r] = ts_now_ns() - t0;
        }
        if (!rc) {
            qsort(t, (size_t)reps, sizeof *t, cmp_u64);
            ms[i] = (double)t[reps / 2] * 1e-6;
        }
    }
    if (q) (void)ts_eng_queue_finish(q, NULL);
    for (int sg = 0; sg < ns; sg++) ts_eng_graph_free(graphs[sg]);
    ts_eng_queue_free(q);
    for (int k = 0; k < TS_LS_COUNT; k++) {
        ts_eng_buf_free(p.buf[k]);
        free(p.host[k]);
    }
    free(t);
    return rc;
}
