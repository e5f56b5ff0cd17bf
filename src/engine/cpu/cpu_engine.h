/* cpu_engine.h - the one constructor of the `cpu` engine besides its
 * registry entry: the host engine over a thread pool its caller owns, so
 * that the forward runs its layer graphs on the state's own pool (one set of
 * worker threads per state, not two that spin against each other). */
#ifndef TS_ENGINE_CPU_ENGINE_H
#define TS_ENGINE_CPU_ENGINE_H

#include "core/threadpool.h"
#include "engine/engine.h"

/* The `cpu` engine on pool (not owned: it must outlive the engine, and no
 * other caller may run work on it while a graph runs); act_q8: its matmuls
 * at 8-bit activations (the registry's act=q8). NULL with err. */
ts_engine *ts_eng_cpu_open_pool(ts_threadpool *pool, bool act_q8, ts_err *err);

#endif
