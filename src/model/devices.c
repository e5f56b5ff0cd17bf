/* devices.c - a model's device sessions. The first state that asks for a
 * prefill device opens it and describes the model's weights to the runtime
 * (runtime/layers.h ts_rt_weights); every later state of the model asking
 * for the same device (name and thread count) shares that session: one open
 * device, one probe, one converted copy, one upload. The last state to let
 * go closes it. The weights' host description is the model's (each
 * layer's matrices, vectors and rope angles, made once at load: it is also
 * what the CPU forward's own layer graphs bind); what depends on a state
 * (context size, chunk width, buffers) stays with the state (forward.c).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "gguf/gguf.h"
#include "kernels/repack.h"
#include "model/model_impl.h"
#include "quant/quant.h"
#include "runtime/layers.h"

struct ts_mdl_devs {
    pthread_mutex_t mu;
    ts_mdl_dev *list;
};

struct ts_mdl_devs *ts_mdl_devs_new(void) {
    struct ts_mdl_devs *d = calloc(1, sizeof *d);
    if (d) pthread_mutex_init(&d->mu, NULL);
    return d;
}

static void dev_free(ts_mdl_dev *d) {
    ts_engine *e = ts_rt_weights_engine(d->w);
    ts_rt_weights_free(d->w);
    ts_eng_close(e);
    free(d);
}

void ts_mdl_devs_free(struct ts_mdl_devs *d) {
    if (!d) return;
    while (d->list) {
        ts_mdl_dev *n = d->list->next;
        dev_free(d->list);
        d->list = n;
    }
    pthread_mutex_destroy(&d->mu);
    free(d);
}

/* A layer matrix as the runtime sees it on the host. */
static ts_rt_host_slot host_matrix(const ts_wmat *w) {
    const bool packed = w->packed != NULL;
    return (ts_rt_host_slot){
        .data = packed ? (const void *)w->packed : w->data,
        .bytes = packed ? ts_rp_matrix_bytes(w->type, w->n_in, w->n_out) : (uint64_t)w->row_bytes * (uint64_t)w->n_out,
        .wtype = w->type,
        .layout = packed ? TS_WL_PANELS : TS_WL_ROWS,
        /* panels written over the rows (a model read into memory): rows lost */
        .rows = packed && (const void *)w->packed == w->data ? NULL : w->data,
        .n_in = w->n_in,
        .n_out = w->n_out,
    };
}

/* An expert array: n_expert matrices back to back, in the file's rows or
 * (repacked at load, fast.c) each expert's panels. */
static ts_rt_host_slot host_experts(const ts_wmat *w, int32_t n_expert) {
    const bool packed = w->packed != NULL;
    const uint64_t eb = packed ? ts_rp_matrix_bytes(w->type, w->n_in, w->n_out)
                               : (uint64_t)w->row_bytes * (uint64_t)w->n_out;
    return (ts_rt_host_slot){.data = packed ? (const void *)w->packed : w->data,
                             .bytes = eb * (uint64_t)n_expert,
                             .wtype = w->type,
                             .layout = packed ? TS_WL_PANELS : TS_WL_ROWS,
                             .rows = w->data,
                             .n_in = w->n_in,
                             .n_out = w->n_out,
                             .n_expert = n_expert,
                             .expert_bytes = eb};
}

int ts_mdl_describe_weights(ts_mdl *m, ts_err *err) {
    const ts_hparams *hp = &m->hp;
    const int nl = hp->n_layer;
    const int64_t qd = (int64_t)hp->n_head * hp->head_dim, kd = (int64_t)hp->n_head_kv * hp->head_dim;
    const size_t fb = (ts_eng_rope_freq_bytes(m->n_rot) + 63) & ~(size_t)63;
    m->host_slots = calloc((size_t)nl * TS_LS_COUNT, sizeof *m->host_slots);
    m->rope_packed = aligned_alloc(64, 2 * fb);
    if (!m->host_slots || !m->rope_packed) return ts_err_set(err, "out of memory describing the layers");
    /* the two sets of rope angles (global, sliding window), packed once: every
     * layer of a set binds the same memory */
    uint8_t *packed[2] = {m->rope_packed, (uint8_t *)m->rope_packed + fb};
    ts_eng_rope_freq_pack(m->inv_freq_global, m->n_rot, packed[0]);
    ts_eng_rope_freq_pack(m->inv_freq_swa ? m->inv_freq_swa : m->inv_freq_global, m->n_rot, packed[1]);
    for (int l = 0; l < nl; l++) {
        const ts_layer *L = &m->layers[l];
        ts_rt_host_slot *S = m->host_slots + (size_t)l * TS_LS_COUNT;
#define VEC(slot, ptr, n) \
    if (ptr) S[slot] = (ts_rt_host_slot){.data = (ptr), .bytes = (uint64_t)(n) * sizeof(float)}
        VEC(TS_LS_ATTN_NORM, L->attn_norm, hp->n_embd);
        VEC(TS_LS_FFN_NORM, L->ffn_norm, hp->n_embd);
        VEC(TS_LS_BQ, L->bq, qd);
        VEC(TS_LS_BK, L->bk, kd);
        VEC(TS_LS_BV, L->bv, kd);
        VEC(TS_LS_Q_NORM, L->q_norm, L->n_q_norm);
        VEC(TS_LS_K_NORM, L->k_norm, L->n_k_norm);
        VEC(TS_LS_ATTN_POST_NORM, L->attn_post_norm, hp->n_embd);
        VEC(TS_LS_FFN_POST_NORM, L->ffn_post_norm, hp->n_embd);
#undef VEC
        if (L->inv_freq != m->inv_freq_global && L->inv_freq != m->inv_freq_swa)
            return ts_err_set(err, "layer %d: rope angles neither the global nor the sliding-window set", l);
        const int set = L->inv_freq != m->inv_freq_global;
        S[TS_LS_ROPE_FREQ] = (ts_rt_host_slot){.data = packed[set], .bytes = ts_eng_rope_freq_bytes(m->n_rot)};
        S[TS_LS_WQ] = host_matrix(&L->wq);
        S[TS_LS_WK] = host_matrix(&L->wk);
        S[TS_LS_WV] = host_matrix(&L->wv);
        S[TS_LS_WO] = host_matrix(&L->wo);
        if (L->w_router.data) {
            S[TS_LS_W_ROUTER] = host_matrix(&L->w_router);
            S[TS_LS_W_GATE_EXPS] = host_experts(&L->w_gate_exps, hp->n_expert);
            S[TS_LS_W_UP_EXPS] = host_experts(&L->w_up_exps, hp->n_expert);
            S[TS_LS_W_DOWN_EXPS] = host_experts(&L->w_down_exps, hp->n_expert);
        } else {
            S[TS_LS_W_GATE] = host_matrix(&L->w_gate);
            S[TS_LS_W_UP] = host_matrix(&L->w_up);
            S[TS_LS_W_DOWN] = host_matrix(&L->w_down);
        }
        ts_mdl_stream_describe(m, l, S); /* a layer beyond the memory budget: its matrices stream */
    }
    m->host_w = ts_rt_weights_new(NULL, nl, m->host_slots, err);
    return m->host_w ? ts_mdl_stream_attach(m, err) : -1;
}

