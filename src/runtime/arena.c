/* arena.c - streamed layers through host slots filled by loader threads,
 * with the routed experts read on demand (arena.h). */
#include "runtime/arena.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"

#define MAX_SLOTS 8

enum { EX_ABSENT = 0, EX_QUEUED, EX_PRESENT };

/* A dense part (part >= 0) or an expert of every expert array (part -1,
 * expert e) of one fill: jobs of a fill superseded by a later one of the
 * same slot are dropped by their generation. */
typedef struct job {
    int j, part, expert;
    uint64_t gen;
} job;

typedef struct slot_state {
    int k;        /* the streamed layer the slot holds or receives (-1: nothing known) */
    uint64_t gen; /* its fill's generation */
    int pending;  /* dense jobs of that fill not finished */
    int busy;     /* jobs of the slot in a loader's hands (any generation) */
    bool failed, skipped;
    bool predicted; /* the fill read ahead only the predicted experts */
    char msg[sizeof(((ts_err *)0)->msg)];
    int tag_k; /* what a completed dense fill left in the slot (-1: nothing usable) */
    uint64_t tag_gen;
    uint8_t *ex; /* [max_exp]: EX_* of each expert of this fill */
} slot_state;

struct ts_rt_arena {
    ts_rt_source src;
    int n_slots, n_stream, n_parts, max_exp;
    int *order;                /* [n_stream] */
    uint64_t *off, *bytes;     /* [n_stream][n_parts] */
    int32_t *nexp;             /* [n_stream][n_parts] */
    int *layer_exp;            /* [n_stream]: the layer's expert count (0: dense) */
    uint8_t *pred;             /* [n_stream][max_exp]: routed at the layer's last routing node */
    bool *pred_valid, *whole_next; /* [n_stream] */
    uint8_t *need;             /* [max_exp] route()'s scratch */
    uint8_t *slot[MAX_SLOTS];
    uint64_t slot_bytes;
    pthread_t *thr;
    void **scratch; /* [n_loaders] */
    int n_thr;
    pthread_mutex_t mu;
    pthread_cond_t work, filled;
    job *q; /* ring of queued jobs */
    int qh, qn, qcap;
    int busy; /* jobs being worked on */
    bool quit;
    slot_state st[MAX_SLOTS];
    uint64_t gen;
    ts_rt_arena_stats stats;
};

typedef struct loader_arg {
    ts_rt_arena *a;
    void *scratch;
} loader_arg;

/* Runs one job (outside the lock): its part, or its expert's rows of every
 * expert array. */
static int run_job(ts_rt_arena *a, void *scratch, const job *jb, int k, uint64_t *got, ts_err *e) {
    const size_t base = (size_t)k * (size_t)a->n_parts;
    if (jb->part >= 0)
        return a->src.fill(a->src.user, scratch, a->order[k], jb->part, -1, a->slot[jb->j] + a->off[base + jb->part],
                           a->bytes[base + jb->part], got, e);
    for (int p = 0; p < a->n_parts; p++) {
        const int32_t n = a->nexp[base + p];
        if (!n) continue;
        const uint64_t eb = a->bytes[base + p] / (uint64_t)n;
        if (a->src.fill(a->src.user, scratch, a->order[k], p, jb->expert,
                        a->slot[jb->j] + a->off[base + p] + (uint64_t)jb->expert * eb, eb, got, e))
            return -1;
    }
    return 0;
}

