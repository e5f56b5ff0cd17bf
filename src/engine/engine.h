/* engine.h - one interface for every compute engine (the CPU, the `loop`
 * test device, OpenCL devices, later CUDA and NPUs), and the registry that
 * opens them by name.
 *
 * An engine is a table of function pointers plus a context (engine_impl.h);
 * everything here is a thin checked wrapper over that table, so the runtime
 * never knows which engine it drives. What an engine offers:
 *
 *   self-description  ts_eng_desc: kind, memory window, graph widths it
 *                     requires or prefers, ops and weight types it takes,
 *                     cost of one crossing. Placement reads only this.
 *   buffers           DEVICE (device memory; the host reaches it only by
 *                     enqueued writes/reads), HOST (host memory the device
 *                     addresses; the host pointer is usable), MAPPED (the
 *                     caller's own host memory made addressable by the
 *                     device, e.g. the KV cache: no copy). Every buffer, and
 *                     every graph's scratch, counts against the memory
 *                     window: an allocation past it is refused, and the
 *                     peak is reported.
 *   queues + events   asynchronous, in order within a queue. Commands are
 *                     handed to the device in batches (ts_eng_queue_flush;
 *                     also done by finish and by a host wait): one batch is
 *                     one crossing. A queue can wait on an event of another
 *                     queue of the same engine or on a user event the host
 *                     signals; the host waits on events.
 *   graphs            a list of nodes (ops over slots) built once per shape
 *                     (width) and run many times; every run binds the slots
 *                     to buffers anew, which is how weights are rebound per
 *                     graph (one layer graph, run once per layer with that
 *                     layer's weights and KV cache bound).
 *   telemetry         ts_eng_stats: counters of what happened.
 *
 * Names (ts_eng_open): an engine's registry name, optionally ":variant",
 * optionally followed by ",key=value" options. The engines are listed in
 * engines.def (one line each; see docs/ARCHITECTURE.md): "cpu", "loop",
 * "loop:npu", "opencl", "opencl:N". Options every engine takes:
 *   window=SIZE       the memory window (suffixes K, M, G: binary): a cap
 *                     for real devices, the emulated size for loop
 *   slots=N           weight staging slots (2..8) the runtime streams the
 *                     layers through when they do not all fit (default 2)
 *   place=P           how the runtime places the weights (ts_eng_place):
 *                     auto (default: all resident when they fit, else all
 *                     streamed), stream (streamed even when they fit),
 *                     peruse (plain per-use staging: one slot, each layer
 *                     uploaded just before its use, nothing ahead), somr
 *                     (the swap-optimized memory runtime: what fits stays
 *                     resident, packed in consumption order into few
 *                     buffers; the rest streams through the slots, ahead of
 *                     use and across runs; docs/ENGINE.md)
 *   calib=FILE        the clips of each matmul input (a `tessera calibrate`
 *                     sidecar, runtime/calib.h), read by the runtime and
 *                     bound per layer (ts_eng_clip); engines with
 *                     desc.clips only (amx,act=int8)
 *   prune=P           with calib=: the fraction P (0..1) of layers, least
 *                     important first, that get no shadow outliers: their
 *                     inputs take one scale from their own amax (seed 003's
 *                     pruning)
 *   prune_keep=I+...  with prune=: these inputs (qkv, o, ffn, down; none)
 *                     keep their shadow in a pruned layer (down: the input
 *                     whose outliers are largest; docs/FIDELITY.md)
 *   sched=S           how the runtime schedules a prompt's chunks
 *                     (ts_eng_sched): inorder (default) or ooo
 *   inflight=N        with sched=ooo: chunks in flight at once (2..4,
 *                     default 4; an activation set each)
 *   wtypes=A+B+...    restricts the matmul weight types the engine takes
 *                     (type names, e.g. f16+q8_0+q4_0): a `cpu` engine with
 *                     the NPU's types computes with the weights converted
 *                     exactly as they are for that NPU (the Gate 2 reference)
 * and each engine's own (its entry lists them):
 *   threads=N         cpu, loop: kernel threads (default: the caller's
 *                     ts_eng_open_params.threads, else 1)
 *   delay_us=N        loop: cost charged per crossing (sleep on the device)
 *   copy_mbps=N       loop: host <-> device copies at most N MB/s (slept
 *                     beyond the memcpy; 0, the default: the memcpy alone)
 * Test hooks, only in a build configured with -DTS_TEST_HOOKS=ON (the test
 * suite's; elsewhere they are refused as not in this build):
 *   nowait=1          loop: BROKEN ON PURPOSE - the queue ignores waits on
 *                     events; exists so a gate can prove it notices
 *   own_layout=1      loop: its own weight layout (rows padded to 64 bytes,
 *                     ts_eng_pack), so the runtime's packing path is tested
 *   ooo_nowait=1      any engine, runtime only, with sched=ooo: BROKEN ON
 *                     PURPOSE - a chunk's attention does not wait for the
 *                     previous chunk's K/V rows of that layer (and ties go
 *                     to the later chunk, so the race is certain)
 *   nodrain=1         any engine, runtime only: BROKEN ON PURPOSE - a layer
 *                     run returns without waiting for the device, so the
 *                     CPU reads the residual stream and KV rows before the
 *                     device wrote them (the second ordering gate)
 *   and the engine `null` (opens, takes no op, no buffer: everything refused)
 * An unknown name or option, or a device that will not open, is an error
 * (NULL + message) that the caller turns into one stderr line and a CPU run
 * (ts_eng_fallback_line).
 *
 * Threading: an engine may be used from several host threads, but each
 * queue and each graph by one host thread at a time. Nothing here prints.
 */
