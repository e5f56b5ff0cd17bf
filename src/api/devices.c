/* devices.c - ts_devices_list and ts_devices: the public face of the engine
 * registry's listing (src/engine ts_eng_list / ts_eng_info_line), as text
 * and as ts_device_info records (no engine struct crosses the API). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "core/threadpool.h"
#include "engine/engine.h"
#include "runtime/convert.h"
#include "runtime/profile.h"
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

ts_layer_shape ts_layer_shape_default(void) {
    ts_layer_shape s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    s.n_embd = 576, s.n_head = 9, s.n_head_kv = 3, s.head_dim = 64, s.n_ff = 1536;
    s.n_ctx = 1024;
    s.weight_type = "Q4_0";
    s.reps = 5;
    return s;
}

ts_status ts_device_profile(const char *device, const ts_layer_shape *shape, const int32_t *widths, int32_t n,
                            double *ms, ts_error *err) {
    ts_layer_shape p = ts_layer_shape_default();
    if (shape) {
        const ts_status st = ts_params_in(&p, sizeof p, shape, "ts_layer_shape", err, NULL);
        if (st != TS_OK) return st;
    }
    if (!device || !widths || !ms || n < 1)
        return ts_api_fail(err, NULL, TS_ERR_INVALID_ARG, "ts_device_profile: %s", !device ? "device is NULL"
                           : !widths || !ms ? "widths or ms is NULL" : "no widths");
    if (p.n_embd < 1 || p.n_head < 1 || p.n_head_kv < 1 || p.head_dim < 2 || p.head_dim % 2 || p.n_ff < 1 ||
        p.n_head % p.n_head_kv || p.n_ctx < 1 || p.reps < 1 || p.reps > 1000 || p.n_threads < 0 ||
        p.n_threads > TS_THREADS_MAX)
        return ts_api_fail(err, NULL, TS_ERR_INVALID_ARG,
                           "ts_layer_shape: n_embd %d, n_head %d, n_head_kv %d, head_dim %d, n_ff %d, n_ctx %d, reps %d, "
                           "n_threads %d: each must be positive (head_dim even, n_head a multiple of n_head_kv)",
                           (int)p.n_embd, (int)p.n_head, (int)p.n_head_kv, (int)p.head_dim, (int)p.n_ff, (int)p.n_ctx,
                           (int)p.reps, (int)p.n_threads);
    const int wt = p.weight_type ? ts_type_from_name(p.weight_type) : -1;
    if (wt < 0 || !ts_type_info((uint32_t)wt)->can_quant)
        return ts_api_fail(err, NULL, TS_ERR_INVALID_ARG,
                           "weight type '%s' cannot be made here (one of F32, F16, BF16, Q4_0, Q4_1, Q8_0)",
                           p.weight_type ? p.weight_type : "(null)");
    for (int i = 0; i < n; i++)
        if (widths[i] < 1 || widths[i] > p.n_ctx)
            return ts_api_fail(err, NULL, TS_ERR_INVALID_ARG, "width %d out of range [1, n_ctx %d]", (int)widths[i],
                               (int)p.n_ctx);
    ts_err e = {{0}};
    const ts_eng_open_params op = {.threads = p.n_threads ? p.n_threads : ts_physical_cores()};
    ts_engine *dev = ts_eng_open_ex(device, &op, &e);
    if (!dev) return ts_api_fail(err, NULL, TS_ERR_INVALID_ARG, "device '%s': %s", device, e.msg);
    const ts_rt_block_shape bs = {.kind = TS_BLOCK_DECODER,
                                  .n_embd = p.n_embd,
                                  .n_head = p.n_head,
                                  .n_head_kv = p.n_head_kv,
                                  .head_dim = p.head_dim,
                                  .n_ff = p.n_ff,
                                  .n_rot = p.head_dim,
                                  .n_ctx = p.n_ctx,
                                  .qkv_bias = p.qkv_bias,
                                  .kv_f16 = true,
                                  .fast_kernels = true,
                                  .eps = 1e-5f,
                                  .attn_scale = 1.0f / sqrtf((float)p.head_dim)};
    int *w = malloc(sizeof(int) * (size_t)n);
    ts_status st = TS_OK;
    if (!w) {
        st = ts_api_fail(err, NULL, TS_ERR_NO_MEMORY, "out of memory");
    } else {
        for (int i = 0; i < n; i++) w[i] = widths[i];
        /* the type the device takes for these weights, as a model's are
         * converted at load (loop:npu: F32 to F16, Q4_1 to Q8_0) */
        const int run_t = ts_rt_probe_weight_type(dev, (uint32_t)wt, p.n_embd, NULL, 0, &e);
        if (run_t < 0)
            st = ts_api_fail(err, NULL, TS_ERR_UNSUPPORTED, "profiling on %s: %s", device, e.msg);
        else if (ts_rt_profile_layer(dev, &bs, (uint32_t)run_t, w, n, p.reps, ms, &e))
            st = ts_api_fail(err, NULL, TS_ERR_INVALID_ARG, "profiling on %s: %s", device, e.msg);
    }
    free(w);
    ts_eng_close(dev);
    return st == TS_OK ? ts_api_ok(err) : st;
}