static void *loader_main(void *p) {
    loader_arg *la = p;
    ts_rt_arena *a = la->a;
    void *scratch = la->scratch;
    free(la);
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (!a->quit && a->qn == 0) pthread_cond_wait(&a->work, &a->mu);
        if (a->quit) break;
        const job jb = a->q[a->qh];
        a->qh = (a->qh + 1) % a->qcap;
        a->qn--;
        slot_state *S = &a->st[jb.j];
        if (jb.gen != S->gen) continue; /* superseded */
        const int k = S->k;
        a->busy++;
        S->busy++;
        pthread_mutex_unlock(&a->mu);

        ts_sleep_us(a->src.delay_us);
        ts_err e = {0};
        uint64_t got = 0;
        int rc = 0;
        bool skip = false;
#ifdef TS_TEST_HOOKS
        skip = a->src.skip_fill && jb.part >= 0 && k == (a->n_stream > 1 ? 1 : 0);
#endif
        if (!skip) rc = run_job(a, scratch, &jb, k, &got, &e);

        pthread_mutex_lock(&a->mu);
        a->busy--;
        S->busy--;
        a->stats.read_bytes += got;
        if (jb.gen == S->gen) {
            if (rc && !S->failed) {
                S->failed = true;
                snprintf(S->msg, sizeof S->msg, "%s", e.msg[0] ? e.msg : "the source's fill failed");
                a->stats.failed++;
            }
            if (jb.part < 0) {
                if (!rc) S->ex[jb.expert] = EX_PRESENT;
            } else {
                S->skipped |= skip;
                if (--S->pending == 0 && !S->failed && !S->skipped) {
                    S->tag_k = k, S->tag_gen = S->gen;
                    a->stats.fills++;
                }
            }
        }
        pthread_cond_broadcast(&a->filled);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

/* Queues a job (under mu): at the back, or at the front (demand). */
static bool push(ts_rt_arena *a, job jb, bool front) {
    if (a->qn == a->qcap) return false; /* cannot happen: at most one fill per slot is live */
    if (front) {
        a->qh = (a->qh + a->qcap - 1) % a->qcap;
        a->q[a->qh] = jb;
    } else {
        a->q[(a->qh + a->qn) % a->qcap] = jb;
    }
    a->qn++;
    return true;
}

static void queue_expert(ts_rt_arena *a, int j, int e, bool front) {
    slot_state *S = &a->st[j];
    if (push(a, (job){.j = j, .part = -1, .expert = e, .gen = S->gen}, front)) {
        S->ex[e] = EX_QUEUED;
    } else if (!S->failed) {
        S->failed = true;
        snprintf(S->msg, sizeof S->msg, "arena: loader queue full");
    }
}

/* Queues slot j's fill with the k-th streamed layer (under mu): its dense
 * parts, and the experts to read ahead. Waits first for the slot's jobs in
 * a loader's hands: they still write the slot's previous layer. */
static void queue_fill(ts_rt_arena *a, int j, int k) {
    slot_state *S = &a->st[j];
    S->gen = ++a->gen; /* the previous fill's queued jobs are dropped */
    if (S->busy > 0) {
        const uint64_t t0 = ts_now_ns();
        while (S->busy > 0) pthread_cond_wait(&a->filled, &a->mu);
        a->stats.stall_ns += ts_now_ns() - t0;
    }
    S->k = k;
    S->pending = 0;
    S->failed = S->skipped = S->predicted = false;
    S->msg[0] = 0;
    S->tag_k = -1;
    if (a->max_exp) memset(S->ex, EX_ABSENT, (size_t)a->max_exp);
    const size_t base = (size_t)k * (size_t)a->n_parts;
    for (int p = 0; p < a->n_parts; p++) {
        if (!a->bytes[base + p] || a->nexp[base + p]) continue;
        if (push(a, (job){.j = j, .part = p, .expert = -1, .gen = S->gen}, false)) {
            S->pending++;
        } else if (!S->failed) {
            S->failed = true;
            snprintf(S->msg, sizeof S->msg, "arena: loader queue full");
        }
    }
    if (S->pending == 0 && !S->failed) S->tag_k = k, S->tag_gen = S->gen;
    const int ne = a->layer_exp[k];
    if (ne) {
        const bool whole = !a->src.routed || !a->pred_valid[k] || a->whole_next[k];
        a->whole_next[k] = false;
        S->predicted = !whole;
        a->stats.whole += whole;
        for (int e = 0; e < ne; e++)
            if (whole || a->pred[(size_t)k * (size_t)a->max_exp + (size_t)e]) {
                queue_expert(a, j, e, false);
                a->stats.ahead++;
            }
    }
    pthread_cond_broadcast(&a->work);
}

ts_rt_arena *ts_rt_arena_new(const ts_rt_source *src, int n_slots, uint64_t slot_bytes, const int *order, int n_stream,
                             int n_parts, const uint64_t *parts_off, const uint64_t *parts_bytes,
                             const int32_t *parts_nexp, ts_err *err) {
    if (!src || !src->fill || src->n_loaders < 1 || src->n_loaders > 64 || n_slots < 1 || n_slots > MAX_SLOTS ||
        n_stream < 1 || n_parts < 1 || !order) {
        ts_err_set(err, "arena: bad parameters (%d slots, %d streamed layers, %d loaders)", n_slots, n_stream,
                   src ? src->n_loaders : 0);
        return NULL;
    }
    ts_rt_arena *a = calloc(1, sizeof *a);
    if (!a) {
        ts_err_set(err, "out of memory");
        return NULL;
    }
    a->src = *src;
    a->n_slots = n_slots, a->n_stream = n_stream, a->n_parts = n_parts;
    a->slot_bytes = slot_bytes;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->work, NULL);
    pthread_cond_init(&a->filled, NULL);
    const size_t np = (size_t)n_stream * (size_t)n_parts;
    a->order = malloc((size_t)n_stream * sizeof *a->order);
    a->off = malloc(np * sizeof *a->off);
    a->bytes = malloc(np * sizeof *a->bytes);
    a->nexp = calloc(np, sizeof *a->nexp);
    a->layer_exp = calloc((size_t)n_stream, sizeof *a->layer_exp);
    a->pred_valid = calloc((size_t)n_stream, sizeof *a->pred_valid);
    a->whole_next = calloc((size_t)n_stream, sizeof *a->whole_next);
    a->thr = calloc((size_t)src->n_loaders, sizeof *a->thr);
    a->scratch = calloc((size_t)src->n_loaders, sizeof *a->scratch);
    if (!a->order || !a->off || !a->bytes || !a->nexp || !a->layer_exp || !a->pred_valid || !a->whole_next ||
        !a->thr || !a->scratch) {
        ts_err_set(err, "out of memory");
        goto fail;
    }
    memcpy(a->order, order, (size_t)n_stream * sizeof *order);
    memcpy(a->off, parts_off, np * sizeof *a->off);
    memcpy(a->bytes, parts_bytes, np * sizeof *a->bytes);
    if (parts_nexp) memcpy(a->nexp, parts_nexp, np * sizeof *a->nexp);
    for (int k = 0; k < n_stream; k++)
        for (int p = 0; p < n_parts; p++) {
            const int32_t n = a->nexp[(size_t)k * (size_t)n_parts + (size_t)p];
            if (n < 0 || (n && a->layer_exp[k] && n != a->layer_exp[k])) {
                ts_err_set(err, "arena: layer %d: expert arrays of %d and %d experts", order[k], (int)n,
                           a->layer_exp[k]);
                goto fail;
            }
            if (n) a->layer_exp[k] = n;
            if (n > a->max_exp) a->max_exp = n;
        }
    /* a slot has at most one live fill: its dense parts and its experts (twice that for slack) */
    a->qcap = 2 * n_slots * (n_parts + a->max_exp) + 1;
    a->q = malloc((size_t)a->qcap * sizeof *a->q);
    if (a->max_exp) {
        a->pred = calloc((size_t)n_stream * (size_t)a->max_exp, 1);
        a->need = calloc((size_t)a->max_exp, 1);
    }
    if (!a->q || (a->max_exp && (!a->pred || !a->need))) {
        ts_err_set(err, "out of memory");
        goto fail;
    }
    const uint64_t sb = (slot_bytes + 4095) & ~(uint64_t)4095;
    for (int j = 0; j < n_slots; j++) {
        a->st[j].k = a->st[j].tag_k = -1;
        if (!(a->slot[j] = aligned_alloc(4096, (size_t)(sb ? sb : 4096))) ||
            (a->max_exp && !(a->st[j].ex = calloc((size_t)a->max_exp, 1)))) {
            ts_err_set(err, "out of memory: weight slot %d of %.1f MiB", j, (double)slot_bytes / 1048576.0);
            goto fail;
        }
    }
    for (int i = 0; i < src->n_loaders; i++) {
        const uint64_t scb = (src->scratch_bytes + 4095) & ~(uint64_t)4095;
        loader_arg *la = malloc(sizeof *la);
        if (!la || (scb && !(a->scratch[i] = aligned_alloc(4096, (size_t)scb)))) {
            free(la);
            ts_err_set(err, "out of memory: loader %d's scratch of %.1f MiB", i, (double)scb / 1048576.0);
            goto fail;
        }
        *la = (loader_arg){a, a->scratch[i]};
        if (pthread_create(&a->thr[i], NULL, loader_main, la)) {
            free(la);
            ts_err_set(err, "cannot start loader thread %d", i);
            goto fail;
        }
        a->n_thr++;
    }
    a->stats.slot_bytes = slot_bytes;
    a->stats.n_slots = n_slots, a->stats.n_loaders = src->n_loaders, a->stats.n_stream = n_stream;
    return a;
fail:
    ts_rt_arena_free(a);
    return NULL;
}

