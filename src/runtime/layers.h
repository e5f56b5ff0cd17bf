/* layers.h - the transformer layers of a span of tokens run on a device:
 * prompt chunks (seed 001: prefill on the device, decode on the CPU) and the
 * window forwards of diffusion LLMs, over the forward's own buffers and KV
 * cache.
 *
 * Two objects:
 *   ts_rt_weights  the model's weights on one device: opened once per model
 *                  and device, shared by every state that runs there (one
 *                  probe, one conversion, one upload). The first state that
 *                  attaches plans them (every matrix probed and, where the
 *                  device refuses its type, converted once to the type the
 *                  probe found: ts_rt_probe_weight_type) and places them:
 *     resident   every layer in its own DEVICE buffer, uploaded once, when
 *                they all fit the window beside that state's buffers;
 *     streaming  otherwise each state gets N DEVICE slots of the largest
 *                layer's size (the engine option slots=N, default 2, at
 *                most TS_RT_MAX_SLOTS): a run uploads the next layers (on
 *                its own queue, up to N - 1 ahead) while layer l computes
 *                from its slot; the compute queue waits for a layer's
 *                upload on an event flagged TS_WAIT_WEIGHTS just before the
 *                layer's first graph (the device's stall time), and an
 *                upload into a slot waits for the graphs that read the
 *                slot's previous layer. Converted copies stay in host memory as the
 *                source of every run's uploads.
 *   The engine option place= chooses (ts_eng_place): auto (the two above),
 *   stream (streaming even when every layer fits), peruse (plain per-use
 *   staging: one slot, each layer uploaded after the previous one's
 *   compute), somr (the swap-optimized memory runtime of seed 000: the
 *   layers that fit beside N slots stay resident, packed in consumption
 *   order into few buffers; the others, spread evenly through the run,
 *   stream through the slots, which keep their layers across runs, and
 *   each slot's first layer of the next run goes in as soon as the slot's
 *   last one of this run is done).
 *   ts_rt_layers   one state's runner (once per state): the forward's
 *                  activation buffers and KV cache mapped into the device
 *                  (no copy; the cache only when the device runs kv_store or
 *                  attention) and into the state's own `cpu` engine; one
 *                  graph per layer variant and segment built for the chunk
 *                  width (ts_rt_block_nodes, ts_rt_split_nodes) and reused
 *                  by every run; its queues.
 * Weights with a source (ts_rt_weights_set_source: a model under a memory
 * budget, docs/MOE.md): the slots marked streamed are not in host memory;
 * each runner gets an arena (runtime/arena.h) that reads them from the
 * source. On the CPU a streamed layer computes from its arena slot, paced
 * at its first graph and, in a MoE layer, at its routing node (the CPU
 * graph is cut after it: routed experts are read on demand). On a device
 * every layer streams (the device gets only its slots), a streamed one
 * uploaded whole from the arena slot (a device that converts or packs
 * gets the form chosen at load, made from the slot's bytes in a staging
 * buffer at each upload); a device that would leave a streamed matmul to
 * the CPU is refused.
 * A window that holds neither is refused with the numbers (the caller runs
 * on the CPU). Peak window use never exceeds the window (engine.c refuses
 * every allocation past it). Several states may run at once from their own
 * threads (each has its own queues and graphs; the engine serialises what
 * it must).
 *
 * A run takes the embeddings of n_tok tokens in x and leaves the residual
 * stream after the last layer in x, with every layer's K/V rows for the
 * chunk in the KV cache, exactly where the CPU decode reads them. Nodes the
 * device does not take run on the CPU engine in place, at the cost of a
 * crossing per segment boundary. The embedding, the output norm and the
 * logits stay with the caller (the CPU).
 */
#ifndef TS_RUNTIME_LAYERS_H
#define TS_RUNTIME_LAYERS_H

#include "engine/engine.h"
#include "runtime/arena.h"
#include "runtime/block.h"

#define TS_RT_MAX_SLOTS 8  /* most weight staging slots a state streams through */
#define TS_RT_MAX_PACKS 16 /* place=somr: most buffers the resident layers are packed into */

