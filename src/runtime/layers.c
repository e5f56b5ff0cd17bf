/* layers.c - a span's layers on a device over the forward's own buffers,
 * with the model's weights placed there once (see layers.h). */
#include "runtime/layers.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "kernels/linear.h"
#include "kernels/repack.h"
#include "quant/quant.h"
#include "runtime/arena.h"
#include "runtime/calib.h"
#include "runtime/convert.h"
#include "runtime/kvrange.h"

#define N_ACT TS_LS_N_ACT /* activation slots are 0 .. TS_LS_EXP_W */
#define MIB(b) ((double)(b) / 1048576.0)

typedef struct variant {
    ts_rt_block_shape shape;
    ts_eng_node nodes[TS_LS_MAX_NODES];
    int n_nodes;
    ts_rt_segment segs[TS_LS_MAX_NODES];
    int n_segs;
    ts_eng_graph *graphs[TS_LS_MAX_NODES];
    bool kv_on_device;   /* its kv_store node runs on the device */
    bool kv_read_device; /* its attention runs on the device */
    int route_seg;       /* CPU weights with a source: the segment that starts after the routing node (the
                          * experts' pacing point), else -1 */
} variant;

/* Ends a CPU segment at the MoE routing node, so that a streamed layer's
 * routed experts can be read between the two (ts_rt_arena_route). */
static void split_after_route(variant *V) {
    for (int i = 0; i < V->n_segs; i++) {
        ts_rt_segment *sg = &V->segs[i];
        for (int n = sg->first; n < sg->first + sg->count; n++) {
            if (V->nodes[n].op != TS_OP_MOE_ROUTE)
                continue;
            if (n + 1 < sg->first + sg->count) { /* split: [first, n] and [n + 1, end) */
                memmove(&V->segs[i + 2], &V->segs[i + 1], (size_t)(V->n_segs - i - 1) * sizeof *V->segs);
                V->segs[i + 1] = (ts_rt_segment){.first = n + 1, .count = sg->first + sg->count - n - 1,
                                                 .on_device = sg->on_device};
                sg->count = n + 1 - sg->first;
                V->n_segs++;
            }
            V->route_seg = i + 1 < V->n_segs ? i + 1 : -1;
            return;
        }
    }
}

typedef struct probe_cache {
    uint32_t wtype;
    int64_t n_in;
    int result;
} probe_cache;

/* How one matrix goes to the device: as the host holds it (its bytes, or
 * its GGUF rows kept beside panels), packed into the engine's own layout,
 * or converted to another type (in rows, or in the CPU kernels' panels). */
typedef enum { MF_AS_IS, MF_ROWS, MF_PACK, MF_CONVERT, MF_CONVERT_PANELS } mf_how;
typedef struct mat_form {
    mf_how how;
    uint32_t type;
    ts_eng_wlayout layout;
    uint64_t bytes, expert_bytes;
} mat_form;

/* What goes to the device for one layer: each slot's source bytes and its
 * offset in the layer's block (resident buffer, or a streaming slot). */
typedef struct layer_plan {
    const void *src[TS_LS_COUNT];
    uint64_t bytes[TS_LS_COUNT], off[TS_LS_COUNT];
    uint64_t total;
    uint8_t *conv[TS_LS_COUNT]; /* owned converted copies (kept while streaming: every run re-uploads them) */
    bool streamed[TS_LS_COUNT]; /* not in host memory: uploaded from the runner's arena slot (src NULL) */
    mat_form form[TS_LS_COUNT]; /* a streamed matrix's device form, made from the arena slot at each upload */
} layer_plan;

/* Host scratch where a device runner makes the device form of a streamed
 * layer (converted, packed) before uploading it: sized at arena_setup for
 * the largest such layer, reused by every upload (stream_in waits for each). */
typedef struct stage_buf {
    uint8_t *out;  /* [largest layer block] */
    uint8_t *rows; /* [largest form_scratch] */
    float *row;    /* [largest n_in] */
} stage_buf;

/* One segment of one layer in a run: what the schedule orders. Its
 * dependency is the task before it in the chain of the residual stream
 * (every segment reads what the previous one wrote); a later policy over
 * several chunks or activation sets adds the others (KV of the previous
 * chunk, outlier products), and the executor never issues a task before
 * its dependency. */
typedef struct rt_task {
    int layer, seg;
    bool on_device;
    bool first_dev; /* the layer's first device segment (streaming waits for its upload before it) */
    bool last_dev;  /* the layer's last device segment (streaming frees its slot after it) */
    int dep;       /* the task it needs issued first, -1 none */
    /* for several chunks in flight (ts_rt_layers_run_chunks) */
    bool attn;     /* it runs attention: it reads the previous chunk's K/V rows of its layer */
    int kv_task;   /* the task of its layer that stores K/V, -1 none */
    int n_cpu;     /* CPU tasks from it (inclusive) to the chain's next device task */
    int n_dev;     /* device tasks in that next run (0: none before the chain's end) */
} rt_task;

/* A scheduling policy: picks the next task to issue among those not issued
 * whose dependency is (-1 when none is ready). */
typedef struct rt_policy {
    const char *name;
    int (*pick)(const rt_task *tasks, int n, const uint8_t *issued);
} rt_policy;

/* In order: the first ready task. */
static int pick_inorder(const rt_task *tasks, int n, const uint8_t *issued) {
    for (int i = 0; i < n; i++)
        if (!issued[i] && (tasks[i].dep < 0 || issued[tasks[i].dep]))
            return i;
    return -1;
}
static const rt_policy policy_inorder = {"inorder", pick_inorder};

#ifdef TS_TEST_HOOKS
/* BROKEN ON PURPOSE (test builds): the last task not issued, ignoring its
 * dependency; the executor must refuse it. */
static int pick_nodeps(const rt_task *tasks, int n, const uint8_t *issued) {
    (void)tasks;
    for (int i = n - 1; i >= 0; i--)
        if (!issued[i])
            return i;
    return -1;
}
static const rt_policy policy_nodeps = {"nodeps", pick_nodeps};
#endif

static const rt_policy *const policies[] = {
    &policy_inorder,
#ifdef TS_TEST_HOOKS
    &policy_nodeps,
#endif
};

/* The model's weights on one device (shared by its states). Planned and
 * placed by the first state that attaches, under mu; read-only after. */
struct ts_rt_weights {
    ts_engine *dev;
    int n_layer;
    ts_rt_host_slot *slots; /* [n_layer * TS_LS_COUNT] */
    pthread_mutex_t mu;
    bool planned, placed;
    layer_plan *plans;      /* [n_layer] */
    ts_eng_bind *binds;     /* [n_layer * TS_LS_COUNT]: weight slots' type, layout, row size; buf/off when resident */
    ts_eng_buf **dev_layer; /* [n_layer]: resident weights, a buffer each (place=auto/stream) */
    ts_eng_place place;     /* the engine's place= option */
    bool *resident;         /* [n_layer]: the layer's block stays on the device (no streaming) */
    ts_eng_buf *pack[TS_RT_MAX_PACKS]; /* place=somr: the resident layers, packed in consumption order */
    int n_pack;
    int n_resident;         /* layers with a device block that stay resident */
    int somr_slots;         /* place=somr: the staging slots the window holds (slots=N or fewer) */
    bool streaming;         /* each state streams the other layers through slots of its own */
    uint64_t slot_bytes, weight_bytes;
    uint64_t plan_total; /* bytes of every layer's device block, as planned */
    int converted;
    int packed; /* matrices in the engine's own layout (ts_eng_pack) */
    struct ts_rt_weights *peer; /* ts_rt_weights_set_peer */
    ts_eng_buf **peer_maps;           /* [n_layer * TS_LS_COUNT]: the peer's matrices mapped into dev */
    int shared;
    uint64_t shared_bytes;
    int users; /* ts_rt_layers attached now */
    uint8_t *calib; /* the layers' clip records (calib=, or a calibration's collect records) */
    bool calib_owned;
    int calib_pruned; /* layers prune= took the shadow from */
    ts_rt_source src; /* the streamed slots' source (ts_rt_weights_set_source) */
    bool has_src;
};

struct ts_rt_layers {
    ts_rt_weights *w;
    ts_engine *dev, *cpu;
    ts_eng_queue *dq, *cq;
    ts_eng_queue *uq; /* streaming: the upload queue, beside dq */
    int width, n_layer;
    variant *vars;
    int n_vars;
    int *layer_var;
    float *act[N_ACT];
    uint64_t act_row[N_ACT]; /* bytes per token */
    bool act_used[N_ACT];    /* some layer's nodes use the slot */
    ts_eng_buf *dev_act[N_ACT], *cpu_act[N_ACT];
    ts_eng_buf *dev_kc, *dev_vc, *cpu_kc, *cpu_vc;
    bool kv_mapped_dev; /* some variant reads or writes the cache on the device */
    uint64_t kv_layer_bytes, kv_row_bytes;
    ts_eng_buf **cpu_maps;  /* [n_layer * TS_LS_COUNT] */
    ts_eng_bind *dev_binds; /* [n_layer * TS_LS_COUNT] */
    ts_eng_bind *cpu_binds;
    ts_eng_bindset **bsets; /* [n_layer * TS_LS_MAX_NODES]: layer l's segment i, checked once */
    bool need_cpu;
    bool attached; /* counted in w->users */
    /* the schedule: every (layer, segment) of a run as a task with its
     * dependency, and the policy that orders them */
    rt_task *tasks;
    int n_tasks;
    uint8_t *issued; /* [n_tasks], per run */
    const rt_policy *policy;
    /* streaming: the k-th streamed layer (order[k], consumption order)
     * computes from slot k % n_slots while the next ones are uploaded into
     * the others */
    bool streaming;
    int n_slots;                           /* staging slots (the engine option slots=N; default 2; peruse: 1) */
    int *order;                            /* [n_stream]: the streamed layers in consumption order */
    int *stream_k;                         /* [n_layer]: a layer's index in order, -1 when resident */
    int n_stream;
    bool cyclic; /* place=somr: slots keep their layers across runs, and each slot's first layer of the next
                  * run is uploaded as soon as its last one of this run is done */
    int slot_layer[TS_RT_MAX_SLOTS];       /* the layer a slot holds or is receiving (-1: unknown) */
    ts_eng_buf *slot[TS_RT_MAX_SLOTS];
    ts_eng_event *slot_free[TS_RT_MAX_SLOTS]; /* dq marker after the last graph that read the slot */
    ts_eng_event *slot_up[TS_RT_MAX_SLOTS];   /* uq marker after the slot's upload, until dq waits on it */
    bool nodrain;               /* the broken-on-purpose hook (engine option nodrain=1) */
    ts_rt_kv_ranges kv_own;     /* cache rows coherent on the device (the same in every layer) */
    ts_rt_kv_ranges *kv_held;   /* &kv_own, or the first set's (activation sets share the cache's view) */
    ts_rt_layers *share;        /* another activation set of the same state: its queue and cache maps are used */
    bool dq_pending;            /* commands on dq since the last drain */
    /* a submitted run not yet waited for (ts_rt_layers_submit_window) */
    bool in_flight;
    int64_t fl_pos0, fl_n_kv;
    int fl_n_tok;
    ts_eng_stats fl_before;
    ts_eng_event *fl_done; /* dq marker after the run's last command (NULL: nothing on the device) */
    ts_rt_layers_stats st;
    /* weights with a source (ts_rt_weights_set_source): the k-th layer
     * streamed from it (arena_k[l], -1 for a layer in host memory) is in
     * arena slot k % 2, filled by the arena's loaders: on the CPU its
     * graphs compute from there; a device's runner uploads it from there
     * into its own slots (whole layers) */
    ts_rt_arena *arena;
    int *arena_k;        /* [n_layer] */
    int32_t *all_experts; /* a device's runner: 0 .. n_expert - 1 (its uploads wait for every expert) */
    stage_buf stage;      /* a device's runner: where streamed layers take the device's form */
};

static bool is_matrix(int s) {
    return s == TS_LS_WQ || s == TS_LS_WK || s == TS_LS_WV || s == TS_LS_WO || s == TS_LS_W_GATE || s == TS_LS_W_UP ||
           s == TS_LS_W_DOWN || s == TS_LS_W_ROUTER || s == TS_LS_W_GATE_EXPS || s == TS_LS_W_UP_EXPS ||
           s == TS_LS_W_DOWN_EXPS;
}

static uint64_t align64(uint64_t v) { return (v + 63) & ~(uint64_t)63; }

static void free_plan_copies(layer_plan *lp) {
    for (int s = 0; s < TS_LS_COUNT; s++) {
        free(lp->conv[s]);
        lp->conv[s] = NULL;
    }
}

