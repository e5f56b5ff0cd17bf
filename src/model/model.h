/* model.h - transformer models read from GGUF: hyper-parameters, weights
 * (pointers into the mmap, in their stored types), and the forward pass over a
 * batch of tokens with a KV cache.
 *
 * Architectures are data: `general.architecture` selects a family (llama,
 * qwen2, qwen3, gemma3, and the diffusion LLMs llada and dream), whose
 * hyper-parameters and tensor names are read from the file; a missing or
 * inconsistent one is a load error naming it.
 *
 * (Internal: the public handle is ts_model in include/tessera.h, which wraps a
 * ts_mdl; see src/api.)
 *
 * Ownership: a ts_mdl is immutable after load and may be shared read-only by
 * several ts_state objects (one per sequence / thread). A ts_state owns the KV
 * cache and every activation buffer; ts_forward allocates nothing.
 */
#ifndef TS_MODEL_H
#define TS_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/err.h"
#include "gguf/gguf.h"
#include "text/tokenizer.h"

enum ts_arch {
    TS_ARCH_LLAMA,
    TS_ARCH_QWEN2,
    TS_ARCH_QWEN3,
    TS_ARCH_GEMMA3,
    TS_ARCH_LLADA, /* diffusion LLM: the llama forward, bidirectional attention */
    TS_ARCH_DREAM, /* diffusion LLM: the qwen2 forward, bidirectional attention */
    TS_ARCH_QWEN3MOE, /* qwen3 attention, routed experts */
    TS_ARCH_OLMOE,    /* full-width Q/K norms, routed experts */
};
enum ts_rope_type { TS_ROPE_NORM /* adjacent pairs */, TS_ROPE_NEOX /* split halves */ };

typedef struct ts_hparams {
    enum ts_arch arch;
    const char *arch_name;  /* "llama", ... */
    int32_t n_vocab;
    int32_t n_ctx_train;
    int32_t n_embd;         /* model width */
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;       /* key/value length per head */
    int32_t n_ff;
    float norm_eps;
    enum ts_rope_type rope_type;
    float rope_freq_base;
    float rope_freq_base_swa; /* gemma3 local layers */
    float rope_freq_scale;  /* linear scaling factor (1 = none) */
    /* llama3-style scaling (rope_scaling_type = llama3), 0 when absent */
    float rope_llama3_factor, rope_llama3_low, rope_llama3_high;
    int32_t rope_llama3_orig_ctx;
    int32_t n_swa;          /* sliding-window length (gemma3), 0 = none */
    int32_t swa_pattern;    /* every swa_pattern-th layer is global (gemma3: 6) */
    float final_logit_softcap; /* 0 = none */
    float attn_logit_softcap;  /* 0 = none */
    float embd_scale;       /* gemma: sqrt(n_embd); 1 otherwise */
    bool tied_output;       /* output projection shares token_embd */
    /* diffusion LLMs (llada, dream) */
    bool causal;            /* {arch}.attention.causal; false for llada/dream */
    int32_t mask_token_id;  /* tokenizer.ggml.mask_token_id, -1 if none */
    int shift_logits;       /* diffusion.shift_logits: position p reads row p-1's
                             * logits (absent: 1 for dream, 0 otherwise) */
    /* mixture of experts (qwen3moe, olmoe, llama with experts: Mixtral);
     * n_expert 0 for a dense model */
    int32_t n_expert;       /* {arch}.expert_count */
    int32_t n_expert_used;  /* {arch}.expert_used_count: k experts per token */
    int32_t n_ff_exp;       /* one expert's FFN width: {arch}.expert_feed_forward_length,
                             * else feed_forward_length */
    uint8_t moe_score;      /* ts_moe_score: the family's, or sigmoid with
                             * {arch}.expert_gating_func = 2 */
    bool moe_norm_topk;     /* the family's, or {arch}.expert_weights_norm */
} ts_hparams;

typedef struct ts_mdl ts_mdl;

typedef struct ts_mdl_params {
    bool use_mmap;   /* default true */
    /* model/stream.c: bytes of weights to keep in memory (0: all); the
     * layers beyond it stream from the file through each state's arena */
    uint64_t mem_budget;
    int n_loaders;           /* loader threads per state (0: 4) */
    const char *stream_opts; /* stream.c's options (loaders=, loader_delay_us=, direct=, test hooks) */
} ts_mdl_params;
ts_mdl_params ts_mdl_default_params(void);

/* Loads model + tokenizer from a GGUF file. NULL with err on failure. */
ts_mdl *ts_mdl_load(const char *path, const ts_mdl_params *p, ts_err *err);
void ts_mdl_free(ts_mdl *m); /* NULL is a no-op */

