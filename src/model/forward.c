/* forward.c - per-sequence state (KV cache, activation buffers, thread
 * pool) and the forward pass over a batch of tokens.
 *
 * A call to ts_forward is cut into micro-batches of at most n_batch tokens.
 * Each micro-batch is embedded here, runs its layers through the block graph
 * (runtime/block.h: one description of a layer, as data) and ends with the
 * output norm and logits here. The layers run on the state's own `cpu`
 * engine (runtime/layers.h over the model's weights) or, for prompt chunks
 * and diffusion windows a prefill device takes, on that device over the
 * same buffers and KV cache: placement is the only difference, and the CPU
 * forward and every device path execute the same nodes.
 *
 * K and V go into the cache (rounded to f16 unless kv_f32) before attention
 * reads them back, so a batched prefill and a token-by-token decode compute
 * each position from exactly the same values; with matmuls whose per-token
 * result does not depend on the batch, a position's logits do not depend on
 * the micro-batch size at all.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <stdio.h>

#include "core/clock.h"
#include "engine/cpu/cpu_engine.h"
#include "kernels/fastops.h"
#include "kernels/linear.h"
#include "kernels/repack.h"
#include "model/model_impl.h"
#include "quant/quant.h"
#include "runtime/layers.h"

/* ---- state ------------------------------------------------------------ */

ts_state_params ts_state_default_params(void) {
    ts_state_params p = {.n_ctx = 0, .n_batch = 512, .n_threads = 0, .kv_f32 = false};
    return p;
}

/* calloc of a*b*c elements of size sz with overflow checks. */
static void *alloc3(int64_t a, int64_t b, int64_t c, size_t sz) {
    uint64_t n;
    if (a < 0 || b < 0 || c < 0) return NULL;
    if (ts_mul_overflow_u64((uint64_t)a, (uint64_t)b, &n) || ts_mul_overflow_u64(n, (uint64_t)c, &n) ||
        ts_mul_overflow_u64(n, sz, &n) || n > (uint64_t)SIZE_MAX)
        return NULL;
    return calloc(n ? (size_t)n : 1, 1);
}

/* ---- prefill on a device: setup -------------------------------------- */

/* Opens p->prefill_device (and a `cpu` engine beside it) and picks the chunk
 * width. On failure the state stays on the CPU and keeps the fallback line.
 * cpu and loop engines get the state's thread count unless the name sets one. */
static void pf_open(ts_state *s, const ts_state_params *p) {
    s->pf_width = 0;
    if (!p->prefill_device) return;
    const char *spec = p->prefill_device;
    ts_err e = {{0}};
    /* the model's session for this device (opened by the first state that
     * asks); what it does not take runs on the state's own `cpu` engine */
    if (!(s->pf_sess = ts_mdl_dev_acquire(s->m, spec, s->n_threads, NULL, &e))) {
        ts_eng_fallback_line(spec, &e, s->pf_fallback, sizeof s->pf_fallback);
        ts_mdl_dev_release(s->m, s->pf_sess);
        s->pf_sess = NULL;
        return;
    }
    s->pf_dev = ts_rt_weights_engine(s->pf_sess->w);
    const ts_eng_desc *d = ts_eng_describe(s->pf_dev);
    int w = p->chunk > 0 ? p->chunk : 256;
    if (d->widths_required && d->n_widths > 0) {
        /* the largest width it names that is not above the chunk asked for */
        int best = d->widths[0];
        for (int i = 0; i < d->n_widths; i++) {
            if (d->widths[i] < best) best = d->widths[i];
        }
        for (int i = 0; i < d->n_widths; i++)
            if (d->widths[i] <= w && d->widths[i] > best) best = d->widths[i];
        w = best;
    } else if (d->max_width > 0 && w > d->max_width) {
        w = d->max_width;
    }
    s->pf_width = w;
    /* the narrowest chunk worth a crossing: asked for, else the device's own
     * min_width where it names one, else 32 */
    s->want_sets = p->n_act_sets < 1 ? 1 : p->n_act_sets > 4 ? 4 : p->n_act_sets;
    /* sched=ooo: inflight=N chunks in flight (default 4), an activation set
     * each: one on the device while the CPU works on the others' units */
    if (ts_eng_schedule(s->pf_dev) == TS_SCHED_OOO && s->want_sets < ts_eng_inflight(s->pf_dev))
        s->want_sets = ts_eng_inflight(s->pf_dev);
    s->pf_auto = p->prefill_min_tokens < 0;
    s->pf_min = p->prefill_min_tokens > 0 ? p->prefill_min_tokens
                : d->min_width > 1        ? d->min_width
                : s->pf_auto              ? 2
                                          : 32;
    if (s->pf_min < 2) s->pf_min = 2; /* a one-token forward is decode: it stays on the CPU */
    /* a chunk must fit one micro-batch of the state */
    if (s->n_batch < w) s->n_batch = w < s->n_ctx ? w : s->n_ctx;
}

static void sets_free(ts_state *s) {
    for (int i = 0; i < s->n_sets; i++) {
        ts_rt_layers_free(s->sets[i].pf); /* before the first set's runner: they share its queue */
        for (int k = 0; k < TS_LS_N_ACT; k++) free(s->sets[i].act[k]);
    }
    free(s->sets);
    s->sets = NULL;
    s->n_sets = 0;
}

static void pf_close(ts_state *s) {
    ts_rt_layers_free(s->pfb);
    s->pfb = NULL;
    ts_mdl_dev_release(s->m, s->pfb_sess);
    s->pfb_sess = NULL;
    sets_free(s);
    ts_rt_layers_free(s->pf);
    s->pf = NULL;
    ts_mdl_dev_release(s->m, s->pf_sess);
    s->pf_sess = NULL;
    s->pf_dev = NULL;
}

/* The state's layer shapes [n_layer] (calloc'd; the caller frees), or NULL
 * with err. */
