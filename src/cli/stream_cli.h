/* stream_cli.h - what `tessera video --pipe` and `tessera pipe` share: the
 * --cut modes (auto, solo, step, sweep, rates, setup, K1,K2,...), --slo,
 * --baselines, and their text and JSON reports, over either stream's
 * calls (tessera.h "streams on two engines"). */
#ifndef TS_CLI_STREAM_CLI_H
#define TS_CLI_STREAM_CLI_H

#include <stdbool.h>

#include "tessera.h"

typedef struct cli_stream {
    void *p; /* the stream (ts_video_pipe, ts_prompt_pipe) */
    ts_status (*measure)(void *p, int32_t probe, ts_stream_rates *solo, ts_stream_rates *co, ts_error *err);
    ts_status (*run)(void *p, int32_t cut, int32_t n, const ts_stream_rates *pace, double slo, ts_stream_result *r,
                     ts_error *err);
    ts_status (*run_whole)(void *p, uint32_t stages, int32_t n, ts_stream_result *r, ts_error *err);
    ts_stream_info info;
    const char *unit, *units; /* "video", "videos" */
    bool quiet, stats_json;
    bool *announce; /* set while a single cut runs (the caller's per-request lines), or NULL */
} cli_stream;

/* "setup": prints the setup (JSON with stats_json) and returns. Else
 * measures, picks the cuts cut_s names, runs n requests through each and,
 * with baselines, whole requests on A, B and both; prints as it goes
 * (stats_json: one JSON object on stderr). 0, or 1 after printing the error. */
int cli_stream_cuts(const cli_stream *s, const char *cut_s, int32_t n, double slo, int32_t probe, bool baselines);

#endif
