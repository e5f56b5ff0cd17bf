/* convert.h - weights in a type an engine takes: the probe that finds the
 * type (a real matmul on the device, compared with the CPU reference) and
 * the conversion done once at load when the stored type is refused. The
 * runtime calls these when it places a model's weights on a device
 * (runtime/layers.c); they use only the engine interface (engine.h).
 */
#ifndef TS_RUNTIME_CONVERT_H
#define TS_RUNTIME_CONVERT_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "engine/engine.h"

/* Finds the weight type e takes for a matmul whose weights are stored as
 * `type` with rows of n_in elements: `type` itself if a probe matmul in it
 * builds, runs and matches the CPU reference; else the nearest candidate
 * that does (a quantized grid: Q8_0, then F16, then F32; a float type:
 * F16, then F32). Each probe really runs on the device. note (may be NULL)
 * gets a one-line account: "Q6_K: refused (matmul does not take Q6_K);
 * Q8_0: ok (nmse 2.1e-14)". Returns the type, or -1 with err when nothing
 * passes. */
int ts_rt_probe_weight_type(ts_engine *e, uint32_t type, int64_t n_in, char *note, size_t note_size, ts_err *err);

/* Converts n_rows rows of n_in elements from src_type (rows src_row_bytes
 * apart) to dst_type (rows ts_row_size(dst_type, n_in) apart at dst): exact
 * dequantization, then the reference quantizer. Done once at load. */
int ts_rt_convert_rows(uint32_t src_type, const void *src, size_t src_row_bytes, uint32_t dst_type, void *dst,
                        int64_t n_in, int64_t n_rows, ts_err *err);

#endif
