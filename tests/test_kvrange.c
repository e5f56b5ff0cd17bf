/* test_kvrange.c - runtime/kvrange.h against a plain bitmap of rows: random
 * adds and removes, every query's missing parts equal to the bitmap's gaps,
 * and the ranges never claiming a row the bitmap does not hold (when full,
 * they may forget rows, never invent them). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "runtime/kvrange.h"

enum { ROWS = 300 };

int main(void) {
    int forgot = 0, queries = 0;
    for (int trial = 0; trial < 200; trial++) {
        ts_rt_kv_ranges r;
        ts_rt_kv_clear(&r);
        unsigned char held[ROWS] = {0};
        for (int op = 0; op < 60; op++) {
            const int64_t a = (int64_t)(rng() % ROWS), len = (int64_t)(rng() % 40), b = a + len > ROWS ? ROWS : a + len;
            if (rng() % 3) {
                ts_rt_kv_add(&r, a, b);
                memset(held + a, 1, (size_t)(b - a));
            } else {
                const bool to_end = rng() % 8 == 0; /* a truncation */
                ts_rt_kv_remove(&r, a, to_end ? INT64_MAX : b);
                memset(held + a, 0, (size_t)((to_end ? ROWS : b) - a));
            }
            /* the ranges are sorted, disjoint, within the rows, and never
             * claim a row that is not held */
            for (int i = 0; i < r.n; i++) {
                CHECK(r.a[i] < r.b[i] && (i == 0 || r.b[i - 1] < r.a[i]), "range %d [%lld, %lld) out of order", i,
                      (long long)r.a[i], (long long)r.b[i]);
                for (int64_t x = r.a[i]; x < r.b[i] && x < ROWS; x++) CHECK(held[x], "row %lld claimed", (long long)x);
            }
            /* a query: the missing parts are exactly the rows not in the ranges */
            const int64_t qa = (int64_t)(rng() % ROWS), qb = qa + (int64_t)(rng() % (ROWS - qa + 1));
            int64_t ma[64], mb[64];
            const int nm = ts_rt_kv_missing(&r, qa, qb, ma, mb, 64);
            CHECK(nm <= 64, "%d missing parts", nm);
            unsigned char miss[ROWS] = {0};
            for (int i = 0; i < nm && i < 64; i++) {
                CHECK(ma[i] < mb[i] && ma[i] >= qa && mb[i] <= qb, "part [%lld, %lld) outside [%lld, %lld)",
                      (long long)ma[i], (long long)mb[i], (long long)qa, (long long)qb);
                for (int64_t x = ma[i]; x < mb[i]; x++) miss[x] = 1;
            }
            for (int64_t x = qa; x < qb; x++) {
                bool in = false;
                for (int i = 0; i < r.n; i++) in |= x >= r.a[i] && x < r.b[i];
                CHECK(miss[x] == !in, "row %lld: missing %d, in the ranges %d", (long long)x, miss[x], in);
                forgot += !in && held[x];
            }
            queries++;
        }
    }
    printf("kvrange: %d queries against a bitmap; %d held rows forgotten when the set was full (synced again)\n",
           queries, forgot);
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