/* What a layer slot holds on the host. */
typedef struct ts_rt_host_slot {
    const void *data; /* NULL: absent. As the CPU forward uses it. */
    uint64_t bytes;   /* of data */
    /* matmul weights only: */
    uint32_t wtype;
    ts_eng_wlayout layout; /* of data */
    const void *rows;      /* the GGUF rows (== data when layout is ROWS; NULL if lost) */
    int64_t n_in, n_out;
    /* an expert array (TS_LS_W_*_EXPS): n_expert matrices of n_out x n_in,
     * expert e at data + e * expert_bytes (rows, when kept: rows + e *
     * n_out * row size); 0 for one matrix */
    int32_t n_expert;
    uint64_t expert_bytes;
    /* not in memory (data NULL): the CPU's runners stream it through their
     * arena from the weights' source (ts_rt_weights_set_source), bytes long
     * in `layout` */
    bool streamed;
} ts_rt_host_slot;

typedef struct ts_rt_weights ts_rt_weights;

/* The weights of a model's n_layer layers on dev (not owned: it must
 * outlive the object). slots [n_layer][TS_LS_COUNT] is what each layer slot
 * holds on the host (activation and KV slots ignored); it is copied, but
 * the memory it points to must outlive the object. Nothing is probed or
 * uploaded until the first ts_rt_layers_new. */
ts_rt_weights *ts_rt_weights_new(ts_engine *dev, int n_layer, const ts_rt_host_slot *slots, ts_err *err);
/* Frees the device copy. Every ts_rt_layers over w must have been freed. */
void ts_rt_weights_free(ts_rt_weights *w);
ts_engine *ts_rt_weights_engine(const ts_rt_weights *w);
/* Points every layer's TS_LS_CALIB slot at records + l * stride (clip
 * records, engine.h ts_eng_clip; NULL: none) and takes them (aligned_alloc;
 * freed with w or by the next call), while no state is attached: the
 * layers' graphs then carry them (a calibration's TS_CLIP_COLLECT records
 * on the model's own CPU weights). -1 while a state is attached (the
 * records stay w's), or when w already has records and records is not
 * NULL. The engine option calib= does this itself for a device. */
int ts_rt_weights_set_calib(ts_rt_weights *w, void *records, uint64_t stride, ts_err *err);

/* The source of the slots marked streamed, while no state is attached:
 * every runner over w then gets an arena (runtime/arena.h) of two slots and
 * src->n_loaders loader threads (above). src is copied. */
int ts_rt_weights_set_source(ts_rt_weights *w, const ts_rt_source *src, ts_err *err);

/* One stored copy for two devices (seed 002): while no state is attached
 * to w, names peer, the same model's weights on another device. Where the
 * peer, placed and resident by then in memory the host addresses, holds a
 * matrix in the engine layout w's device reads too (the same desc.layout
 * name, weight type and size: "amx-int8" on amx,act=int8 and vnni), w's
 * device maps the peer's bytes instead of packing its own. peer must
 * outlive w. */
int ts_rt_weights_set_peer(ts_rt_weights *w, ts_rt_weights *peer, ts_err *err);

typedef struct ts_rt_layers ts_rt_layers;

typedef struct ts_rt_layers_params {
    ts_rt_weights *weights; /* the device and the model's weights on it (not owned) */
    ts_engine *cpu;         /* this state's `cpu` engine for what the device does not take (not owned) */
    int width;              /* tokens per chunk graph */
    int n_layer;
    const ts_rt_block_shape *shapes; /* [n_layer] (swa layers differ) */
    /* the forward's buffers, each [>= width] rows (see ts_ls_slot for widths) */
    float *act[TS_LS_N_ACT]; /* indexed by TS_LS_X .. TS_LS_EXP_W, rows of ts_rt_block_act_rows; NULL for a
                                slot no layer uses */
    void *k_cache, *v_cache; /* [n_layer][n_ctx][n_head_kv*head_dim] */
    uint64_t kv_layer_bytes; /* bytes of one layer's cache */
    /* the schedule's policy: the runs' (layer, segment) tasks with their
     * dependencies, issued in the order it picks among the ready ones.
     * NULL or "inorder": the only one within a run (several chunks out of
     * order are ts_rt_layers_run_chunks' units); "nodeps" in
     * TS_TEST_HOOKS builds ignores the dependencies on purpose, and the
     * executor refuses its picks. */
    const char *schedule;
    /* Another activation set of the same state (NULL: this is the first):
     * the runner gets its own activation buffers (act), graphs and
     * in-flight run, and shares `share`'s device queue (its runs follow the
     * other set's in the device's order, so a window that reads rows the
     * other one writes sees them), its KV cache maps and its view of the
     * rows the device holds. The weights must be resident; `share` must be
     * freed last. */
    ts_rt_layers *share;
} ts_rt_layers_params;

