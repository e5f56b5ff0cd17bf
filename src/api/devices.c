/* devices.c - ts_devices_list: the public face of the engine registry's
 * listing (src/engine ts_eng_list / ts_eng_info_line), rendered as text so
 * the API exposes no engine structs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "tessera.h"

int64_t ts_devices_list(char *buf, size_t cap) {
    if (!buf) cap = 0;
    /* ts_eng_list reports the full count; a second call sizes the array when
     * the first guess is too small (more OpenCL devices than expected). */
    int want = 16;
    ts_eng_info *info = NULL;
    int n = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        free(info);
        info = malloc(sizeof *info * (size_t)want);
        if (!info) return -1;
        n = ts_eng_list(info, want);
        if (n <= want) break;
        want = n;
    }
    if (n > want) n = want;
    int64_t len = 0;
    char line[1024];
    for (int i = 0; i < n; i++) {
        ts_eng_info_line(&info[i], line, sizeof line);
        const size_t k = strlen(line);
        /* copy what fits; len always counts the full text */
        for (size_t j = 0; j <= k; j++) {
            const char ch = j < k ? line[j] : '\n';
            if ((uint64_t)len + 1 < cap) buf[len] = ch;
            len++;
        }
    }
    if (cap) buf[(uint64_t)len < cap ? (size_t)len : cap - 1] = '\0';
    free(info);
    return len;
}
