/* threadpool.c - persistent pthread pool (see threadpool.h). Jobs are posted
 * by bumping a generation counter that idle workers spin on (then futex-wait
 * on, after the spin budget); completion is an atomic count of workers still
 * busy, which the caller spins on the same way. Work is cut either into one
 * static chunk per thread or into grains taken from an atomic counter.
 *
 * Sleeping uses the Dekker pattern on sequentially consistent atomics: a
 * worker announces itself in n_sleepers before re-checking the counter it
 * waits on, and the poster bumps the counter before reading n_sleepers, so
 * at least one of them sees the other (no lost wake-up); FUTEX_WAIT also
 * re-checks the value atomically in the kernel. */
#include "core/threadpool.h"
#include "core/clock.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CACHE_LINE 64
#define YIELD_AFTER_NS 20000

/* preemption watch of one waiter (see waiter_budget) */
typedef struct {
    unsigned n_waits;
    int nospin;
    int64_t t_check;
    long nivcsw;
} waiter;

struct ts_threadpool {
    /* set at creation */
    int n_threads;
    pthread_t *threads;          /* n_threads - 1 workers */
    int n_started;               /* workers actually created */
    int pin;                     /* TS_PIN=1 */
    int caller_pinned;
    int n_cpus;                  /* CPUs of the affinity mask, for pinning */
    int *cpus;
    int64_t spin_ns;             /* spin budget before sleeping (TS_SPIN_US) */
    waiter caller;               /* the calling thread's preemption watch */

    /* the current job: written by the caller before `gen` is bumped */
    ts_range_fn fn;
    void *ctx;
    int64_t n;
    int64_t grain;               /* 0: static chunks */

    _Alignas(CACHE_LINE) _Atomic uint32_t gen; /* job generation (futex word) */
    _Atomic int32_t n_sleepers;                /* workers in (or entering) futex wait */
    _Atomic int32_t shutdown;
    _Alignas(CACHE_LINE) _Atomic int64_t next; /* next grain (grain mode) */
    _Alignas(CACHE_LINE) _Atomic int32_t pending; /* workers not done with the job (futex word) */
    _Atomic int32_t caller_sleeps;
};

typedef struct {
    ts_threadpool *p;
    int tid;
} worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield" ::: "memory");
#endif
}

static void futex_wait(_Atomic uint32_t *addr, uint32_t val) {
    /* returns on wake, on a value change (EAGAIN) or a signal: callers loop */
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *addr, int n) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

/* Spinning pays when the thread we wait for is running: its change comes
 * within microseconds. When threads outnumber cores (another busy process),
 * it is not: the scheduler charges our spinning as work and preempts our
 * threads at bad moments. Measured on 2 cores with one busy-loop process,
 * decode ran ~2x faster sleeping at once (TS_SPIN_US=0) than spinning,
 * while on an idle machine spinning is ~2.3x faster (docs/PERFORMANCE.md).
 * So each waiter (the caller, each worker) watches how often it is
 * preempted (involuntary context switches, getrusage every 256 waits): above
 * 200 per second it stops spinning, below 50 per second it spins again. */
static int64_t waiter_budget(const ts_threadpool *p, waiter *w) {
    if ((++w->n_waits & 255) == 0) {
        struct rusage ru;
        if (getrusage(RUSAGE_THREAD, &ru) == 0) {
            const int64_t t = (int64_t)ts_now_ns();
            if (w->t_check && t > w->t_check) {
                const double rate = (double)(ru.ru_nivcsw - w->nivcsw) * 1e9 / (double)(t - w->t_check);
                if (rate > 200.0) w->nospin = 1;
                else if (rate < 50.0) w->nospin = 0;
            }
            w->t_check = t;
            w->nivcsw = ru.ru_nivcsw;
        }
    }
    return w->nospin ? 0 : p->spin_ns;
}

/* Spins until *addr != val or `budget` ns are spent; returns the last value. */
static uint32_t spin_while_eq(int64_t budget, _Atomic uint32_t *addr, uint32_t val) {
    uint32_t v = atomic_load_explicit(addr, memory_order_acquire);
    if (v != val || budget <= 0) return v;
    const int64_t t0 = (int64_t)ts_now_ns();
    for (unsigned it = 1;; it++) {
        cpu_relax();
        v = atomic_load_explicit(addr, memory_order_acquire);
        if (v != val) return v;
        if ((it & 63) == 0) {
            const int64_t dt = (int64_t)ts_now_ns() - t0;
            if (dt > budget) return v;
            /* Past a short pure spin, give the core away between checks: if
             * the thread we wait for shares this core (more runnable threads
             * than cores), it runs now instead of after our time slice. */
            if (dt > YIELD_AFTER_NS) sched_yield();
        }
    }
}

static void pin_self(const ts_threadpool *p, int tid) {
    if (!p->pin || p->n_cpus <= 0) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(p->cpus[tid % p->n_cpus], &set);
    (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set); /* best effort */
}

