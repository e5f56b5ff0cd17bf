/* cpu_ops.h - graph nodes executed with the CPU's own kernels
 * (kernels/ops.h, kernels/linear.h). Shared by the `cpu` engine and the
 * `loop` test device, so that a node gives the same bits on either: the
 * only difference between them is where the memory is and which thread
 * runs the call.
 *
 * Each node calls exactly the function the CPU forward calls for that
 * step (matmul: ts_linear; norm: ts_rmsnorm_f32 per row; rope: ts_rope_f32
 * per token; attention: ts_attention; activations: ts_swiglu_f32 /
 * ts_geglu_tanh_f32; KV store: ts_f32_to_f16 per element; residual adds: a
 * plain f32 loop), all of which give a token's result independently of the
 * batch size and thread count.
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
ts_cpu_exec *ts_cpu_exec_new(const ts_eng_node *nodes, int n_nodes, int width, int n_threads, ts_err *err);
void ts_cpu_exec_free(ts_cpu_exec *x);

/* Runs node n over n_tok tokens at pos0 (attention: n_kv 0 causal, > 0
 * every query sees cache rows [0, n_kv), ts_attn_params.n_kv). base[s] is the host address of
 * slot s (its buffer + binding offset); binds gives the weight type and
 * layout of matmul slots. pool has the n_threads the exec was made for. */
void ts_cpu_exec_node(ts_cpu_exec *x, ts_threadpool *pool, const ts_eng_node *n, const ts_eng_bind *binds,
                      uint8_t *const *base, int64_t pos0, int n_tok, int64_t n_kv);

#endif