void ts_mdl_drop_row_pages(const ts_mdl *m) {
    if (!m->host_slots) return;
    for (size_t i = 0; i < (size_t)m->hp.n_layer * TS_LS_COUNT; i++) {
        const ts_rt_host_slot *S = &m->host_slots[i];
        if (S->layout != TS_WL_PANELS || !S->rows || S->rows == S->data) continue;
        const uint64_t one = (uint64_t)S->n_out * ts_row_size(S->wtype, S->n_in);
        ts_gguf_drop_pages(S->rows, (size_t)(one * (uint64_t)(S->n_expert > 0 ? S->n_expert : 1)));
    }
}

ts_mdl_dev *ts_mdl_dev_acquire(const ts_mdl *m, const char *spec, int n_threads, ts_mdl_dev *peer, ts_err *err) {
    struct ts_mdl_devs *ds = m->devs;
    char key[sizeof ((ts_mdl_dev *)0)->key];

    if (!spec || strlen(spec) > 256) {
        ts_err_set(err, "device name missing or longer than 256 bytes");
        return NULL;
    }
    snprintf(key, sizeof key, "%s#%d%s", spec, n_threads, peer ? "+peer" : "");
    pthread_mutex_lock(&ds->mu);
    ts_mdl_dev *d = ds->list;
    while (d && strcmp(d->key, key)) d = d->next;
    if (d) {
        d->refs++;
        pthread_mutex_unlock(&ds->mu);
        return d;
    }
    d = calloc(1, sizeof *d);
    /* engines that take threads= get the state's count unless the name sets one */
    const ts_eng_open_params op = {.threads = n_threads};
    ts_engine *dev = d ? ts_eng_open_ex(spec, &op, err) : NULL;
    if (!d) ts_err_set(err, "out of memory");
    if (dev && !(d->w = ts_rt_weights_new(dev, m->hp.n_layer, m->host_slots, err))) ts_eng_close(dev);
    if (d && d->w && peer && ts_rt_weights_set_peer(d->w, peer->w, err)) {
        dev_free(d);
        d = NULL;
    }
    /* a model streamed from the file: the device's runners stream it too */
    if (d && d->w && ts_mdl_stream_attach_to(m, d->w, err)) {
        dev_free(d);
        d = NULL;
    }
    if (!d || !d->w) {
        free(d);
        pthread_mutex_unlock(&ds->mu);
        return NULL;
    }
    snprintf(d->key, sizeof d->key, "%s", key);
    d->refs = 1;
    if (peer) { /* its memory is mapped: held until this session closes */
        d->peer = peer;
        peer->refs++;
    }
    d->next = ds->list;
    ds->list = d;
    pthread_mutex_unlock(&ds->mu);
    return d;
}

void ts_mdl_dev_release(const ts_mdl *m, ts_mdl_dev *d) {
    if (!d) return;
    struct ts_mdl_devs *ds = m->devs;
    pthread_mutex_lock(&ds->mu);
    /* a session closing lets go of its peer (after it: the peer's memory is
     * mapped into it until then) */
    while (d && --d->refs == 0) {
        ts_mdl_dev **pp = &ds->list, *peer = d->peer;
        while (*pp && *pp != d) pp = &(*pp)->next;
        if (*pp) *pp = d->next;
        dev_free(d);
        d = peer;
    }
    pthread_mutex_unlock(&ds->mu);
}