static void run_part(ts_threadpool *p, int tid) {
    const int64_t n = p->n;
    if (p->grain > 0) {
        const int64_t g = p->grain;
        for (;;) {
            const int64_t b = atomic_fetch_add_explicit(&p->next, g, memory_order_relaxed);
            if (b >= n) break;
            p->fn(p->ctx, b, b + g < n ? b + g : n, tid);
        }
    } else {
        /* Chunk boundaries n*t/T spread the remainder evenly; computed in 64
         * bits (n is at most a few million items, T <= TS_MAX_THREADS). */
        const int64_t b = n * tid / p->n_threads, e = n * (tid + 1) / p->n_threads;
        if (b < e) p->fn(p->ctx, b, e, tid);
    }
}

static void *worker_main(void *arg) {
    worker_arg *wa = arg;
    ts_threadpool *p = wa->p;
    const int tid = wa->tid;
    free(wa);
    pin_self(p, tid);
    uint32_t seen = 0;
    waiter me = {0, 0, 0, 0};
    for (;;) {
        uint32_t g = spin_while_eq(waiter_budget(p, &me), &p->gen, seen);
        if (g == seen) {
            atomic_fetch_add(&p->n_sleepers, 1);
            while ((g = atomic_load(&p->gen)) == seen) futex_wait(&p->gen, seen);
            atomic_fetch_sub(&p->n_sleepers, 1);
        }
        seen = g;
        if (atomic_load_explicit(&p->shutdown, memory_order_acquire)) break;
        run_part(p, tid);
        if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->caller_sleeps))
            futex_wake((_Atomic uint32_t *)&p->pending, 1);
    }
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

/* CPUs of this process's affinity mask, in order (for pinning). */
static void list_cpus(ts_threadpool *p) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return;
    p->cpus = malloc(sizeof(int) * (size_t)CPU_COUNT(&set));
    if (!p->cpus) return;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) p->cpus[p->n_cpus++] = c;
}

ts_threadpool *ts_threadpool_new(int n_threads, ts_err *err) {
    if (n_threads <= 0) n_threads = ts_physical_cores();
    if (n_threads > TS_MAX_THREADS) {
        ts_err_set(err, "n_threads %d exceeds the maximum %d", n_threads, TS_MAX_THREADS);
        return NULL;
    }
    const size_t sz = (sizeof(ts_threadpool) + CACHE_LINE - 1) / CACHE_LINE * CACHE_LINE;
    ts_threadpool *p = aligned_alloc(CACHE_LINE, sz);
    if (!p) {
        ts_err_set(err, "out of memory allocating the thread pool");
        return NULL;
    }
    memset(p, 0, sz);
    p->n_threads = n_threads;
    p->spin_ns = 2000 * 1000;
    const char *sp = getenv("TS_SPIN_US");
    if (sp && *sp) {
        char *end;
        long v = strtol(sp, &end, 10);
        if (*end == '\0' && v >= 0 && v <= 10 * 1000 * 1000) p->spin_ns = (int64_t)v * 1000;
    }

    const char *pin = getenv("TS_PIN");
    p->pin = pin && strcmp(pin, "1") == 0;
    if (p->pin) list_cpus(p);
    atomic_init(&p->gen, 0);
    atomic_init(&p->n_sleepers, 0);
    atomic_init(&p->shutdown, 0);
    atomic_init(&p->next, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->caller_sleeps, 0);
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
    atomic_store(&p->shutdown, 1);
    atomic_fetch_add(&p->gen, 1);
    futex_wake(&p->gen, INT_MAX);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->threads[i], NULL);
    free(p->threads);
    free(p->cpus);
    free(p);
}

int ts_threadpool_n_threads(const ts_threadpool *p) { return p ? p->n_threads : 1; }

static void run_job(ts_threadpool *p, int64_t n, int64_t grain, ts_range_fn fn, void *ctx) {
    if (p->pin && !p->caller_pinned) {
        pin_self(p, 0);
        p->caller_pinned = 1;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->grain = grain;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store_explicit(&p->pending, p->n_threads - 1, memory_order_relaxed);
    atomic_fetch_add(&p->gen, 1); /* publishes the job (seq_cst: see the top comment) */
    if (atomic_load(&p->n_sleepers) > 0) futex_wake(&p->gen, INT_MAX);

    run_part(p, 0);

    _Atomic uint32_t *pend = (_Atomic uint32_t *)&p->pending;
    const int64_t budget = waiter_budget(p, &p->caller);
    for (;;) {
        uint32_t v = atomic_load(pend);
        if (v == 0) break;
        const uint32_t w = spin_while_eq(budget, pend, v);
        if (w == 0) break;
        if (w != v) continue; /* progress: spin on */
        /* the spin budget is spent with no progress: sleep */
        atomic_store(&p->caller_sleeps, 1);
        while ((v = atomic_load(pend)) != 0) futex_wait(pend, v);
        atomic_store(&p->caller_sleeps, 0);
        break;
    }
}

void ts_parallel_for(ts_threadpool *p, int64_t n, ts_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (!p || p->n_threads == 1 || n == 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    run_job(p, n, 0, fn, ctx);
}

void ts_parallel_for_grain(ts_threadpool *p, int64_t n, int64_t grain, ts_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (!p || p->n_threads == 1 || n <= grain) {
        fn(ctx, 0, n, 0);
        return;
    }
    run_job(p, n, grain, fn, ctx);
}