const ts_hparams *ts_mdl_hparams(const ts_mdl *m);
const ts_tokenizer *ts_mdl_tokenizer(const ts_mdl *m);
const ts_gguf *ts_mdl_gguf(const ts_mdl *m);
/* tokenizer.chat_template (NUL-terminated copy) or NULL. */
const char *ts_mdl_chat_template(const ts_mdl *m);
/* Total bytes of weight tensors, and parameter count. */
uint64_t ts_mdl_size_bytes(const ts_mdl *m);
uint64_t ts_mdl_n_params(const ts_mdl *m);
/* Under a memory budget: what was kept and what streams (NULL: no budget),
 * and how many layers stream. */
const char *ts_mdl_stream_note(const ts_mdl *m);
int ts_mdl_stream_layers(const ts_mdl *m);

/* Per-sequence state: KV cache (F16 by default), activations, logits. */
typedef struct ts_state ts_state;

typedef struct ts_state_params {
    int32_t n_ctx;      /* KV capacity in tokens; 0 = min(n_ctx_train, 4096) */
    int32_t n_batch;    /* micro-batch for prompt processing (-b), default 512 */
    int32_t n_threads;  /* default: physical cores */
    bool kv_f32;        /* KV cache in f32 instead of f16 (tests) */
    /* prefill on a device (runtime/layers.h; docs/ENGINE.md). NULL: CPU only.
     * A device that does not open, or cannot take the model, leaves the
     * state on the CPU with the reason in ts_state_dev_fallback. */
    const char *prefill_device; /* ts_eng_open name: "loop", "loop:npu,window=16M", "opencl:0", ... */
    int32_t chunk;              /* tokens per device chunk; 0: 256 (a device requiring widths gets one of them) */
    int32_t n_act_sets;         /* activation sets for device windows in flight at once (0, 1: one; at most 4):
                                   ts_forward_window_submit_set; the weights must be resident */
    int32_t prefill_min_tokens; /* chunks narrower than this stay on the CPU; 0: the device's min_width if > 1, else 32 (at least 2: decode stays);
                                   -1: a chunk goes to the device when the CPU's measured time for it exceeds the
                                   crossings it costs there (desc.crossing_ns x crossings per run) */
    bool act_q8;                /* the CPU's matmuls at 8-bit activations (TS_ACT overrides; linear.h) */
} ts_state_params;
ts_state_params ts_state_default_params(void);

ts_state *ts_state_new(const ts_mdl *m, const ts_state_params *p, ts_err *err);
void ts_state_free(ts_state *s);

int32_t ts_state_n_ctx(const ts_state *s);
int32_t ts_state_n_past(const ts_state *s); /* tokens held in the KV cache */
int32_t ts_state_n_batch(const ts_state *s);   /* effective micro-batch (capped at n_ctx) */
int32_t ts_state_n_threads(const ts_state *s);
/* Drops cached positions >= n (n <= n_past). ts_state_kv_truncate(s, 0) resets. */
void ts_state_kv_truncate(ts_state *s, int32_t n);
bool ts_state_kv_f32(const ts_state *s); /* the KV cache is f32 (ts_state_params.kv_f32) */
bool ts_state_act_q8(const ts_state *s); /* the CPU's matmuls run at 8-bit activations */
/* Rows [a, b) of dst's KV cache, every layer, := src's (the same model and
 * KV type; nothing in flight on either). A device holding a copy of dst's
 * cache re-reads those rows before its next run. The sparse cache refresh's
 * CPU path: a snapshot of the cache, and the merge of refreshed rows. */
int ts_state_kv_copy(ts_state *dst, const ts_state *src, int32_t a, int32_t b, ts_err *err);

/* ---- prefill on a device ------------------------------------------------ */

