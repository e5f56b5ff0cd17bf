/* profile.h - what one transformer layer costs on a device, by width: the
 * curve a matrix engine has (flat, then a step every time the tiles fill)
 * that placement and the diffusion decoder's lookahead read. */
#ifndef TS_RUNTIME_PROFILE_H
#define TS_RUNTIME_PROFILE_H

#include "runtime/block.h"

/* Runs the nodes of one layer of shape s that dev takes (its device
 * segments, each one graph, all in one batch), over random weights of type
 * wtype (packed in the engine's own layout where it has one, in the CPU's
 * panels where it reads them) and a cache of s->n_ctx rows, at each of the
 * n widths (pos0 0, n_tok = the width): one warm-up run, then the median
 * of reps runs of enqueue + finish, into ms[i]. -1 with err when the layer
 * cannot be built or run there (a width past the device's, no node it
 * takes). */
int ts_rt_profile_layer(ts_engine *dev, const ts_rt_block_shape *s, uint32_t wtype, const int *widths, int n,
                        int reps, double *ms, ts_err *err);

#endif
