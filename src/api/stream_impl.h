/* stream_impl.h - what the two-engine streams of tessera.h (videos,
 * prompts) share inside the library: the public measure / run / baseline
 * calls over a pipe/pipe.h work, and the process's PSS. */
#ifndef TS_API_STREAM_IMPL_H
#define TS_API_STREAM_IMPL_H

#include "api/api_internal.h"
#include "diffusion/diffusion.h"
#include "pipe/pipe.h"

/* The decoders' configuration of public diffusion parameters (diffusion.c). */
ts_diff_cfg ts_api_diff_cfg(const ts_diffusion_params *p);

/* The proportional set size of the process (/proc/self/smaps_rollup), -1
 * when unknown. */
int64_t ts_pss_bytes(void);

/* ts_*_pipe_measure, _run and _run_whole over w (NULL: invalid argument),
 * failures logged to lg. */
ts_status ts_api_stream_measure(const ts_pipe_work *w, const ts_logger *lg, int32_t probe_blocks,
                                ts_stream_rates *solo, ts_stream_rates *corun, ts_error *err);
ts_status ts_api_stream_run(const ts_pipe_work *w, const ts_logger *lg, int32_t cut, int32_t n_req,
                            const ts_stream_rates *pace, double slo_s, ts_stream_result *res, ts_error *err);
ts_status ts_api_stream_run_whole(const ts_pipe_work *w, const ts_logger *lg, uint32_t stages, int32_t n_req,
                                  ts_stream_result *res, ts_error *err);

#endif
