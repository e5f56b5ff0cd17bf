/* cpu_ops.h - graph nodes executed with the CPU's own kernels
 * (kernels/ops.h, kernels/linear.h). Shared by the `cpu` engine and the
 * `loop` test device, so that a node gives the same bits on either: the
 * only difference between them is where the memory is and which thread
 * runs the call.
 *
 * These are the CPU forward's layers: the forward runs its block graph on
 * the `cpu` engine (runtime/layers.h), so a node is the only code for its
 * step (matmul: ts_linear, or ts_matmul on the reference path; norm:
 * ts_rmsnorm_f32 per row; rope: ts_rope_cs + ts_rope_apply; attention:
 * ts_attention or ts_attention_fast; relative-position attention:
 * ts_rel_attention; activations: ts_glu; KV store:
 * ts_f32_to_f16 per element; residual adds: a plain f32 loop), all of which
 * give a token's result independently of the batch size and thread count.
 */
#ifndef TS_ENGINE_CPU_OPS_H
#define TS_ENGINE_CPU_OPS_H

#include <stdint.h>

#include "core/threadpool.h"
#include "engine/engine.h"

/* Per-graph work space: matmul work space, attention scratch, rope table. */
typedef struct ts_cpu_exec ts_cpu_exec;

/* Bytes ts_cpu_exec_new will allocate for these nodes (an upper estimate,
 * for window accounting). */
uint64_t ts_cpu_exec_bytes(const ts_eng_node *nodes, int n_nodes, int width, int n_threads);
/* hi: the matmuls' activation precision (linear.h ts_linear_ws_set_hi) */
ts_cpu_exec *ts_cpu_exec_new(const ts_eng_node *nodes, int n_nodes, int width, int n_threads, int hi, ts_err *err);
void ts_cpu_exec_free(ts_cpu_exec *x);

/* Matmuls whose weights are bound in an engine's own layout (TS_WL_ENGINE:
 * the amx engine's tiles) go to this instead of ts_linear: k (<= 4)
 * consecutive matmuls over one input x of n_tok rows, weights w[i] (the
 * bound bytes), outputs y[i]; clip: the first node's clip record (NULL when
 * it has none). 0, or -1 (the run fails).
 * A clip record flagged TS_CLIP_COLLECT gathers the input's statistics
 * (ts_eng_clip_collect) once per run of matmuls, before they compute. */
typedef int (*ts_cpu_matmul_fn)(void *ctx, ts_threadpool *pool, int k, const void *const *w, float *const *y,
                                const float *x, int n_tok, const ts_eng_clip *clip);
void ts_cpu_exec_set_matmul(ts_cpu_exec *x, ts_cpu_matmul_fn fn, void *ctx);

/* Runs nodes[0 .. n_nodes) (the graph x was made for) over n_tok tokens at
 * pos0 (attention: n_kv 0 causal, > 0 every query sees cache rows [0,
 * n_kv), ts_attn_params.n_kv). base[s] is the host address of slot s (its
 * buffer + binding offset); binds gives the weight type and layout of
 * matmul slots. pool has the n_threads the exec was made for. Consecutive
 * fast matmuls reading the same input run as one ts_linear call (the input
 * quantized once), as the CPU forward always ran q/k/v and gate/up; rope
 * nodes share a cos/sin table per (angles, positions). 0, or -1 when a
 * node could not run (an own-layout weight without a matmul hook, or the
 * hook failed). */
int ts_cpu_exec_run(ts_cpu_exec *x, ts_threadpool *pool, const ts_eng_node *nodes, int n_nodes,
                     const ts_eng_bind *binds, uint8_t *const *base, int64_t pos0, int n_tok, int64_t n_kv);

#endif
