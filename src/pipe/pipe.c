/* pipe.c - the two-stage stream pipeline (pipe.h): the cut's arithmetic,
 * the rate measurements and the stream itself, one thread per stage. */
#include "pipe/pipe.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"

/* ---- the cut ---- */

double ts_pipe_period(const ts_pipe_rates *r, int n_blocks, int k) {
    const double a = k * r->ta, b = (n_blocks - k) * r->tb + r->tv;
    return a > b ? a : b;
}

double ts_pipe_latency(const ts_pipe_rates *r, int n_blocks, int k) {
    return k * r->ta + (n_blocks - k) * r->tb + r->tv;
}

double ts_pipe_crossing(const ts_pipe_rates *r, int n_blocks) {
    const double d = r->ta + r->tb;
    return d > 0 ? (n_blocks * r->tb + r->tv) / d : 0.0;
}

int ts_pipe_best_cut(const ts_pipe_rates *r, int n_blocks, int step) {
    if (step < 1)
        step = 1;
    const double x = ts_pipe_crossing(r, n_blocks);
    /* the multiples of step on either side of the crossing (and B, which
     * need not be one) */
    int lo = (int)floor(x / step) * step, hi = lo + step;
    lo = lo < 0 ? 0 : lo > n_blocks ? n_blocks : lo;
    hi = hi < 0 ? 0 : hi > n_blocks ? n_blocks : hi;
    return ts_pipe_period(r, n_blocks, hi) < ts_pipe_period(r, n_blocks, lo) ? hi : lo;
}

int ts_pipe_slo_cut(const ts_pipe_rates *r, int n_blocks, double slo_s) {
    int best = -1;
    for (int k = 0; k <= n_blocks; k++)
        if (ts_pipe_latency(r, n_blocks, k) <= slo_s &&
            (best < 0 || ts_pipe_period(r, n_blocks, k) < ts_pipe_period(r, n_blocks, best)))
            best = k;
    return best;
}

/* ---- shared by both stages ---- */

typedef struct shared {
    const ts_pipe_work *w;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool failed;
    ts_err err; /* the first failure */
} shared;