static ts_rt_block_shape *layer_shapes(const ts_state *s, ts_err *err) {
    const ts_mdl *m = s->m;
    const ts_hparams *hp = &m->hp;
    const int nl = hp->n_layer;
    ts_rt_block_shape *shapes = calloc((size_t)nl, sizeof *shapes);
    if (!shapes) {
        ts_err_set(err, "out of memory describing the layers");
        return NULL;
    }
    for (int l = 0; l < nl; l++) {
        const ts_layer *L = &m->layers[l];
        if (!L->q_norm != !L->k_norm || !L->attn_post_norm != !L->ffn_post_norm || !L->bq != !L->bk ||
            !L->bq != !L->bv) {
            ts_err_set(err, "layer %d mixes present and absent optional parts (q/k norms, post norms, biases)", l);
            free(shapes);
            return NULL;
        }
        shapes[l] = (ts_rt_block_shape){
            .kind = L->w_router.data ? TS_BLOCK_MOE : TS_BLOCK_DECODER,
            .n_expert = hp->n_expert,
            .n_expert_used = hp->n_expert_used,
            .n_ff_exp = hp->n_ff_exp,
            .moe_score = hp->moe_score,
            .moe_norm_topk = hp->moe_norm_topk,
            .qk_norm_full = m->ad->qk_norm_full,
            .n_embd = hp->n_embd,
            .n_head = hp->n_head,
            .n_head_kv = hp->n_head_kv,
            .head_dim = hp->head_dim,
            .n_ff = hp->n_ff,
            .n_rot = m->n_rot,
            .n_ctx = s->n_ctx,
            .n_swa = L->swa ? hp->n_swa : 0,
            .neox = hp->rope_type == TS_ROPE_NEOX,
            .qkv_bias = L->bq != NULL,
            .qk_norm = L->q_norm != NULL,
            .post_norms = L->attn_post_norm != NULL,
            .gelu = m->ffn_gelu,
            .kv_f16 = !s->kv_f32,
            .fast_kernels = s->lin != NULL, /* the kernels the CPU forward runs */
            .ref_matmul = s->lin == NULL,
            .eps = hp->norm_eps,
            .attn_scale = m->attn_scale,
            .attn_softcap = hp->attn_logit_softcap,
        };
    }
    return shapes;
}

/* A layer runner over the state's buffers for weights w (the model's own,
 * for the CPU layers; or a device session's), width tokens per run. */
static ts_rt_layers *layers_new_on(ts_state *s, ts_rt_weights *w, int width, float *const *act, ts_rt_layers *share,
                                   ts_err *err) {
    ts_rt_block_shape *shapes = layer_shapes(s, err);
    if (!shapes) return NULL;
    ts_rt_layers_params pp = {
        .weights = w,
        .cpu = s->cpu_eng,
        .width = width,
        .n_layer = s->m->hp.n_layer,
        .shapes = shapes,
        .share = share,
        .k_cache = s->k_cache,
        .v_cache = s->v_cache,
        .kv_layer_bytes = (uint64_t)s->n_ctx * (uint64_t)s->n_kv_dim * (s->kv_f32 ? 4u : 2u),
    };
    for (int i = 0; i < TS_LS_N_ACT; i++) pp.act[i] = act[i];
    ts_rt_layers *l = ts_rt_layers_new(&pp, NULL, 0, err);
    free(shapes);
    return l;
}

static ts_rt_layers *layers_new(ts_state *s, ts_rt_weights *w, int width, ts_err *err) {
    float *const act[TS_LS_N_ACT] = {s->x,    s->xn, s->q,      s->k,             s->v,     s->attn,
                                     s->o,    s->gate, s->up,   s->router, (float *)s->exp_ids, s->exp_w};
    return layers_new_on(s, w, width, act, NULL, err);
}

/* After the buffers exist: the device path, or the fallback line. */
static void pf_attach(ts_state *s) {
    if (!s->pf_dev) return;
    ts_err e = {{0}};
    if (!(s->pf = layers_new(s, s->pf_sess->w, s->pf_width, &e))) {
        const char *spec = ts_eng_describe(s->pf_dev)->name;
        ts_eng_fallback_line(spec, &e, s->pf_fallback, sizeof s->pf_fallback);
        pf_close(s);
        s->pf_width = 0;
        return;
    }
    ts_mdl_drop_row_pages(s->m);
    /* the extra activation sets: their own buffers and runners on the first's queue */
    if (s->want_sets > 1) {
        ts_rt_block_shape *shapes = layer_shapes(s, &e);
        uint64_t rows[TS_LS_N_ACT] = {0};
        const bool have_rows = shapes != NULL;
        if (have_rows) ts_rt_block_act_rows(&shapes[0], rows);
        free(shapes);
        s->sets = calloc((size_t)s->want_sets - 1, sizeof *s->sets);
        for (int i = 0; s->sets && have_rows && i < s->want_sets - 1; i++) {
            ts_act_set *A = &s->sets[i];
            s->n_sets = i + 1;
            bool ok = true;
            for (int k = 0; k < TS_LS_N_ACT && ok; k++)
                ok = (A->act[k] = alloc3(s->pf_width, (int64_t)rows[k], 1, 1)) != NULL;
            if (!ok || !(A->pf = layers_new_on(s, s->pf_sess->w, s->pf_width, A->act, s->pf, &e))) {
                /* the state keeps the sets that opened; the reason goes to the info line */
                if (!ok) ts_err_set(&e, "out of memory");
                for (int k = 0; k < TS_LS_N_ACT; k++) free(A->act[k]);
                s->n_sets = i;
                const int len = snprintf(s->sets_note, sizeof s->sets_note, "; %d of %d opened: ", i + 1,
                                         (int)s->want_sets);
                if (len > 0 && (size_t)len < sizeof s->sets_note) {
                    const size_t room = sizeof s->sets_note - (size_t)len - 1, ml = strlen(e.msg);
                    memcpy(s->sets_note + len, e.msg, ml < room ? ml : room);
                    s->sets_note[(size_t)len + (ml < room ? ml : room)] = '\0';
                }
                break;
            }
        }
    }
    ts_rt_layers_stats ps;
    ts_rt_layers_get_stats(s->pf, &ps);
    const ts_eng_desc *d = ts_eng_describe(s->pf_dev);
    if (ps.streaming && ps.n_resident)
        snprintf(s->pf_info, sizeof s->pf_info,
                 "prefill on %s: chunks of %d tokens (>= %d on the device), %d matrices converted, place=%s: %d "
                 "layers resident (%.1f MiB in %d buffers), %d streamed through %d slots of %.1f MiB (window %.0f "
                 "MiB)",
                 d->name, s->pf_width, s->pf_min, ps.converted, ps.place, ps.n_resident,
                 (double)ps.weight_bytes / 1048576.0, ps.weight_buffers, ps.n_streamed, ps.n_slots,
                 (double)ps.slot_bytes / 1048576.0, (double)d->window_bytes / 1048576.0);
    else if (ps.streaming)
        snprintf(s->pf_info, sizeof s->pf_info,
                 "prefill on %s: chunks of %d tokens (>= %d on the device), %d matrices converted, weights streamed "
                 "through %d slots of %.1f MiB (window %.0f MiB)",
                 d->name, s->pf_width, s->pf_min, ps.converted, ps.n_slots, (double)ps.slot_bytes / 1048576.0,
                 (double)d->window_bytes / 1048576.0);
    else
        snprintf(s->pf_info, sizeof s->pf_info,
                 "prefill on %s: chunks of %d tokens (>= %d on the device), %d matrices converted, %.1f MiB of "
                 "weights resident in %d buffers (window %.0f MiB)",
                 d->name, s->pf_width, s->pf_min, ps.converted, (double)ps.weight_bytes / 1048576.0,
                 ps.weight_buffers, (double)d->window_bytes / 1048576.0);
    if (s->n_sets || s->sets_note[0]) {
        const size_t len = strlen(s->pf_info);
        snprintf(s->pf_info + len, sizeof s->pf_info - len, "; %d activation sets%s", 1 + (int)s->n_sets,
                 s->sets_note);
    }
}