/* Sets up (the first state: probe, convert, upload; every state: map,
 * build). note gets the probe results, one "type[n_in]: ..." account per
 * distinct weight shape (first state only). NULL with err when the device
 * cannot take the model: the caller prints ts_eng_fallback_line and runs on
 * the CPU. */
ts_rt_layers *ts_rt_layers_new(const ts_rt_layers_params *p, char *note, size_t note_size, ts_err *err);
void ts_rt_layers_free(ts_rt_layers *pf);

/* Runs every layer over n_tok tokens (n_tok <= width; == width on devices
 * that require widths) at positions pos0..: x in, x out, KV rows written. */
int ts_rt_layers_run(ts_rt_layers *pf, int64_t pos0, int n_tok, ts_err *err);

/* The same with non-causal attention (ts_forward_window): every token sees
 * cache rows [0, n_kv) (pos0 < n_kv; 0 = causal, as above). Rows at or past
 * n_kv are padding: computed, KV rows written, never attended. Rows
 * [pos0 + n_tok, n_kv) the host wrote (a dual cache's suffix) are synced to
 * the device first. Counted in tokens/runs and in window_tokens/runs. */
int ts_rt_layers_run_window(ts_rt_layers *pf, int64_t pos0, int n_tok, int64_t n_kv, ts_err *err);

/* Layers [l0, l1) only (0 <= l0 < l1 <= n_layer), as run_window runs them
 * (submit + wait): x holds the residual after layer l0 - 1 and gets the one
 * after layer l1 - 1; the range's KV rows are written. Two runners over one
 * state's buffers and cache (two engines) split a chunk's layers this way
 * (the two-engine stream, pipe/pipe.h): the run's rows are left marked as
 * the host's, so a device syncs the layers another runner wrote before it
 * reads them. Needs resident weights unless the range is every layer. */
int ts_rt_layers_run_range(ts_rt_layers *pf, int64_t pos0, int n_tok, int64_t n_kv, int l0, int l1, ts_err *err);

/* The same in two halves, so the host can work while the device computes:
 * submit enqueues the run and hands it to the device (it blocks only for
 * the parts of the layers that run on the CPU between device segments, and
 * returns once the last device segment is handed over); wait blocks until
 * the device is done, after which x and the KV rows are the host's. One run
 * in flight at a time; ts_rt_layers_run_window is submit + wait. The host
 * must not touch the forward's buffers or the run's KV rows in between. */
int ts_rt_layers_submit_window(ts_rt_layers *pf, int64_t pos0, int n_tok, int64_t n_kv, ts_err *err);
int ts_rt_layers_wait(ts_rt_layers *pf, ts_err *err); /* 0 at once when nothing is in flight */
bool ts_rt_layers_done(ts_rt_layers *pf);             /* the submitted run has finished (non-blocking) */