#ifndef TS_ENGINE_ENGINE_H
#define TS_ENGINE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef struct ts_engine ts_engine;
typedef struct ts_eng_buf ts_eng_buf;
typedef struct ts_eng_queue ts_eng_queue;
typedef struct ts_eng_event ts_eng_event;
typedef struct ts_eng_graph ts_eng_graph;

/* ---- self-description ------------------------------------------------- */

typedef enum ts_eng_kind {
    TS_ENG_KIND_CPU = 0, /* the host CPU itself */
    TS_ENG_KIND_LOOP,    /* loopback test device: CPU kernels behind a device boundary */
    TS_ENG_KIND_GPU,
    TS_ENG_KIND_NPU,   /* matrix engine (also loop:npu, which emulates one) */
    TS_ENG_KIND_OTHER, /* e.g. an OpenCL device of CPU type (PoCL) */
} ts_eng_kind;
const char *ts_eng_kind_name(ts_eng_kind k); /* "cpu", "loop", "gpu", "npu", "other" */

/* The building blocks of the forward's stages. A device that takes a stage
 * takes all of its ops (see docs/ENGINE.md for the mapping). */
typedef enum ts_op {
    TS_OP_MATMUL = 0, /* y[t][r] = sum_i x[t][i] W[r][i]                       */
    TS_OP_RMSNORM,    /* y[row] = x[row] / rms(x[row]) * w                      */
    TS_OP_ROPE,       /* rotary embedding of each head at position pos0 + t     */
    TS_OP_KV_STORE,   /* K, V rows of the batch -> cache rows pos0 .. (f16/f32) */
    TS_OP_ATTENTION,  /* causal attention over the cache (GQA, SWA, softcap)    */
    TS_OP_SWIGLU,     /* out = silu(gate) * up                                  */
    TS_OP_GEGLU,      /* out = gelu_tanh(gate) * up                             */
    TS_OP_ADD,        /* y[t] += x[t]   (residual)                              */
    TS_OP_ADD_ROW,    /* y[t] += b      (bias, one row for every token)         */
    /* the ops of the coming families (MoE LLMs, diffusion transformers);
     * kernels/block_ops.h has their definitions */
    TS_OP_LAYERNORM,   /* y[t] = (x[t] - mean) / sqrt(var + eps) * w + b        */
    TS_OP_MUL,         /* y[t] = a[t] * b[t] (or b as one row)                  */
    TS_OP_MODULATE,    /* y[t] = x[t] * (1 + scale_s) + shift_s (adaLN)         */
    TS_OP_GATED_ADD,   /* x[t] += gate_s * y[t] (adaLN's gated residual)        */
    TS_OP_MOE_ROUTE,   /* router logits -> top-k expert ids and weights         */
    TS_OP_MOE_MATMUL,  /* y += (w) x W_e^T over each token's k experts (an expert array) */
    TS_OP_CROSS_ATTN,  /* attention over K/V of another sequence (no cache)     */
    TS_OP_GELU,        /* y = gelu_tanh(x) (a DiT's FFN)                        */
    TS_OP_ROPE_TAB,    /* rotary embedding from a per-token angle table (3-D)   */
    TS_OP_REL_ATTN,    /* self-attention with a relative-position bias (T5)     */
    TS_OP_COUNT
} ts_op;
/* The ops of the LLM block (matmul .. add_row): what an engine that knows
 * only those (opencl) offers. */
#define TS_OP_MASK_LLM ((1u << (TS_OP_ADD_ROW + 1)) - 1)
const char *ts_op_name(ts_op op);

#define TS_ENG_MAX_WIDTHS 8

