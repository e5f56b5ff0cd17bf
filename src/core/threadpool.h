/* threadpool.h - a small persistent pool of worker threads with a blocking
 * parallel-for, cheap enough to call hundreds of times per decoded token.
 *
 * Workers are created once (ts_threadpool_new). Between jobs they spin on a
 * job counter for a short while (TS_SPIN_US microseconds, default 2000;
 * after the first 20 us each check also yields the core) and then sleep on
 * a futex, so a pool left idle does not burn a core. Posting a job is one
 * atomic store (plus a futex wake only when a worker sleeps); finishing is
 * one atomic decrement per worker; the caller spins on it (and sleeps the
 * same way after the spin budget). A waiter that finds itself preempted
 * often (more threads than cores: another busy process) stops spinning
 * until that passes. Decoding SmolLM2-135M on an idle machine, spinning is
 * ~2.5x the tokens/s of sleeping at every job (TS_SPIN_US=0); with a busy
 * process beside it, the watch keeps it as fast as sleeping
 * (docs/PERFORMANCE.md).
 *
 * Two ways to cut a range [0, n):
 *   ts_parallel_for        one contiguous chunk per thread (chunk t is
 *                          [n*t/T, n*(t+1)/T)); the calling thread runs chunk 0.
 *   ts_parallel_for_grain  chunks of `grain` items handed out by an atomic
 *                          counter, so a thread that is slowed down (another
 *                          process on its core) does less of the work.
 * Both return when every item is done, and fn's writes are visible to the
 * caller. A pool of 1 thread runs everything inline with no synchronisation.
 *
 * One pool serves one caller at a time (it belongs to a ts_state); calling
 * it from two threads at once is a programming error.
 *
 * Optional pinning: TS_PIN=1 in the environment pins thread t (0 = the
 * caller, pinned on its first job) to the t-th CPU of the process's affinity
 * mask (modulo its size). Off by default: on a shared machine the scheduler
 * moving threads away from a busy core usually beats a fixed placement.
 *
 *   ts_threadpool *p = ts_threadpool_new(0, &err);   // 0 = physical cores
 *   ts_parallel_for(p, n_rows, my_fn, &ctx);          // my_fn(ctx, begin, end, tid)
 *   ts_threadpool_free(p);
 */
#ifndef TS_CORE_THREADPOOL_H
#define TS_CORE_THREADPOOL_H

#include <stdint.h>

#include "core/err.h"

#define TS_MAX_THREADS 256

typedef struct ts_threadpool ts_threadpool;

/* Runs the items [begin, end) of a job on thread `tid` (0 = the caller). */
typedef void (*ts_range_fn)(void *ctx, int64_t begin, int64_t end, int tid);

/* Number of physical cores available to this process (distinct core ids
 * among the CPUs in its affinity mask, from /sys topology), falling back to
 * the online CPU count; at least 1. */
int ts_physical_cores(void);

/* n_threads <= 0 means ts_physical_cores(); values above TS_MAX_THREADS are
 * an error. NULL with err set when threads cannot be created. */
ts_threadpool *ts_threadpool_new(int n_threads, ts_err *err);
void ts_threadpool_free(ts_threadpool *p); /* NULL is a no-op */
int ts_threadpool_n_threads(const ts_threadpool *p);

/* Calls fn(ctx, b, e, tid) for the chunk of [0, n) belonging to each thread
 * (chunks may be empty and are then skipped) and waits for all of them. */
void ts_parallel_for(ts_threadpool *p, int64_t n, ts_range_fn fn, void *ctx);

/* Calls fn on chunks [k*grain, min((k+1)*grain, n)) taken by whichever
 * thread is free first (grain < 1 is taken as 1), and waits for all. */
void ts_parallel_for_grain(ts_threadpool *p, int64_t n, int64_t grain, ts_range_fn fn, void *ctx);

#endif