/* calib=FILE: the sidecar's records for every layer, in one host block that
 * the layers' TS_LS_CALIB slots point into (uploaded with each layer's
 * vectors); prune= drops the shadow of the least important layers (but
 * in the inputs prune_keep= names). */
static int load_calib(ts_rt_weights *w, ts_err *err) {
    const char *path = ts_eng_calib_path(w->dev);
    const float prune = ts_eng_prune(w->dev);
    const char *name = ts_eng_describe(w->dev)->name;
    if (ts_eng_prune_keep(w->dev) && !(prune > 0))
        return ts_err_set(err, "prune_keep= needs prune=P (the fraction of layers it applies to)");
    if (!path[0])
        return prune > 0 ? ts_err_set(err, "prune=%g needs calib=FILE (a `tessera calibrate` sidecar)", (double)prune)
                         : 0;
    if (!ts_eng_describe(w->dev)->clips)
        return ts_err_set(err, "calib=%s: %s applies no clip records (amx,act=int8 does)", path, name);
    ts_rt_calib *c = ts_rt_calib_read(path, err);
    if (!c)
        return -1;
    bool *pruned = calloc((size_t)w->n_layer, sizeof *pruned);
    int rc = -1;
    if (!pruned) {
        ts_err_set(err, "out of memory");
        goto done;
    }
    if (c->n_layer != w->n_layer) {
        ts_err_set(err, "calib=%s: made for %d layers, the model has %d (calibrated for another model?)", path, c->n_layer, w->n_layer);
        goto done;
    }
    uint64_t stride = 0;
    static const int mats[TS_CLIP_N_IN] = {TS_LS_WQ, TS_LS_WO, TS_LS_W_GATE, TS_LS_W_DOWN};
    for (int l = 0; l < w->n_layer; l++) {
        int64_t n_in[TS_CLIP_N_IN];
        uint64_t off[TS_CLIP_N_IN];
        for (int i = 0; i < TS_CLIP_N_IN; i++) {
            const ts_rt_host_slot *m = &w->slots[(size_t)l * TS_LS_COUNT + mats[i]];
            n_in[i] = m->data ? m->n_in : 0;
            if (n_in[i] != c->n_in[(size_t)l * TS_CLIP_N_IN + i]) {
                ts_err_set(err, "calib=%s: layer %d input %d is %lld wide in the calibration, %lld in the model "
                                "(calibrated for another model?)",
                           path, l, i, (long long)c->n_in[(size_t)l * TS_CLIP_N_IN + i], (long long)n_in[i]);
                goto done;
            }
        }
        const uint64_t b = ts_rt_clip_offsets(n_in, off);
        stride = b > stride ? b : stride;
    }
    stride = (stride + 63) & ~(uint64_t)63;
    if (ts_rt_calib_pruned(c, prune, pruned, err))
        goto done;
    if (!(w->calib = aligned_alloc(64, (size_t)stride * (size_t)w->n_layer))) {
        ts_err_set(err, "out of memory");
        goto done;
    }
    w->calib_owned = true;
    for (int l = 0; l < w->n_layer; l++) {
        ts_rt_calib_fill(c, l, pruned[l], ts_eng_prune_keep(w->dev), 0, w->calib + (size_t)l * stride);
        w->calib_pruned += pruned[l];
        w->slots[(size_t)l * TS_LS_COUNT + TS_LS_CALIB] =
            (ts_rt_host_slot){.data = w->calib + (size_t)l * stride, .bytes = stride};
    }
    rc = 0;
done:
    free(pruned);
    ts_rt_calib_free(c);
    return rc;
}

ts_rt_weights *ts_rt_weights_new(ts_engine *dev, int n_layer, const ts_rt_host_slot *slots, ts_err *err) {
    if (n_layer < 1 || !slots) {
        ts_err_set(err, "device weights: missing slots, or n_layer < 1");
        return NULL;
    }
    ts_rt_weights *w = calloc(1, sizeof *w);
    const size_t n = (size_t)n_layer * TS_LS_COUNT;
    if (w) {
        w->slots = malloc(n * sizeof *w->slots);
        w->plans = calloc((size_t)n_layer, sizeof *w->plans);
        w->binds = calloc(n, sizeof *w->binds);
        w->dev_layer = calloc((size_t)n_layer, sizeof *w->dev_layer);
        w->resident = calloc((size_t)n_layer, sizeof *w->resident);
    }
    if (!w || !w->slots || !w->plans || !w->binds || !w->dev_layer || !w->resident) {
        if (w) {
            free(w->resident);
            free(w->slots);
            free(w->plans);
            free(w->binds);
            free(w->dev_layer);
        }
        free(w);
        ts_err_set(err, "out of memory");
        return NULL;
    }
    memcpy(w->slots, slots, n * sizeof *w->slots);
    w->dev = dev;
    w->n_layer = n_layer;
    pthread_mutex_init(&w->mu, NULL);
    if (dev && load_calib(w, err)) {
        ts_rt_weights_free(w);
        return NULL;
    }
    return w;
}

int ts_rt_weights_set_source(ts_rt_weights *w, const ts_rt_source *src, ts_err *err) {
    pthread_mutex_lock(&w->mu);
    const bool busy = w->users || w->planned;
    if (!busy) {
        w->src = *src;
        w->has_src = true;
    }
    pthread_mutex_unlock(&w->mu);
    return busy ? ts_err_set(err, "weights: a source is set before any state attaches") : 0;
}

int ts_rt_weights_set_peer(ts_rt_weights *w, ts_rt_weights *peer, ts_err *err) {
    if (!peer || peer == w || peer->n_layer != w->n_layer)
        return ts_err_set(err, "weights: a peer is the same model's weights on another device");
    pthread_mutex_lock(&w->mu);
    const bool busy = w->users || w->planned || w->peer;
    if (!busy && !w->peer_maps)
        w->peer_maps = calloc((size_t)w->n_layer * TS_LS_COUNT, sizeof *w->peer_maps);
    if (!busy && w->peer_maps)
        w->peer = peer;
    pthread_mutex_unlock(&w->mu);
    if (busy)
        return ts_err_set(err, "weights: a peer is named once, before any state attaches");
    return w->peer ? 0 : ts_err_set(err, "out of memory");
}

/* Frees the peer's matrices mapped into w's device (the slots then unshared). */
static void peer_maps_clear(ts_rt_weights *w) {
    for (size_t i = 0; w->peer_maps && i < (size_t)w->n_layer * TS_LS_COUNT; i++) {
        ts_eng_buf_free(w->peer_maps[i]);
        w->peer_maps[i] = NULL;
    }
}

/* Slot i's matrix (layer i / TS_LS_COUNT) in form f, mapped from the peer's
 * copy where the peer holds the same bytes resident in host memory and
 * this device reads its layout; NULL otherwise. */
static ts_eng_buf *peer_matrix(ts_rt_weights *wt, size_t i, const mat_form *f) {
    ts_rt_weights *p = wt->peer;
    const char *lay = ts_eng_describe(wt->dev)->layout;
    if (f->how != MF_PACK || !lay[0] || strcmp(lay, ts_eng_describe(p->dev)->layout))
        return NULL;
    const int l = (int)(i / TS_LS_COUNT), s = (int)(i % TS_LS_COUNT);
    const uint8_t *host = NULL;
    pthread_mutex_lock(&p->mu);
    const ts_eng_bind *b = &p->binds[i];
    if (p->placed && p->resident[l] && b->buf && b->layout == TS_WL_ENGINE && b->wtype == f->type &&
        p->plans[l].bytes[s] == f->bytes && p->slots[i].data == wt->slots[i].data &&
        (host = ts_eng_buf_peer_bytes(b->buf)))
        host += b->off;
    pthread_mutex_unlock(&p->mu);
    /* not mapped: this device packs its own (err stays clear) */
    ts_err quiet = {{0}};
    return host ? ts_eng_buf_map(wt->dev, (void *)(uintptr_t)host, (size_t)f->bytes, &quiet) : NULL;
}

int ts_rt_weights_set_calib(ts_rt_weights *w, void *records, uint64_t stride, ts_err *err) {
    pthread_mutex_lock(&w->mu);
    const bool busy = w->users || w->planned, taken = records && w->calib;
    if (!busy && !taken) {
        if (w->calib_owned)
            free(w->calib);
        w->calib = records, w->calib_owned = records != NULL;
        for (int l = 0; l < w->n_layer; l++)
            w->slots[(size_t)l * TS_LS_COUNT + TS_LS_CALIB] = (ts_rt_host_slot){
                .data = records ? (uint8_t *)records + (size_t)l * stride : NULL, .bytes = records ? stride : 0};
    }
    pthread_mutex_unlock(&w->mu);
    if (busy)
        return ts_err_set(err, "a context of this model is open (its layers carry the clip records they had)");
    if (taken)
        return ts_err_set(err, "the model already carries clip records (one calibration at a time)");
    return 0;
}