void ts_state_dev_stats_get(const ts_state *s, ts_state_dev_stats *out) {
    memset(out, 0, sizeof *out);
    if (!s || !s->pf) return;
    ts_rt_layers_stats ps;
    ts_eng_stats es;
    ts_rt_layers_get_stats(s->pf, &ps);
    ts_eng_get_stats(s->pf_dev, &es);
    const ts_eng_desc *d = ts_eng_describe(s->pf_dev);
    out->device = d->name;
    out->width = s->pf_width;
    out->min_tokens = s->pf_min;
    out->streaming = ps.streaming;
    out->dev_tokens = ps.tokens;
    out->dev_runs = ps.runs;
    out->dev_window_tokens = ps.window_tokens;
    out->dev_window_runs = ps.window_runs;
    out->dev_pad_tokens = s->pf_pad_tokens;
    out->dev_nodes = ps.run_nodes;
    out->crossings = ps.run_crossings;
    out->upload_bytes = es.upload_bytes;
    out->stall_ns = es.stall_ns;
    out->busy_ns = es.busy_ns;
    out->outliers = es.outliers;
    out->outliers_unprofiled = es.outliers_unprofiled;
    out->outliers_pruned = es.outliers_pruned;
    out->outlier_ns = es.outlier_ns;
    out->graph_builds = ps.graph_builds;
    out->weight_bytes = ps.weight_bytes;
    out->weight_users = ps.weight_users;
    out->window_bytes = d->window_bytes;
    out->window_peak = es.window_peak;
    out->converted = ps.converted;
    out->resident_layers = ps.n_resident;
    out->streamed_layers = ps.n_streamed;
    out->ooo_chunks = s->ooo_chunks;
    out->ooo_host_wait_ns = s->ooo_host_wait_ns;
}

void ts_state_stream_stats_get(const ts_state *s, ts_state_stream_stats *out) {
    memset(out, 0, sizeof *out);
    if (!s) return;
    ts_rt_arena_stats as, ds;
    ts_rt_layers_arena_stats(s->cpu_layers, &as);
    /* the device's runner has an arena of its own (its uploads' source) */
    ts_rt_layers_arena_stats(s->pf, &ds);
    as.read_bytes += ds.read_bytes, as.fills += ds.fills, as.failed += ds.failed, as.stall_ns += ds.stall_ns;
    as.whole += ds.whole, as.ahead += ds.ahead, as.demand += ds.demand, as.routed += ds.routed;
    *out = (ts_state_stream_stats){.layers = as.n_stream,
                                   .slots = as.n_slots,
                                   .loaders = as.n_loaders,
                                   .slot_bytes = as.slot_bytes,
                                   .read_bytes = as.read_bytes,
                                   .fills = as.fills,
                                   .failed = as.failed,
                                   .stall_ns = as.stall_ns,
                                   .whole = as.whole,
                                   .ahead = as.ahead,
                                   .demand = as.demand,
                                   .routed = as.routed,
                                   .predicted = as.predicted,
                                   .predict_n = as.predict_n};
    ts_mdl_stream_cache_stats(s->m, &out->cache_hits, &out->cache_misses, &out->cache_bytes);
}

const char *ts_state_dev_fallback(const ts_state *s) { return s && s->pf_fallback[0] ? s->pf_fallback : NULL; }
const char *ts_state_dev_info(const ts_state *s) { return s && s->pf && s->pf_info[0] ? s->pf_info : NULL; }

