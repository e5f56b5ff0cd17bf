/* pipe.h - two engines, one cut: seed 002's stream pipeline (HeteroVDiff
 * section 4.3) over any trajectory that flattens into block executions.
 *
 * A request's work is B block executions in order (a video's N steps x L
 * DiT blocks; a diffusion LLM's steps x layers; an AR prompt's chunks x
 * layers) and then a tail (the VAE decoder; the output work). One cut k
 * splits it: stage A runs blocks [0, k) of request i, hands its state over
 * once, and starts request i + 1 while stage B runs [k, B) and the tail of
 * request i. Each stage is one thread driving its own engine; every block
 * still runs in order on the whole activation, so the split is exact: the
 * output is the one engine's whenever both compute alike.
 *
 * The cut comes from measured rates (Eq. 4 and 5 of the seed): with ta, tb
 * the seconds per block on A and on B and tv the tail's on B,
 *   period(k) = max(k ta, (B - k) tb + tv)
 * and the two terms cross at k = (B tb + tv) / (ta + tb); the better of
 * the neighbouring integers is k*. The rates are taken while both stages
 * run (co-run: each engine's speed changes when the other is busy) and
 * alone (solo: the seed's ablation), and the tail's cost is in them.
 *
 * The work is the caller's (callbacks over its own request slots); this
 * module owns the threads, the order, the timing and the arithmetic above.
 */
#ifndef TS_PIPE_PIPE_H
#define TS_PIPE_PIPE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/err.h"

#define TS_PIPE_STAGES 2

typedef struct ts_pipe_work {
    int n_blocks;    /* B, block executions per request (>= 1) */
    int step_blocks; /* blocks per step (L), the unit of a step-boundary cut (>= 1) */
    int n_slots;     /* request states the caller holds (>= 2): A fills one while B drains another */
    void *ctx;
    /* Blocks [b0, b1) of request `req` held in `slot`, on `stage` (0: A,
     * 1: B). b0 == 0 starts the request (its input from req: noise seed,
     * prompt); b1 == n_blocks finishes its trajectory. Consecutive calls
     * on one slot continue where the last stopped, on the same stage or,
     * after a handoff, on the other. 0, or -1 with err. */
    int (*blocks)(void *ctx, int stage, int slot, int req, int b0, int b1, ts_err *err);
    /* Stage A's state of slot, stopped at block b (0 < b <= n_blocks),
     * made the other stage's (the hidden state between blocks, copied once
     * into memory both address; at b = n_blocks what the tail needs). NULL:
     * nothing crosses (the slot holds it all). */
    int (*handoff)(void *ctx, int slot, int b, ts_err *err);
    /* The tail of slot's finished request on `stage` (the pipeline runs it
     * on B; ts_pipe_parallel on either) (NULL: none). */
    int (*tail)(void *ctx, int stage, int slot, int req, ts_err *err);
    /* The request is complete (after the tail), on the thread of the stage
     * that finished it (NULL: nothing). */
    int (*done)(void *ctx, int slot, int req, ts_err *err);
} ts_pipe_work;

/* Seconds per block on A and on B, and of the tail on B. */
typedef struct ts_pipe_rates {
    double ta, tb, tv;
} ts_pipe_rates;

/* Eq. 4: the steady-state period of cut k (0 <= k <= B). */
double ts_pipe_period(const ts_pipe_rates *r, int n_blocks, int k);
/* Eq. 5's crossing (B tb + tv) / (ta + tb) (may be fractional). */
double ts_pipe_crossing(const ts_pipe_rates *r, int n_blocks);
/* The cut of the smallest predicted period among the integers next to the
 * crossing (step > 1: among the multiples of step, the step-boundary
 * ablation), clamped to [0, B]. */
int ts_pipe_best_cut(const ts_pipe_rates *r, int n_blocks, int step);

/* Measures the rates on `probe` blocks per stage (a whole number of steps
 * keeps the per-step work in the mean): solo (each stage alone, then the
 * tail alone) and co-run (both stages at once, every timed block of each
 * run while the other stage was busy; the tail timed while A runs blocks).
 * Uses slots 0 and 1 and request numbers -1, -2 (the callbacks see them).
 * 0, or -1 with err. */
int ts_pipe_measure(const ts_pipe_work *w, int probe, ts_pipe_rates *solo, ts_pipe_rates *corun, ts_err *err);

typedef struct ts_pipe_result {
    int n_req;
    int cut;
    double total_s;   /* first start to last completion */
    double period_s;  /* steady state: median interval between completions (total_s with one request) */
    double latency_s; /* median request latency (its start to its completion) */
    double max_latency_s;
    double a_busy_s, b_busy_s; /* each stage's time in its calls (B's tails included) */
    double tail_s;             /* B's tails together */
    double handoff_s;          /* all hand-offs together */
    int slo_met;               /* requests whose latency <= slo_s (all when there is none) */
} ts_pipe_result;

/* The latency of one request through cut k when nothing waits:
 * k ta + (B - k) tb + tv. */
double ts_pipe_latency(const ts_pipe_rates *r, int n_blocks, int k);
/* The cut of the smallest predicted period whose latency is within slo_s
 * (seed 002's SLO mode: requests per hour with every request under a
 * deadline); -1 when no cut meets it. */
int ts_pipe_slo_cut(const ts_pipe_rates *r, int n_blocks, double slo_s);

/* Streams requests 0 .. n_req - 1 through the two stages with cut k (0:
 * all on B; n_blocks: all blocks on A, only the tail on B). pace (may be
 * NULL: each request starts as soon as a slot is free) admits request i
 * just in time: when its hand-off is predicted to meet B free, so its
 * latency is the stages' sum rather than a queue's (the SLO mode).
 * slo_s > 0 counts the requests within it. done_s (may be NULL) [n_req]
 * gets each request's completion time from the start. 0, or -1 with err
 * (the first failure of either stage; the other stops after its current
 * call). */
int ts_pipe_stream(const ts_pipe_work *w, int cut, int n_req, const ts_pipe_rates *pace, double slo_s,
                   ts_pipe_result *res, double *done_s, ts_err *err);

/* The baselines without a cut: each stage in `stages` (bit 0: A, bit 1:
 * B) runs whole requests (every block and the tail) on its own thread,
 * taking the next request as it frees up; one stage is that engine alone,
 * both are data parallelism. Slots: stage s uses s, s + 2, ... (n_slots
 * >= 2). res as ts_pipe_stream's (cut -1; a_busy_s / b_busy_s each
 * stage's), except period_s: 1 / the sum of each stage's requests per
 * second of its busy time (completions of whole requests come in bursts,
 * so a short stream's intervals would not show the steady state). */
int ts_pipe_parallel(const ts_pipe_work *w, unsigned stages, int n_req, ts_pipe_result *res, double *done_s,
                     ts_err *err);

#endif
