/* arena.h - layers whose weights are not in memory, streamed from their
 * source (the model file) through a few layer-sized slots while the other
 * layers compute (seed 001, "The arena" and "Reading only the routed
 * experts"; the model's --mem-budget).
 *
 * One arena per layer runner (ts_rt_layers over the CPU's weights): n_slots
 * host buffers of the largest streamed layer's size, and n_loaders threads
 * that fill them. The k-th streamed layer (order[k], consumption order)
 * always computes from slot k % n_slots, so the layers' bindings into the
 * slots are made once. A layer's weights are its dense parts (attention,
 * norms, router: one job each) and, in a MoE layer, its experts (one job
 * per expert, reading that expert's rows of every expert array). A run's
 * pacing:
 *   begin     the run starts: each slot's first layer is queued unless the
 *             slot holds it or is receiving it (a slot whose last layer of
 *             a run is done takes its first layer of the next run at once,
 *             so the loaders read while the caller samples and embeds);
 *   wait(k)   before the k-th streamed layer's first graph: blocks until its
 *             dense parts are in (the time is the stall), then checks that
 *             the slot holds exactly that layer's fill of this request; a
 *             fill that failed or did not happen fails the run with a
 *             message naming the layer (and the source's tensor and
 *             offset), so a graph never computes on stale or partial bytes;
 *   route(k)  at the layer's routing node, with the routed expert ids:
 *             the routed experts not read yet are queued first (demand) and
 *             waited for, every one checked; the layer's routed set becomes
 *             its prediction for the next run;
 *   done(k)   after the layer's last graph: its slot takes the layer
 *             n_slots later (or, past the end, its first one of the next
 *             run).
 * Which experts a fill reads ahead of the routing node: every one (whole
 * layers: routed reads off, the first run of the arena, a layer with no
 * prediction, or the layer after one that routed to more than `full` of its
 * experts), else the ones the layer routed to in the previous run.
 * After a failed run, abort waits for the loaders to go idle and forgets
 * what every slot holds and every prediction: the next run reads whole
 * layers again. One thread (the runner's) calls begin/wait/route/done/abort;
 * the source's fill runs on the loader threads, several at once.
 */
#ifndef TS_RUNTIME_ARENA_H
#define TS_RUNTIME_ARENA_H

#include <stdbool.h>
#include <stdint.h>

#include "core/err.h"

/* Where streamed weights come from. */
typedef struct ts_rt_source {
    /* Writes weight slot `slot` (ts_ls_slot) of layer `layer` to dst, bytes
     * long in the layout the bindings expect: the whole of it (expert -1),
     * or expert `expert` of an expert array (its rows). scratch is the
     * calling loader thread's own scratch_bytes (4096-aligned). *read_bytes
     * gets the bytes read from the source. 0, or -1 with err naming the
     * tensor, the offset and what went wrong. */
    int (*fill)(void *user, void *scratch, int layer, int slot, int expert, void *dst, uint64_t bytes,
                uint64_t *read_bytes, ts_err *err);
    void *user;
    int n_loaders;          /* loader threads per arena, >= 1 */
    uint64_t scratch_bytes; /* each loader's scratch */
    uint32_t delay_us;      /* each job sleeps this long first (loader_delay_us=: a slow disk) */
    bool routed;            /* read ahead only the predicted experts (else whole layers) */
    float full;             /* a layer routing to more than this fraction of its experts gets the next read whole */
    /* BROKEN ON PURPOSE (honoured in TS_TEST_HOOKS builds only):
     * skip_fill: the loaders report the dense parts of the second streamed
     * layer done without writing them; the pacing check must refuse the
     * slot. skip_demand: route() neither reads nor checks the routed
     * experts it was not given ahead (after the queued ones land): a graph
     * computes on whatever the slot holds, and the results must change. */
    bool skip_fill, skip_demand;
} ts_rt_source;

typedef struct ts_rt_arena ts_rt_arena;

/* order[n_stream]: the streamed layers in consumption order; parts_off,
 * parts_bytes and parts_nexp [n_stream][n_parts]: where each weight slot of
 * a layer goes in its slot (bytes 0: none), and for an expert array its
 * expert count (expert e at off + e * bytes / n). Every expert array of a
 * layer has the same expert count. src is copied; its user must outlive
 * the arena. */
ts_rt_arena *ts_rt_arena_new(const ts_rt_source *src, int n_slots, uint64_t slot_bytes, const int *order, int n_stream,
                             int n_parts, const uint64_t *parts_off, const uint64_t *parts_bytes,
                             const int32_t *parts_nexp, ts_err *err);
void ts_rt_arena_free(ts_rt_arena *a);
uint8_t *ts_rt_arena_slot(ts_rt_arena *a, int j);
int ts_rt_arena_n_slots(const ts_rt_arena *a);
/* Whether the k-th streamed layer has expert arrays (route() applies). */
bool ts_rt_arena_has_experts(const ts_rt_arena *a, int k);

int ts_rt_arena_begin(ts_rt_arena *a, ts_err *err);
int ts_rt_arena_wait(ts_rt_arena *a, int k, ts_err *err);
/* ids [n_ids]: the expert ids the routing node wrote (every token's k). */
int ts_rt_arena_route(ts_rt_arena *a, int k, const int32_t *ids, int64_t n_ids, ts_err *err);
void ts_rt_arena_done(ts_rt_arena *a, int k);
void ts_rt_arena_abort(ts_rt_arena *a);

typedef struct ts_rt_arena_stats {
    uint64_t read_bytes;  /* from the source */
    uint64_t fills;       /* layers whose dense parts were filled */
    uint64_t failed;      /* fills that failed */
    uint64_t stall_ns;    /* the runner's time blocked in wait and route */
    uint64_t whole;       /* MoE layer fills that read every expert ahead */
    uint64_t ahead;       /* experts read ahead of the routing node (whole or predicted) */
    uint64_t demand;      /* experts read at the routing node (routed, not read ahead) */
    uint64_t routed;      /* experts routed to, summed over the routing nodes */
    uint64_t predicted;   /* of those, read ahead by prediction (routed mode, not whole) */
    uint64_t predict_n;   /* routed experts at routing nodes of layers filled by prediction */
    uint64_t slot_bytes;
    int n_slots, n_loaders, n_stream;
} ts_rt_arena_stats;
void ts_rt_arena_get_stats(const ts_rt_arena *a, ts_rt_arena_stats *out);

#endif