ts_state *ts_state_new(const ts_mdl *m, const ts_state_params *p, ts_err *err) {
    ts_state_params dp = ts_state_default_params();
    if (!p) p = &dp;
    if (!m) {
        ts_err_set(err, "model is NULL");
        return NULL;
    }
    const ts_hparams *hp = &m->hp;
    if (p->n_ctx < 0 || p->n_ctx > (1 << 24)) {
        ts_err_set(err, "n_ctx %d out of range [0, %d]", p->n_ctx, 1 << 24);
        return NULL;
    }
    if (p->n_batch < 1) {
        ts_err_set(err, "n_batch %d must be >= 1", p->n_batch);
        return NULL;
    }
    ts_state *s = calloc(1, sizeof *s);
    if (!s) {
        ts_err_set(err, "out of memory");
        return NULL;
    }
    s->m = m;
    s->n_ctx = p->n_ctx ? p->n_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    s->n_batch = p->n_batch < s->n_ctx ? p->n_batch : s->n_ctx;
    s->kv_f32 = p->kv_f32;
    s->pool = ts_threadpool_new(p->n_threads, err);
    if (!s->pool) goto fail;
    s->n_threads = ts_threadpool_n_threads(s->pool);
    if (!(s->cpu_eng = ts_eng_cpu_open_pool(s->pool, p->act_q8, err))) goto fail;
    pf_open(s, p); /* prefill device: may raise n_batch to hold a chunk */
    s->n_kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
    s->n_q_dim = (int64_t)hp->n_head * hp->head_dim;

    const size_t kv_sz = s->kv_f32 ? sizeof(float) : sizeof(uint16_t);
    s->k_cache = alloc3(hp->n_layer, s->n_ctx, s->n_kv_dim, kv_sz);
    s->v_cache = alloc3(hp->n_layer, s->n_ctx, s->n_kv_dim, kv_sz);
    const int64_t B = s->n_batch > s->pf_width ? s->n_batch : s->pf_width; /* a device chunk fits too */
    s->x = alloc3(B, hp->n_embd, 1, sizeof(float));
    s->xn = alloc3(B, hp->n_embd, 1, sizeof(float));
    s->o = alloc3(B, hp->n_embd, 1, sizeof(float));
    s->q = alloc3(B, s->n_q_dim, 1, sizeof(float));
    s->attn = alloc3(B, s->n_q_dim, 1, sizeof(float));
    s->k = alloc3(B, s->n_kv_dim, 1, sizeof(float));
    s->v = alloc3(B, s->n_kv_dim, 1, sizeof(float));
    /* a MoE layer's gate/up hold k expert rows per token; the routing
     * buffers are a float for a dense model (unused) */
    const int64_t n_ff_act = hp->n_expert > 0 && (int64_t)hp->n_expert_used * hp->n_ff_exp > hp->n_ff
                                 ? (int64_t)hp->n_expert_used * hp->n_ff_exp
                                 : hp->n_ff;
    s->gate = alloc3(B, n_ff_act, 1, sizeof(float));
    s->up = alloc3(B, n_ff_act, 1, sizeof(float));
    s->router = alloc3(B, hp->n_expert > 0 ? hp->n_expert : 1, 1, sizeof(float));
    s->exp_ids = alloc3(B, hp->n_expert > 0 ? hp->n_expert_used : 1, 1, sizeof(int32_t));
    s->exp_w = alloc3(B, hp->n_expert > 0 ? hp->n_expert_used : 1, 1, sizeof(float));
    s->logits = alloc3(hp->n_vocab, 1, 1, sizeof(float));

    /* Per-thread scratch: one dequantized weight row (the widest matmul
     * input), or attention's K/V row, accumulator and scores over n_ctx.
     * Rounded to 64 bytes so threads never share a cache line. */
    int64_t need = hp->n_embd;
    if (s->n_q_dim > need) need = s->n_q_dim;
    if (hp->n_ff > need) need = hp->n_ff;
    if ((int64_t)s->n_ctx + 2 * hp->head_dim > need) need = (int64_t)s->n_ctx + 2 * hp->head_dim;
    if (!m->ref_kernels) {
        const ts_attn_params ap = {.n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim};
        if (ts_attention_fast_scratch(&ap) > need) need = ts_attention_fast_scratch(&ap);
    }
    s->scratch_stride = (need + 15) & ~(int64_t)15;
    s->scratch = alloc3(s->n_threads, s->scratch_stride, 1, sizeof(float));
    if (!m->ref_kernels) {
        int64_t max_in = hp->n_embd > s->n_q_dim ? hp->n_embd : s->n_q_dim;
        if (hp->n_ff > max_in) max_in = hp->n_ff;
        s->lin = ts_linear_ws_new(max_in, s->n_batch, s->n_threads, err);
        if (!s->lin) goto fail;
        ts_linear_ws_set_hi(s->lin, !p->act_q8);
    }

    if (!s->k_cache || !s->v_cache || !s->x || !s->xn || !s->o || !s->q || !s->attn || !s->k || !s->v ||
        !s->gate || !s->up || !s->router || !s->exp_ids || !s->exp_w || !s->logits || !s->scratch) {
        ts_err_set(err, "out of memory allocating the state (n_ctx %d, n_batch %d)", s->n_ctx, s->n_batch);
        goto fail;
    }
    /* the layers on the CPU: the block graph over these buffers */
    if (!(s->cpu_layers = layers_new(s, m->host_w, (int)B, err))) goto fail;
    pf_attach(s); /* the device path over these buffers, or the fallback line */
    return s;
fail:
    ts_state_free(s);
    return NULL;
}

void ts_state_free(ts_state *s) {
    if (!s) return;
    pf_close(s); /* finishes the device's queues before the buffers go */
    ts_rt_layers_free(s->cpu_layers);
    ts_eng_close(s->cpu_eng);
    ts_threadpool_free(s->pool);
    ts_linear_ws_free(s->lin);
    free(s->k_cache);
    free(s->v_cache);
    free(s->x);
    free(s->xn);
    free(s->o);
    free(s->q);
    free(s->attn);
    free(s->k);
    free(s->v);
    free(s->gate);
    free(s->up);
    free(s->router);
    free(s->exp_ids);
    free(s->exp_w);
    free(s->logits);
    free(s->scratch);
    free(s);
}

int32_t ts_state_n_ctx(const ts_state *s) { return s->n_ctx; }
int32_t ts_state_n_past(const ts_state *s) { return s->n_past; }
int32_t ts_state_n_batch(const ts_state *s) { return s->n_batch; }
int32_t ts_state_n_threads(const ts_state *s) { return s->n_threads; }
const float *ts_state_logits(const ts_state *s) { return s->logits; }

void ts_state_kv_truncate(ts_state *s, int32_t n) {
    if (n < 0) n = 0;
    if (n < s->n_past) s->n_past = n;
    for (int i = 0; i < s->n_sets; i++) (void)ts_rt_layers_wait(s->sets[i].pf, NULL); /* may write those rows */
    if (s->pf) ts_rt_layers_kv_truncate(s->pf, n); /* rows >= n are no longer the device's */
    if (s->pfb) ts_rt_layers_kv_truncate(s->pfb, n);
}

bool ts_state_kv_f32(const ts_state *s) { return s->kv_f32; }
bool ts_state_act_q8(const ts_state *s) { return s->lin && !ts_linear_ws_hi(s->lin); }

int ts_state_kv_copy(ts_state *dst, const ts_state *src, int32_t a, int32_t b, ts_err *err) {
    if (!dst || !src) return ts_err_set(err, "kv copy: state is NULL");
    if (dst->m != src->m || dst->kv_f32 != src->kv_f32)
        return ts_err_set(err, "kv copy: the states differ in model or KV type (%s / %s)", dst->kv_f32 ? "f32" : "f16",
                          src->kv_f32 ? "f32" : "f16");
    if (a < 0 || b < a || b > dst->n_ctx || b > src->n_ctx)
        return ts_err_set(err, "kv copy: rows [%d, %d) outside the caches (%d, %d rows)", a, b, dst->n_ctx,
                          src->n_ctx);
    if (a == b) return 0;
    if (src->win_pending || (src->pf && !ts_rt_layers_done(src->pf)) || dst->win_pending ||
        (dst->pf && !ts_rt_layers_done(dst->pf)))
        return ts_err_set(err, "kv copy: a window is in flight on one of the states (wait for it first)");
    const size_t esz = dst->kv_f32 ? sizeof(float) : sizeof(uint16_t);
    const size_t row = (size_t)dst->n_kv_dim * esz, n = (size_t)(b - a) * row;
    for (int64_t l = 0; l < dst->m->hp.n_layer; l++) {
        const size_t od = ((size_t)l * (size_t)dst->n_ctx + (size_t)a) * row;
        const size_t os = ((size_t)l * (size_t)src->n_ctx + (size_t)a) * row;
        memcpy((char *)dst->k_cache + od, (const char *)src->k_cache + os, n);
        memcpy((char *)dst->v_cache + od, (const char *)src->v_cache + os, n);
    }
    if (dst->pf) ts_rt_layers_kv_host_wrote(dst->pf, a, b); /* the device re-reads those rows */
    return 0;
}

