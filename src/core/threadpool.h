/* threadpool.h - a small persistent pool of worker threads with a blocking
 * parallel-for.
 *
 * Workers are created once (ts_threadpool_new) and sleep between jobs. A job
 * is a range [0, n) cut into one contiguous chunk per thread; the calling
 * thread runs chunk 0 itself, so a pool of 1 thread runs everything inline
 * with no synchronisation. ts_parallel_for returns when every chunk is done.
 *
 * One pool serves one caller at a time (it belongs to a ts_state); calling
 * ts_parallel_for on the same pool from two threads at once is a programming
 * error.
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

#endif