/* What the device path of a state did (cumulative since ts_state_new). */
typedef struct ts_state_dev_stats {
    const char *device;      /* name of the device that runs chunks, NULL when none */
    int32_t width;           /* chunk width W */
    int32_t min_tokens;      /* narrower chunks stay on the CPU */
    bool streaming;          /* weights stream through staging slots (slots=N, default 2) */
    uint64_t dev_tokens;     /* tokens whose layers ran through the device path */
    uint64_t dev_runs;       /* chunks run there */
    uint64_t dev_nodes;      /* graph nodes the device computed in those runs */
    uint64_t crossings;      /* hand-offs to the device during those runs */
    uint64_t upload_bytes;   /* host -> device, setup included: the device session's, shared by
                                the model's states on that device (the weights go up once) */
    uint64_t weight_bytes;   /* the weights' device copy (resident; 0 when streaming), shared */
    int32_t weight_users;    /* states sharing that device session now (this one included) */
    uint64_t stall_ns;       /* device waiting on weight uploads */
    uint64_t busy_ns;        /* the device computing graphs (ts_eng_stats.busy_ns) */
    /* clip records (calib=): the session's counters, as ts_eng_stats */
    uint64_t outliers, outliers_unprofiled, outliers_pruned, outlier_ns;
    uint64_t graph_builds;   /* chunk graphs built (at setup only) */
    uint64_t window_bytes;   /* the device's memory window */
    uint64_t window_peak;    /* most of it ever in use */
    int32_t converted;       /* matrices converted to a type the device takes */
    /* of dev_tokens / dev_runs: the non-causal window forwards (diffusion) */
    uint64_t dev_window_tokens;
    uint64_t dev_window_runs;
    uint64_t dev_pad_tokens; /* of dev_window_tokens: padding rows (windows narrower than a required width) */
    int32_t resident_layers; /* layers whose weights stay on the device */
    int32_t streamed_layers; /* layers staged through the slots every run */
    /* sched=ooo: chunks run several in flight, and the calling thread's
     * time blocked on the device with no unit of its own ready */
    uint64_t ooo_chunks, ooo_host_wait_ns;
} ts_state_dev_stats;
void ts_state_dev_stats_get(const ts_state *s, ts_state_dev_stats *out);
/* The CPU layers' arena under a memory budget (all 0 when nothing streams):
 * since the state was created. */
typedef struct ts_state_stream_stats {
    int32_t layers, slots, loaders;
    uint64_t slot_bytes, read_bytes, fills, failed, stall_ns;
    uint64_t whole, ahead, demand, routed, predicted, predict_n; /* ts_rt_arena_stats */
    uint64_t cache_hits, cache_misses, cache_bytes;              /* the model's expert cache */
} ts_state_stream_stats;
void ts_state_stream_stats_get(const ts_state *s, ts_state_stream_stats *out);
/* The one line a front end prints when the device asked for did not open
 * or could not take the model ("tessera: prefill device 'X' unavailable
 * (why); running on the CPU"), or NULL. */
const char *ts_state_dev_fallback(const ts_state *s);
/* One informational line about the device path ("loop:npu: chunks of 32
 * ..."), or NULL when there is none. */
const char *ts_state_dev_info(const ts_state *s);

/* Evaluates n tokens at positions n_past .. n_past+n-1, appending their K/V,
 * in micro-batches of n_batch. If logits_all is non-NULL it receives n rows of
 * n_vocab f32 logits (one per token); the last row is always available through
 * ts_state_logits afterwards. Errors: n_past+n > n_ctx ("context full"), bad ids. */
int ts_forward(ts_state *s, const int32_t *tokens, int32_t n, float *logits_all, ts_err *err);
const float *ts_state_logits(const ts_state *s); /* n_vocab floats: the last evaluated token */
/* Embeddings: the following forwards also add each evaluated row's final
 * hidden state after the output norm (what the output projection reads)
 * into sum[n_embd] and write the last row's into last[n_embd]; NULL, NULL
 * stops. The caller zeroes sum. */
void ts_state_set_embd_sink(ts_state *s, float *sum, float *last);

/* ---- layer ranges on several engines (the two-engine stream, pipe.h) -- */

/* The state's layer runners, each over its buffers and KV cache: the CPU's
 * (the model's own weights), the prefill device's, and a second device's. */
typedef enum ts_runner { TS_RUN_CPU = 0, TS_RUN_DEVICE = 1, TS_RUN_DEVICE_B = 2 } ts_runner;
/* Opens the second device (the model's session for spec, shared by the
 * model's states as the prefill device's is) and its runner at the chunk
 * width. Needs the prefill device. Unless own_copy, the second device maps
 * the prefill device's packed matrices where it reads their layout (one
 * stored copy: runtime/layers.h ts_rt_weights_set_peer). */
int ts_state_attach_device_b(ts_state *s, const char *spec, bool own_copy, ts_err *err);
/* Bytes of packed matrices the second device maps from the prefill
 * device's copy (0 without one). */
uint64_t ts_state_device_b_shared_bytes(const ts_state *s);
/* Layers [l0, l1) of nb tokens at positions pos0 .. on runner on, causal
 * (n_kv 0) or every row seeing cache rows [0, n_kv) (a diffusion window,
 * as ts_forward_window):
 * the embedding of tokens first when l0 == 0 (else x holds the residual
 * after layer l0 - 1, whichever runner left it); at l1 == n_layer n_past
 * becomes pos0 + nb. nb <= the chunk width (n_batch on the CPU). A chunk
 * split between runners at any layer gives the bits one runner gives when
 * the two compute alike. */
