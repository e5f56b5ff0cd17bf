/* calib.h - a model's activation calibration (seed 003): for every layer
 * and matmul input (ts_rt_clip_input) the clip of the per-tensor INT8 scale,
 * the channels that went beyond it and how often, and per layer the
 * importance of its outlier handling. `tessera calibrate` measures it and
 * writes it as a GGUF sidecar; the engine option calib=FILE reads it and
 * the runtime binds it per layer as clip records (engine.h ts_eng_clip).
 *
 * The sidecar (docs/ENGINE.md "Calibration sidecar"): general.type =
 * "tessera.calib", tessera.calib.version = 1, tessera.calib.percentile
 * (f32), tessera.calib.tokens and .chunks (u32: what it was measured on),
 * and F32 tensors
 *   calib.n_in        [n_layer][4]  each input's width (checked at load)
 *   calib.clip        [n_layer][4]  the clip (0: none, dynamic scales)
 *   calib.frac        [n_layer][4]  fraction of the input's elements beyond the clip
 *   calib.shadow      [n_layer]     1: outliers computed on the CPU, 0: none (pruned)
 *   calib.importance  [n_layer]     perplexity increase when the layer's outliers
 *                                   are not computed (optional: prune= needs it)
 *   blk.L.hot.I       [n_in]        per channel, the fraction of calibration
 *                                   chunks in which it went beyond the clip (> 0: hot)
 */
#ifndef TS_RUNTIME_CALIB_H
#define TS_RUNTIME_CALIB_H

#include <stdbool.h>
#include <stdint.h>

#include "core/err.h"
#include "runtime/block.h"

typedef struct ts_rt_calib {
    int n_layer;
    int64_t *n_in;     /* [n_layer * TS_CLIP_N_IN] */
    float *clip;       /* [n_layer * TS_CLIP_N_IN] */
    float *frac;       /* [n_layer * TS_CLIP_N_IN] */
    float *shadow;     /* [n_layer] */
    float *importance; /* [n_layer], or NULL */
    float **hot;       /* [n_layer * TS_CLIP_N_IN] -> [n_in] (NULL where n_in is 0) */
    float percentile;
    uint32_t tokens, chunks;
} ts_rt_calib;

/* An empty calibration for these widths: clips 0, shadow 1, hot 0. */
ts_rt_calib *ts_rt_calib_new(int n_layer, const int64_t *n_in, ts_err *err);
void ts_rt_calib_free(ts_rt_calib *c);
int ts_rt_calib_write(const ts_rt_calib *c, const char *path, ts_err *err);
/* Reads and validates a sidecar (NULL with err naming the field). */
ts_rt_calib *ts_rt_calib_read(const char *path, ts_err *err);

/* Which layers prune=P clips: the round(P * n_layer) least important
 * (ties: the lower layer first). -1 with err when P > 0 and the sidecar
 * has no importance. */
int ts_rt_calib_pruned(const ts_rt_calib *c, float prune, bool *pruned, ts_err *err);

/* Record offsets of a layer with these input widths (ts_eng_clip_bytes
 * each, in ts_rt_clip_input order); returns the layer's bytes. */
uint64_t ts_rt_clip_offsets(const int64_t n_in[TS_CLIP_N_IN], uint64_t off[TS_CLIP_N_IN]);

/* Writes layer l's records into dst (ts_rt_clip_offsets bytes, 8-aligned):
 * its clips, hot channels, TS_CLIP_SHADOW unless pruned (a pruned layer's
 * input i keeps it where bit i of keep is set); flags |= extra. */
void ts_rt_calib_fill(const ts_rt_calib *c, int l, bool pruned, uint32_t keep, uint32_t extra, void *dst);

#endif
