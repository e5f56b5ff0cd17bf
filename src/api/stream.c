/* stream.c - the two-engine streams' shared calls (stream_impl.h) and the
 * public arithmetic of a cut (tessera.h ts_stream_*). */
#include <stdio.h>
#include <string.h>

#include "api/stream_impl.h"

int64_t ts_pss_bytes(void) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f)
        return -1;
    char line[256];
    long long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Pss: %lld kB", &kb) == 1)
            break;
    fclose(f);
    return kb < 0 ? -1 : (int64_t)kb * 1024;
}

/* ---- the arithmetic of a cut ---- */

static ts_pipe_rates to_pipe(const ts_stream_rates *r) {
    return (ts_pipe_rates){.ta = r->block_a_s, .tb = r->block_b_s, .tv = r->tail_s};
}

double ts_stream_period(const ts_stream_rates *r, int32_t n_blocks, int32_t cut) {
    const ts_pipe_rates q = to_pipe(r);
    return ts_pipe_period(&q, n_blocks, cut);
}

double ts_stream_crossing(const ts_stream_rates *r, int32_t n_blocks) {
    const ts_pipe_rates q = to_pipe(r);
    return ts_pipe_crossing(&q, n_blocks);
}

double ts_stream_latency(const ts_stream_rates *r, int32_t n_blocks, int32_t cut) {
    const ts_pipe_rates q = to_pipe(r);
    return ts_pipe_latency(&q, n_blocks, cut);
}

int32_t ts_stream_best_cut(const ts_stream_rates *r, int32_t n_blocks, int32_t step, double slo_s) {
    const ts_pipe_rates q = to_pipe(r);
    return slo_s > 0 ? ts_pipe_slo_cut(&q, n_blocks, slo_s) : ts_pipe_best_cut(&q, n_blocks, step);
}

/* ---- measuring and running ---- */

ts_status ts_api_stream_measure(const ts_pipe_work *w, const ts_logger *lg, int32_t probe_blocks,
                                ts_stream_rates *solo, ts_stream_rates *corun, ts_error *err) {
    if (!w || !solo || !corun)
        return ts_api_fail(err, lg, TS_ERR_INVALID_ARG, "stream measure: NULL argument");
    ts_pipe_rates a, b;
    ts_err e = {{0}};
    if (ts_pipe_measure(w, probe_blocks > 0 ? probe_blocks : w->step_blocks, &a, &b, &e))
        return ts_api_fail(err, lg, TS_ERR_INTERNAL, "%s", e.msg);
    *solo = (ts_stream_rates){.block_a_s = a.ta, .block_b_s = a.tb, .tail_s = a.tv};
    *corun = (ts_stream_rates){.block_a_s = b.ta, .block_b_s = b.tb, .tail_s = b.tv};
    return ts_api_ok(err);
}

static void to_result(const ts_pipe_result *r, ts_stream_result *o) {
    *o = (ts_stream_result){.n_requests = r->n_req, .cut = r->cut, .total_s = r->total_s, .period_s = r->period_s,
                            .latency_s = r->latency_s, .max_latency_s = r->max_latency_s, .a_busy_s = r->a_busy_s,
                            .b_busy_s = r->b_busy_s, .tail_s = r->tail_s, .handoff_s = r->handoff_s,
                            .slo_met = r->slo_met};
}

static ts_status run_fail(const ts_logger *lg, ts_error *err, const ts_err *e) {
    return ts_api_fail(err, lg, strncmp(e->msg, "cancelled", 9) ? TS_ERR_INTERNAL : TS_ERR_CANCELLED, "%s", e->msg);
}

ts_status ts_api_stream_run(const ts_pipe_work *w, const ts_logger *lg, int32_t cut, int32_t n_req,
                            const ts_stream_rates *pace, double slo_s, ts_stream_result *res, ts_error *err) {
    if (!w || !res)
        return ts_api_fail(err, lg, TS_ERR_INVALID_ARG, "stream run: NULL argument");
    if (cut < 0 || cut > w->n_blocks || n_req < 1)
        return ts_api_fail(err, lg, TS_ERR_INVALID_ARG, "cut %d of %d block executions, %d requests", cut,
                           w->n_blocks, n_req);
    ts_pipe_rates q;
    if (pace)
        q = to_pipe(pace);
    ts_pipe_result r;
    ts_err e = {{0}};
    if (ts_pipe_stream(w, cut, n_req, pace ? &q : NULL, slo_s, &r, NULL, &e))
        return run_fail(lg, err, &e);
    to_result(&r, res);
    return ts_api_ok(err);
}

ts_status ts_api_stream_run_whole(const ts_pipe_work *w, const ts_logger *lg, uint32_t stages, int32_t n_req,
                                  ts_stream_result *res, ts_error *err) {
    if (!w || !res)
        return ts_api_fail(err, lg, TS_ERR_INVALID_ARG, "stream baseline: NULL argument");
    if (stages < 1 || stages > 3 || n_req < 1)
        return ts_api_fail(err, lg, TS_ERR_INVALID_ARG, "stages %u (1: A, 2: B, 3: both), %d requests", stages,
                           n_req);
    ts_pipe_result r;
    ts_err e = {{0}};
    if (ts_pipe_parallel(w, stages, n_req, &r, NULL, &e))
        return run_fail(lg, err, &e);
    to_result(&r, res);
    return ts_api_ok(err);
}