/* ---- stages ------------------------------------------------------------ */

/* x[t] = embedding row of tokens[t] * embd_scale, then pad padding rows */
static void stage_embed_into(ts_state *s, float *x, const int32_t *tokens, int nb, int pad) {
    const ts_mdl *m = s->m;
    const int64_t E = m->hp.n_embd;
    for (int t = 0; t < nb; t++) {
        float *xt = x + t * E;
        ts_wmat_row(&m->tok_embd, tokens[t], xt);
        if (m->hp.embd_scale != 1.0f)
            for (int64_t i = 0; i < E; i++) xt[i] *= m->hp.embd_scale;
    }
    /* a window's padding rows (window_pad): copies of its last row, finite,
     * and no row of the window reads them */
    for (int t = nb; t < nb + pad; t++) memcpy(x + t * E, x + (int64_t)(nb - 1) * E, (size_t)E * sizeof(float));
    s->pf_pad_tokens += (uint64_t)pad;
}

static void stage_embed(ts_state *s, const int32_t *tokens, int nb, int pad) {
    stage_embed_into(s, s->x, tokens, nb, pad);
}

/* y = x W^T over nb rows: the fast path (ts_linear) or the reference. */
static void matmul(ts_state *s, const ts_wmat *w, const float *x, float *y, int nb) {
    if (s->lin) {
        ts_linear(s->pool, s->lin, 1, &w, &y, x, nb);
        return;
    }
    ts_matmul(s->pool, w, x, w->n_in, y, w->n_out, nb, s->scratch, s->scratch_stride);
}

/* Output norm and projection for rows [t0, nb) of the batch into out
 * (rows of n_vocab), with final soft-capping. */
static void stage_logits(ts_state *s, const float *x, float *xn, int t0, int nb, float *out) {
    const ts_mdl *m = s->m;
    const int64_t E = m->hp.n_embd, V = m->hp.n_vocab;
    const int n = nb - t0;
    ts_rmsnorm_rows(s->pool, xn, x + t0 * E, m->output_norm, E, n, m->hp.norm_eps);
    matmul(s, &m->output, xn, out, n);
    if (m->hp.final_logit_softcap > 0.0f) ts_softcap_f32(out, (int64_t)n * V, m->hp.final_logit_softcap);
}

/* A window forward's logit-row selection (ts_state_set_logit_rows), taken
 * by the forward it was made for: need NULL means every row. */
typedef struct logit_sel {
    const uint8_t *need;
    int32_t n;
} logit_sel;

static logit_sel take_sel(ts_state *s) {
    logit_sel sel = {NULL, 0};
    if (s) {
        sel = (logit_sel){s->logit_need, s->logit_need_n};
        s->logit_need = NULL;
    }
    return sel;
}

/* The logits of the selected rows: those rows of x gathered to the front
 * (x is spent once the layers are done), projected into the front of out,
 * then moved to their rows (last row first, so no row is overwritten
 * before it moves). */
static void selected_logits(ts_state *s, float *x, float *xn, int nb, float *out, bool last, logit_sel sel) {
    const int64_t E = s->m->hp.n_embd, V = s->m->hp.n_vocab;
    const uint8_t *need = sel.need;
    const int nn = sel.n < nb ? sel.n : nb;
    int k = 0;
    for (int i = 0; i < nn; i++)
        if (need[i]) {
            if (k != i) memmove(x + (int64_t)k * E, x + (int64_t)i * E, (size_t)E * sizeof(float));
            k++;
        }
    if (k) stage_logits(s, x, xn, 0, k, out);
    for (int i = nn - 1; i >= 0; i--)
        if (need[i] && --k != i) memmove(out + (int64_t)i * V, out + (int64_t)k * V, (size_t)V * sizeof(float));
    if (last && nn == nb && need[nb - 1]) memcpy(s->logits, out + (int64_t)(nb - 1) * V, (size_t)V * sizeof(float));
}

/* The logits of the span's nb rows into logits_out (or NULL; sel: only
 * those rows); when last, the last row also goes to s->logits. */
static void finish_logits_from(ts_state *s, float *x, float *xn, int nb, float *logits_out, bool last,
                               logit_sel sel) {
    const int64_t V = s->m->hp.n_vocab;
    if (s->embd_sum) { /* embeddings: every row's normed hidden state (xn is rewritten below) */
        const int64_t E = s->m->hp.n_embd;
        ts_rmsnorm_rows(s->pool, xn, x, s->m->output_norm, E, nb, s->m->hp.norm_eps);
        for (int r = 0; r < nb; r++)
            for (int64_t e = 0; e < E; e++) s->embd_sum[e] += xn[(int64_t)r * E + e];
        memcpy(s->embd_last, xn + (int64_t)(nb - 1) * E, (size_t)E * sizeof(float));
    }
    if (logits_out && sel.need) {
        selected_logits(s, x, xn, nb, logits_out, last, sel);
    } else if (logits_out) {
        stage_logits(s, x, xn, 0, nb, logits_out);
        if (last) memcpy(s->logits, logits_out + (int64_t)(nb - 1) * V, (size_t)V * sizeof(float));
    } else if (last) {
        stage_logits(s, x, xn, nb - 1, nb, s->logits);
    }
}

static void finish_logits(ts_state *s, int nb, float *logits_out, bool last, logit_sel sel) {
    finish_logits_from(s, s->x, s->xn, nb, logits_out, last, sel);
}

/* nb tokens at positions pos0 ...: the embedding and the logits on the CPU,
 * the layers on the CPU stages or, on_device, through runtime/layers.c
 * over the same buffers and KV cache (placement is the only difference).
 * Attention is causal (n_kv 0) or sees cache rows [0, n_kv) (a diffusion
 * window). logits_out: nb rows (sel: only those), or NULL; when last, the
 * last row also goes to s->logits. */
static int eval_span(ts_state *s, const int32_t *tokens, int nb, int pad, int64_t pos0, int64_t n_kv,
                     bool on_device, float *logits_out, bool last, logit_sel sel, ts_err *err) {
    stage_embed(s, tokens, nb, pad);
    /* the layers: one block graph, on the device or on the state's cpu engine */
    const uint64_t t0 = s->pf_auto && !on_device && nb > 1 ? ts_now_ns() : 0;
    if (ts_rt_layers_run_window(on_device ? s->pf : s->cpu_layers, pos0, nb + pad, n_kv, err) < 0) return -1;
    if (t0) {
        /* what a token of the CPU's layers costs, for pf_takes */
        const double per = (double)(ts_now_ns() - t0) / nb;
        s->cpu_ns_per_tok = s->cpu_ns_per_tok > 0 ? 0.75 * s->cpu_ns_per_tok + 0.25 * per : per;
    }
    /* the CPU wrote those cache rows: a device's copy of them is stale */
    if (!on_device && s->pf) ts_rt_layers_kv_host_wrote(s->pf, pos0, pos0 + nb);
    finish_logits(s, nb, logits_out, last, sel);
    return 0;
}

