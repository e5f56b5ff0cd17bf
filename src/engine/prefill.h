/* prefill.h - the transformer layers of a prefill chunk run on a device
 * (seed 001: prefill on the device, decode on the CPU), over the forward's
 * own buffers and KV cache.
 *
 * At setup (once per state): the forward's activation buffers and KV cache
 * are mapped into the device (no copy; the cache only when the device runs
 * kv_store or attention) and into the `cpu` engine; one graph per layer
 * variant and segment is built for the chunk width (ts_eng_layer_nodes,
 * ts_eng_split_nodes) and reused by every run; every matrix weight is probed
 * and, where the device refuses its type, converted once to the type the
 * probe found (ts_eng_probe_weight_type). Then the weights are placed:
 *   resident   every layer in its own DEVICE buffer, uploaded once, when
 *              they all fit the window beside the rest;
 *   streaming  otherwise two DEVICE slots of the largest layer's size: a run
 *              uploads layer l+1 (on its own queue) while layer l computes
 *              from the other slot; the compute queue waits for each upload
 *              on an event flagged TS_WAIT_WEIGHTS (the device's stall
 *              time), and an upload into a slot waits for the graphs that
 *              read the slot's previous layer. Converted copies stay in host
 *              memory as the source of every run's uploads.
 * A window that holds neither is refused with the numbers (the caller runs
 * on the CPU). Peak window use never exceeds the window (engine.c refuses
 * every allocation past it).
 *
 * A run takes the embeddings of n_tok tokens in x and leaves the residual
 * stream after the last layer in x, with every layer's K/V rows for the
 * chunk in the KV cache, exactly where the CPU decode reads them. Nodes the
 * device does not take run on the CPU engine in place, at the cost of a
 * crossing per segment boundary. The embedding, the output norm and the
 * logits stay with the caller (the CPU).
 */
#ifndef TS_ENGINE_PREFILL_H
#define TS_ENGINE_PREFILL_H

#include "engine/engine.h"
#include "engine/layer_graph.h"

/* What a layer slot holds on the host. */
typedef struct ts_eng_host_slot {
    const void *data; /* NULL: absent. As the CPU forward uses it. */
    uint64_t bytes;   /* of data */
    /* matmul weights only: */
    uint32_t wtype;
    ts_eng_wlayout layout; /* of data */
    const void *rows;      /* the GGUF rows (== data when layout is ROWS; NULL if lost) */
    int64_t n_in, n_out;
} ts_eng_host_slot;

typedef struct ts_eng_prefill_params {
    ts_engine *dev; /* the device (not owned) */
    ts_engine *cpu; /* a `cpu` engine for what the device does not take (not owned) */
    int width;      /* tokens per chunk graph */
    int n_layer;
    const ts_eng_layer_shape *shapes; /* [n_layer] (swa layers differ) */
    const ts_eng_host_slot *slots;    /* [n_layer][TS_LS_COUNT]; activation/KV slots ignored */
    /* the forward's buffers, each [>= width] rows (see ts_ls_slot for widths) */
    float *act[TS_LS_KC];    /* indexed by TS_LS_X .. TS_LS_UP */
    void *k_cache, *v_cache; /* [n_layer][n_ctx][n_head_kv*head_dim] */
    uint64_t kv_layer_bytes; /* bytes of one layer's cache */
} ts_eng_prefill_params;

typedef struct ts_eng_prefill ts_eng_prefill;

/* Sets up (probe, convert, upload, map, build). note gets the probe
 * results, one "type[n_in]: ..." account per distinct weight shape. NULL
 * with err when the device cannot take the model: the caller prints
 * ts_eng_fallback_line and runs on the CPU. */
ts_eng_prefill *ts_eng_prefill_new(const ts_eng_prefill_params *p, char *note, size_t note_size, ts_err *err);
void ts_eng_prefill_free(ts_eng_prefill *pf);

/* Runs every layer over n_tok tokens (n_tok <= width; == width on devices
 * that require widths) at positions pos0..: x in, x out, KV rows written. */
int ts_eng_prefill_run(ts_eng_prefill *pf, int64_t pos0, int n_tok, ts_err *err);

/* The same with non-causal attention (ts_forward_window): every token sees
 * cache rows [0, n_kv) (n_kv >= pos0 + n_tok; 0 = causal, as above). Rows
 * [pos0 + n_tok, n_kv) the host wrote (a dual cache's suffix) are synced to
 * the device first. Counted in tokens/runs and in window_tokens/runs. */
int ts_eng_prefill_run_window(ts_eng_prefill *pf, int64_t pos0, int n_tok, int64_t n_kv, ts_err *err);

/* The KV cache was truncated to n rows on the host (ts_state_kv_truncate):
 * rows past it are no longer known to the device. */
void ts_eng_prefill_kv_truncate(ts_eng_prefill *pf, int64_t n);

typedef struct ts_eng_prefill_stats {
    uint64_t tokens; /* tokens run through the device path */
    uint64_t runs;
    uint64_t window_tokens; /* of tokens: those of window runs (n_kv > 0) */
    uint64_t window_runs;   /* of runs: window runs */
    uint64_t run_crossings; /* device crossings during runs (setup's probes and uploads excluded) */
    uint64_t run_nodes;     /* nodes the device computed during runs */
    int segments_per_layer; /* device + cpu segments of the first layer variant */
    int device_segments;    /* of which on the device */
    uint64_t weight_bytes;  /* uploaded at setup (after conversion; 0 when streaming) */
    int converted;          /* matrices converted at setup */
    uint64_t graph_builds;  /* chunk graphs built (at setup; runs never rebuild) */
    bool streaming;         /* weights stream through two slots */
    uint64_t slot_bytes;    /* size of one slot when streaming */
} ts_eng_prefill_stats;
void ts_eng_prefill_get_stats(const ts_eng_prefill *pf, ts_eng_prefill_stats *out);

#endif