/* Several chunks of one prompt, out of order (seed 003; the engine option
 * sched=ooo): chunk c runs on activation set sets[c % n_sets] (sets[0] the
 * first set, the others sharing its device queue: ts_rt_layers_params.share)
 * over n_tok[c] tokens at positions pos0[c] (consecutive: pos0[c + 1] =
 * pos0[c] + n_tok[c]; n_tok[c] <= width). Every (chunk, layer, segment) is a
 * unit with its real dependencies: the chain of its own chunk, and a
 * chunk's attention on the previous chunk's kv_store of the same layer.
 * Device units are queued as soon as they are ready (the device runs them
 * in that order); while it computes, the calling thread runs the ready CPU
 * unit that unlocks device work soonest (fewest CPU units before the next
 * device unit, then the longest run of device units after it, then the
 * older chunk), and the hosts' own work when nothing feeds the device.
 * begin(user, c, set, err) fills set's x (the embeddings) before chunk c's
 * first unit, once that set's previous chunk has ended; end(user, c, set,
 * err) reads it (the logits) after chunk c's last unit; both run on the
 * calling thread, as units of the schedule. The order of independent work
 * changes, never the arithmetic: the result is bit-identical to the
 * chunks run one after the other (ts_rt_layers_run).
 * Needs resident weights, and kv_store and attention on the same side in
 * every layer (the device, or the CPU). */
typedef struct ts_rt_chunks {
    int n_chunks;
    const int64_t *pos0; /* [n_chunks] */
    const int *n_tok;    /* [n_chunks] */
    int (*begin)(void *user, int c, int set, ts_err *err);
    int (*end)(void *user, int c, int set, ts_err *err);
    void *user;
    /* out: the calling thread's time blocked on the device with nothing
     * of its own ready to run (added to) */
    uint64_t host_wait_ns;
} ts_rt_chunks;
int ts_rt_layers_run_chunks(ts_rt_layers *const *sets, int n_sets, ts_rt_chunks *ch, ts_err *err);

/* The host wrote cache rows [a, b) itself (the CPU's layers ran there): the
 * device's copy of them is stale until a run syncs them again. */
void ts_rt_layers_kv_host_wrote(ts_rt_layers *pf, int64_t a, int64_t b);

/* The KV cache was truncated to n rows on the host (ts_state_kv_truncate):
 * rows past it are no longer known to the device. */
void ts_rt_layers_kv_truncate(ts_rt_layers *pf, int64_t n);

/* Crossings one run makes: a hand-off back to the host after each run of
 * device segments (what the engine's crossing_ns is paid for). 0 without a
 * device. */
int ts_rt_layers_crossings_per_run(const ts_rt_layers *pf);

typedef struct ts_rt_layers_stats {
    uint64_t tokens; /* tokens run through the device path */
    uint64_t runs;
    uint64_t window_tokens; /* of tokens: those of window runs (n_kv > 0) */
    uint64_t window_runs;   /* of runs: window runs */
    uint64_t run_crossings; /* device crossings during runs (setup's probes and uploads excluded) */
    uint64_t run_nodes;     /* nodes the device computed during runs */
    int segments_per_layer; /* device + cpu segments of the first layer variant */
    int device_segments;    /* of which on the device */
    uint64_t weight_bytes;  /* the shared device copy, uploaded once (after conversion; 0 when streaming) */
    int weight_users;       /* states sharing that copy now (this one included) */
    int converted;          /* matrices converted at setup */
    int packed;             /* matrices packed into the device's own layout (ts_eng_pack) at setup */
    int shared;             /* matrices mapped from the peer's copy (ts_rt_weights_set_peer) */
    uint64_t shared_bytes;  /* their bytes (not in weight_bytes) */
    uint64_t graph_builds;  /* chunk graphs built (at setup; runs never rebuild) */
    bool streaming;         /* weights stream through staging slots (all, or somr's share of them) */
    int n_slots;            /* how many (slots=N; 0 when resident) */
    uint64_t slot_bytes;    /* size of one slot when streaming */
    const char *place;      /* the placement asked for: "auto", "stream", "peruse", "somr" */
    int n_resident;         /* layers whose weights stay on the device */
    int n_streamed;         /* layers that stream through the slots */
    int weight_buffers;     /* device buffers holding the resident weights (somr: packs; else one a layer) */
} ts_rt_layers_stats;
void ts_rt_layers_get_stats(const ts_rt_layers *pf, ts_rt_layers_stats *out);
/* The arena's counters (all 0 when the runner streams nothing). */
void ts_rt_layers_arena_stats(const ts_rt_layers *pf, ts_rt_arena_stats *out);

#endif