/* Whether an extra activation set has a window in flight. */
static bool sets_pending(const ts_state *s) {
    for (int i = 0; i < s->n_sets; i++)
        if (s->sets[i].pending) return true;
    return false;
}

/* Every id in [0, n_vocab). */
static int check_tokens(const ts_state *s, const int32_t *tokens, int32_t n, ts_err *err) {
    const int32_t n_vocab = s->m->hp.n_vocab;
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            return ts_err_set(err, "token id %d at index %d out of range [0, %d)", tokens[i], i, n_vocab);
    return 0;
}

/* Whether w tokens of work are worth a crossing: always, unless the
 * minimum is automatic (prefill_min_tokens -1). */
static bool pf_worth(const ts_state *s, int w) {
    if (!s->pf_auto) return true;
    /* auto: only what the CPU would take longer for than the crossings
     * cost; until the CPU has been measured, the CPU runs (and measures) */
    const double cross_ns =
        (double)ts_eng_describe(s->pf_dev)->crossing_ns * (double)ts_rt_layers_crossings_per_run(s->pf);
    return s->cpu_ns_per_tok > 0 && (double)w * s->cpu_ns_per_tok > cross_ns;
}

/* Whether a chunk of w tokens goes to the device: at least the minimum, and
 * exactly the width where the device requires widths. */
static bool pf_takes(const ts_state *s, int w) {
    if (!s->pf || w < s->pf_min || (w != s->pf_width && ts_eng_describe(s->pf_dev)->widths_required)) return false;
    return pf_worth(s, w);
}

/* The padding rows a window of n tokens at pos0 takes to run on a device
 * that requires widths, at the state's width (0: it needs none, or cannot
 * be padded). The rows past n repeat the window's last input, attend the
 * same keys and write cache rows [pos0+n, pos0+width), which nothing has
 * written yet that a later call reads: only a window whose keys end at its
 * own end (n_kv == pos0+n: the prefix cache, full recompute; not a dual
 * cache's suffix) is padded, and only where the cache has those rows. */
static int window_pad(const ts_state *s, int n, int32_t pos0, int32_t n_kv) {
    if (!s->pf || n >= s->pf_width || n < s->pf_min || !ts_eng_describe(s->pf_dev)->widths_required) return 0;
    if (n_kv != pos0 + n || (int64_t)pos0 + s->pf_width > s->n_ctx) return 0;
    return pf_worth(s, n) ? s->pf_width - n : 0;
}

/* ---- several chunks out of order (sched=ooo) ---------------------------- */

typedef struct ooo_ctx {
    ts_state *s;
    const int32_t *tokens; /* of the first chunk */
    float *logits_all;     /* of the first chunk's first row, or NULL */
    bool last;             /* the last chunk ends the forward's tokens */
    int n_chunks, width;
    const int *n_tok; /* [n_chunks]: chunk c starts at token c * width */
} ooo_ctx;

static float *set_act(ts_state *s, int set, int slot) {
    if (set == 0) return slot == TS_LS_X ? s->x : s->xn;
    return s->sets[set - 1].act[slot];
}

static int ooo_begin(void *user, int c, int set, ts_err *err) {
    (void)err;
    ooo_ctx *o = user;
    stage_embed_into(o->s, set_act(o->s, set, TS_LS_X), o->tokens + (int64_t)c * o->width, o->n_tok[c], 0);
    return 0;
}

static int ooo_end(void *user, int c, int set, ts_err *err) {
    (void)err;
    ooo_ctx *o = user;
    ts_state *s = o->s;
    float *out = o->logits_all ? o->logits_all + (int64_t)c * o->width * s->m->hp.n_vocab : NULL;
    finish_logits_from(s, set_act(s, set, TS_LS_X), set_act(s, set, TS_LS_XN), o->n_tok[c], out,
                       o->last && c == o->n_chunks - 1, (logit_sel){NULL, 0});
    return 0;
}

/* The device chunks of tokens[0, n) from s->n_past, several in flight on
 * the state's activation sets (ts_rt_layers_run_chunks). Returns how many
 * tokens it ran: 0 when fewer than two chunks go to the device (the caller
 * runs them one by one), -1 on failure. */
static int32_t forward_ooo(ts_state *s, const int32_t *tokens, int32_t n, float *logits_all, ts_err *err) {
    enum { MAX_CH = 64 };
    int64_t pos0[MAX_CH];
    int n_tok[MAX_CH];
    int nc = 0;
    int32_t run = 0;
    while (nc < MAX_CH && run < n) {
        const int w = n - run < s->pf_width ? n - run : s->pf_width;
        if (!pf_takes(s, w)) break;
        pos0[nc] = s->n_past + run, n_tok[nc] = w;
        nc++, run += w;
    }
    if (nc < 2) return 0;
    ts_rt_layers *sets[4] = {s->pf}; /* want_sets <= 4: at most 3 extra */
    for (int i = 0; i < s->n_sets; i++) sets[i + 1] = s->sets[i].pf;
    /* the last chunk's last row is the forward's last when the chunks take every token */
    ooo_ctx o = {s, tokens, logits_all, run == n, nc, s->pf_width, n_tok};
    ts_rt_chunks ch = {.n_chunks = nc, .pos0 = pos0, .n_tok = n_tok, .begin = ooo_begin, .end = ooo_end, .user = &o};
    if (ts_rt_layers_run_chunks(sets, 1 + s->n_sets, &ch, err)) return -1;
    s->ooo_chunks += (uint64_t)nc;
    s->ooo_host_wait_ns += ch.host_wait_ns;
    s->n_past += run;
    return run;
}

