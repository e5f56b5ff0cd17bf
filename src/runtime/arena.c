/* arena.c - streamed layers through host slots filled by loader threads
 * (arena.h). */
#include "runtime/arena.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"

#define MAX_SLOTS 8

/* One matrix of one fill: jobs of a fill superseded by a later one of the
 * same slot (after an abort) are dropped by their generation. */
typedef struct job {
    int j, part;
    uint64_t gen;
} job;

typedef struct slot_state {
    int k;             /* the streamed layer the slot holds or receives (-1: nothing known) */
    uint64_t gen;      /* its fill's generation */
    int pending;       /* jobs of that fill not finished */
    bool failed, skipped;
    char msg[sizeof(((ts_err *)0)->msg)];
    int tag_k;         /* what a completed fill left in the slot (-1: nothing usable) */
    uint64_t tag_gen;
} slot_state;

struct ts_rt_arena {
    ts_rt_source src;
    int n_slots, n_stream, n_parts;
    int *order;                     /* [n_stream] */
    uint64_t *off, *bytes;          /* [n_stream][n_parts] */
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

static void sleep_us(uint32_t us) {
    struct timespec t = {.tv_sec = us / 1000000u, .tv_nsec = (long)(us % 1000000u) * 1000L};
    while (nanosleep(&t, &t) != 0) {
    }
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
        pthread_mutex_unlock(&a->mu);

        if (a->src.delay_us) sleep_us(a->src.delay_us);
        ts_err e = {0};
        uint64_t got = 0;
        int rc = 0;
        bool skip = false;
#ifdef TS_TEST_HOOKS
        skip = a->src.skip_fill && k == (a->n_stream > 1 ? 1 : 0);
#endif
        if (!skip) {
            const size_t pi = (size_t)k * (size_t)a->n_parts + (size_t)jb.part;
            rc = a->src.fill(a->src.user, scratch, a->order[k], jb.part, a->slot[jb.j] + a->off[pi], a->bytes[pi], &got,
                             &e);
        }

        pthread_mutex_lock(&a->mu);
        a->busy--;
        a->stats.read_bytes += got;
        if (jb.gen == S->gen) {
            if (rc && !S->failed) {
                S->failed = true;
                snprintf(S->msg, sizeof S->msg, "%s", e.msg[0] ? e.msg : "the source's fill failed");
            }
            S->skipped |= skip;
            if (--S->pending == 0) {
                if (S->failed) {
                    a->stats.failed++;
                } else if (!S->skipped) {
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

/* Queues slot j's fill with the k-th streamed layer (under mu). */
static void queue_fill(ts_rt_arena *a, int j, int k) {
    slot_state *S = &a->st[j];
    S->k = k;
    S->gen = ++a->gen;
    S->pending = 0;
    S->failed = S->skipped = false;
    S->msg[0] = 0;
    S->tag_k = -1;
    for (int p = 0; p < a->n_parts; p++) {
        if (!a->bytes[(size_t)k * (size_t)a->n_parts + (size_t)p]) continue;
        if (a->qn == a->qcap) { /* cannot happen (one fill per slot at a time); never a fill that skips a part */
            S->failed = true;
            snprintf(S->msg, sizeof S->msg, "arena: loader queue full");
            continue;
        }
        a->q[(a->qh + a->qn) % a->qcap] = (job){.j = j, .part = p, .gen = S->gen};
        a->qn++;
        S->pending++;
    }
    if (S->pending == 0 && !S->failed) S->tag_k = k, S->tag_gen = S->gen;
    pthread_cond_broadcast(&a->work);
}

ts_rt_arena *ts_rt_arena_new(const ts_rt_source *src, int n_slots, uint64_t slot_bytes, const int *order, int n_stream,
                             int n_parts, const uint64_t *parts_off, const uint64_t *parts_bytes, ts_err *err) {
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
    const size_t np = (size_t)n_stream * (size_t)n_parts;
    a->order = malloc((size_t)n_stream * sizeof *a->order);
    a->off = malloc(np * sizeof *a->off);
    a->bytes = malloc(np * sizeof *a->bytes);
    a->qcap = 2 * n_slots * n_parts + 1; /* a slot has at most one fill queued; twice that for slack */
    a->q = malloc((size_t)a->qcap * sizeof *a->q);
    a->thr = calloc((size_t)src->n_loaders, sizeof *a->thr);
    a->scratch = calloc((size_t)src->n_loaders, sizeof *a->scratch);
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->work, NULL);
    pthread_cond_init(&a->filled, NULL);
    if (!a->order || !a->off || !a->bytes || !a->q || !a->thr || !a->scratch) {
        ts_err_set(err, "out of memory");
        goto fail;
    }
    memcpy(a->order, order, (size_t)n_stream * sizeof *order);
    memcpy(a->off, parts_off, np * sizeof *a->off);
    memcpy(a->bytes, parts_bytes, np * sizeof *a->bytes);
    const uint64_t sb = (slot_bytes + 4095) & ~(uint64_t)4095;
    for (int j = 0; j < n_slots; j++) {
        a->st[j].k = a->st[j].tag_k = -1;
        if (!(a->slot[j] = aligned_alloc(4096, (size_t)(sb ? sb : 4096)))) {
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
    for (int j = 0; j < MAX_SLOTS; j++) free(a->slot[j]);
    for (int i = 0; a->scratch && i < a->src.n_loaders; i++) free(a->scratch[i]);
    free(a->scratch);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->work);
    pthread_cond_destroy(&a->filled);
    free(a->order);
    free(a->off);
    free(a->bytes);
    free(a->q);
    free(a->thr);
    free(a);
}

uint8_t *ts_rt_arena_slot(ts_rt_arena *a, int j) { return a && j >= 0 && j < a->n_slots ? a->slot[j] : NULL; }
int ts_rt_arena_n_slots(const ts_rt_arena *a) { return a ? a->n_slots : 0; }

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

int ts_rt_arena_wait(ts_rt_arena *a, int k, ts_err *err) {
    if (k < 0 || k >= a->n_stream) return ts_err_set(err, "arena: streamed layer %d of %d", k, a->n_stream);
    const int j = k % a->n_slots;
    slot_state *S = &a->st[j];
    const uint64_t t0 = ts_now_ns();
    pthread_mutex_lock(&a->mu);
    while (S->k == k && S->pending > 0) pthread_cond_wait(&a->filled, &a->mu);
    a->stats.stall_ns += ts_now_ns() - t0;
    int rc = 0;
    if (S->k != k) {
        rc = ts_err_set(err, "layer %d: weight slot %d was never given its fill (it is %s); refusing to compute on its bytes",
                        a->order[k], j, S->k < 0 ? "empty" : "receiving another layer");
    } else if (S->failed) {
        rc = ts_err_set(err, "layer %d: streaming its weights failed: %s", a->order[k], S->msg);
    } else if (S->tag_k != k || S->tag_gen != S->gen) {
        rc = ts_err_set(err,
                        "layer %d: weight slot %d was reported filled but does not hold this layer's fill (it holds "
                        "%s); refusing to compute on stale bytes",
                        a->order[k], j, S->tag_k < 0 ? "nothing usable" : "an older fill");
    }
    pthread_mutex_unlock(&a->mu);
    return rc;
}

void ts_rt_arena_done(ts_rt_arena *a, int k) {
    const int j = k % a->n_slots;
    const int next = k + a->n_slots < a->n_stream ? k + a->n_slots : j; /* past the end: the next run's first */
    pthread_mutex_lock(&a->mu);
    const slot_state *S = &a->st[j];
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
    pthread_mutex_unlock(&a->mu);
}

void ts_rt_arena_get_stats(const ts_rt_arena *a, ts_rt_arena_stats *out) {
    memset(out, 0, sizeof *out);
    if (!a) return;
    pthread_mutex_lock((pthread_mutex_t *)&a->mu);
    *out = a->stats;
    pthread_mutex_unlock((pthread_mutex_t *)&a->mu);
}