void ts_rt_weights_free(ts_rt_weights *w) {
    if (!w)
        return;
    if (w->calib_owned)
        free(w->calib);
    for (int l = 0; l < w->n_layer; l++) {
        ts_eng_buf_free(w->dev_layer[l]);
        free_plan_copies(&w->plans[l]);
    }
    for (int i = 0; i < w->n_pack; i++)
        ts_eng_buf_free(w->pack[i]);
    peer_maps_clear(w);
    free(w->peer_maps);
    free(w->resident);
    free(w->plans);
    free(w->dev_layer);
    free(w->binds);
    free(w->slots);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

ts_engine *ts_rt_weights_engine(const ts_rt_weights *w) { return w ? w->dev : NULL; }

void ts_rt_layers_free(ts_rt_layers *pf) {
    if (!pf)
        return;
    if (pf->dq)
        (void)ts_eng_queue_finish(pf->dq, NULL);
    if (pf->uq)
        (void)ts_eng_queue_finish(pf->uq, NULL);
    ts_eng_event_free(pf->fl_done);
    for (int j = 0; j < TS_RT_MAX_SLOTS; j++) {
        ts_eng_event_free(pf->slot_free[j]);
        ts_eng_event_free(pf->slot_up[j]);
        ts_eng_buf_free(pf->slot[j]);
    }
    free(pf->order);
    free(pf->stream_k);
    ts_rt_arena_free(pf->arena);
    free(pf->arena_k);
    free(pf->all_experts);
    free(pf->stage.out);
    free(pf->stage.rows);
    free(pf->stage.row);
    if (pf->bsets)
        for (int i = 0; i < pf->n_layer * TS_LS_MAX_NODES; i++)
            ts_eng_bindset_free(pf->bsets[i]);
    free(pf->bsets);
    for (int v = 0; v < pf->n_vars; v++)
        for (int i = 0; i < pf->vars[v].n_segs; i++)
            ts_eng_graph_free(pf->vars[v].graphs[i]);
    free(pf->vars);
    free(pf->layer_var);
    for (int i = 0; i < N_ACT; i++) {
        ts_eng_buf_free(pf->dev_act[i]);
        ts_eng_buf_free(pf->cpu_act[i]);
    }
    if (!pf->share) { /* an activation set borrows these from the first set */
        ts_eng_buf_free(pf->dev_kc);
        ts_eng_buf_free(pf->dev_vc);
        ts_eng_buf_free(pf->cpu_kc);
        ts_eng_buf_free(pf->cpu_vc);
    }
    if (pf->cpu_maps)
        for (int i = 0; i < pf->n_layer * TS_LS_COUNT; i++)
            ts_eng_buf_free(pf->cpu_maps[i]);
    free(pf->cpu_maps);
    free(pf->tasks);
    free(pf->issued);
    free(pf->dev_binds);
    free(pf->cpu_binds);
    if (!pf->share)
        ts_eng_queue_free(pf->dq);
    ts_eng_queue_free(pf->uq);
    ts_eng_queue_free(pf->cq);
    if (pf->attached) {
        pthread_mutex_lock(&pf->w->mu);
        pf->w->users--;
        pthread_mutex_unlock(&pf->w->mu);
    }
    free(pf);
}

/* Row r of expert e (0 for one matrix) of a matrix slot as floats, from
 * its GGUF rows or its panels. */
static int slot_row(const ts_rt_host_slot *s, int e, int64_t r, float *dst, ts_err *err) {
    const size_t rb = ts_row_size(s->wtype, s->n_in);
    if (s->rows)
        return ts_dequant_row(s->wtype, (const uint8_t *)s->rows + ((size_t)e * (size_t)s->n_out + (size_t)r) * rb,
                              dst, s->n_in, err);
    const uint8_t *base = (const uint8_t *)s->data + (size_t)e * s->expert_bytes;
    if (s->layout == TS_WL_PANELS) {
        ts_rp_row(s->wtype, s->n_in, base, r, dst);
        return 0;
    }
    return ts_dequant_row(s->wtype, base + (size_t)r * rb, dst, s->n_in, err);
}

/* Every row of slot s (all n_exp experts, stacked) in type `type`, from the
 * exact values of the stored weights, into dst; row [n_in] is scratch. */
static int convert_rows(const ts_rt_host_slot *s, uint32_t type, int n_exp, uint8_t *dst, float *row, ts_err *err) {
    const size_t drb = ts_row_size(type, s->n_in);
    int rc = 0;
    for (int e = 0; e < n_exp && !rc; e++)
        for (int64_t r = 0; r < s->n_out && !rc; r++)
            rc = slot_row(s, e, r, row, err) ||
                 ts_quant_row(type, row, dst + ((size_t)e * (size_t)s->n_out + (size_t)r) * drb, s->n_in, err);
    return rc;
}

/* The weight type the device computes slot s's matrix in (probed once per
 * type and width, the probe's line added to note), or -1 with err. */
static int choose_type(ts_rt_weights *wt, const ts_rt_host_slot *s, probe_cache *pc, int *n_pc, char *note,
                       size_t note_size, ts_err *err) {
    for (int i = 0; i < *n_pc; i++)
        if (pc[i].wtype == s->wtype && pc[i].n_in == s->n_in)
            return pc[i].result;
    char line[400];
    const int chosen = ts_rt_probe_weight_type(wt->dev, s->wtype, s->n_in, line, sizeof line, err);
    if (chosen < 0)
        return -1;
    if (*n_pc < 64)
        pc[(*n_pc)++] = (probe_cache){s->wtype, s->n_in, chosen};
    if (note && note_size) {
        const size_t len = strlen(note);
        if (len < note_size)
            snprintf(note + len, note_size - len, "%s%s[%lld]: %s", len ? "\n" : "", ts_type_info(s->wtype)->name,
                     (long long)s->n_in, line);
    }
    return chosen;
}

/* The device form of slot s's matrix in type `chosen` (s->data may be NULL:
 * a streamed slot, whose bytes arrive in s->layout). */
static mat_form decide_form(const ts_engine *dev, const ts_rt_host_slot *s, uint32_t chosen) {
    const int n_exp = s->n_expert > 0 ? s->n_expert : 1;
    const size_t crb = ts_row_size(chosen, s->n_in);
    mat_form f = {.type = chosen, .layout = TS_WL_ROWS, .expert_bytes = s->expert_bytes};
    /* an engine with a layout of its own for this matrix gets it, packed
     * from GGUF rows of the chosen type (converted first if needed) */
    const uint64_t own = s->n_expert > 0 ? 0 : ts_eng_packed_bytes(dev, chosen, s->n_in, s->n_out);
    if (own) {
        f.how = MF_PACK, f.layout = TS_WL_ENGINE, f.bytes = own;
        return f;
    }
    if (chosen == s->wtype && (ts_eng_describe(dev)->cpu_layouts || s->layout == TS_WL_ROWS)) {
        f.how = MF_AS_IS, f.layout = s->layout, f.bytes = s->bytes;
        return f;
    }
    f.bytes = (uint64_t)n_exp * (uint64_t)s->n_out * crb;
    f.expert_bytes = s->n_expert > 0 ? (uint64_t)s->n_out * crb : 0;
    if (chosen == s->wtype && s->rows) {
        f.how = MF_ROWS;
        return f;
    }
    /* converted from the exact values of the stored weights (an expert
     * array: every expert, stacked as rows); an engine running the CPU's
     * kernels gets a converted matrix in their panel layout where they have
     * one (as the loader repacks the file's matrices): the same arithmetic
     * on every such engine */
    f.how = MF_CONVERT;
    const ts_wmat w = {.type = chosen, .n_in = s->n_in, .n_out = s->n_out, .row_bytes = crb};
    if (!s->n_expert && ts_eng_describe(dev)->cpu_layouts && ts_linear_wants_pack(&w) &&
        ts_rp_matrix_bytes(chosen, s->n_in, s->n_out)) {
        f.how = MF_CONVERT_PANELS, f.layout = TS_WL_PANELS, f.bytes = ts_rp_matrix_bytes(chosen, s->n_in, s->n_out);
    }
    return f;
}

/* Bytes of scratch make_form needs for slot s in form f: the matrix as rows
 * of the chosen type when it is converted before it is packed. */
static uint64_t form_scratch(const ts_rt_host_slot *s, const mat_form *f) {
    const bool direct_rows = f->type == s->wtype && (s->rows || s->layout == TS_WL_ROWS);
    if (f->how == MF_CONVERT_PANELS || (f->how == MF_PACK && !direct_rows))
        return (uint64_t)s->n_out * ts_row_size(f->type, s->n_in);
    return 0;
}

/* Writes slot s's matrix in form f (MF_PACK, MF_CONVERT, MF_CONVERT_PANELS)
 * into dst [f->bytes]; rows [form_scratch] and row [n_in] are scratch. */
static int make_form(const ts_engine *dev, const ts_rt_host_slot *s, const mat_form *f, uint8_t *dst, uint8_t *rows,
                     float *row, ts_err *err) {
    const int n_exp = s->n_expert > 0 ? s->n_expert : 1;
    const size_t crb = ts_row_size(f->type, s->n_in);
    if (f->how == MF_CONVERT)
        return convert_rows(s, f->type, n_exp, dst, row, err);
    const uint8_t *src = f->type == s->wtype ? (s->rows ? s->rows : s->layout == TS_WL_ROWS ? s->data : NULL) : NULL;
    if (!src) {
        /* convert (or read the panels back) into rows of the chosen type */
        if (convert_rows(s, f->type, 1, rows, row, err))
            return -1;
        src = rows;
    }
    if (f->how == MF_PACK)
        return ts_eng_pack(dev, f->type, src, crb, s->n_in, s->n_out, dst, err);
    const ts_wmat w = {.type = f->type, .data = src, .n_in = s->n_in, .n_out = s->n_out, .row_bytes = crb};
    return ts_linear_pack(&w, dst, err);
}

/* The device form of one resident matrix: type, layout, bytes; *conv is a
 * converted copy owned by the caller (NULL when the host bytes go as they
 * are). */
static int plan_matrix(ts_rt_weights *wt, size_t i, probe_cache *pc, int *n_pc, char *note, size_t note_size,
                       mat_form *f, const void **src, uint8_t **conv, ts_err *err) {
    const ts_rt_host_slot *s = &wt->slots[i];
    *conv = NULL;
    const int chosen = choose_type(wt, s, pc, n_pc, note, note_size, err);
    if (chosen < 0)
        return -1;
    *f = decide_form(wt->dev, s, (uint32_t)chosen);
    if (f->how == MF_AS_IS || f->how == MF_ROWS) {
        *src = f->how == MF_AS_IS ? s->data : s->rows;
        return 0;
    }
    /* the peer's copy, mapped: nothing packed, nothing in this layer's block */
    if (wt->peer && (wt->peer_maps[i] = peer_matrix(wt, i, f))) {
        wt->binds[i].buf = wt->peer_maps[i];
        wt->binds[i].off = 0;
        wt->shared++;
        wt->shared_bytes += f->bytes;
        *src = NULL;
        return 0;
    }
    const uint64_t sb = form_scratch(s, f);
    uint8_t *dst = malloc((size_t)f->bytes), *rows = sb ? malloc((size_t)sb) : NULL;
    float *row = malloc((size_t)s->n_in * sizeof(float));
    int rc = dst && row && (rows || !sb) ? make_form(wt->dev, s, f, dst, rows, row, err)
                                          : ts_err_set(err, "out of memory converting a weight");
    free(rows);
    free(row);
    if (rc) {
        free(dst);
        return -1;
    }
    if ((uint32_t)chosen != s->wtype || f->how != MF_PACK)
        wt->converted++;
    if (f->how == MF_PACK)
        wt->packed++;
    *conv = dst, *src = dst;
    return 0;
}

/* Plans layer l's device copy (probe, convert) and fills the matrix part of
 * its device binds (type, layout, row size; buffer and offset come later). */
static int plan_layer(ts_rt_weights *wt, int l, probe_cache *pc, int *n_pc, char *note, size_t note_size,
                      ts_err *err) {
    const ts_rt_host_slot *slots = wt->slots + (size_t)l * TS_LS_COUNT;
    ts_eng_bind *b = wt->binds + (size_t)l * TS_LS_COUNT;
    layer_plan *lp = &wt->plans[l];
    for (int s = TS_LS_ROPE_FREQ; s < TS_LS_COUNT; s++) {
        if (!slots[s].data && !slots[s].streamed)
            continue;
        if (is_matrix(s)) {
            mat_form f;
            if (slots[s].streamed) {
                /* in the file: the form is chosen now, and each run that
                 * uploads the layer makes it from the arena slot's bytes
                 * (stream_in) */
                const int chosen = choose_type(wt, &slots[s], pc, n_pc, note, note_size, err);
                if (chosen < 0)
                    return -1;
                f = decide_form(wt->dev, &slots[s], (uint32_t)chosen);
                lp->streamed[s] = true;
                lp->form[s] = f;
            } else if (plan_matrix(wt, (size_t)l * TS_LS_COUNT + (size_t)s, pc, n_pc, note, note_size, &f,
                                   &lp->src[s], &lp->conv[s], err)) {
                return -1;
            }
            /* a matrix mapped from the peer takes no room in the block */
            lp->bytes[s] = wt->peer_maps && wt->peer_maps[(size_t)l * TS_LS_COUNT + (size_t)s] ? 0 : f.bytes;
            b[s].wtype = f.type;
            b[s].layout = f.layout;
            b[s].row_bytes = ts_row_size(f.type, slots[s].n_in);
            b[s].n_expert = slots[s].n_expert;
            b[s].expert_bytes = f.expert_bytes;
        } else if (slots[s].streamed) {
            lp->streamed[s] = true;
            lp->form[s] = (mat_form){.how = MF_AS_IS};
            lp->bytes[s] = slots[s].bytes;
        } else {
            lp->src[s] = slots[s].data;
            lp->bytes[s] = slots[s].bytes;
        }
        lp->off[s] = lp->total;
        lp->total += align64(lp->bytes[s]);
    }
    return 0;
}

/* Points layer l's weight binds in b (n_layer * TS_LS_COUNT) at buf, its
 * block starting at offset base (0 but in a pack). */
static void bind_layer(const ts_rt_weights *wt, ts_eng_bind *binds, int l, ts_eng_buf *buf, uint64_t base) {
    ts_eng_bind *b = binds + (size_t)l * TS_LS_COUNT;
    const layer_plan *lp = &wt->plans[l];
    for (int s = TS_LS_ROPE_FREQ; s < TS_LS_COUNT; s++)
        if (lp->src[s] || lp->streamed[s]) {
            b[s].buf = buf;
            b[s].off = base + lp->off[s];
        }
}

static uint64_t arena_part_off(const ts_rt_host_slot *slots, int s);

/* Enqueues the upload of layer l's block into buf at offset base on queue
 * q; a streamed layer's parts from its arena slot host_slot (NULL: none),
 * made into their device form in stage first where they need it. */
static int enqueue_layer_upload(const ts_rt_weights *wt, ts_eng_queue *q, int l, ts_eng_buf *buf, uint64_t base,
                                const uint8_t *host_slot, const stage_buf *stage, ts_err *err) {
    const layer_plan *lp = &wt->plans[l];
    const ts_rt_host_slot *slots = wt->slots + (size_t)l * TS_LS_COUNT;
    for (int s = TS_LS_ROPE_FREQ; s < TS_LS_COUNT; s++) {
        const void *src = lp->src[s];
        if (lp->streamed[s]) {
            if (!host_slot)
                return ts_err_set(err, "layer %d streams from the file and has no arena slot to upload from", l);
            src = host_slot + arena_part_off(slots, s);
            if (lp->form[s].how != MF_AS_IS) {
                ts_rt_host_slot v = slots[s];
                v.data = src;
                if (!stage || !stage->out)
                    return ts_err_set(err, "layer %d streams and has no staging buffer for its device form", l);
                if (make_form(wt->dev, &v, &lp->form[s], stage->out + lp->off[s], stage->rows, stage->row, err))
                    return -1;
                src = stage->out + lp->off[s];
            }
        }
        if (src && ts_eng_enqueue_write(q, buf, (size_t)(base + lp->off[s]), src, (size_t)lp->bytes[s], err))
            return -1;
    }
    return 0;
}

/* Where weight slot s of a layer goes in its arena slot: the layer's
 * streamed slots in slot order, each 4096-aligned (a loader may read
 * straight into them). Returns the end for s == TS_LS_COUNT. */
static uint64_t arena_part_off(const ts_rt_host_slot *slots, int s) {
    uint64_t off = 0;
    for (int i = TS_LS_ROPE_FREQ; i < s; i++)
        if (slots[i].streamed)
            off += (slots[i].bytes + 4095) & ~(uint64_t)4095;
    return off;
}

/* The CPU's weights with streamed slots: the arena every runner over them
 * paces its streamed layers through. */
static int arena_setup(ts_rt_layers *pf, ts_err *err) {
    const ts_rt_weights *wt = pf->w;
    const int nl = pf->n_layer;
    int *order = malloc((size_t)nl * sizeof *order);
    uint64_t *off = calloc((size_t)nl * TS_LS_COUNT, sizeof *off), *bytes = calloc((size_t)nl * TS_LS_COUNT, sizeof *bytes);
    int32_t *nexp = calloc((size_t)nl * TS_LS_COUNT, sizeof *nexp);
    pf->arena_k = malloc((size_t)nl * sizeof *pf->arena_k);
    int rc = -1, n = 0;
    uint64_t slot_bytes = 0;
    if (!order || !off || !bytes || !nexp || !pf->arena_k) {
        ts_err_set(err, "out of memory");
        goto done;
    }
    for (int l = 0; l < nl; l++) {
        const ts_rt_host_slot *S = wt->slots + (size_t)l * TS_LS_COUNT;
        pf->arena_k[l] = -1;
        for (int s = TS_LS_ROPE_FREQ; s < TS_LS_COUNT; s++) {
            if (!S[s].streamed)
                continue;
            if (pf->arena_k[l] < 0)
                pf->arena_k[l] = n++;
            off[(size_t)pf->arena_k[l] * TS_LS_COUNT + s] = arena_part_off(S, s);
            bytes[(size_t)pf->arena_k[l] * TS_LS_COUNT + s] = S[s].bytes;
            nexp[(size_t)pf->arena_k[l] * TS_LS_COUNT + s] = S[s].n_expert;
        }
        if (pf->arena_k[l] >= 0) {
            order[pf->arena_k[l]] = l;
            const uint64_t lb = arena_part_off(S, TS_LS_COUNT);
            if (lb > slot_bytes)
                slot_bytes = lb;
        }
    }
    if (n == 0) {
        free(pf->arena_k);
        pf->arena_k = NULL;
        rc = 0;
        goto done;
    }
    /* a device's runner uploads whole layers from its arena (the routing
     * node is on the device), and its CPU segments must not read a streamed
     * matrix: the arena slot is refilled once the upload is done */
    ts_rt_source src = wt->src;
    int max_exp = 0;
    if (pf->dev) {
        src.routed = false;
        for (int l = 0; l < nl; l++) {
            const variant *V = &pf->vars[pf->layer_var[l]];
            for (int i = 0; i < V->n_segs && pf->arena_k[l] >= 0; i++)
                for (int k = V->segs[i].first; k < V->segs[i].first + V->segs[i].count && !V->segs[i].on_device; k++)
                    if (V->nodes[k].op == TS_OP_MATMUL || V->nodes[k].op == TS_OP_MOE_MATMUL) {
                        ts_err_set(err, "layer %d streams from the file and %s leaves some of its matmuls to the CPU, "
                                        "which streaming does not do yet: prefill on loop, or on the CPU",
                                   l, ts_eng_describe(pf->dev)->name);
                        goto done;
                    }
            if (V->shape.kind == TS_BLOCK_MOE && V->shape.n_expert > max_exp)
                max_exp = V->shape.n_expert;
        }
        if (max_exp && !(pf->all_experts = malloc((size_t)max_exp * sizeof *pf->all_experts))) {
            ts_err_set(err, "out of memory");
            goto done;
        }
        for (int e = 0; e < max_exp; e++)
            pf->all_experts[e] = e;
        /* a device that converts or packs: the staging for its forms */
        uint64_t out_b = 0, rows_b = 0;
        int64_t n_in = 0;
        for (int l = 0; l < nl; l++) {
            const layer_plan *lp = &wt->plans[l];
            bool any = false;
            for (int s = TS_LS_ROPE_FREQ; s < TS_LS_COUNT; s++)
                if (lp->streamed[s] && lp->form[s].how != MF_AS_IS) {
                    const ts_rt_host_slot *S = wt->slots + (size_t)l * TS_LS_COUNT + s;
                    const uint64_t sb = form_scratch(S, &lp->form[s]);
                    any = true;
                    rows_b = sb > rows_b ? sb : rows_b;
                    n_in = S->n_in > n_in ? S->n_in : n_in;
                }
            if (any && lp->total > out_b)
                out_b = lp->total;
        }
        if (out_b && (!(pf->stage.out = malloc((size_t)out_b)) ||
                      (rows_b && !(pf->stage.rows = malloc((size_t)rows_b))) ||
                      !(pf->stage.row = malloc((size_t)n_in * sizeof(float))))) {
            ts_err_set(err, "out of memory for the staging of streamed layers (%.1f MiB)", (double)out_b / 1048576.0);
            goto done;
        }
    }
    pf->arena = ts_rt_arena_new(&src, 2, slot_bytes, order, n, TS_LS_COUNT, off, bytes, nexp, err);
    rc = pf->arena ? 0 : -1;
done:
    free(order);
    free(off);
    free(bytes);
    free(nexp);
    return rc;
}

/* Maps the host weights of layer l into the cpu engine (no copy; a
 * streamed layer's: its arena slot). */
static int map_layer_cpu(ts_rt_layers *pf, int l, ts_err *err) {
    const ts_rt_host_slot *slots = pf->w->slots + (size_t)l * TS_LS_COUNT;
    ts_eng_bind *b = pf->cpu_binds + (size_t)l * TS_LS_COUNT;
    const int k = pf->arena_k ? pf->arena_k[l] : -1;
    for (int s = TS_LS_ROPE_FREQ; s < TS_LS_COUNT; s++) {
        const void *src = slots[s].data;
        if (slots[s].streamed && k >= 0) /* its place in the layer's arena slot */
            src = ts_rt_arena_slot(pf->arena, k % ts_rt_arena_n_slots(pf->arena)) + arena_part_off(slots, s);
        if (!src)
            continue;
        /* the graph only reads weights, so read-only memory is fine */
        ts_eng_buf *m = ts_eng_buf_map(pf->cpu, (void *)(uintptr_t)src, (size_t)slots[s].bytes, err);
        if (!m)
            return -1;
        pf->cpu_maps[(size_t)l * TS_LS_COUNT + s] = m;
        b[s].buf = m;
        if (is_matrix(s)) {
            b[s].wtype = slots[s].wtype;
            b[s].layout = slots[s].layout;
            b[s].row_bytes = ts_row_size(slots[s].wtype, slots[s].n_in);
            b[s].n_expert = slots[s].n_expert;
            b[s].expert_bytes = slots[s].expert_bytes;
        }
    }
    return 0;
}

static uint64_t window_free(ts_engine *dev) {
    ts_eng_stats es;
    ts_eng_get_stats(dev, &es);
    const uint64_t window = ts_eng_describe(dev)->window_bytes;
    return window > es.window_used ? window - es.window_used : 0;
}

static int window_full(ts_engine *dev, uint64_t total, uint64_t largest, int n_slots, ts_err *err) {
    return ts_err_set(err,
                      "memory window full: the window of %.1f MiB (%.1f MiB free beside activations, KV cache "
                      "and graph scratch) holds neither the weights' device copy (%.1f MiB) nor %s "
                      "(%d x %.1f MiB)",
                      MIB(ts_eng_describe(dev)->window_bytes), MIB(window_free(dev)), MIB(total),
                      n_slots == 1 ? "one layer slot" : n_slots == 2 ? "two layer slots" : n_slots == 3 ? "three layer slots" : "its layer slots", n_slots, MIB(largest));
}

/* Uploads the resident layers into w->pack[]: consecutive in consumption
 * (layer) order, a new buffer only where the next layer would pass the
 * device's largest buffer, so the device holds them in few mappings. */
static int pack_resident(ts_rt_weights *wt, ts_eng_queue *q, ts_err *err) {
    const uint64_t max_buf = ts_eng_describe(wt->dev)->max_buf_bytes;
    int l = 0;
    while (l < wt->n_layer) {
        /* the next pack: resident layers from l while they fit one buffer */
        uint64_t size = 0;
        int end = l;
        for (; end < wt->n_layer; end++) {
            if (!wt->resident[end] || !wt->plans[end].total)
                continue;
            if (size + wt->plans[end].total > max_buf && size)
                break;
            size += wt->plans[end].total;
        }
        if (size) {
            if (wt->n_pack == TS_RT_MAX_PACKS)
                return ts_err_set(err, "somr: the resident weights need more than %d buffers of %.1f MiB",
                                  TS_RT_MAX_PACKS, MIB(max_buf));
            ts_eng_buf *buf = ts_eng_buf_alloc(wt->dev, TS_MEM_DEVICE, (size_t)size, err);
            if (!buf)
                return ts_err_prefix(err, "somr: packing the resident weights (%.1f MiB)", MIB(size));
            wt->pack[wt->n_pack++] = buf;
            uint64_t base = 0;
            for (int k = l; k < end; k++) {
                if (!wt->resident[k] || !wt->plans[k].total)
                    continue;
                bind_layer(wt, wt->binds, k, buf, base);
                if (enqueue_layer_upload(wt, q, k, buf, base, NULL, NULL, err))
                    return -1;
                base += wt->plans[k].total;
            }
            /* the converted copies must outlive their uploads */
            if (ts_eng_queue_finish(q, err))
                return -1;
            for (int k = l; k < end; k++)
                if (wt->resident[k])
                    free_plan_copies(&wt->plans[k]);
        }
        l = end;
    }
    return 0;
}

/* place=somr, the window holding less than every layer: n_slots slots of
 * the largest layer are kept free for each state's staging and as many
 * layers as fit the rest stay resident. Which ones: every layer of a model
 * here holds the same matrices, so its device time and its transfer time
 * both follow its bytes, and the profile reduces to them; the streamed
 * layers are spread evenly through the run so that each upload has the
 * most resident layers' compute ahead of its consumer to hide behind (the
 * seed's alternating resident and temporary data). Returns how many stream. */
static int somr_choose(ts_rt_weights *wt, uint64_t budget) {
    int n_dev = 0;
    for (int l = 0; l < wt->n_layer; l++)
        n_dev += wt->plans[l].total > 0;
    for (int S = 1; S <= n_dev; S++) {
        /* the k-th streamed layer: the middle of the k-th of S equal stretches of the device layers */
        uint64_t res = 0;
        for (int l = 0, d = 0, k = 0; l < wt->n_layer; l++) {
            wt->resident[l] = true;
            if (!wt->plans[l].total)
                continue;
            if (k < S && d == (int)(((2 * (int64_t)k + 1) * n_dev) / (2 * S))) {
                wt->resident[l] = false;
                k++;
            } else {
                res += wt->plans[l].total;
            }
            d++;
        }
        if (res <= budget)
            return S;
    }
    return n_dev;
}

/* The first state to attach places the model's weights (under wt->mu), by
 * the engine's place= option:
 * - auto: every layer resident (a buffer each) when they fit beside what
 *   is already there (that state's activations, KV cache, graph scratch),
 *   uploaded once on q, else every layer streamed (each state then brings
 *   slots of its own: stream_slots);
 * - stream: every layer streamed even when they fit; peruse: the same
 *   through one slot (plain per-use staging, the baseline SOMR is measured
 *   against);
 * - somr: what fits resident, packed (pack_resident), the rest streamed. */
static int place_weights(ts_rt_weights *wt, ts_eng_queue *q, ts_err *err) {
    const uint64_t avail = window_free(wt->dev);
    uint64_t total = 0, largest = 0;
    for (int l = 0; l < wt->n_layer; l++) {
        total += wt->plans[l].total;
        if (wt->plans[l].total > largest)
            largest = wt->plans[l].total;
    }
    wt->plan_total = total;
    wt->place = ts_eng_placement(wt->dev);
    /* a model streamed from the file: the device gets only slots, never the
     * model (every layer streams, the resident ones from the host's copy) */
    if (wt->has_src)
        wt->place = TS_PLACE_STREAM;
    const uint64_t max_buf = ts_eng_describe(wt->dev)->max_buf_bytes;
    if (wt->place == TS_PLACE_SOMR) {
        int S = 0;
        if (total > avail) {
            /* the slots asked for (slots=N, default 2), fewer when the window
             * holds fewer: with one, each upload waits for the previous
             * streamed layer's compute, but the next forward's first one
             * still goes in ahead */
            int ns = ts_eng_staging_slots(wt->dev);
            while (ns > 1 && (uint64_t)ns * largest > avail)
                ns--;
            if ((uint64_t)ns * largest > avail || largest > max_buf)
                return window_full(wt->dev, total, largest, 1, err);
            wt->somr_slots = ns;
            S = somr_choose(wt, avail - (uint64_t)ns * largest);
        } else {
            for (int l = 0; l < wt->n_layer; l++)
                wt->resident[l] = true;
        }
        if (largest > max_buf)
            return window_full(wt->dev, total, largest, 2, err);
        if (pack_resident(wt, q, err))
            return -1;
        for (int l = 0; l < wt->n_layer; l++)
            if (wt->resident[l] && wt->plans[l].total) {
                wt->n_resident++;
                wt->weight_bytes += wt->plans[l].total;
            }
        wt->streaming = S > 0;
        wt->slot_bytes = S > 0 ? largest : 0;
        wt->placed = true;
        return 0;
    }
    if (wt->place == TS_PLACE_AUTO && total <= avail && largest <= max_buf) {
        for (int l = 0; l < wt->n_layer; l++) {
            if (!wt->plans[l].total)
                continue;
            wt->dev_layer[l] = ts_eng_buf_alloc(wt->dev, TS_MEM_DEVICE, (size_t)wt->plans[l].total, err);
            if (!wt->dev_layer[l])
                return ts_err_prefix(err, "uploading the weights of layer %d", l);
            wt->resident[l] = true;
            wt->n_resident++;
            bind_layer(wt, wt->binds, l, wt->dev_layer[l], 0);
            if (enqueue_layer_upload(wt, q, l, wt->dev_layer[l], 0, NULL, NULL, err))
                return -1;
            /* the converted copies must outlive their uploads */
            if (ts_eng_queue_finish(q, err))
                return -1;
            free_plan_copies(&wt->plans[l]);
        }
        wt->weight_bytes = total;
        wt->placed = true;
        return 0;
    }
    const int ns = wt->place == TS_PLACE_PERUSE ? 1 : 2;
    if (ns * largest > avail || largest > max_buf)
        return window_full(wt->dev, total, largest, ns, err);
    wt->streaming = true;
    wt->slot_bytes = largest;
    wt->placed = true;
    return 0;
}

/* Streaming: this state's weight slots (n_slots) and upload queue. */
static int stream_slots(ts_rt_layers *pf, ts_err *err) {
    const ts_rt_weights *wt = pf->w;
    if (wt->place == TS_PLACE_PERUSE)
        pf->n_slots = 1;
    else if (wt->place == TS_PLACE_SOMR && wt->somr_slots < pf->n_slots)
        pf->n_slots = wt->somr_slots;
    if ((uint64_t)pf->n_slots * wt->slot_bytes > window_free(pf->dev)) {
        return window_full(pf->dev, wt->plan_total, wt->slot_bytes, pf->n_slots, err);
    }
    pf->streaming = true;
    pf->cyclic = wt->place == TS_PLACE_SOMR;
    pf->order = malloc((size_t)pf->n_layer * sizeof *pf->order);
    pf->stream_k = malloc((size_t)pf->n_layer * sizeof *pf->stream_k);
    if (!pf->order || !pf->stream_k)
        return ts_err_set(err, "out of memory");
    for (int l = 0; l < pf->n_layer; l++) {
        pf->stream_k[l] = wt->resident[l] ? -1 : pf->n_stream;
        if (!wt->resident[l])
            pf->order[pf->n_stream++] = l;
    }
    for (int j = 0; j < pf->n_slots; j++) {
        pf->slot_layer[j] = -1;
        if (!(pf->slot[j] = ts_eng_buf_alloc(pf->dev, TS_MEM_DEVICE, (size_t)wt->slot_bytes, err)))
            return ts_err_prefix(err, "allocating weight slot %d", j);
    }
    if (!(pf->uq = ts_eng_queue_new(pf->dev, err)))
        return -1;
    for (int k = 0; k < pf->n_stream; k++)
        bind_layer(wt, pf->dev_binds, pf->order[k], pf->slot[k % pf->n_slots], 0);
    return 0;
}

/* Whether segment seg of layer l has a node of op. */
static bool seg_has(const ts_rt_layers *pf, int l, int seg, ts_op op) {
    const variant *V = &pf->vars[pf->layer_var[l]];
    for (int k = V->segs[seg].first; k < V->segs[seg].first + V->segs[seg].count; k++)
        if (V->nodes[k].op == op)
            return true;
    return false;
}

/* Task t's place in the chain, for the policy: how many CPU tasks from t
 * (inclusive) until the next device task, and how many device tasks that
 * run has (0: none before the chain's end). */
static void cpu_to_dev(const ts_rt_layers *pf, int t, int *n_cpu, int *n_dev) {
    int i = t;
    while (i < pf->n_tasks && !pf->tasks[i].on_device)
        i++;
    *n_cpu = i - t;
    int j = i;
    while (j < pf->n_tasks && pf->tasks[j].on_device)
        j++;
    *n_dev = j - i;
}

ts_rt_layers *ts_rt_layers_new(const ts_rt_layers_params *p, char *note, size_t note_size, ts_err *err) {
    if (note && note_size)
        note[0] = 0;
    if (!p || !p->weights || !p->cpu || !p->shapes || p->n_layer < 1 || p->width < 1 ||
        p->n_layer != p->weights->n_layer) {
        ts_err_set(err, "prefill: missing weights, engine or shapes, or n_layer/width < 1 or not the weights'");
        return NULL;
    }
    ts_rt_layers *pf = calloc(1, sizeof *pf);
    if (!pf) {
        ts_err_set(err, "out of memory");
        return NULL;
    }
    pf->w = p->weights;
    pf->dev = p->weights->dev;
    pf->cpu = p->cpu;
    pf->width = p->width;
    pf->n_layer = p->n_layer;
    pf->kv_layer_bytes = p->kv_layer_bytes;
    pf->nodrain = ts_eng_test_nodrain(pf->dev);
    pf->n_slots = ts_eng_staging_slots(pf->dev);
    const ts_rt_block_shape *s0 = &p->shapes[0];
    /* every layer's activation rows, the widest of each slot */
    for (int l = 0; l < p->n_layer; l++) {
        uint64_t rows[N_ACT];
        ts_rt_block_act_rows(&p->shapes[l], rows);
        for (int i = 0; i < N_ACT; i++)
            if (rows[i] > pf->act_row[i])
                pf->act_row[i] = rows[i];
    }
    memcpy(pf->act, p->act, sizeof pf->act);
    pf->kv_row_bytes = (uint64_t)s0->n_head_kv * (uint64_t)s0->head_dim * (s0->kv_f16 ? 2 : 4);

    pf->layer_var = calloc((size_t)p->n_layer, sizeof *pf->layer_var);
    pf->vars = calloc((size_t)p->n_layer, sizeof *pf->vars);
    pf->cpu_maps = calloc((size_t)p->n_layer * TS_LS_COUNT, sizeof *pf->cpu_maps);
    pf->dev_binds = calloc((size_t)p->n_layer * TS_LS_COUNT, sizeof *pf->dev_binds);
    pf->cpu_binds = calloc((size_t)p->n_layer * TS_LS_COUNT, sizeof *pf->cpu_binds);
    pf->bsets = calloc((size_t)p->n_layer * TS_LS_MAX_NODES, sizeof *pf->bsets);
    if (!pf->layer_var || !pf->vars || !pf->cpu_maps || !pf->dev_binds || !pf->cpu_binds || !pf->bsets) {
        ts_err_set(err, "out of memory");
        goto fail;
    }
    /* no device: the CPU forward's own layers, every node on the cpu engine.
     * Another activation set of the state shares the first set's queue (its
     * runs follow the first set's in the device's order) and cache maps. */
    pf->kv_held = &pf->kv_own;
    if (p->share) {
        if (p->share->w != pf->w || p->share->share || p->share->streaming || p->share->n_layer != p->n_layer) {
            ts_err_set(err, "prefill: an activation set shares a first set of the same weights, resident");
            goto fail;
        }
        pf->share = p->share;
        pf->dq = p->share->dq;
        pf->kv_held = p->share->kv_held;
    } else if (pf->dev && !(pf->dq = ts_eng_queue_new(pf->dev, err))) {
        goto fail;
    }
    pf->cq = ts_eng_queue_new(pf->cpu, err);
    if (!pf->cq)
        goto fail;

    /* layer variants, their nodes and segments */
    for (int l = 0; l < p->n_layer; l++) {
        int v = 0;
        /* the layer's shape, with clip records where its TS_LS_CALIB slot has them */
        ts_rt_block_shape sh;
        memcpy(&sh, &p->shapes[l], sizeof sh);
        sh.clips = pf->w->slots[(size_t)l * TS_LS_COUNT + TS_LS_CALIB].data != NULL;
        while (v < pf->n_vars && memcmp(&pf->vars[v].shape, &sh, sizeof sh))
            v++;
        if (v == pf->n_vars) {
            variant *V = &pf->vars[pf->n_vars++];
            memcpy(&V->shape, &sh, sizeof sh);
            V->n_nodes = ts_rt_block_nodes(&V->shape, V->nodes);
            if (V->n_nodes < 1) {
                ts_err_set(err, "layer %d: no builder for block kind %d", l, (int)V->shape.kind);
                goto fail;
            }
            V->n_segs = ts_rt_split_nodes(pf->dev, V->nodes, V->n_nodes, V->segs);
            V->route_seg = -1;
            if (!pf->dev && pf->w->has_src)
                split_after_route(V);
            for (int i = 0; i < V->n_segs; i++) {
                const ts_rt_segment *sg = &V->segs[i];
                if (!sg->on_device)
                    pf->need_cpu = true;
                for (int k = sg->first; k < sg->first + sg->count; k++) {
                    if (V->nodes[k].op == TS_OP_KV_STORE)
                        V->kv_on_device = sg->on_device;
                    if (V->nodes[k].op == TS_OP_ATTENTION)
                        V->kv_read_device = sg->on_device;
                }
            }
            if (V->kv_on_device || V->kv_read_device)
                pf->kv_mapped_dev = true;
        }
        pf->layer_var[l] = v;
    }
    /* the activation slots some layer's nodes use: those must be given,
     * and only those are mapped and synced */
    for (int v = 0; v < pf->n_vars; v++)
        for (int k = 0; k < pf->vars[v].n_nodes; k++) {
            ts_eng_ref refs[6];
            uint64_t bytes[6];
            uint32_t align[6];
            bool isw[6];
            const int nr = ts_eng_node_refs(&pf->vars[v].nodes[k], 1, refs, bytes, align, isw);
            for (int r = 0; r < nr; r++)
                if (refs[r].slot >= 0 && refs[r].slot < N_ACT)
                    pf->act_used[refs[r].slot] = true;
        }
    for (int i = 0; i < N_ACT; i++)
        if (pf->act_used[i] && !p->act[i]) {
            ts_err_set(err, "prefill: activation buffer %d is NULL and a layer uses it", i);
            goto fail;
        }
    pf->st.segments_per_layer = pf->vars[0].n_segs;
    for (int i = 0; i < pf->vars[0].n_segs; i++)
        pf->st.device_segments += pf->vars[0].segs[i].on_device;
    if (pf->dev && !pf->st.device_segments) {
        ts_err_set(err, "%s takes none of a layer's ops", ts_eng_describe(pf->dev)->name);
        goto fail;
    }

    /* the forward's buffers, mapped (no copies); the KV cache only into
     * engines that touch it (an NPU taking matmuls alone never does) */
    for (int i = 0; i < N_ACT; i++) {
        const size_t b = (size_t)(pf->act_row[i] * (uint64_t)p->width);
        if (!pf->act_used[i])
            continue;
        if (pf->dev && !(pf->dev_act[i] = ts_eng_buf_map(pf->dev, p->act[i], b, err)))
            goto fail;
        if (pf->need_cpu && !(pf->cpu_act[i] = ts_eng_buf_map(pf->cpu, p->act[i], b, err)))
            goto fail;
    }
    const size_t kvb = (size_t)(p->kv_layer_bytes * (uint64_t)p->n_layer);
    if (pf->share) {
        pf->dev_kc = pf->share->dev_kc, pf->dev_vc = pf->share->dev_vc;
        pf->cpu_kc = pf->share->cpu_kc, pf->cpu_vc = pf->share->cpu_vc;
    } else {
        if (pf->kv_mapped_dev && (!(pf->dev_kc = ts_eng_buf_map(pf->dev, p->k_cache, kvb, err)) ||
                                  !(pf->dev_vc = ts_eng_buf_map(pf->dev, p->v_cache, kvb, err))))
            goto fail;
        if (pf->need_cpu && (!(pf->cpu_kc = ts_eng_buf_map(pf->cpu, p->k_cache, kvb, err)) ||
                             !(pf->cpu_vc = ts_eng_buf_map(pf->cpu, p->v_cache, kvb, err))))
            goto fail;
    }

    /* weights, the first state only: probe (needs window room for a
     * moment), convert; the weight binds of every layer */
    ts_rt_weights *wt = pf->w;
    pthread_mutex_lock(&wt->mu);
    if (!wt->planned && pf->dev) {
        probe_cache pc[64];
        int n_pc = 0;
        for (int l = 0; l < p->n_layer; l++)
            if (plan_layer(wt, l, pc, &n_pc, note, note_size, err)) {
                for (int k = 0; k <= l; k++)
                    free_plan_copies(&wt->plans[k]);
                memset(wt->plans, 0, (size_t)wt->n_layer * sizeof *wt->plans);
                memset(wt->binds, 0, (size_t)wt->n_layer * TS_LS_COUNT * sizeof *wt->binds);
                wt->converted = wt->packed = wt->shared = 0;
                wt->shared_bytes = 0;
                peer_maps_clear(wt);
                goto fail_locked;
            }
        wt->planned = true;
    }
    if (wt->has_src) {
        if (p->share) {
            ts_err_set(err, "prefill: several activation sets need the weights in memory (some stream here)");
            goto fail_locked;
        }
        if (arena_setup(pf, err))
            goto fail_locked;
    }
    for (int l = 0; l < p->n_layer; l++) {
        ts_eng_bind *db = pf->dev_binds + (size_t)l * TS_LS_COUNT, *cb = pf->cpu_binds + (size_t)l * TS_LS_COUNT;
        for (int i = 0; i < N_ACT; i++) {
            db[i].buf = pf->dev_act[i];
            cb[i].buf = pf->cpu_act[i];
        }
        if (pf->kv_mapped_dev) {
            db[TS_LS_KC] = (ts_eng_bind){.buf = pf->dev_kc, .off = (uint64_t)l * p->kv_layer_bytes};
            db[TS_LS_VC] = (ts_eng_bind){.buf = pf->dev_vc, .off = (uint64_t)l * p->kv_layer_bytes};
        }
        cb[TS_LS_KC] = (ts_eng_bind){.buf = pf->cpu_kc, .off = (uint64_t)l * p->kv_layer_bytes};
        cb[TS_LS_VC] = (ts_eng_bind){.buf = pf->cpu_vc, .off = (uint64_t)l * p->kv_layer_bytes};
        for (int s = TS_LS_ROPE_FREQ; s < TS_LS_COUNT; s++)
            db[s] = wt->binds[(size_t)l * TS_LS_COUNT + s];
        if (pf->need_cpu && map_layer_cpu(pf, l, err))
            goto fail_locked;
    }
    /* graphs: one per variant and segment, built once for this width (before
     * the weights are placed, so that their scratch is known) */
    for (int v = 0; v < pf->n_vars; v++) {
        variant *V = &pf->vars[v];
        for (int i = 0; i < V->n_segs; i++) {
            const ts_rt_segment *sg = &V->segs[i];
            V->graphs[i] = ts_eng_graph_new(sg->on_device ? pf->dev : pf->cpu, V->nodes + sg->first, sg->count,
                                            TS_LS_COUNT, p->width, err);
            if (!V->graphs[i])
                goto fail_locked;
            pf->st.graph_builds++;
        }
    }

    if (!wt->placed && pf->dev) {
        if (place_weights(wt, pf->dq, err))
            goto fail_locked;
        for (int l = 0; l < p->n_layer; l++)
            for (int s = TS_LS_ROPE_FREQ; s < TS_LS_COUNT; s++)
                pf->dev_binds[(size_t)l * TS_LS_COUNT + s] = wt->binds[(size_t)l * TS_LS_COUNT + s];
    }
    if (wt->streaming && pf->share) {
        ts_err_set(err, "prefill: several activation sets need the weights resident (they stream here)");
        goto fail_locked;
    }
    if (wt->streaming && stream_slots(pf, err))
        goto fail_locked;
    /* every layer's bindings, checked once: runs check only positions */
    for (int l = 0; l < p->n_layer; l++) {
        const variant *V = &pf->vars[pf->layer_var[l]];
        for (int i = 0; i < V->n_segs; i++) {
            const ts_eng_bind *b = (V->segs[i].on_device ? pf->dev_binds : pf->cpu_binds) + (size_t)l * TS_LS_COUNT;
            if (!(pf->bsets[(size_t)l * TS_LS_MAX_NODES + i] = ts_eng_bindset_new(V->graphs[i], b, TS_LS_COUNT, err))) {
                ts_err_prefix(err, "layer %d", l);
                goto fail_locked;
            }
        }
    }
    /* the schedule's tasks: the chain of every layer's segments */
    pf->policy = NULL;
    for (size_t i = 0; i < sizeof policies / sizeof *policies; i++)
        if (!strcmp(policies[i]->name, p->schedule ? p->schedule : "inorder"))
            pf->policy = policies[i];
    if (!pf->policy) {
        ts_err_set(err, "unknown schedule '%s' (known: inorder)", p->schedule);
        goto fail_locked;
    }
    for (int l = 0; l < p->n_layer; l++)
        pf->n_tasks += pf->vars[pf->layer_var[l]].n_segs;
    pf->tasks = calloc((size_t)pf->n_tasks, sizeof *pf->tasks);
    pf->issued = calloc((size_t)pf->n_tasks, 1);
    if (!pf->tasks || !pf->issued) {
        ts_err_set(err, "out of memory");
        goto fail_locked;
    }
    for (int l = 0, t = 0; l < p->n_layer; l++) {
        const variant *V = &pf->vars[pf->layer_var[l]];
        int first_dev = -1, last_dev = -1;
        for (int i = 0; i < V->n_segs; i++)
            if (V->segs[i].on_device) {
                last_dev = i;
                if (first_dev < 0)
                    first_dev = i;
            }
        for (int i = 0; i < V->n_segs; i++, t++)
            pf->tasks[t] = (rt_task){.layer = l,
                                     .seg = i,
                                     .on_device = V->segs[i].on_device,
                                     .first_dev = i == first_dev,
                                     .last_dev = i == last_dev,
                                     .dep = t - 1};
    }
    for (int t = 0, kv = -1, l = -1; t < pf->n_tasks; t++) {
        rt_task *T = &pf->tasks[t];
        if (T->layer != l) { /* a layer's kv_store task: the first of its tasks that has one */
            l = T->layer, kv = -1;
            for (int u = t; u < pf->n_tasks && pf->tasks[u].layer == l && kv < 0; u++)
                if (seg_has(pf, l, pf->tasks[u].seg, TS_OP_KV_STORE))
                    kv = u;
        }
        T->kv_task = kv;
        T->attn = seg_has(pf, l, T->seg, TS_OP_ATTENTION);
        cpu_to_dev(pf, t, &T->n_cpu, &T->n_dev);
    }
    wt->users++;
    pf->attached = true;
    pf->st.converted = wt->converted;
    pf->st.packed = wt->packed;
    pf->st.shared = wt->shared;
    pf->st.shared_bytes = wt->shared_bytes;
    pf->st.weight_bytes = wt->weight_bytes;
    pf->st.streaming = wt->streaming;
    pf->st.n_slots = wt->streaming ? pf->n_slots : 0;
    pf->st.slot_bytes = wt->slot_bytes;
    {
        static const char *const place_names[] = {"auto", "stream", "peruse", "somr"};
        pf->st.place = pf->dev ? place_names[wt->place] : "auto";
    }
    pf->st.n_resident = wt->n_resident;
    pf->st.n_streamed = pf->n_stream;
    pf->st.weight_buffers = wt->place == TS_PLACE_SOMR ? wt->n_pack : wt->n_resident;
    pthread_mutex_unlock(&wt->mu);
    return pf;
fail_locked:
    pthread_mutex_unlock(&wt->mu);
fail:
    ts_err_prefix(err, "prefill on %s", pf->dev ? ts_eng_describe(pf->dev)->name : "cpu");
    ts_rt_layers_free(pf);
    return NULL;
}

/* host_sync of every activation's first n_tok rows */
static int sync_acts(ts_rt_layers *pf, int n_tok, ts_eng_sync_dir dir, ts_err *err) {
    pf->dq_pending = true;
    for (int i = 0; i < N_ACT; i++)
        if (pf->dev_act[i] &&
            ts_eng_enqueue_host_sync(pf->dq, pf->dev_act[i], 0, (size_t)(pf->act_row[i] * (uint64_t)n_tok), dir, err))
            return -1;
    return 0;
}

static int sync_kv(ts_rt_layers *pf, int l, int64_t r0, int64_t r1, ts_eng_sync_dir dir, ts_err *err) {
    if (r1 <= r0 || !pf->kv_mapped_dev)
        return 0;
    pf->dq_pending = true;
    const size_t off = (size_t)((uint64_t)l * pf->kv_layer_bytes + (uint64_t)r0 * pf->kv_row_bytes);
    const size_t n = (size_t)((uint64_t)(r1 - r0) * pf->kv_row_bytes);
    if (ts_eng_enqueue_host_sync(pf->dq, pf->dev_kc, off, n, dir, err))
        return -1;
    return ts_eng_enqueue_host_sync(pf->dq, pf->dev_vc, off, n, dir, err);
}

/* Cache rows [a, b) a device-side attention reads that the device does not
 * hold (the CPU decode's, a truncated cache's, a dual cache's suffix):
 * synced to it, and held from then on. */
static int sync_kv_missing(ts_rt_layers *pf, int64_t a, int64_t b, ts_err *err) {
    if (!pf->kv_mapped_dev || b <= a)
        return 0;
    int64_t ma[TS_RT_KV_MAX_RANGES + 2], mb[TS_RT_KV_MAX_RANGES + 2];
    int nm = ts_rt_kv_missing(pf->kv_held, a, b, ma, mb, TS_RT_KV_MAX_RANGES + 2);
    if (nm > TS_RT_KV_MAX_RANGES + 2) /* more gaps than listed: sync the whole span */
        nm = 1, ma[0] = a, mb[0] = b;
    for (int i = 0; i < nm; i++) {
        for (int l = 0; l < pf->n_layer; l++)
            if (pf->vars[pf->layer_var[l]].kv_read_device && sync_kv(pf, l, ma[i], mb[i], TS_SYNC_TO_DEVICE, err))
                return -1;
        ts_rt_kv_add(pf->kv_held, ma[i], mb[i]);
    }
    return 0;
}

/* Waits until everything enqueued on the device queue is done (nothing to
 * do, and no crossing, when nothing was enqueued since the last drain). */
static int drain(ts_rt_layers *pf, ts_err *err) {
    if (!pf->dq_pending)
        return 0;
    pf->dq_pending = false;
    ts_eng_event *ev = ts_eng_enqueue_marker(pf->dq, err);
    if (!ev)
        return -1;
    const int rc = ts_eng_event_wait(ev, err);
    ts_eng_event_free(ev);
    return rc;
}

/* Streaming: uploads the k-th streamed layer into its slot (k % n_slots)
 * once the graphs that read the slot's previous layer are done; the compute
 * queue waits for the upload just before that layer's first graph
 * (stream_wait: a weight wait, its time the device's stall), so uploads run
 * ahead by n_slots - 1 streamed layers (peruse, one slot: none ahead, each
 * upload after the previous layer's compute). */
static int stream_in(ts_rt_layers *pf, int k, ts_err *err) {
    const int j = k % pf->n_slots;
    pf->slot_layer[j] = -1; /* until the upload is queued */
    if (pf->slot_free[j]) {
        /* the graphs that marked the slot free must reach the device before the upload waits for them */
        if (ts_eng_queue_flush(pf->dq, err) || ts_eng_enqueue_wait(pf->uq, pf->slot_free[j], 0, err))
            return -1;
        ts_eng_event_free(pf->slot_free[j]);
        pf->slot_free[j] = NULL;
    }
    /* a layer streamed from the file: its arena slot, every expert in */
    const int l = pf->order[k], ak = pf->arena_k ? pf->arena_k[l] : -1;
    const uint8_t *host_slot = NULL;
    if (ak >= 0) {
        if (ts_rt_arena_wait(pf->arena, ak, err) ||
            (ts_rt_arena_has_experts(pf->arena, ak) &&
             ts_rt_arena_route(pf->arena, ak, pf->all_experts, pf->vars[pf->layer_var[l]].shape.n_expert, err)))
            return -1;
        host_slot = ts_rt_arena_slot(pf->arena, ak % ts_rt_arena_n_slots(pf->arena));
    }
    if (enqueue_layer_upload(pf->w, pf->uq, l, pf->slot[j], 0, host_slot, &pf->stage, err))
        return -1;
    ts_eng_event_free(pf->slot_up[j]);
    if (!(pf->slot_up[j] = ts_eng_enqueue_marker(pf->uq, err)))
        return -1;
    pf->slot_layer[j] = l;
    if (ts_eng_queue_flush(pf->uq, err))
        return -1;
    if (ak >= 0) {
        /* the upload reads the arena slot when it runs: the slot takes its
         * next layer only after that */
        if (ts_eng_event_wait(pf->slot_up[j], err))
            return -1;
        ts_rt_arena_done(pf->arena, ak);
    }
    return 0;
}

/* Streaming: the compute queue waits for the upload of the k-th streamed
 * layer (none when its slot already held it: an earlier wait saw it in). */
static int stream_wait(ts_rt_layers *pf, int k, ts_err *err) {
    const int j = k % pf->n_slots;
    if (!pf->slot_up[j])
        return 0;
    const int rc = ts_eng_enqueue_wait(pf->dq, pf->slot_up[j], TS_WAIT_WEIGHTS, err);
    ts_eng_event_free(pf->slot_up[j]);
    pf->slot_up[j] = NULL;
    pf->dq_pending = true;
    return rc;
}

/* Streaming: the k-th streamed layer's graphs are all on dq: its slot is
 * free after them, and the slot's next layer goes in: the one n_slots
 * later in this run, or (somr) the slot's first one of the next run, which
 * then is already there (or on its way) when that run starts. */
static int stream_done(ts_rt_layers *pf, int k, ts_err *err) {
    const int j = k % pf->n_slots;
    ts_eng_event_free(pf->slot_free[j]);
    if (!(pf->slot_free[j] = ts_eng_enqueue_marker(pf->dq, err)))
        return -1;
    if (k + pf->n_slots < pf->n_stream)
        return stream_in(pf, k + pf->n_slots, err);
    if (pf->cyclic && pf->slot_layer[j] != pf->order[j])
        return stream_in(pf, j, err);
    return 0;
}

int ts_rt_layers_run(ts_rt_layers *pf, int64_t pos0, int n_tok, ts_err *err) {
    return ts_rt_layers_run_window(pf, pos0, n_tok, 0, err);
}

static int submit_range(ts_rt_layers *pf, int64_t pos0, int n_tok, int64_t n_kv, int l0, int l1, ts_err *err);

int ts_rt_layers_submit_window(ts_rt_layers *pf, int64_t pos0, int n_tok, int64_t n_kv, ts_err *err) {
    if (!pf)
        return ts_err_set(err, "prefill: NULL");
    return submit_range(pf, pos0, n_tok, n_kv, 0, pf->n_layer, err);
}

int ts_rt_layers_run_range(ts_rt_layers *pf, int64_t pos0, int n_tok, int64_t n_kv, int l0, int l1, ts_err *err) {
    if (!pf)
        return ts_err_set(err, "prefill: NULL");
    if (l0 < 0 || l1 > pf->n_layer || l0 >= l1)
        return ts_err_set(err, "prefill: layers [%d, %d) outside [0, %d) or empty", l0, l1, pf->n_layer);
    if ((l0 > 0 || l1 < pf->n_layer) && (pf->streaming || pf->arena))
        return ts_err_set(err, "prefill: a run of layers [%d, %d) needs resident weights (these stream)", l0, l1);
    if (submit_range(pf, pos0, n_tok, n_kv, l0, l1, err))
        return -1;
    return ts_rt_layers_wait(pf, err);
}

static int submit_range(ts_rt_layers *pf, int64_t pos0, int n_tok, int64_t n_kv, int l0, int l1, ts_err *err) {
    const bool whole = l0 == 0 && l1 == pf->n_layer;
    if (pf->in_flight)
        return ts_err_set(err, "prefill: a submitted run is still in flight (wait for it first)");
    if (n_tok < 1 || n_tok > pf->width)
        return ts_err_set(err, "prefill: %d tokens outside [1, width %d]", n_tok, pf->width);
    if (pf->dev && ts_eng_describe(pf->dev)->widths_required && n_tok != pf->width)
        return ts_err_set(err, "prefill: %s runs only full chunks of %d tokens, not %d (run the tail on the CPU)",
                          ts_eng_describe(pf->dev)->name, pf->width, n_tok);
    if (pos0 < 0)
        return ts_err_set(err, "prefill: pos0 %lld", (long long)pos0);
    /* rows at or past n_kv are padding (ts_eng_enqueue_graph) */
    if (n_kv != 0 && n_kv <= pos0)
        return ts_err_set(err, "prefill: n_kv %lld does not reach the window start %lld", (long long)n_kv,
                          (long long)pos0);
    /* the broken hook left the previous run in flight: catch up first */
    if (pf->nodrain && drain(pf, err))
        goto fail;
    ts_eng_stats before = {0};
    if (pf->dev)
        ts_eng_get_stats(pf->dev, &before);
    /* what the host wrote since the device last looked: the embeddings, and
     * the cache rows the CPU decode appended */
    if (pf->dev && sync_acts(pf, n_tok, TS_SYNC_TO_DEVICE, err))
        goto fail;
    /* the rows the run reads that the device does not hold: before the
     * span, and (a window) the rows past it, a dual cache's suffix */
    if (sync_kv_missing(pf, 0, pos0, err) || sync_kv_missing(pf, pos0 + n_tok, n_kv, err))
        goto fail;
    if (pf->arena && ts_rt_arena_begin(pf->arena, err))
        goto fail;
    /* streaming: the first n_slots streamed layers' uploads go out before
     * any compute (somr: unless the slot holds or is receiving it already) */
    if (pf->streaming)
        for (int k = 0; k < pf->n_slots && k < pf->n_stream; k++)
            if ((!pf->cyclic || pf->slot_layer[k] != pf->order[k]) && stream_in(pf, k, err))
                goto fail;
    /* the run's segments, in the order the schedule's policy picks among
     * those whose dependencies are issued */
    bool dev_dirty = false; /* the device wrote activations the host has not synced */
    bool first = true;      /* no segment issued yet (the activations went over above) */
    memset(pf->issued, 0, (size_t)pf->n_tasks);
    for (int k = 0; k < pf->n_tasks; k++) {
        const int ti = pf->policy->pick(pf->tasks, pf->n_tasks, pf->issued);
        if (ti < 0 || ti >= pf->n_tasks || pf->issued[ti] ||
            (pf->tasks[ti].dep >= 0 && !pf->issued[pf->tasks[ti].dep])) {
            ts_err_set(err, "prefill: schedule '%s' picked no ready segment (%d of %d issued)", pf->policy->name, k,
                       pf->n_tasks);
            goto fail;
        }
        const rt_task *T = &pf->tasks[ti];
        const int l = T->layer, i = T->seg;
        if (l < l0 || l >= l1) { /* a layer range: another runner's layers */
            pf->issued[ti] = 1;
            continue;
        }
        variant *V = &pf->vars[pf->layer_var[l]];
        ts_eng_bindset *bs = pf->bsets[(size_t)l * TS_LS_MAX_NODES + i];
        const bool was_first = first;
        first = false;
        if (T->on_device) {
            if (!dev_dirty && !was_first && sync_acts(pf, n_tok, TS_SYNC_TO_DEVICE, err))
                goto fail;
            /* K/V rows the CPU stored for a device-side attention */
            if (!dev_dirty && V->kv_read_device && !V->kv_on_device &&
                sync_kv(pf, l, pos0, pos0 + n_tok, TS_SYNC_TO_DEVICE, err))
                goto fail;
            const int sk = pf->streaming ? pf->stream_k[l] : -1;
            if (sk >= 0 && T->first_dev && stream_wait(pf, sk, err))
                goto fail;
            if (ts_eng_enqueue_bound(pf->dq, bs, pos0, n_tok, n_kv, err))
                goto fail;
            dev_dirty = pf->dq_pending = true;
            /* layer l is done with its slot: the slot's next layer may go in */
            if (sk >= 0 && T->last_dev && stream_done(pf, sk, err))
                goto fail;
        } else {
            if (dev_dirty) {
                /* the crossing back: the CPU needs what the device wrote */
                if (sync_acts(pf, n_tok, TS_SYNC_TO_HOST, err))
                    goto fail;
                if (V->kv_on_device && sync_kv(pf, l, pos0, pos0 + n_tok, TS_SYNC_TO_HOST, err))
                    goto fail;
                if (drain(pf, err))
                    goto fail;
                dev_dirty = false;
            }
            /* a streamed layer: its weights are in its arena slot before its
             * first graph (the pacing point), and the slot takes the next
             * layer after its last one */
            const int ak = pf->arena_k && !pf->dev ? pf->arena_k[l] : -1; /* a device's: paced by its uploads */
            if (ak >= 0 && i == 0 && ts_rt_arena_wait(pf->arena, ak, err))
                goto fail;
            /* its routed experts, at the routing node */
            if (ak >= 0 && i == V->route_seg &&
                ts_rt_arena_route(pf->arena, ak, (const int32_t *)pf->act[TS_LS_EXP_IDS],
                                  (int64_t)n_tok * V->shape.n_expert_used, err))
                goto fail;
            if (ts_eng_enqueue_bound(pf->cq, bs, pos0, n_tok, n_kv, err))
                goto fail;
            if (ak >= 0 && i == V->n_segs - 1)
                ts_rt_arena_done(pf->arena, ak);
        }
        pf->issued[ti] = 1;
    }
    if (dev_dirty && sync_acts(pf, n_tok, TS_SYNC_TO_HOST, err))
        goto fail;
    for (int l = l0; l < l1; l++)
        if (pf->vars[pf->layer_var[l]].kv_on_device && sync_kv(pf, l, pos0, pos0 + n_tok, TS_SYNC_TO_HOST, err))
            goto fail;
    /* hand the rest to the device and return: ts_rt_layers_wait waits for
     * the marker after it */
    if (pf->dq && pf->dq_pending) {
        if (!(pf->fl_done = ts_eng_enqueue_marker(pf->dq, err)) || ts_eng_queue_flush(pf->dq, err))
            goto fail;
    }
    if (ts_eng_queue_finish(pf->cq, err))
        goto fail;
    pf->in_flight = true;
    pf->fl_pos0 = pos0, pf->fl_n_tok = n_tok, pf->fl_n_kv = n_kv, pf->fl_before = before;
    /* the run's rows: written (or synced) on both sides once it is done, and
     * the host keeps off them until then; a run of another activation set
     * queued behind this one must not sync them from the host */
    if (whole)
        ts_rt_kv_add(pf->kv_held, pos0, pos0 + n_tok);
    else /* the rows' other layers are another runner's: synced to the device when a run reads them */
        ts_rt_layers_kv_host_wrote(pf, pos0, pos0 + n_tok);
    return 0;
fail:
    ts_eng_event_free(pf->fl_done);
    pf->fl_done = NULL;
    if (pf->dq)
        (void)ts_eng_queue_finish(pf->dq, NULL);
    if (pf->uq)
        (void)ts_eng_queue_finish(pf->uq, NULL);
    for (int j = 0; j < TS_RT_MAX_SLOTS; j++) {
        ts_eng_event_free(pf->slot_free[j]);
        ts_eng_event_free(pf->slot_up[j]);
        pf->slot_free[j] = pf->slot_up[j] = NULL;
        pf->slot_layer[j] = -1;
    }
    pf->dq_pending = false;
    ts_rt_kv_clear(pf->kv_held);
    ts_rt_arena_abort(pf->arena); /* the next run reads every slot again */
    return -1;
}

/* The run is over: the counters. */
static void run_done(ts_rt_layers *pf) {
    pf->in_flight = false;
    if (pf->dev) {
        ts_eng_stats after;
        ts_eng_get_stats(pf->dev, &after);
        pf->st.run_crossings += after.crossings - pf->fl_before.crossings;
        pf->st.run_nodes += after.nodes - pf->fl_before.nodes;
    }
    pf->st.tokens += (uint64_t)pf->fl_n_tok;
    pf->st.runs++;
    if (pf->fl_n_kv > 0) {
        pf->st.window_tokens += (uint64_t)pf->fl_n_tok;
        pf->st.window_runs++;
    }
}

int ts_rt_layers_wait(ts_rt_layers *pf, ts_err *err) {
    if (!pf)
        return ts_err_set(err, "prefill: NULL");
    if (!pf->in_flight)
        return 0;
    const int rc = pf->fl_done ? ts_eng_event_wait(pf->fl_done, err) : 0;
    ts_eng_event_free(pf->fl_done);
    pf->fl_done = NULL;
    pf->dq_pending = false;
    if (rc) {
        pf->in_flight = false;
        ts_rt_kv_clear(pf->kv_held);
        return -1;
    }
    run_done(pf);
    return 0;
}

bool ts_rt_layers_done(ts_rt_layers *pf) {
    return !pf || !pf->in_flight || !pf->fl_done || ts_eng_event_done(pf->fl_done);
}

int ts_rt_layers_run_window(ts_rt_layers *pf, int64_t pos0, int n_tok, int64_t n_kv, ts_err *err) {
    if (ts_rt_layers_submit_window(pf, pos0, n_tok, n_kv, err))
        return -1;
    if (pf->nodrain) {
        /* BROKEN ON PURPOSE: return without waiting for the device, so the
         * caller reads x and the KV rows before the device wrote them (the
         * next run catches up) */
        ts_eng_event_free(pf->fl_done);
        pf->fl_done = NULL;
        run_done(pf);
        return 0;
    }
    return ts_rt_layers_wait(pf, err);
}

/* ---- several chunks out of order (ts_rt_layers_run_chunks) ------------- */

/* One chunk in flight. */
typedef struct ch_run {
    int set;
    int next;         /* its next task (the chain issues in order) */
    int done;         /* tasks complete: [0, done) */
    bool begun, ended;
    bool dev_dirty;   /* device tasks issued since the last sync back */
    ts_eng_event *ev; /* marker after its last device run and the syncs back; done then = ev_upto */
    int ev_upto;
    uint64_t ev_seq;  /* enqueue order of ev, for the oldest wait */
} ch_run;

int ts_rt_layers_run_chunks(ts_rt_layers *const *sets, int n_sets, ts_rt_chunks *ch, ts_err *err) {
    if (!sets || n_sets < 1 || !ch || ch->n_chunks < 1 || !ch->pos0 || !ch->n_tok)
        return ts_err_set(err, "prefill chunks: bad arguments");
    ts_rt_layers *p0 = sets[0];
    if (!p0 || !p0->dev)
        return ts_err_set(err, "prefill chunks: no device");
    for (int i = 0; i < n_sets; i++) {
        if (!sets[i] || (i > 0 && sets[i]->share != p0) || sets[i]->in_flight)
            return ts_err_set(err, "prefill chunks: set %d is not an idle activation set of the first", i);
        if (sets[i]->streaming)
            return ts_err_set(err, "prefill chunks: the weights stream; several chunks in flight need them resident");
    }
    for (int v = 0; v < p0->n_vars; v++)
        if (p0->vars[v].kv_on_device != p0->vars[v].kv_read_device)
            return ts_err_set(err, "prefill chunks: kv_store and attention run on different sides");
    const bool widths = ts_eng_describe(p0->dev)->widths_required;
    for (int c = 0; c < ch->n_chunks; c++) {
        if (ch->n_tok[c] < 1 || ch->n_tok[c] > p0->width || (widths && ch->n_tok[c] != p0->width) ||
            ch->pos0[c] < 0 || (c > 0 && ch->pos0[c] != ch->pos0[c - 1] + ch->n_tok[c - 1]))
            return ts_err_set(err, "prefill chunks: chunk %d (%d tokens at %lld) does not fit width %d or follow the last",
                              c, ch->n_tok[c], (long long)ch->pos0[c], p0->width);
    }
    const bool nowait = ts_eng_test_ooo_nowait(p0->dev);
    const int n = ch->n_chunks, nt = p0->n_tasks;
    ch_run *cr = calloc((size_t)n, sizeof *cr);
    if (!cr)
        return ts_err_set(err, "out of memory");
    for (int c = 0; c < n; c++)
        cr[c].set = c % n_sets;
    ts_eng_stats before = {0}, after = {0};
    ts_eng_get_stats(p0->dev, &before);
    uint64_t seq = 0;
    int rc = -1, n_ended = 0;
    /* the rows before the first chunk that a device-side attention reads */
    if (sync_kv_missing(p0, 0, ch->pos0[0], err))
        goto done;
    while (n_ended < n) {
        bool progress = false;
        /* markers: what the device finished */
        for (int c = 0; c < n; c++)
            if (cr[c].ev && ts_eng_event_done(cr[c].ev)) {
                if (ts_eng_event_wait(cr[c].ev, err)) /* done: returns at once, with the queue's failure if any */
                    goto done;
                ts_eng_event_free(cr[c].ev);
                cr[c].ev = NULL;
                cr[c].done = cr[c].ev_upto;
            }
        /* chunks whose set is free begin (the host's embeddings: cheap) */
        for (int c = 0; c < n; c++)
            if (!cr[c].begun && (c < n_sets || cr[c - n_sets].ended)) {
                if (ch->begin && ch->begin(ch->user, c, cr[c].set, err))
                    goto done;
                cr[c].begun = progress = true;
            }
        /* every ready device task, oldest chunk first: the device runs its
         * queue in this order */
        for (int c = 0; c < n; c++) {
            ch_run *R = &cr[c];
            ts_rt_layers *pf = sets[R->set];
            while (R->begun && R->next < nt && pf->tasks[R->next].on_device) {
                const int t = R->next;
                const rt_task *T = &pf->tasks[t];
                /* a CPU task before it is complete (the CPU queue is synchronous) */
                if (t > 0 && !pf->tasks[t - 1].on_device && R->done < t)
                    break;
                /* its attention reads the previous chunk's rows of this layer:
                 * their kv_store is queued before it (the queue runs in order) */
                if (!nowait && T->attn && c > 0 && !cr[c - 1].ended && cr[c - 1].next <= T->kv_task)
                    break;
                if (!R->dev_dirty && sync_acts(pf, ch->n_tok[c], TS_SYNC_TO_DEVICE, err))
                    goto done;
                if (ts_eng_enqueue_bound(pf->dq, pf->bsets[(size_t)T->layer * TS_LS_MAX_NODES + T->seg], ch->pos0[c],
                                         ch->n_tok[c], 0, err))
                    goto done;
                R->dev_dirty = p0->dq_pending = true;
                R->next++;
                progress = true;
                if (R->next == nt || !pf->tasks[R->next].on_device) {
                    /* the crossing back: what the CPU's next task reads */
                    if (sync_acts(pf, ch->n_tok[c], TS_SYNC_TO_HOST, err))
                        goto done;
                    for (int l = 0; l < pf->n_layer; l++)
                        if (pf->vars[pf->layer_var[l]].kv_on_device && (R->next == nt || l == T->layer) &&
                            sync_kv(pf, l, ch->pos0[c], ch->pos0[c] + ch->n_tok[c], TS_SYNC_TO_HOST, err))
                            goto done;
                    if (!(R->ev = ts_eng_enqueue_marker(p0->dq, err)) || ts_eng_queue_flush(p0->dq, err))
                        goto done;
                    R->ev_upto = R->next;
                    R->ev_seq = seq++;
                    R->dev_dirty = false;
                }
            }
        }
        /* the CPU: the ready task that feeds the device soonest */
        int best = -1, best_cpu = 0, best_dev = 0;
        for (int c0 = 0; c0 < n; c0++) {
            const int c = nowait ? n - 1 - c0 : c0; /* the hook: ties to the later chunk */
            const ch_run *R = &cr[c];
            const ts_rt_layers *pf = sets[R->set];
            if (!R->begun || R->ended || R->done != R->next)
                continue;
            const int t = R->next;
            if (t < nt) {
                if (pf->tasks[t].on_device)
                    continue;
                if (!nowait && pf->tasks[t].attn && c > 0 && !cr[c - 1].ended && cr[c - 1].done <= pf->tasks[t].kv_task)
                    continue;
            }
            /* the end (t == nt) and tasks that reach no device work rank last */
            const int nc = t < nt && pf->tasks[t].n_dev ? pf->tasks[t].n_cpu : INT32_MAX,
                      nd = t < nt ? pf->tasks[t].n_dev : 0;
            if (best < 0 || nc < best_cpu || (nc == best_cpu && nd > best_dev))
                best = c, best_cpu = nc, best_dev = nd;
        }
        if (best >= 0) {
            ch_run *R = &cr[best];
            ts_rt_layers *pf = sets[R->set];
            if (R->next == nt) {
                if (ch->end && ch->end(ch->user, best, R->set, err))
                    goto done;
                R->ended = true;
                n_ended++;
            } else {
                const rt_task *T = &pf->tasks[R->next];
                if (ts_eng_enqueue_bound(pf->cq, pf->bsets[(size_t)T->layer * TS_LS_MAX_NODES + T->seg], ch->pos0[best],
                                         ch->n_tok[best], 0, err))
                    goto done;
                R->next++;
                R->done = R->next;
            }
            continue;
        }
        if (progress)
            continue;
        /* nothing ready on the host: wait for the device's oldest marker */
        int oldest = -1;
        for (int c = 0; c < n; c++)
            if (cr[c].ev && (oldest < 0 || cr[c].ev_seq < cr[oldest].ev_seq))
                oldest = c;
        if (oldest < 0) {
            ts_err_set(err, "prefill chunks: nothing ready and nothing on the device (%d of %d chunks ended)", n_ended, n);
            goto done;
        }
        const uint64_t w0 = ts_now_ns();
        if (ts_eng_event_wait(cr[oldest].ev, err))
            goto done;
        ch->host_wait_ns += ts_now_ns() - w0;
    }
    rc = 0;
done:
    if (rc) {
        (void)ts_eng_queue_finish(p0->dq, NULL);
        ts_rt_kv_clear(p0->kv_held);
    }
    for (int c = 0; c < n; c++)
        ts_eng_event_free(cr[c].ev);
    p0->dq_pending = false;
    ts_eng_get_stats(p0->dev, &after);
    if (!rc) {
        ts_rt_kv_add(p0->kv_held, ch->pos0[0], ch->pos0[n - 1] + ch->n_tok[n - 1]);
        p0->st.run_crossings += after.crossings - before.crossings;
        p0->st.run_nodes += after.nodes - before.nodes;
        for (int c = 0; c < n; c++) {
            p0->st.tokens += (uint64_t)ch->n_tok[c];
            p0->st.runs++;
        }
    }
    free(cr);
    return rc;
}

void ts_rt_layers_kv_truncate(ts_rt_layers *pf, int64_t n) {
    if (!pf)
        return;
    (void)ts_rt_layers_wait(pf, NULL); /* a submitted run may still write those rows */
    /* the broken hook may have left a run in flight over those rows */
    if (pf->nodrain)
        (void)drain(pf, NULL);
    ts_rt_kv_remove(pf->kv_held, n < 0 ? 0 : n, INT64_MAX);
}

void ts_rt_layers_kv_host_wrote(ts_rt_layers *pf, int64_t a, int64_t b) {
    if (!pf)
        return;
    (void)ts_rt_layers_wait(pf, NULL);
    ts_rt_kv_remove(pf->kv_held, a, b);
}

int ts_rt_layers_crossings_per_run(const ts_rt_layers *pf) {
    if (!pf || !pf->dev)
        return 0;
    /* one hand-off per device -> CPU change of engine, and one at the end */
    int n = 0;
    for (int t = 0; t < pf->n_tasks; t++)
        if (pf->tasks[t].on_device && (t + 1 == pf->n_tasks || !pf->tasks[t + 1].on_device))
            n++;
    return n;
}

void ts_rt_layers_get_stats(const ts_rt_layers *pf, ts_rt_layers_stats *out) {
    *out = pf->st;
    pthread_mutex_lock(&pf->w->mu);
    out->weight_users = pf->dev ? pf->w->users : 0;
    pthread_mutex_unlock(&pf->w->mu);
}

void ts_rt_layers_arena_stats(const ts_rt_layers *pf, ts_rt_arena_stats *out) {
    ts_rt_arena_get_stats(pf ? pf->arena : NULL, out);
}