int ts_forward(ts_state *s, const int32_t *tokens, int32_t n, float *logits_all, ts_err *err) {
    if (!s) return ts_err_set(err, "state is NULL");
    if (n < 0) return ts_err_set(err, "token count %d is negative", n);
    if (n == 0) return 0;
    if (!tokens) return ts_err_set(err, "tokens is NULL");
    if ((int64_t)s->n_past + n > s->n_ctx)
        return ts_err_set(err, "context full: %d cached + %d new tokens exceed n_ctx %d", s->n_past, n, s->n_ctx);
    if (s->win_pending || sets_pending(s))
        return ts_err_set(err, "a submitted window forward is still in flight (wait for it first)");
    if (check_tokens(s, tokens, n, err) < 0) return -1;
    const int32_t n_vocab = s->m->hp.n_vocab;

    for (int32_t done = 0; done < n;) {
        int nb = n - done < s->n_batch ? n - done : s->n_batch;
        float *out = logits_all ? logits_all + (int64_t)done * n_vocab : NULL;
        if (s->pf && s->n_sets > 0 && ts_eng_schedule(s->pf_dev) == TS_SCHED_OOO) {
            const int32_t ran = forward_ooo(s, tokens + done, n - done, out, err);
            if (ran < 0) return -1;
            if (ran > 0) {
                done += ran;
                continue;
            }
        }
        if (s->pf) {
            /* the prompt in chunks of the device's width: full ones (and, where
             * widths are free, a tail of at least the minimum) on the device,
             * the rest on the CPU in micro-batches */
            const int w = n - done < s->pf_width ? n - done : s->pf_width;
            if (pf_takes(s, w)) {
                if (eval_span(s, tokens + done, w, 0, s->n_past, 0, true, out, done + w == n, (logit_sel){NULL, 0}, err) < 0)
                    return -1;
                s->n_past += w;
                done += w;
                continue;
            }
            if (nb > w) nb = w;
        }
        if (eval_span(s, tokens + done, nb, 0, s->n_past, 0, false, out, done + nb == n, (logit_sel){NULL, 0}, err) < 0)
            return -1;
        s->n_past += nb;
        done += nb;
    }
    return 0;
}

/* ---- layer ranges on several runners (the two-engine stream) ----------- */

int ts_state_attach_device_b(ts_state *s, const char *spec, bool own_copy, ts_err *err) {
    if (!s) return ts_err_set(err, "state is NULL");
    if (!s->pf) return ts_err_set(err, "a second device needs the state's prefill device first");
    if (s->pfb) return ts_err_set(err, "the state has a second device already");
    if (!(s->pfb_sess = ts_mdl_dev_acquire(s->m, spec, s->n_threads, own_copy ? NULL : s->pf_sess, err))) return -1;
    if (!(s->pfb = layers_new(s, s->pfb_sess->w, s->pf_width, err))) {
        ts_mdl_dev_release(s->m, s->pfb_sess);
        s->pfb_sess = NULL;
        return -1;
    }
    ts_mdl_drop_row_pages(s->m);
    return 0;
}

uint64_t ts_state_device_b_shared_bytes(const ts_state *s) {
    if (!s || !s->pfb) return 0;
    ts_rt_layers_stats ps;
    ts_rt_layers_get_stats(s->pfb, &ps);
    return ps.shared_bytes;
}

static ts_rt_layers *runner(ts_state *s, ts_runner on) {
    return on == TS_RUN_CPU ? s->cpu_layers : on == TS_RUN_DEVICE ? s->pf : s->pfb;
}

int ts_forward_layers(ts_state *s, ts_runner on, const int32_t *tokens, int32_t nb, int32_t pos0, int32_t n_kv,
                      int32_t l0, int32_t l1, ts_err *err) {
    if (!s) return ts_err_set(err, "state is NULL");
    ts_rt_layers *r = runner(s, on);
    if (!r) return ts_err_set(err, "runner %d: the state has no such device", (int)on);
    const int32_t nl = s->m->hp.n_layer, cap = on == TS_RUN_CPU ? s->n_batch : s->pf_width;
    if (nb < 1 || nb > cap || pos0 < 0 || (int64_t)pos0 + nb > s->n_ctx)
        return ts_err_set(err, "layers of %d tokens at %d: outside [1, %d] tokens or past n_ctx %d", nb, pos0, cap,
                          s->n_ctx);
    if (l0 < 0 || l1 > nl || l0 >= l1) return ts_err_set(err, "layers [%d, %d) outside [0, %d)", l0, l1, nl);
    if (n_kv && (n_kv < pos0 + nb || n_kv > s->n_ctx || s->m->hp.n_swa > 0))
        return ts_err_set(err, "window of %d tokens at %d seeing %d keys: outside n_ctx %d, or a model with "
                          "sliding-window layers", nb, pos0, n_kv, s->n_ctx);
    if (s->win_pending || sets_pending(s))
        return ts_err_set(err, "a submitted window forward is still in flight (wait for it first)");
    if (l0 == 0) {
        if (!tokens) return ts_err_set(err, "tokens is NULL");
        if (check_tokens(s, tokens, nb, err) < 0) return -1;
        stage_embed(s, tokens, nb, 0);
    }
    if (ts_rt_layers_run_range(r, pos0, nb, n_kv, l0, l1, err) < 0) return -1;
    /* the rows this runner wrote: every other device's copy of them is stale */
    for (int o = TS_RUN_DEVICE; o <= TS_RUN_DEVICE_B; o++)
        if (runner(s, (ts_runner)o) && runner(s, (ts_runner)o) != r)
            ts_rt_layers_kv_host_wrote(runner(s, (ts_runner)o), pos0, pos0 + nb);
    if (l1 == nl && !n_kv) s->n_past = pos0 + nb;
    return 0;
}

int ts_state_layers_logits(ts_state *s, int32_t nb, float *logits_all, ts_err *err) {
    if (!s || nb < 1 || nb > (s->n_batch > s->pf_width ? s->n_batch : s->pf_width))
        return ts_err_set(err, "logits: no state, or %d rows outside the buffers", nb);
    finish_logits(s, nb, logits_all, true, (logit_sel){NULL, 0});
    return 0;
}

/* ---- bidirectional window (diffusion LLMs) ----------------------------- */

/* The checks of a window forward; *on_device: its layers go to the device,
 * *pad: with that many padding rows (window_pad). */