void ts_rt_arena_free(ts_rt_arena *a) {
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    a->quit = true;
    pthread_cond_broadcast(&a->work);
    pthread_mutex_unlock(&a->mu);
    for (int i = 0; i < a->n_thr; i++) pthread_join(a->thr[i], NULL);
    for (int j = 0; j < MAX_SLOTS; j++) {
        free(a->slot[j]);
        free(a->st[j].ex);
    }
    for (int i = 0; a->scratch && i < a->src.n_loaders; i++) free(a->scratch[i]);
    free(a->scratch);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->work);
    pthread_cond_destroy(&a->filled);
    free(a->order);
    free(a->off);
    free(a->bytes);
    free(a->nexp);
    free(a->layer_exp);
    free(a->pred);
    free(a->pred_valid);
    free(a->whole_next);
    free(a->need);
    free(a->q);
    free(a->thr);
    free(a);
}

uint8_t *ts_rt_arena_slot(ts_rt_arena *a, int j) { return a && j >= 0 && j < a->n_slots ? a->slot[j] : NULL; }
int ts_rt_arena_n_slots(const ts_rt_arena *a) { return a ? a->n_slots : 0; }
bool ts_rt_arena_has_experts(const ts_rt_arena *a, int k) {
    return a && k >= 0 && k < a->n_stream && a->layer_exp[k] > 0;
}