static void fail(shared *s, const ts_err *e) {
    pthread_mutex_lock(&s->mu);
    if (!s->failed) {
        s->failed = true;
        s->err = *e;
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static double secs(uint64_t ns) { return (double)ns * 1e-9; }

static void sleep_until(uint64_t t_ns) {
    const uint64_t now = ts_now_ns();
    if (t_ns <= now)
        return;
    const uint64_t d = t_ns - now;
    struct timespec ts = {.tv_sec = (time_t)(d / 1000000000u), .tv_nsec = (long)(d % 1000000000u)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* fa(a) on this thread while fb(b) runs on another; -1 (nothing run)
 * when the thread does not start */
static int run_pair(void *(*fa)(void *), void *a, void *(*fb)(void *), void *b) {
    pthread_t th;
    if (pthread_create(&th, NULL, fb, b))
        return -1;
    fa(a);
    pthread_join(th, NULL);
    return 0;
}

/* ---- measuring the rates ---- */

typedef struct co_stage {
    shared *s;
    int stage, slot, req, probe;
    bool tail_only; /* stage B: one tail, timed (A keeps busy meanwhile) */
    int done;       /* blocks (or tails) finished; under s->mu */
    const struct co_stage *other;
    uint64_t ns; /* the first probe blocks' (or the tail's) time */
} co_stage;

/* what a co-running stage times: one tail, or probe blocks */
static int co_target(const co_stage *c) { return c->tail_only ? 1 : c->probe; }

static void *corun_main(void *arg) {
    co_stage *c = arg;
    shared *s = c->s;
    const ts_pipe_work *w = s->w;
    const co_stage *other = c->other;
    for (int n = 0;; n++) {
        pthread_mutex_lock(&s->mu);
        const bool stop = s->failed || (n >= co_target(c) && other->done >= co_target(other));
        pthread_mutex_unlock(&s->mu);
        if (stop)
            break;
        ts_err e = {{0}};
        const uint64_t t0 = ts_now_ns();
        int rc;
        if (c->tail_only) {
            rc = w->tail ? w->tail(w->ctx, c->stage, c->slot, c->req, &e) : 0;
        } else {
            const int b = n % w->n_blocks;
            rc = w->blocks(w->ctx, c->stage, c->slot, c->req, b, b + 1, &e);
        }
        if (rc) {
            fail(s, &e);
            break;
        }
        pthread_mutex_lock(&s->mu);
        if (n < co_target(c))
            c->ns += ts_now_ns() - t0;
        c->done = n + 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
    return NULL;
}

/* both stages at once: A on blocks, B on blocks (tail_b false) or one tail */
static int corun_pair(shared *s, int probe, bool tail_b, uint64_t *ns_a, uint64_t *ns_b) {
    co_stage a = {.s = s, .stage = 0, .slot = 0, .req = -1, .probe = probe};
    co_stage b = {.s = s, .stage = 1, .slot = 1, .req = -2, .probe = probe, .tail_only = tail_b};
    a.other = &b, b.other = &a;
    if (run_pair(corun_main, &a, corun_main, &b)) {
        ts_err e = {{0}};
        ts_err_set(&e, "pipe: cannot start a thread");
        fail(s, &e);
        return -1;
    }
    *ns_a = a.ns, *ns_b = b.ns;
    return s->failed ? -1 : 0;
}

static int check_work(const ts_pipe_work *w, ts_err *err) {
    if (!w || !w->blocks || w->n_blocks < 1 || w->step_blocks < 1 || w->n_slots < 2)
        return ts_err_set(err, "pipe: the work needs blocks(), B >= 1, a step of >= 1 blocks and >= 2 slots");
    return 0;
}

int ts_pipe_measure(const ts_pipe_work *w, int probe, ts_pipe_rates *solo, ts_pipe_rates *corun, ts_err *err) {
    if (check_work(w, err))
        return -1;
    if (probe < 1 || probe > w->n_blocks)
        return ts_err_set(err, "pipe: %d probe blocks (1 .. %d)", probe, w->n_blocks);
    /* solo: A alone, B alone, the tail alone */
    uint64_t t0 = ts_now_ns();
    if (w->blocks(w->ctx, 0, 0, -1, 0, probe, err))
        return -1;
    uint64_t t1 = ts_now_ns();
    if (w->blocks(w->ctx, 1, 1, -2, 0, probe, err))
        return -1;
    uint64_t t2 = ts_now_ns();
    if (w->tail && w->tail(w->ctx, 1, 1, -2, err))
        return -1;
    uint64_t t3 = ts_now_ns();
    *solo = (ts_pipe_rates){.ta = secs(t1 - t0) / probe, .tb = secs(t2 - t1) / probe, .tv = secs(t3 - t2)};
    /* co-run: blocks against blocks, then the tail against blocks */
    shared s = {.w = w};
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    uint64_t na = 0, nb = 0, na2 = 0, nv = 0;
    int rc = corun_pair(&s, probe, false, &na, &nb);
    if (!rc && w->tail)
        rc = corun_pair(&s, probe, true, &na2, &nv);
    pthread_cond_destroy(&s.cv);
    pthread_mutex_destroy(&s.mu);
    if (rc) {
        *err = s.err;
        return ts_err_prefix(err, "pipe: measuring the co-run rates");
    }
    *corun = (ts_pipe_rates){.ta = secs(na) / probe, .tb = secs(nb) / probe, .tv = secs(nv)};
    return 0;
}

/* ---- the stream ---- */

typedef struct stream {
    shared s;
    int cut, n_req;
    const ts_pipe_rates *pace; /* NULL: admit at once */
    uint64_t t0;
    uint64_t *start, *done;        /* [n_req] times */
    int n_handed, n_taken, n_done; /* requests handed to B, taken by B, done */
    uint64_t b_start_prev;         /* when B took the last request (pace) */
    uint64_t busy[2], tail_ns, handoff_ns;
} stream;

static void *stage_b(void *arg) {
    stream *st = arg;
    shared *s = &st->s;
    const ts_pipe_work *w = s->w;
    const int B = w->n_blocks;
    for (int i = 0; i < st->n_req; i++) {
        pthread_mutex_lock(&s->mu);
        while (!s->failed && st->n_handed <= i)
            pthread_cond_wait(&s->cv, &s->mu);
        const bool stop = s->failed;
        st->b_start_prev = ts_now_ns();
        st->n_taken = i + 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        if (stop)
            return NULL;
        const int slot = i % w->n_slots;
        ts_err e = {{0}};
        const uint64_t t0 = ts_now_ns();
        if (st->cut == 0)
            st->start[i] = t0;
        if (st->cut < B && w->blocks(w->ctx, 1, slot, i, st->cut, B, &e)) {
            fail(s, &e);
            return NULL;
        }
        const uint64_t t1 = ts_now_ns();
        if ((w->tail && w->tail(w->ctx, 1, slot, i, &e)) || (w->done && w->done(w->ctx, slot, i, &e))) {
            fail(s, &e);
            return NULL;
        }
        const uint64_t t2 = ts_now_ns();
        pthread_mutex_lock(&s->mu);
        st->busy[1] += t2 - t0;
        st->tail_ns += t2 - t1;
        st->done[i] = t2;
        st->n_done = i + 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
    return NULL;
}

static void *stage_a(void *arg) {
    stream *st = arg;
    shared *s = &st->s;
    const ts_pipe_work *w = s->w;
    const int B = w->n_blocks, cut = st->cut;
    for (int i = 0; i < st->n_req; i++) {
        const int slot = i % w->n_slots;
        pthread_mutex_lock(&s->mu);
        while (!s->failed && st->n_done < i - w->n_slots + 1) /* the slot's last request is done */
            pthread_cond_wait(&s->cv, &s->mu);
        /* pace: the previous request on B first (then this one's hand-off
         * is timed to meet B free) */
        while (!s->failed && st->pace && st->n_taken < i)
            pthread_cond_wait(&s->cv, &s->mu);
        const bool stop = s->failed;
        const uint64_t b_prev = st->b_start_prev;
        pthread_mutex_unlock(&s->mu);
        if (stop)
            break;
        if (st->pace && i > 0) {
            /* request i - 1 reached B at b_prev and leaves it after its
             * suffix and tail; this one's prefix should end then */
            const double stage_b_s = (B - cut) * st->pace->tb + st->pace->tv, stage_a_s = cut * st->pace->ta;
            if (stage_b_s > stage_a_s)
                sleep_until(b_prev + (uint64_t)((stage_b_s - stage_a_s) * 1e9));
        }
        ts_err e = {{0}};
        const uint64_t t0 = ts_now_ns();
        if (cut > 0) /* else B starts it */
            st->start[i] = t0;
        if (cut > 0 && w->blocks(w->ctx, 0, slot, i, 0, cut, &e)) {
            fail(s, &e);
            break;
        }
        const uint64_t t1 = ts_now_ns();
        if (cut > 0 && w->handoff && w->handoff(w->ctx, slot, cut, &e)) {
            fail(s, &e);
            break;
        }
        const uint64_t t2 = ts_now_ns();
        pthread_mutex_lock(&s->mu);
        st->busy[0] += t2 - t0;
        st->handoff_ns += t2 - t1;
        st->n_handed = i + 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
    return NULL;
}

static int cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* period, latencies, SLO count from the start and completion times (iv:
 * n scratch values); the stage figures are the caller's */
static void figures(uint64_t t0, const uint64_t *start, const uint64_t *done, int n, double slo_s, uint64_t *iv,
                    ts_pipe_result *res, double *done_s) {
    ts_pipe_result r = {.n_req = n, .cut = -1};
    uint64_t last = done[0];
    for (int i = 1; i < n; i++) last = done[i] > last ? done[i] : last;
    r.total_s = secs(last - t0);
    /* completions in time order (parallel stages finish out of order) */
    memcpy(iv, done, (size_t)n * sizeof *iv);
    qsort(iv, (size_t)n, sizeof *iv, cmp_u64);
    const int m = n - 1; /* intervals between completions */
    for (int i = 0; i < m; i++) iv[i] = iv[i + 1] - iv[i];
    qsort(iv, (size_t)m, sizeof *iv, cmp_u64);
    r.period_s = m == 0 ? r.total_s : m % 2 ? secs(iv[m / 2]) : 0.5 * (secs(iv[m / 2 - 1]) + secs(iv[m / 2]));
    for (int i = 0; i < n; i++) {
        iv[i] = done[i] - start[i];
        const double l = secs(iv[i]);
        r.max_latency_s = l > r.max_latency_s ? l : r.max_latency_s;
        r.slo_met += slo_s <= 0 || l <= slo_s;
        if (done_s)
            done_s[i] = secs(done[i] - t0);
    }
    qsort(iv, (size_t)n, sizeof *iv, cmp_u64);
    r.latency_s = n % 2 ? secs(iv[n / 2]) : 0.5 * (secs(iv[n / 2 - 1]) + secs(iv[n / 2]));
    *res = r;
}

int ts_pipe_stream(const ts_pipe_work *w, int cut, int n_req, const ts_pipe_rates *pace, double slo_s,
                   ts_pipe_result *res, double *done_s, ts_err *err) {
    if (check_work(w, err))
        return -1;
    const int B = w->n_blocks;
    if (cut < 0 || cut > B || n_req < 1)
        return ts_err_set(err, "pipe: cut %d of %d blocks, %d requests (cut 0 .. %d, >= 1 request)", cut, B, n_req, B);
    stream st = {.s = {.w = w}, .cut = cut, .n_req = n_req, .pace = pace};
    st.start = calloc((size_t)n_req, sizeof *st.start);
    st.done = calloc((size_t)n_req, sizeof *st.done);
    uint64_t *iv = calloc((size_t)n_req, sizeof *iv);
    if (!st.start || !st.done || !iv) {
        free(st.start), free(st.done), free(iv);
        return ts_err_set(err, "out of memory");
    }
    shared *s = &st.s;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    st.t0 = ts_now_ns();
    int rc = 0;
    if (run_pair(stage_a, &st, stage_b, &st)) {
        rc = ts_err_set(err, "pipe: cannot start stage B's thread");
        goto out;
    }
    if (s->failed) {
        *err = s->err;
        rc = -1;
        goto out;
    }
    figures(st.t0, st.start, st.done, n_req, slo_s, iv, res, done_s);
    res->cut = cut;
    res->a_busy_s = secs(st.busy[0]), res->b_busy_s = secs(st.busy[1]);
    res->tail_s = secs(st.tail_ns), res->handoff_s = secs(st.handoff_ns);
out:
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(st.start), free(st.done), free(iv);
    return rc;
}

/* ---- the baselines: whole requests per stage ---- */

typedef struct par {
    shared *s;
    int stage, n_req;
    int *next; /* the next request to take; under s->mu */
    uint64_t *start, *done;
    uint64_t busy;
    int n_done; /* requests this stage finished */
} par;

static void *par_main(void *arg) {
    par *p = arg;
    shared *s = p->s;
    const ts_pipe_work *w = s->w;
    for (int k = 0;; k++) {
        pthread_mutex_lock(&s->mu);
        const int i = s->failed ? p->n_req : (*p->next)++;
        pthread_mutex_unlock(&s->mu);
        if (i >= p->n_req)
            break;
        /* this stage's slots: stage, stage + 2, ... (two in turn) */
        const int slot = p->stage + 2 * (k % (w->n_slots / 2 > 1 ? 2 : 1));
        ts_err e = {{0}};
        const uint64_t t0 = ts_now_ns();
        p->start[i] = t0;
        if (w->blocks(w->ctx, p->stage, slot, i, 0, w->n_blocks, &e) ||
            (w->tail && w->tail(w->ctx, p->stage, slot, i, &e)) || (w->done && w->done(w->ctx, slot, i, &e))) {
            fail(s, &e);
            break;
        }
        p->done[i] = ts_now_ns();
        p->busy += p->done[i] - t0;
        p->n_done++;
    }
    return NULL;
}

int ts_pipe_parallel(const ts_pipe_work *w, unsigned stages, int n_req, ts_pipe_result *res, double *done_s,
                     ts_err *err) {
    if (check_work(w, err))
        return -1;
    if (!(stages & 3u) || n_req < 1)
        return ts_err_set(err, "pipe: stages mask %u, %d requests (bit 0 A, bit 1 B; >= 1 request)", stages, n_req);
    uint64_t *start = calloc((size_t)n_req, sizeof *start), *done = calloc((size_t)n_req, sizeof *done);
    uint64_t *iv = calloc((size_t)n_req, sizeof *iv);
    if (!start || !done || !iv) {
        free(start), free(done), free(iv);
        return ts_err_set(err, "out of memory");
    }
    shared s = {.w = w};
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    int next = 0, rc = 0;
    par p[2] = {{.s = &s, .stage = 0, .n_req = n_req, .next = &next, .start = start, .done = done},
                {.s = &s, .stage = 1, .n_req = n_req, .next = &next, .start = start, .done = done}};
    const uint64_t t0 = ts_now_ns();
    if (stages != 3u) {
        par_main(&p[stages == 1u ? 0 : 1]);
    } else if (run_pair(par_main, &p[0], par_main, &p[1])) {
        rc = ts_err_set(err, "pipe: cannot start a thread");
        goto out;
    }
    if (s.failed) {
        *err = s.err;
        rc = -1;
        goto out;
    }
    figures(t0, start, done, n_req, 0.0, iv, res, done_s);
    res->a_busy_s = secs(p[0].busy), res->b_busy_s = secs(p[1].busy);
    /* the steady-state period: each stage's own rate while both ran, added
     * (whole requests complete in bursts, so intervals between completions
     * of a short stream say little) */
    double rate = 0;
    for (int st = 0; st < 2; st++)
        if (p[st].n_done && p[st].busy)
            rate += p[st].n_done / secs(p[st].busy);
    if (rate > 0)
        res->period_s = 1.0 / rate;
out:
    pthread_cond_destroy(&s.cv);
    pthread_mutex_destroy(&s.mu);
    free(start), free(done), free(iv);
    return rc;
}