typedef struct ts_eng_desc {
    char name[48];    /* canonical name it was opened as: "loop:npu", "opencl:0" */
    char detail[160]; /* one human line: what it is, why it has this profile */
    ts_eng_kind kind;
    uint64_t window_bytes;  /* memory the device can address, all buffers together */
    uint64_t max_buf_bytes; /* largest single buffer */
    int n_widths;           /* graph widths (tokens per graph) it names */
    int widths[TS_ENG_MAX_WIDTHS];
    bool widths_required;         /* true: a graph must be exactly one of widths;
                                     false: widths are preferred, any width <= max_width runs */
    int max_width;                /* widest graph it takes */
    int min_width;                /* narrower graphs are not worth a crossing (placement hint) */
    uint32_t ops;                 /* bit (1u << op): it runs op */
    uint64_t weight_types;        /* bit (1ull << ts_type): matmul takes weights of that type */
    uint64_t crossing_ns;         /* cost of one crossing (hand-off to the device and back) */
    bool host_visible_device_mem; /* DEVICE buffers have a host pointer (cpu only) */
    bool cpu_layouts;             /* takes TS_WL_PANELS weights (its kernels are the CPU's) */
    bool stall_measured;          /* stats.stall_ns is measured (false: reported as 0) */
    bool sync_queue;              /* commands run on the host as they are enqueued (cpu) */
    bool clips;                   /* applies a matmul's clip record (per-tensor INT8 + shadow outliers) */
    /* its own weight layout's name (ts_eng_pack), "" when it has none:
     * engines naming the same layout read each other's packed bytes, so
     * one stored copy serves both ("amx-int8": amx,act=int8 and vnni) */
    char layout[24];
} ts_eng_desc;

/* ---- clip records: a matmul input's calibration (seed 003) ----
 *
 * One record per matmul input of a layer (the q/k/v input, the o input,
 * the gate/up input, the down input), bound per layer in the layer's
 * TS_LS_CALIB slot (runtime/calib.h builds them from a sidecar). An engine
 * with desc.clips and INT8 arithmetic quantizes x with the one scale
 * clip / 127 after clamping it to [-clip, clip]; with TS_CLIP_SHADOW the
 * remainder x - clamp(x) (the outlier channels, found in the actual input)
 * is multiplied on the CPU in float and added; without it (a pruned layer)
 * the input is quantized whole with the scale of its own amax. clip 0: no calibration for
 * this input (the engine's dynamic scales). Every other engine ignores the
 * record, except that the cpu engine gathers statistics into records
 * flagged TS_CLIP_COLLECT (calibration runs the CPU forward). Layout:
 *   ts_eng_clip | u32 hot[(n_in + 31) / 32] (channels hot in calibration)
 *   | u32 hist[TS_CLIP_BINS] (|x| histogram) | f32 chan_max[n_in] */
#define TS_CLIP_SHADOW 1u  /* the remainder on the CPU (else: one scale from the input's amax) */
#define TS_CLIP_COLLECT 2u /* cpu: add this input's |x| to hist and chan_max */
#define TS_CLIP_BINS 1024  /* log2 bins of |x|, 32 per octave, from 2^-16 (bin 0 takes less) */
typedef struct ts_eng_clip {
    float clip;
    uint32_t flags;
    uint32_t n_in;
    int32_t layer, input; /* which input this is */
    uint32_t pad;
    uint64_t n_tok; /* COLLECT: rows gathered */
} ts_eng_clip;
uint64_t ts_eng_clip_bytes(int64_t n_in);
static inline uint32_t *ts_eng_clip_hot(ts_eng_clip *c) { return (uint32_t *)(c + 1); }
static inline uint32_t *ts_eng_clip_hist(ts_eng_clip *c) { return ts_eng_clip_hot(c) + (c->n_in + 31) / 32; }
static inline float *ts_eng_clip_chan_max(ts_eng_clip *c) { return (float *)(ts_eng_clip_hist(c) + TS_CLIP_BINS); }
/* The bin of |v| (v >= 0 or NaN: the last bin), and the upper edge of bin b. */
int ts_eng_clip_bin(float v);
float ts_eng_clip_bin_top(int b);
/* Adds n_tok rows of x [n_tok][n_in] to a COLLECT record. */
void ts_eng_clip_collect(ts_eng_clip *c, const float *x, int n_tok);

/* ---- telemetry -------------------------------------------------------- */

typedef struct ts_eng_stats {
    uint64_t upload_bytes;    /* host -> device (enqueue_write) */
    uint64_t download_bytes;  /* device -> host (enqueue_read) */
    uint64_t host_sync_bytes; /* bytes of HOST/MAPPED memory made coherent (0 where
                                 that memory is simply shared) */
    uint64_t stall_ns;        /* queues blocked in waits flagged TS_WAIT_WEIGHTS */
    uint64_t wait_ns;         /* queues blocked in other waits */
    uint64_t busy_ns;         /* the compute unit running graphs (hostdev engines: measured on its
                                 thread, slow= included; 0 where not measured) */
    uint64_t crossings;       /* batches handed to the device */
    uint64_t nodes;           /* graph nodes computed on the device */
    uint64_t graph_builds;    /* graphs built (one per shape, ideally) */
    uint64_t graph_runs;      /* graphs run */
    uint64_t window_used;     /* bytes of the window in use now */
    uint64_t window_peak;     /* most ever in use */
    /* clip records (desc.clips): input elements beyond their clip */
    uint64_t outliers;            /* computed on the CPU (TS_CLIP_SHADOW) */
    uint64_t outliers_unprofiled; /* of those, in channels the calibration never saw hot */
    uint64_t outliers_pruned;     /* beyond the clip in pruned layers (no shadow: the input's amax scale) */
    uint64_t outlier_ns;          /* CPU time finding and adding the remainders */
} ts_eng_stats;