int ts_rt_arena_begin(ts_rt_arena *a, ts_err *err) {
    (void)err;
    pthread_mutex_lock(&a->mu);
    for (int j = 0; j < a->n_slots && j < a->n_stream; j++) {
        const slot_state *S = &a->st[j];
        /* held, or on its way (queued when the slot's last layer of the previous run was done) */
        if (S->k == j && !S->failed && (S->pending > 0 || (S->tag_k == j && S->tag_gen == S->gen))) continue;
        queue_fill(a, j, j);
    }
    pthread_mutex_unlock(&a->mu);
    return 0;
}

/* The slot of the k-th streamed layer, checked: 0, or -1 with err (under mu). */
static int slot_check(ts_rt_arena *a, int k, ts_err *err) {
    const int j = k % a->n_slots;
    const slot_state *S = &a->st[j];
    if (S->k != k)
        return ts_err_set(err, "layer %d: weight slot %d was never given its fill (it is %s); refusing to compute on its bytes",
                          a->order[k], j, S->k < 0 ? "empty" : "receiving another layer");
    if (S->failed) return ts_err_set(err, "layer %d: streaming its weights failed: %s", a->order[k], S->msg);
    return 0;
}

int ts_rt_arena_wait(ts_rt_arena *a, int k, ts_err *err) {
    if (k < 0 || k >= a->n_stream) return ts_err_set(err, "arena: streamed layer %d of %d", k, a->n_stream);
    slot_state *S = &a->st[k % a->n_slots];
    const uint64_t t0 = ts_now_ns();
    pthread_mutex_lock(&a->mu);
    while (S->k == k && S->pending > 0 && !S->failed) pthread_cond_wait(&a->filled, &a->mu);
    a->stats.stall_ns += ts_now_ns() - t0;
    int rc = slot_check(a, k, err);
    if (!rc && (S->tag_k != k || S->tag_gen != S->gen))
        rc = ts_err_set(err,
                        "layer %d: weight slot %d was reported filled but does not hold this layer's fill (it holds "
                        "%s); refusing to compute on stale bytes",
                        a->order[k], k % a->n_slots, S->tag_k < 0 ? "nothing usable" : "an older fill");
    pthread_mutex_unlock(&a->mu);
    return rc;
}