static int window_checks(ts_state *s, int32_t set, const int32_t *tokens, int32_t n, int32_t pos0, int32_t n_kv,
                         bool *on_device, int *pad, ts_err *err) {
    *pad = 0;
    if (!s) return ts_err_set(err, "state is NULL");
    if (n < 0) return ts_err_set(err, "window token count %d is negative", n);
    if (pos0 < 0) return ts_err_set(err, "window start pos0 %d is negative", pos0);
    if (n == 0) return 0;
    if (!tokens) return ts_err_set(err, "tokens is NULL");
    if (set == 0 ? s->win_pending : s->sets[set - 1].pending)
        return ts_err_set(err, "a submitted window forward is still in flight on set %d (wait for it first)", set);
    if (n > s->n_batch)
        return ts_err_set(err,
                          "window of %d tokens exceeds n_batch %d (a window is evaluated in one batch: every query "
                          "must see every key; raise n_batch)",
                          n, s->n_batch);
    if ((int64_t)pos0 + n > n_kv)
        return ts_err_set(err, "n_kv %d is less than the window end pos0 + n = %lld", n_kv, (long long)pos0 + n);
    if (n_kv > s->n_ctx) return ts_err_set(err, "n_kv %d exceeds n_ctx %d", n_kv, s->n_ctx);
    const ts_hparams *hp = &s->m->hp;
    if (hp->n_swa > 0)
        return ts_err_set(err, "window evaluation does not support sliding-window layers (%s, n_swa %d)",
                          hp->arch_name, hp->n_swa);
    if (check_tokens(s, tokens, n, err) < 0) return -1;
    /* a window as wide as a prefill chunk runs its layers on the device
     * (same rule as ts_forward's chunks: >= the minimum, <= the width, ==
     * the width where the device requires widths, or narrower there, padded
     * to it); the embedding, output norm and logits stay on the CPU */
    *on_device = n <= s->pf_width && pf_takes(s, n);
    if (!*on_device && (*pad = window_pad(s, n, pos0, n_kv)) > 0) *on_device = true;
    if (!*on_device && (set > 0 || (s->win_pending || sets_pending(s))))
        return ts_err_set(err,
                          set > 0 ? "a window on activation set %d must go to the device (%d tokens: at least %d, at "
                                    "most the chunk width %d)"
                                  : "a window on the CPU while device windows are in flight (set %d; %d tokens, device "
                                    "windows %d..%d): wait for them first",
                          set, n, s->pf_min, s->pf_width);
    /* the CPU rewrites rows pos0.. of the cache: a prefill device that keeps
     * its own copy must not trust its rows from there on */
    if (s->pf && !*on_device) ts_rt_layers_kv_truncate(s->pf, pos0);
    return 0;
}

int ts_forward_window(ts_state *s, const int32_t *tokens, int32_t n, int32_t pos0, int32_t n_kv, float *logits_all,
                      ts_err *err) {
    const logit_sel sel = take_sel(s); /* this call's, whether it runs or not */
    bool on_device = false;
    int pad = 0;
    if (window_checks(s, 0, tokens, n, pos0, n_kv, &on_device, &pad, err) < 0) return -1;
    if (n == 0) return 0;
    return eval_span(s, tokens, n, pad, pos0, n_kv, on_device, logits_all, true, sel, err);
}

int ts_forward_window_submit(ts_state *s, const int32_t *tokens, int32_t n, int32_t pos0, int32_t n_kv,
                             float *logits_all, ts_err *err) {
    const logit_sel sel = take_sel(s); /* this call's, whether it runs or not */
    bool on_device = false;
    int pad = 0;
    if (window_checks(s, 0, tokens, n, pos0, n_kv, &on_device, &pad, err) < 0) return -1;
    if (n == 0) return 0;
    if (!on_device) return eval_span(s, tokens, n, 0, pos0, n_kv, false, logits_all, true, sel, err);
    stage_embed(s, tokens, n, pad);
    if (ts_rt_layers_submit_window(s->pf, pos0, n + pad, n_kv, err) < 0) return -1;
    s->win_pending = true;
    s->win_n = n;
    s->win_logits = logits_all;
    s->win_need = sel.need;
    s->win_need_n = sel.n;
    return 0;
}

int ts_forward_window_wait(ts_state *s, ts_err *err) {
    if (!s) return ts_err_set(err, "state is NULL");
    if (!s->win_pending) return 0;
    s->win_pending = false;
    if (ts_rt_layers_wait(s->pf, err) < 0) return -1;
    finish_logits(s, s->win_n, s->win_logits, true, (logit_sel){s->win_need, s->win_need_n});
    return 0;
}

void ts_state_set_embd_sink(ts_state *s, float *sum, float *last) {
    s->embd_sum = sum && last ? sum : NULL;
    s->embd_last = sum && last ? last : NULL;
}

int ts_state_set_logit_rows(ts_state *s, const uint8_t *need, int32_t n, ts_err *err) {
    if (!s) return ts_err_set(err, "state is NULL");
    if (n < 0) return ts_err_set(err, "logit rows: n %d is negative", n);
    s->logit_need = n > 0 ? need : NULL;
    s->logit_need_n = n;
    return 0;
}

bool ts_forward_window_done(ts_state *s) { return !s || !s->win_pending || ts_rt_layers_done(s->pf); }

int32_t ts_state_n_act_sets(const ts_state *s) { return s ? 1 + s->n_sets : 0; }

int ts_forward_window_submit_set(ts_state *s, int32_t set, const int32_t *tokens, int32_t n, int32_t pos0,
                                 int32_t n_kv, float *logits_all, ts_err *err) {
    if (!s) return ts_err_set(err, "state is NULL");
    if (set == 0) return ts_forward_window_submit(s, tokens, n, pos0, n_kv, logits_all, err);
    if (set < 0 || set > s->n_sets)
        return ts_err_set(err, "activation set %d: the state has %d (ts_state_params.n_act_sets, a device with "
                               "resident weights)", set, 1 + (int)s->n_sets);
    bool on_device = false;
    int pad = 0;
    if (window_checks(s, set, tokens, n, pos0, n_kv, &on_device, &pad, err) < 0) return -1;
    if (n == 0) return 0;
    ts_act_set *A = &s->sets[set - 1];
    stage_embed_into(s, A->act[TS_LS_X], tokens, n, pad);
    if (ts_rt_layers_submit_window(A->pf, pos0, n + pad, n_kv, err) < 0) return -1;
    A->pending = true;
    A->n = n;
    A->logits = logits_all;
    return 0;
}

int ts_forward_window_wait_set(ts_state *s, int32_t set, ts_err *err) {
    if (!s) return ts_err_set(err, "state is NULL");
    if (set == 0) return ts_forward_window_wait(s, err);
    if (set < 0 || set > s->n_sets) return ts_err_set(err, "activation set %d: the state has %d", set, 1 + (int)s->n_sets);
    ts_act_set *A = &s->sets[set - 1];
    if (!A->pending) return 0;
    A->pending = false;
    if (ts_rt_layers_wait(A->pf, err) < 0) return -1;
    finish_logits_from(s, A->act[TS_LS_X], A->act[TS_LS_XN], A->n, A->logits, true, (logit_sel){NULL, 0});
    return 0;
}

int ts_state_set_n_past(ts_state *s, int32_t n, ts_err *err) {
    if (!s) return ts_err_set(err, "state is NULL");
    if (n < 0 || n > s->n_ctx) return ts_err_set(err, "n_past %d out of range [0, %d]", n, s->n_ctx);
    s->n_past = n;
    return 0;
}