/* ---- registry ----------------------------------------------------------- */

/* Opens an engine by name (see the top of this file). NULL with err naming
 * the device and why (unknown name, bad option, not in this build, no ICD,
 * no device N, ...). */
ts_engine *ts_eng_open(const char *spec, ts_err *err);
/* Defaults the caller supplies for options the name leaves out. */
typedef struct ts_eng_open_params {
    int threads; /* engines taking threads=: this many when the name does not say (0: 1) */
} ts_eng_open_params;
ts_engine *ts_eng_open_ex(const char *spec, const ts_eng_open_params *p, ts_err *err);
/* Waits for every queue to drain, then frees the engine. Every buffer,
 * queue, event and graph of it must have been freed. NULL is a no-op. */
void ts_eng_close(ts_engine *e);

const ts_eng_desc *ts_eng_describe(const ts_engine *e);
/* The nodrain=1 test hook (TS_TEST_HOOKS builds only; false elsewhere): the
 * runtime returns from a layer run without waiting for the device. */
bool ts_eng_test_nodrain(const ts_engine *e);
/* The option slots=N (any engine, read by the runtime): weight staging
 * slots when the weights stream; 2 when not set. */
int ts_eng_staging_slots(const ts_engine *e);
/* The option place=P (any engine, read by the runtime). */
typedef enum ts_eng_place { TS_PLACE_AUTO = 0, TS_PLACE_STREAM, TS_PLACE_PERUSE, TS_PLACE_SOMR } ts_eng_place;
ts_eng_place ts_eng_placement(const ts_engine *e);
/* The option sched=S (any engine, read by the runtime): how a prompt's
 * chunks are scheduled between the device and the CPU. inorder (default):
 * one chunk after the other, each unit of work waiting for the previous
 * one; ooo: several chunks in flight on activation sets of their own,
 * every ready device unit queued at once and, while the device computes,
 * the CPU running the ready unit that unlocks the most device work (seed
 * 003's out-of-order execution; runtime/layers.h ts_rt_layers_run_chunks). */
typedef enum ts_eng_sched { TS_SCHED_INORDER = 0, TS_SCHED_OOO } ts_eng_sched;
ts_eng_sched ts_eng_schedule(const ts_engine *e);
/* The option inflight=N (2..4, default 4): with sched=ooo, how many chunks
 * are in flight at once (one activation set each; 4 measured faster than 2
 * on Qwen2.5-Coder-1.5B at every length, mixed on SmolLM2:
 * docs/PERFORMANCE.md "Out-of-order prefill"). */
int ts_eng_inflight(const ts_engine *e);
/* The ooo_nowait=1 test hook (TS_TEST_HOOKS builds only; false elsewhere):
 * BROKEN ON PURPOSE - sched=ooo lets a chunk's attention run before the
 * previous chunk stored that layer's K/V rows (so a gate can prove it
 * notices). */
bool ts_eng_test_ooo_nowait(const ts_engine *e);
/* The calib= sidecar's path ("" when none) and prune= (0 when not set). */
const char *ts_eng_calib_path(const ts_engine *e);
float ts_eng_prune(const ts_engine *e);
/* prune_keep=: bit i set when input i (ts_rt_clip_input order: q/k/v, o,
 * gate/up, down) keeps its shadow in a pruned layer (0 when not set). */
uint32_t ts_eng_prune_keep(const ts_engine *e);
/* Copies the counters (window_* included). */
void ts_eng_get_stats(const ts_engine *e, ts_eng_stats *out);
/* Zeroes the counters except window_used; window_peak restarts at window_used. */
void ts_eng_reset_stats(ts_engine *e);

/* Whether graphs on e may hold op `op`; for TS_OP_MATMUL also whether it
 * takes weights of type `wtype` (ignored for other ops; TS_ENG_ANY_WTYPE
 * asks about the op alone). */
#define TS_ENG_ANY_WTYPE 0xFFFFFFFFu
bool ts_eng_supports_op(const ts_engine *e, ts_op op, uint32_t wtype);

typedef struct ts_eng_info {
    char name[48];    /* what to pass to ts_eng_open */
    bool ok;          /* it opened */
    ts_eng_desc desc; /* valid when ok */
    char reason[256]; /* why it did not open, when !ok */
} ts_eng_info;

/* Lists what this machine has, registry entry by entry: cpu, loop,
 * loop:npu, each OpenCL device (or one "opencl" entry saying why there is
 * none), and in a TS_TEST_HOOKS build `null`. Writes up to cap entries
 * and returns how many there are (may exceed cap). Opens and closes each. */
int ts_eng_list(ts_eng_info *out, int cap);
/* One line for `tessera devices`: "loop:npu  ok  npu  window 256 MiB ..." or
 * "opencl  unavailable: ..." (no newline). Returns out. */
