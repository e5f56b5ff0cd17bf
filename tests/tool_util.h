/* tool_util.h - what the test tools that drive the model layer from Python
 * (model_tool.c, dllm_tool.c) share. */
#ifndef TS_TESTS_TOOL_UTIL_H
#define TS_TESTS_TOOL_UTIL_H

#include <stdint.h>
#include <stdlib.h>

/* Comma- or space-separated ids into a new array (*n of them); -1 on junk
 * or out of memory. */
static inline int tool_parse_ids(const char *s, int32_t **out, int32_t *n) {
    int32_t cap = 16, k = 0;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    if (!v) return -1;
    while (*s) {
        char *end;
        long x = strtol(s, &end, 10);
        if (end == s) {
            free(v);
            return -1;
        }
        if (k == cap) {
            cap *= 2;
            int32_t *nv = realloc(v, (size_t)cap * sizeof *v);
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
        }
        v[k++] = (int32_t)x;
        s = end;
        while (*s == ',' || *s == ' ') s++;
    }
    *out = v;
    *n = k;
    return 0;
}

#endif
