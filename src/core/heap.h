/* heap.h - a binary min-heap over a caller-owned array, generated per element
 * type: TS_HEAP_DEFINE(name, T, before) defines
 *   static void name_push(T *h, size_t *n, T x);  (h has room for *n + 1)
 *   static T    name_pop(T *h, size_t *n);        (*n > 0; returns the first)
 * where before(const T *a, const T *b) is true when a must come out first.
 * Used by the tokenizers' merge queues (text/bpe.c, text/spm.c). */
#ifndef TS_CORE_HEAP_H
#define TS_CORE_HEAP_H

#include <stddef.h>

#define TS_HEAP_DEFINE(name, T, before)                                      \
    static void name##_push(T *h, size_t *n, T x) {                          \
        size_t i = (*n)++;                                                   \
        while (i > 0) {                                                      \
            size_t p = (i - 1) / 2;                                          \
            if (!before(&x, &h[p])) break;                                   \
            h[i] = h[p];                                                     \
            i = p;                                                           \
        }                                                                    \
        h[i] = x;                                                            \
    }                                                                        \
    static T name##_pop(T *h, size_t *n) {                                   \
        T top = h[0];                                                        \
        if (--(*n) == 0) return top;                                         \
        T last = h[*n];                                                      \
        size_t i = 0;                                                        \
        for (;;) {                                                           \
            size_t m = 2 * i + 1;                                            \
            if (m >= *n) break;                                              \
            if (m + 1 < *n && before(&h[m + 1], &h[m])) m++;                 \
            if (!before(&h[m], &last)) break;                                \
            h[i] = h[m];                                                     \
            i = m;                                                           \
        }                                                                    \
        h[i] = last;                                                         \
        return top;                                                          \
    }

#endif