char *ts_eng_info_line(const ts_eng_info *in, char *out, size_t n);
/* The single stderr line a front end prints when `spec` did not open:
 * "tessera: prefill device 'X' unavailable (<err>); running on the CPU".
 * Returns out. */
char *ts_eng_fallback_line(const char *spec, const ts_err *err, char *out, size_t n);

/* Parses "64M", "1G", "4096", "512K" (binary units). -1 on junk/overflow. */
int ts_eng_parse_size(const char *s, uint64_t *out);

/* ---- buffers ---------------------------------------------------------- */

typedef enum ts_eng_mem {
    TS_MEM_DEVICE = 0, /* device memory: reached by enqueued writes/reads only */
    TS_MEM_HOST,       /* host memory the device addresses: ts_eng_buf_host is valid */
    TS_MEM_MAPPED,     /* the caller's host memory mapped for the device (ts_eng_buf_map) */
} ts_eng_mem;

/* Allocates `bytes` (> 0) of kind mem (DEVICE or HOST). Refused, with a
 * message giving the numbers, when it exceeds max_buf_bytes or the window
 * has no room. Contents are undefined (loop fills DEVICE memory with 0xFF,
 * i.e. NaN floats, so a missing upload shows). */
ts_eng_buf *ts_eng_buf_alloc(ts_engine *e, ts_eng_mem mem, size_t bytes, ts_err *err);
/* Makes host[0..bytes) addressable by the device without a copy. host must
 * be 16-byte aligned (what malloc gives; page alignment lets more OpenCL
 * drivers skip a copy) and outlive the buffer. Counts against the window. */
ts_eng_buf *ts_eng_buf_map(ts_engine *e, void *host, size_t bytes, ts_err *err);
/* Frees a buffer (no queued command may still use it). NULL is a no-op. */
void ts_eng_buf_free(ts_eng_buf *b);
size_t ts_eng_buf_size(const ts_eng_buf *b);
ts_eng_mem ts_eng_buf_mem(const ts_eng_buf *b);
/* Host pointer of a HOST or MAPPED buffer (and of any buffer of an engine
 * whose desc has host_visible_device_mem); NULL otherwise. The host may
 * touch it only when no queued command using it is in flight, and (for
 * memory the device also wrote or will read) after a ts_eng_enqueue_host_sync. */
void *ts_eng_buf_host(const ts_eng_buf *b);
/* Where another engine of this process may read b's bytes in place: for
 * packed weights that an engine naming the same desc.layout maps
 * (ts_eng_buf_map) instead of packing its own, one stored copy for two
 * engines. The host pointer where there is one, else the address of
 * DEVICE memory that is host memory kept hidden from the host (the
 * host-emulated devices: loop, amx, vnni); NULL where device memory is
 * elsewhere (opencl). Read-only, and only after b's uploads finished. */
const void *ts_eng_buf_peer_bytes(const ts_eng_buf *b);

/* ---- queues and events ------------------------------------------------- */

ts_eng_queue *ts_eng_queue_new(ts_engine *e, ts_err *err);
/* Finishes the queue, then frees it. NULL is a no-op. */
void ts_eng_queue_free(ts_eng_queue *q);

/* Copies host src[0..n) into b at off, once the commands before it are
 * done: the bytes are read when the command runs, not when it is enqueued,
 * so src must stay valid (and hold what should be copied) until a later
 * event completes. A range past the buffer is refused. Counted as
 * upload_bytes. */
int ts_eng_enqueue_write(ts_eng_queue *q, ts_eng_buf *b, size_t off, const void *src, size_t n, ts_err *err);
/* Copies b[off..off+n) into host dst. Counted as download_bytes. */
int ts_eng_enqueue_read(ts_eng_queue *q, ts_eng_buf *b, size_t off, void *dst, size_t n, ts_err *err);

typedef enum ts_eng_sync_dir {
    TS_SYNC_TO_DEVICE = 0, /* the host wrote b[off..off+n); the device reads it next */
    TS_SYNC_TO_HOST,       /* the device wrote it; the host reads it after this completes */
} ts_eng_sync_dir;
/* Coherence point for HOST/MAPPED memory shared by host and device (the KV
 * cache). Free where the memory is simply shared (cpu, loop, unified-memory
 * GPUs); a map/unmap where the driver keeps a device copy. */
int ts_eng_enqueue_host_sync(ts_eng_queue *q, ts_eng_buf *b, size_t off, size_t n, ts_eng_sync_dir dir, ts_err *err);

#define TS_WAIT_WEIGHTS 1u /* the wait guards weights: its time counts as stall_ns */
/* Commands after this one start only after ev completes: another queue's
 * marker or a user event, of this engine or of another one. Across engines
 * the wait is bridged: on an engine whose queue runs on the host (cpu) the
 * host waits here; on any other, a bridge thread waits for ev and then
 * completes a user event of q's engine that q waits on, so the host goes on
 * (ev may be freed at once; closing either engine waits for the bridge). */
