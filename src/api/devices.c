/* devices.c - ts_devices_list and ts_devices: the public face of the engine
 * registry's listing (src/engine ts_eng_list / ts_eng_info_line), as text
 * and as ts_device_info records (no engine struct crosses the API). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "engine/engine.h"
#include "quant/quant.h"
#include "tessera.h"

/* The registry's listing into a fresh array (*n entries), or NULL. */
static ts_eng_info *list_all(int *n_out) {
    /* ts_eng_list reports the full count; a second call sizes the array when
     * the first guess is too small (more OpenCL devices than expected). */
    int want = 16;
    ts_eng_info *info = NULL;
    int n = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        free(info);
        info = malloc(sizeof *info * (size_t)want);
        if (!info) return NULL;
        n = ts_eng_list(info, want);
        if (n <= want) break;
        want = n;
    }
    *n_out = n > want ? want : n;
    return info;
}

int64_t ts_devices_list(char *buf, size_t cap) {
    if (!buf) cap = 0;
    int n = 0;
    ts_eng_info *info = list_all(&n);
    if (!info) return -1;
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

int32_t ts_devices(ts_device_info *out, int32_t cap) {
    int n = 0;
    ts_eng_info *info = list_all(&n);
    if (!info) return -1;
    if (!out) cap = 0;
    size_t stride = 0;
    if (cap > 0) memcpy(&stride, out, sizeof stride);
    if (cap > 0 && stride < sizeof(size_t)) {
        free(info);
        return -1; /* struct_size not set: nothing sensible to write */
    }
    for (int i = 0; i < n && i < cap; i++) {
        const ts_eng_info *in = &info[i];
        const ts_eng_desc *d = &in->desc;
        ts_device_info r;
        memset(&r, 0, sizeof r);
        r.struct_size = sizeof r;
        snprintf(r.name, sizeof r.name, "%s", in->name);
        r.ok = in->ok;
        snprintf(r.reason, sizeof r.reason, "%s", in->ok ? "" : in->reason);
        if (in->ok) {
            r.kind = (ts_device_kind)d->kind;
            snprintf(r.kind_name, sizeof r.kind_name, "%s", ts_eng_kind_name(d->kind));
            snprintf(r.detail, sizeof r.detail, "%s", d->detail);
            r.window_bytes = d->window_bytes;
            r.max_buf_bytes = d->max_buf_bytes;
            r.n_widths = d->n_widths < 8 ? d->n_widths : 8;
            for (int k = 0; k < r.n_widths; k++) r.widths[k] = d->widths[k];
            r.widths_required = d->widths_required;
            r.max_width = d->max_width;
            r.min_width = d->min_width;
            r.crossing_ns = d->crossing_ns;
            size_t len = 0;
            for (int op = 0; op < TS_OP_COUNT; op++)
                if ((d->ops & (1u << op)) && len < sizeof r.ops)
                    len += (size_t)snprintf(r.ops + len, sizeof r.ops - len, "%s%s", len ? "," : "",
                                            ts_op_name((ts_op)op));
            len = 0;
            for (uint32_t t = 0; t < TS_TYPE_COUNT && t < 64; t++)
                if ((d->weight_types & (1ull << t)) && ts_type_info(t) && len < sizeof r.weight_types)
                    len += (size_t)snprintf(r.weight_types + len, sizeof r.weight_types - len, "%s%s", len ? "," : "",
                                            ts_type_info(t)->name);
        }
        /* struct_size is the caller's: keep it, copy what fits */
        void *dst = (char *)out + (size_t)i * stride;
        memcpy(dst, &stride, sizeof stride);
        (void)ts_struct_out(dst, &r, sizeof r);
    }
    free(info);
    return n;
}
