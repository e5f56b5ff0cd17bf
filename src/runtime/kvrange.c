/* kvrange.c - row ranges of a KV cache held by a device (kvrange.h). */
#include "runtime/kvrange.h"

#include <string.h>

void ts_rt_kv_clear(ts_rt_kv_ranges *r) { r->n = 0; }

void ts_rt_kv_add(ts_rt_kv_ranges *r, int64_t a, int64_t b) {
    if (b <= a)
        return;
    int64_t na[TS_RT_KV_MAX_RANGES + 1], nb[TS_RT_KV_MAX_RANGES + 1];
    int n = 0, i = 0;
    /* ranges wholly before [a, b) and not touching it */
    while (i < r->n && r->b[i] < a)
        na[n] = r->a[i], nb[n] = r->b[i], n++, i++;
    /* merge every range that overlaps or touches [a, b) */
    while (i < r->n && r->a[i] <= b) {
        if (r->a[i] < a)
            a = r->a[i];
        if (r->b[i] > b)
            b = r->b[i];
        i++;
    }
    na[n] = a, nb[n] = b, n++;
    while (i < r->n)
        na[n] = r->a[i], nb[n] = r->b[i], n++, i++;
    if (n > TS_RT_KV_MAX_RANGES)
        n = TS_RT_KV_MAX_RANGES; /* forget the highest: those rows get synced again */
    memcpy(r->a, na, (size_t)n * sizeof *na);
    memcpy(r->b, nb, (size_t)n * sizeof *nb);
    r->n = n;
}

void ts_rt_kv_remove(ts_rt_kv_ranges *r, int64_t a, int64_t b) {
    if (b <= a)
        return;
    int64_t na[TS_RT_KV_MAX_RANGES + 1], nb[TS_RT_KV_MAX_RANGES + 1];
    int n = 0;
    for (int i = 0; i < r->n; i++) {
        const int64_t x = r->a[i], y = r->b[i];
        if (y <= a || x >= b) { /* untouched */
            na[n] = x, nb[n] = y, n++;
            continue;
        }
        if (x < a)
            na[n] = x, nb[n] = a, n++;
        if (y > b)
            na[n] = b, nb[n] = y, n++;
    }
    if (n > TS_RT_KV_MAX_RANGES)
        n = TS_RT_KV_MAX_RANGES; /* (a cut in the middle of one range adds one) */
    memcpy(r->a, na, (size_t)n * sizeof *na);
    memcpy(r->b, nb, (size_t)n * sizeof *nb);
    r->n = n;
}

int ts_rt_kv_missing(const ts_rt_kv_ranges *r, int64_t a, int64_t b, int64_t *ma, int64_t *mb, int cap) {
    int n = 0;
    int64_t p = a;
    for (int i = 0; i < r->n && p < b; i++) {
        if (r->b[i] <= p)
            continue;
        if (r->a[i] >= b)
            break;
        if (r->a[i] > p) {
            if (n < cap)
                ma[n] = p, mb[n] = r->a[i];
            n++;
        }
        p = r->b[i];
    }
    if (p < b) {
        if (n < cap)
            ma[n] = p, mb[n] = b;
        n++;
    }
    return n;
}