int ts_eng_enqueue_wait(ts_eng_queue *q, ts_eng_event *ev, unsigned flags, ts_err *err);
/* A new event that completes when every command enqueued so far on q is
 * done. The caller frees it (ts_eng_event_free); NULL with err on failure. */
ts_eng_event *ts_eng_enqueue_marker(ts_eng_queue *q, ts_err *err);
/* Hands the commands enqueued so far to the device (one crossing). */
int ts_eng_queue_flush(ts_eng_queue *q, ts_err *err);
/* Flushes and waits until every command of q is done. Also reports an error
 * that happened on the device since the last finish. */
int ts_eng_queue_finish(ts_eng_queue *q, ts_err *err);

/* An event the host completes with ts_eng_event_signal. Signal it before
 * finishing or freeing a queue that waits on it (that would never end). */
ts_eng_event *ts_eng_user_event(ts_engine *e, ts_err *err);
int ts_eng_event_signal(ts_eng_event *ev, ts_err *err);
/* Blocks the host until ev completes (flushing the queue it belongs to). */
int ts_eng_event_wait(ts_eng_event *ev, ts_err *err);
/* true when ev has completed (non-blocking). */
bool ts_eng_event_done(ts_eng_event *ev);
/* Drops the caller's reference; safe while the event is still pending. */
void ts_eng_event_free(ts_eng_event *ev);

/* ---- graphs ------------------------------------------------------------ */

/* A reference to memory inside a graph: slot of the binding table (set per
 * run) plus a byte offset. slot < 0: absent (optional operands only). */
typedef struct ts_eng_ref {
    int32_t slot;
    uint64_t off;
} ts_eng_ref;
#define TS_ENG_REF(s, o) ((ts_eng_ref){.slot = (s), .off = (o)})
#define TS_ENG_NOREF ((ts_eng_ref){.slot = -1, .off = 0})

/* One op over n_tok rows (n_tok is given per run, <= the graph's width).
 * All activations are f32, rows contiguous. */
