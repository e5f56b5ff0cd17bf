/* threadpool.c - persistent pthread pool with a static-chunk parallel-for
 * (see threadpool.h). Workers sleep on a condition variable and wake when the
 * job generation changes; the caller runs chunk 0 and then waits for the
 * count of finished workers. Simple rather than fast: later CPU work may add
 * spinning or work stealing behind the same interface. */
#include "core/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct ts_threadpool {
    int n_threads;
    pthread_t *threads;          /* n_threads - 1 workers */
    int n_started;               /* workers actually created */
    pthread_mutex_t mu;
    pthread_cond_t wake;         /* job posted or shutdown */
    pthread_cond_t done;         /* a worker finished its chunk */
    uint64_t generation;         /* bumped for each job */
    int n_done;                  /* workers finished with the current job */
    int shutdown;
    /* the current job */
    ts_range_fn fn;
    void *ctx;
    int64_t n;
};

typedef struct {
    ts_threadpool *p;
    int tid;
} worker_arg;

static void run_chunk(ts_threadpool *p, ts_range_fn fn, void *ctx, int64_t n, int tid) {
    /* Chunk boundaries n*t/T spread the remainder evenly; computed in 64 bits
     * (n is at most a few million items, T <= TS_MAX_THREADS). */
    int64_t b = n * tid / p->n_threads;
    int64_t e = n * (tid + 1) / p->n_threads;
    if (b < e) fn(ctx, b, e, tid);
}

static void *worker_main(void *arg) {
    worker_arg *wa = arg;
    ts_threadpool *p = wa->p;
    int tid = wa->tid;
    free(wa);
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->shutdown && p->generation == seen) pthread_cond_wait(&p->wake, &p->mu);
        if (p->shutdown) break;
        seen = p->generation;
        ts_range_fn fn = p->fn;
        void *ctx = p->ctx;
        int64_t n = p->n;
        pthread_mutex_unlock(&p->mu);
        run_chunk(p, fn, ctx, n, tid);
        pthread_mutex_lock(&p->mu);
        p->n_done++;
        pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static int read_int_file(const char *path, long *out) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int ok = fscanf(f, "%ld", out) == 1;
    fclose(f);
    return ok ? 0 : -1;
}

int ts_physical_cores(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    int have_mask = sched_getaffinity(0, sizeof set, &set) == 0;
    long n_online = sysconf(_SC_NPROCESSORS_ONLN);
    int n_logical = have_mask ? CPU_COUNT(&set) : (int)(n_online > 0 ? n_online : 1);
    if (n_logical < 1) n_logical = 1;

    /* Count distinct (package, core) pairs among the CPUs we may run on. */
    enum { MAXC = CPU_SETSIZE };
    long pkg_of[MAXC], core_of[MAXC];
    int n_pairs = 0, failed = 0;
    for (int cpu = 0; cpu < MAXC && !failed; cpu++) {
        if (have_mask ? !CPU_ISSET(cpu, &set) : cpu >= n_logical) continue;
        char path[128];
        long pkg, core;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
        if (read_int_file(path, &pkg)) { failed = 1; break; }
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
        if (read_int_file(path, &core)) { failed = 1; break; }
        int dup = 0;
        for (int i = 0; i < n_pairs && !dup; i++) dup = pkg_of[i] == pkg && core_of[i] == core;
        if (!dup && n_pairs < MAXC) {
            pkg_of[n_pairs] = pkg;
            core_of[n_pairs] = core;
            n_pairs++;
        }
    }
    int n = failed || n_pairs == 0 ? n_logical : n_pairs;
    if (n > TS_MAX_THREADS) n = TS_MAX_THREADS;
    return n < 1 ? 1 : n;
}

ts_threadpool *ts_threadpool_new(int n_threads, ts_err *err) {
    if (n_threads <= 0) n_threads = ts_physical_cores();
    if (n_threads > TS_MAX_THREADS) {
        ts_err_set(err, "n_threads %d exceeds the maximum %d", n_threads, TS_MAX_THREADS);
        return NULL;
    }
    ts_threadpool *p = calloc(1, sizeof *p);
    if (!p) {
        ts_err_set(err, "out of memory allocating the thread pool");
        return NULL;
    }
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads - 1, sizeof *p->threads);
        if (!p->threads) {
            ts_threadpool_free(p);
            ts_err_set(err, "out of memory allocating the thread pool");
            return NULL;
        }
        for (int i = 1; i < n_threads; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            int rc = wa ? 0 : -1;
            if (wa) {
                wa->p = p;
                wa->tid = i;
                rc = pthread_create(&p->threads[i - 1], NULL, worker_main, wa);
                if (rc) free(wa);
            }
            if (rc) {
                ts_threadpool_free(p);
                ts_err_set(err, "cannot create worker thread %d of %d", i, n_threads);
                return NULL;
            }
            p->n_started++;
        }
    }
    return p;
}

void ts_threadpool_free(ts_threadpool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->shutdown = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p);
}

int ts_threadpool_n_threads(const ts_threadpool *p) { return p ? p->n_threads : 1; }

void ts_parallel_for(ts_threadpool *p, int64_t n, ts_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (!p || p->n_threads == 1 || n == 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->n_done = 0;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);

    run_chunk(p, fn, ctx, n, 0);

    pthread_mutex_lock(&p->mu);
    while (p->n_done < p->n_threads - 1) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
