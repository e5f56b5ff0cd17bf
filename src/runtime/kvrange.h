/* kvrange.h - which rows of a KV cache a device's copy holds as the host
 * has them: a small set of disjoint half-open row ranges. The runtime
 * syncs only the rows a run reads that are missing (runtime/layers.c), marks
 * what a run wrote, and drops what the host rewrote (a CPU forward, a
 * truncation). Full means conservative: when more ranges would be needed
 * than fit, the highest is forgotten (those rows are synced again), never
 * kept wrongly.
 */
#ifndef TS_RUNTIME_KVRANGE_H
#define TS_RUNTIME_KVRANGE_H

#include <stdint.h>

#define TS_RT_KV_MAX_RANGES 16

typedef struct ts_rt_kv_ranges {
    int n;                          /* ranges in use, sorted, disjoint, not touching */
    int64_t a[TS_RT_KV_MAX_RANGES]; /* [a[i], b[i]) */
    int64_t b[TS_RT_KV_MAX_RANGES];
} ts_rt_kv_ranges;

void ts_rt_kv_clear(ts_rt_kv_ranges *r);
/* Rows [a, b) are now the same on both sides. */
void ts_rt_kv_add(ts_rt_kv_ranges *r, int64_t a, int64_t b);
/* Rows [a, b) changed on the host (b may be INT64_MAX: everything from a). */
void ts_rt_kv_remove(ts_rt_kv_ranges *r, int64_t a, int64_t b);
/* The parts of [a, b) not held, in order, into ma/mb (up to cap of them);
 * returns how many there are. */
int ts_rt_kv_missing(const ts_rt_kv_ranges *r, int64_t a, int64_t b, int64_t *ma, int64_t *mb, int cap);

#endif