typedef struct ts_eng_node {
    ts_op op;
    union {
        struct {             /* TS_OP_MATMUL */
            ts_eng_ref w;    /* weight: type/layout from the slot's binding */
            ts_eng_ref x, y; /* x [n_tok][n_in], y [n_tok][n_out] */
            int64_t n_in, n_out;
            bool ref; /* cpu/loop: the reference ts_matmul (TS_KERNELS=ref) instead of ts_linear (whose
                         consecutive matmuls over one input share its quantization); others ignore it */
            bool clipped; /* clip is x's ts_eng_clip record (ts_eng_clip_bytes(n_in) bytes); matmuls over
                             one input share one record */
            ts_eng_ref clip;
        } matmul;
        struct {                /* TS_OP_RMSNORM: n_tok * rows_per_tok rows of n */
            ts_eng_ref x, y, w; /* y may equal x; w [n] f32 or TS_ENG_NOREF */
            int64_t n;
            int32_t rows_per_tok; /* 1, or n_head for per-head q/k norm */
            float eps;
        } rmsnorm;
        struct {             /* TS_OP_ROPE, in place */
            ts_eng_ref x;    /* [n_tok][n_head * head_dim] */
            ts_eng_ref freq; /* ts_eng_rope_freq_bytes(n_rot), see below */
            int32_t n_head, head_dim, n_rot;
            bool neox;
        } rope;
        struct {               /* TS_OP_KV_STORE */
            ts_eng_ref k, v;   /* [n_tok][dim] f32 */
            ts_eng_ref kc, vc; /* one layer's cache [n_ctx][dim], f16 or f32 */
            int64_t dim;
            int32_t n_ctx;
            bool f16;
        } kv_store;
        struct {                       /* TS_OP_ATTENTION (ts_attention's semantics) */
            ts_eng_ref q, kc, vc, out; /* q, out [n_tok][n_head*head_dim]; caches [n_ctx][n_head_kv*head_dim] */
            int32_t n_head, n_head_kv, head_dim;
            int32_t n_swa; /* 0 = full causal */
            int32_t n_ctx; /* cache capacity (rows) */
            float scale, softcap;
            bool kv_f16;
            bool fast; /* cpu/loop: ts_attention_fast (the forward's fast path) instead of
                          ts_attention; other engines ignore it */
        } attention;
        struct {                      /* TS_OP_SWIGLU, TS_OP_GEGLU */
            ts_eng_ref gate, up, out; /* [n_tok][n]; out may equal gate */
            int64_t n;
            bool fast; /* cpu/loop: ts_swiglu_fast / ts_geglu_fast instead of the f32 references */
        } glu;
        struct { /* TS_OP_ADD: y[t] += x[t]; TS_OP_ADD_ROW: y[t] += x[0] */
            ts_eng_ref y, x;
            int64_t n;
        } add;
        struct {                   /* TS_OP_LAYERNORM: n_tok rows of n */
            ts_eng_ref x, y, w, b; /* y may equal x; w, b [n] f32 or TS_ENG_NOREF */
            int64_t n;
            float eps;
        } layernorm;
        struct {                /* TS_OP_MUL */
            ts_eng_ref y, a, b; /* [n_tok][n]; b [n] when b_row; y may equal a */
            int64_t n;
            bool b_row;
        } mul;
        struct {                         /* TS_OP_MODULATE (x, shift, scale -> y), TS_OP_GATED_ADD (x += gate * y) */
            ts_eng_ref x, y, shift, scale; /* x, y [n_tok][n]; GATED_ADD: the gate in `scale`, shift unused */
            int64_t n;
            int64_t mod_stride;     /* floats between one sample's modulation row and the next */
            int32_t tok_per_sample; /* rows per sample (>= 1) */
        } modulate;
        struct {                            /* TS_OP_MOE_ROUTE */
            ts_eng_ref logits, ids, weights; /* [n_tok][n_expert] f32 -> [n_tok][k] int32, [n_tok][k] f32 */
            int32_t n_expert, k;
            uint8_t score; /* ts_moe_score (kernels/block_ops.h) */
            bool norm_topk;
        } route;
        struct {                /* TS_OP_MOE_MATMUL */
            ts_eng_ref w;       /* the expert array: the slot's binding gives n_expert and expert_bytes */
            ts_eng_ref x, y;    /* rows of n_in / n_out: by token [n_tok] or by pair [n_tok * k] */
            ts_eng_ref ids;     /* [n_tok][k] int32 (a route node's) */
            ts_eng_ref weights; /* [n_tok][k] f32 routing weights, or TS_ENG_NOREF (weight 1) */
            int64_t n_in, n_out;
            int32_t n_expert, k;
            bool x_by_pair, y_by_pair;
            bool accumulate; /* false: y's rows are zeroed first */
            bool fast;       /* the fast kernels (ts_moe_linear), else the reference ts_moe_matmul */
        } moe;
        struct {                      /* TS_OP_CROSS_ATTN */
            ts_eng_ref q, k, v, out;  /* q, out [n_tok][n_head*head_dim]; k, v [n_kv][n_head_kv*head_dim] f32 */
            int32_t n_head, n_head_kv, head_dim;
            int32_t n_kv; /* keys of the other sequence (a DiT's self-attention: its own n_tok) */
            float scale;
            bool fast; /* cpu/loop: ts_attention_fast in its non-causal mode (f32 keys) instead of
                          the double reference ts_cross_attention; other engines ignore it */
        } xattn;
        struct {           /* TS_OP_GELU: n_tok rows of n; y may equal x */
            ts_eng_ref x, y;
            int64_t n;
            bool fast; /* cpu/loop: ts_gelu_fast (GeGLU's polynomial kernel) instead of the f32 reference */
        } act;
        struct {             /* TS_OP_ROPE_TAB, in place */
            ts_eng_ref x;    /* [n_tok][n_head * head_dim] */
            ts_eng_ref tab;  /* [n_tok][head_dim / 2] (cos, sin) double pairs: token t's angles, one per
                                adjacent pair (x[2j], x[2j+1]) of every head (block_ops.h ts_rope_tab_f64) */
            int32_t n_head, head_dim;
        } rope_tab;
        struct {                     /* TS_OP_REL_ATTN (kernels/relattn.h ts_rel_attention) */
            ts_eng_ref q, k, v, out; /* [n_tok][n_head * head_dim] f32: the run's rows are queries and keys */
            ts_eng_ref bias;         /* [n_head][2 * max_rel + 1] f32: bias[h][r + max_rel] is added to the score
                                        of the key r = key - query positions away, r clamped to +-max_rel */
            int32_t n_head, head_dim, max_rel;
            float scale;
            /* keys: the run's rows [0, n_kv) (ts_eng_enqueue_graph_window's n_kv: a padding mask over the
               keys), every row when n_kv is 0 or >= n_tok; out may equal q */
        } relattn;
    };
} ts_eng_node;

/* Weight layouts a MATMUL slot can hold. */
typedef enum ts_eng_wlayout {
    TS_WL_ROWS = 0, /* GGUF rows: row r at r * row_bytes */
    TS_WL_PANELS,   /* CPU 16-row panels (kernels/repack.h); engines with desc.cpu_layouts */
    TS_WL_ENGINE,   /* the engine's own layout (ts_eng_pack): opaque to everyone but that engine */
} ts_eng_wlayout;

/* What a slot is bound to for one run. */
typedef struct ts_eng_bind {
    ts_eng_buf *buf;
    uint64_t off;
    /* MATMUL and MOE_MATMUL weights only: */
    uint32_t wtype;     /* ts_type */
    uint64_t row_bytes; /* ts_row_size(wtype, n_in) */
    ts_eng_wlayout layout;
    /* MOE_MATMUL: the slot holds n_expert matrices of this type and layout,
     * expert e at off + e * expert_bytes */
    int32_t n_expert;
    uint64_t expert_bytes;
} ts_eng_bind;