int ts_forward_layers(ts_state *s, ts_runner on, const int32_t *tokens, int32_t nb, int32_t pos0, int32_t n_kv,
                      int32_t l0, int32_t l1, ts_err *err);
/* After the last layer of nb rows: their logits (the output norm and
 * projection, on the CPU) into logits_all [nb][n_vocab] (NULL: none), the
 * last row's into ts_state_logits. */
int ts_state_layers_logits(ts_state *s, int32_t nb, float *logits_all, ts_err *err);

/* ---- diffusion LLMs --------------------------------------------------- */

/* Bidirectional (non-causal) evaluation of a window, for diffusion LLMs.
 * Evaluates n tokens at positions pos0 .. pos0+n-1 in ONE batch (n <= n_batch,
 * else an error saying so: every query must see every key of the window),
 * writing their K/V rows into the cache at those positions, and lets every
 * query attend to all cache positions [0, n_kv) (n_kv >= pos0+n; rows in
 * [pos0+n, n_kv) must have been written by an earlier call: the dual cache's
 * suffix). Does not change n_past. logits_all: n rows of n_vocab (or NULL);
 * the last row also goes to ts_state_logits.
 * Works on any model (the attention is non-causal whatever hparams.causal
 * says) except one with sliding-window layers (refused). Requires
 * 0 <= pos0, 0 <= n, pos0 + n <= n_kv <= n_ctx; n == 0 does nothing.
 * With a prefill device, a window of prefill_min_tokens <= n <= the chunk
 * width runs its layers there (counted in ts_state_dev_stats'
 * dev_window_tokens/runs); the rest on the CPU. Where the device requires
 * widths, a narrower window with n_kv == pos0+n and pos0 + the width <=
 * n_ctx runs padded to the width: the padding rows also write cache rows
 * [pos0+n, pos0+width), which a caller must not expect to keep (counted in
 * dev_pad_tokens). */
int ts_forward_window(ts_state *s, const int32_t *tokens, int32_t n, int32_t pos0, int32_t n_kv, float *logits_all,
                      ts_err *err);
/* ts_forward_window in two halves, so the caller can work on the CPU while
 * the device computes: submit checks and starts the window (a window that
 * does not go to the device is computed right here, and then wait has
 * nothing left to do); wait blocks until its layers are done and writes the
 * logits. Between the two the caller must not use s (no other forward, no
 * truncation) nor read logits_all. One window in flight per state. */
int ts_forward_window_submit(ts_state *s, const int32_t *tokens, int32_t n, int32_t pos0, int32_t n_kv,
                             float *logits_all, ts_err *err);
int ts_forward_window_wait(ts_state *s, ts_err *err);
bool ts_forward_window_done(ts_state *s); /* non-blocking: the submitted window's layers are done */
/* The same on activation set `set` (0 is the state's own, the calls above;
 * 1 .. n_act_sets-1 the extra ones): a window on another set can be
 * submitted while one is in flight, and runs after it on the device, so it
 * sees the rows the earlier one writes. An extra set takes only windows the
 * device takes (prefill_min_tokens <= n <= the chunk width); while any set
 * is in flight, no forward of the CPU runs on s. Waits in any order. */
int ts_forward_window_submit_set(ts_state *s, int32_t set, const int32_t *tokens, int32_t n, int32_t pos0,
                                 int32_t n_kv, float *logits_all, ts_err *err);
int ts_forward_window_wait_set(ts_state *s, int32_t set, ts_err *err);
int32_t ts_state_n_act_sets(const ts_state *s); /* 1 + the extra sets that opened */

/* Declares rows [0, n) of the cache valid (n <= n_ctx): after a window
 * evaluation, the caller makes a prefix permanent with this. A following
 * ts_forward appends at position n. */
int ts_state_set_n_past(ts_state *s, int32_t n, ts_err *err);

/* Selective logits: the next window forward (ts_forward_window, or its
 * submit + wait on set 0) computes the output projection only for rows
 * i < n with need[i] != 0; the other rows of logits_all are left as they
 * were (and ts_state_logits is not updated unless the last row is needed).
 * need must stay valid until that forward's logits are written; the
 * selection is taken by that call, whether it runs or is refused. Other
 * forwards (ts_forward, other sets) ignore it. NULL (or n 0) selects every
 * row. */
int ts_state_set_logit_rows(ts_state *s, const uint8_t *need, int32_t n, ts_err *err);

#endif