int ts_rt_arena_route(ts_rt_arena *a, int k, const int32_t *ids, int64_t n_ids, ts_err *err) {
    if (!ts_rt_arena_has_experts(a, k)) return 0;
    const int j = k % a->n_slots, ne = a->layer_exp[k];
    slot_state *S = &a->st[j];
    memset(a->need, 0, (size_t)ne);
    int n_need = 0;
    for (int64_t i = 0; i < n_ids; i++) {
        if (ids[i] < 0 || ids[i] >= ne)
            return ts_err_set(err, "layer %d: the routing node chose expert %d, outside [0, %d)", a->order[k],
                              (int)ids[i], ne);
        n_need += !a->need[ids[i]];
        a->need[ids[i]] = 1;
    }
    const uint64_t t0 = ts_now_ns();
    pthread_mutex_lock(&a->mu);
    int rc = slot_check(a, k, err);
    if (rc) goto out;
    a->stats.routed += (uint64_t)n_need;
    if (S->predicted) {
        a->stats.predict_n += (uint64_t)n_need;
        for (int e = 0; e < ne; e++) a->stats.predicted += a->need[e] && S->ex[e] != EX_ABSENT;
    }
    bool skip = false;
#ifdef TS_TEST_HOOKS
    skip = a->src.skip_demand;
#endif
    if (skip) {
        /* BROKEN ON PURPOSE: only what was queued ahead, never the rest */
        for (;;) {
            bool queued = false;
            for (int e = 0; e < ne && !queued; e++) queued = S->ex[e] == EX_QUEUED;
            if (!queued || S->failed) break;
            pthread_cond_wait(&a->filled, &a->mu);
        }
    } else {
        bool demand = false;
        for (int e = 0; e < ne; e++)
            if (a->need[e] && S->ex[e] == EX_ABSENT) {
                queue_expert(a, j, e, true);
                a->stats.demand++;
                demand = true;
            }
        if (demand) pthread_cond_broadcast(&a->work);
        for (;;) {
            bool missing = false;
            for (int e = 0; e < ne && !missing; e++) missing = a->need[e] && S->ex[e] != EX_PRESENT;
            if (!missing || S->failed) break;
            pthread_cond_wait(&a->filled, &a->mu);
        }
        if ((rc = slot_check(a, k, err))) goto out;
        for (int e = 0; e < ne; e++)
            if (a->need[e] && S->ex[e] != EX_PRESENT) {
                rc = ts_err_set(err, "layer %d: routed expert %d is not in weight slot %d; refusing to compute on it",
                                a->order[k], e, j);
                goto out;
            }
    }
    /* the prediction for the layer's next fill */
    memcpy(a->pred + (size_t)k * (size_t)a->max_exp, a->need, (size_t)ne);
    a->pred_valid[k] = true;
    /* routed to most of its experts: the next streamed layer is read whole
     * (at once, when its fill is already queued by prediction) */
    if (n_need > a->src.full * (float)ne && k + 1 < a->n_stream && a->layer_exp[k + 1]) {
        slot_state *N = &a->st[(k + 1) % a->n_slots];
        if (N->k == k + 1 && N->predicted && !N->failed) {
            N->predicted = false;
            a->stats.whole++;
            for (int e = 0; e < a->layer_exp[k + 1]; e++)
                if (N->ex[e] == EX_ABSENT) {
                    queue_expert(a, (k + 1) % a->n_slots, e, false);
                    a->stats.ahead++;
                }
            pthread_cond_broadcast(&a->work);
        } else {
            a->whole_next[k + 1] = true;
        }
    }
out:
    a->stats.stall_ns += ts_now_ns() - t0;
    pthread_mutex_unlock(&a->mu);
    return rc;
}

void ts_rt_arena_done(ts_rt_arena *a, int k) {
    const int j = k % a->n_slots;
    const int next = k + a->n_slots < a->n_stream ? k + a->n_slots : j; /* past the end: the next run's first */
    pthread_mutex_lock(&a->mu);
    const slot_state *S = &a->st[j];
    /* a slot that keeps its only layer keeps its bytes (a routing node asks for the experts it lacks) */
    if (!(next == k && S->tag_k == k && S->tag_gen == S->gen)) queue_fill(a, j, next);
    pthread_mutex_unlock(&a->mu);
}

void ts_rt_arena_abort(ts_rt_arena *a) {
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    a->qn = 0;
    while (a->busy > 0) pthread_cond_wait(&a->filled, &a->mu);
    for (int j = 0; j < a->n_slots; j++) {
        a->st[j].k = a->st[j].tag_k = -1;
        a->st[j].pending = 0;
        a->st[j].gen = ++a->gen; /* a job still in a loader's hands is dropped */
    }
    memset(a->pred_valid, 0, (size_t)a->n_stream * sizeof *a->pred_valid);
    memset(a->whole_next, 0, (size_t)a->n_stream * sizeof *a->whole_next);
    pthread_mutex_unlock(&a->mu);
}

void ts_rt_arena_get_stats(const ts_rt_arena *a, ts_rt_arena_stats *out) {
    memset(out, 0, sizeof *out);
    if (!a) return;
    pthread_mutex_lock((pthread_mutex_t *)&a->mu);
    *out = a->stats;
    pthread_mutex_unlock((pthread_mutex_t *)&a->mu);
}