/* The engine's own weight layout (TS_WL_ENGINE), where it has one for a
 * matrix of n_out rows of n_in elements of type wtype: the bytes it takes
 * (0: none; the engine then reads the layouts its desc names). The runtime
 * packs the weights once at load with ts_eng_pack (from GGUF rows, row_bytes
 * apart) and binds them with layout TS_WL_ENGINE; a matrix tile layout (an
 * NPU's, AMX's) lives behind these two calls. */
uint64_t ts_eng_packed_bytes(const ts_engine *e, uint32_t wtype, int64_t n_in, int64_t n_out);
int ts_eng_pack(const ts_engine *e, uint32_t wtype, const void *rows, size_t row_bytes, int64_t n_in, int64_t n_out,
                void *dst, ts_err *err);

/* Builds a graph of n_nodes nodes over n_slots slots, for runs of up to
 * `width` tokens (exactly `width` where the engine requires widths). Every
 * node is checked against the engine (op, width, shape limits); a refusal
 * names the node and the reason. Allocates the engine's scratch for the
 * graph from the window. Counted in graph_builds. */
ts_eng_graph *ts_eng_graph_new(ts_engine *e, const ts_eng_node *nodes, int n_nodes, int n_slots, int width,
                               ts_err *err);
void ts_eng_graph_free(ts_eng_graph *g); /* no queued run may still use it */
int ts_eng_graph_width(const ts_eng_graph *g);

/* Enqueues one run of g over n_tok tokens at positions pos0 .. pos0+n_tok-1
 * with the slots bound to binds[0 .. n_slots). Every reference is checked
 * against its buffer (range, alignment, engine, weight type and size); the
 * bindings are copied, so binds may be reused at once. */
int ts_eng_enqueue_graph(ts_eng_queue *q, ts_eng_graph *g, const ts_eng_bind *binds, int n_binds, int64_t pos0,
                         int n_tok, ts_err *err);

/* The same with the attention nodes' mode per run (the window forward of
 * diffusion LLMs): n_kv 0 is causal (ts_eng_enqueue_graph); n_kv > 0 makes
 * every query of the run see cache rows [0, n_kv), pos0 < n_kv <= the
 * cache's rows (ts_attn_params.n_kv; refused with n_swa layers). Rows of the
 * run at or past n_kv are padding (a window narrower than a width the engine
 * requires): computed, their cache rows written, never attended. REL_ATTN
 * nodes read the same n_kv as their key count (rows [0, n_kv) of the run;
 * 0: every row), the padding mask of a T5 encoder. */
int ts_eng_enqueue_graph_window(ts_eng_queue *q, ts_eng_graph *g, const ts_eng_bind *binds, int n_binds,
                                int64_t pos0, int n_tok, int64_t n_kv, ts_err *err);

/* A binding table checked once for every run of g up to its width (every
 * reference's range at the width, alignment, engine, weight type and size):
 * a run through it (ts_eng_enqueue_bound) checks only n_tok, the positions
 * and n_kv. For a graph run many times over the same buffers (one layer per
 * chunk, every decode step). binds is copied; the buffers must outlive it. */
typedef struct ts_eng_bindset ts_eng_bindset;
ts_eng_bindset *ts_eng_bindset_new(ts_eng_graph *g, const ts_eng_bind *binds, int n_binds, ts_err *err);
void ts_eng_bindset_free(ts_eng_bindset *bs); /* no queued run may still use it; NULL is a no-op */
/* ts_eng_enqueue_graph_window over a checked binding set. */
int ts_eng_enqueue_bound(ts_eng_queue *q, ts_eng_bindset *bs, int64_t pos0, int n_tok, int64_t n_kv, ts_err *err);

/* ---- helpers for the runtime ------------------------------------------ */

/* Bytes node n reads/writes through each of its refs for n_tok rows and
 * cache capacity; used by engine.c's checks, by probes and by the runtime (which slots a block uses). Returns the
 * number of refs written into refs[]/bytes[]/align[] (at most 6). */
int ts_eng_node_refs(const ts_eng_node *n, int n_tok, ts_eng_ref *refs, uint64_t *bytes, uint32_t *align,
                     bool *is_weight);

/* The ROPE frequency slot holds the layer's angles per position in two
 * forms: n_rot/2 doubles (what the CPU kernel takes, bit-exact), then
 * n_rot/2 pairs of floats (hi, lo) with hi + lo = the double to ~2^-48, for
 * devices without doubles. */
size_t ts_eng_rope_freq_bytes(int n_rot);
void ts_eng_rope_freq_pack(const double *inv_freq, int n_rot, void *dst);

/* Normalised mean squared error sum (a-b)^2 / sum b^2 (b the reference);
 * 0 when both are all zero; +inf on NaN. For tests and probes. */
double ts_eng_nmse(const float *a, const float *b, int64_t n);

#endif
