/* common.c - the plumbing of the public API: status names, error recording,
 * logging, struct_size handling, ts_free. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api_internal.h"
#include "core/threadpool.h"

_Static_assert(TS_THREADS_MAX == TS_MAX_THREADS, "public and internal thread limits differ");
_Static_assert(TS_ERROR_MAX == sizeof(((ts_err *)0)->msg), "ts_error and ts_err message sizes differ");

const char *ts_status_string(ts_status status) {
    switch (status) {
    case TS_OK: return "ok";
    case TS_ERR_INVALID_ARG: return "invalid argument";
    case TS_ERR_IO: return "i/o error";
    case TS_ERR_FORMAT: return "bad file format";
    case TS_ERR_UNSUPPORTED: return "unsupported";
    case TS_ERR_NO_MEMORY: return "out of memory";
    case TS_ERR_CONTEXT_FULL: return "context full";
    case TS_ERR_CANCELLED: return "cancelled";
    case TS_ERR_INVALID_STATE: return "invalid state";
    case TS_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

const char *ts_stop_reason_name(ts_stop_reason reason) {
    switch (reason) {
    case TS_STOP_NONE: return "none";
    case TS_STOP_EOS: return "eos";
    case TS_STOP_LENGTH: return "length";
    case TS_STOP_CONTEXT_FULL: return "context_full";
    case TS_STOP_CANCELLED: return "cancelled";
    case TS_STOP_ERROR: return "error";
    }
    return "unknown";
}

void ts_free(void *p) { free(p); }

static void vlog(const ts_logger *lg, ts_log_level level, const char *fmt, va_list ap) {
    if (!lg || !lg->fn) return;
    char buf[1024];
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    if (n >= (int)sizeof buf) { /* long line: format again into the heap */
        char *big = malloc((size_t)n + 1);
        if (big) {
            vsnprintf(big, (size_t)n + 1, fmt, ap2);
            lg->fn(level, big, lg->user_data);
            free(big);
            va_end(ap2);
            return;
        }
    }
    va_end(ap2);
    if (n >= 0) lg->fn(level, buf, lg->user_data);
}

void ts_api_log(const ts_logger *lg, ts_log_level level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlog(lg, level, fmt, ap);
    va_end(ap);
}

ts_status ts_api_fail(ts_error *err, const ts_logger *lg, ts_status status, const char *fmt, ...) {
    char msg[TS_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (err) {
        err->status = status;
        memcpy(err->message, msg, sizeof msg);
    }
    ts_api_log(lg, TS_LOG_ERROR, "%s", msg);
    return status;
}

ts_status ts_ctx_fail(ts_context *ctx, ts_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->msg, sizeof ctx->msg, fmt, ap);
    va_end(ap);
    ctx->status = status;
    ts_api_log(&ctx->log, TS_LOG_ERROR, "%s", ctx->msg);
    return status;
}

ts_status ts_ctx_ok(ts_context *ctx) {
    ctx->status = TS_OK;
    ctx->msg[0] = '\0';
    return TS_OK;
}

ts_status ts_api_ok(ts_error *err) {
    if (err) {
        err->status = TS_OK;
        err->message[0] = '\0';
    }
    return TS_OK;
}

ts_status ts_api_load_status(const char *path, const char *msg) {
    if (path && access(path, R_OK) != 0) return TS_ERR_IO;
    if (msg && strstr(msg, "out of memory")) return TS_ERR_NO_MEMORY;
    if (msg && (strstr(msg, "cannot mmap") || strstr(msg, "short read") || strstr(msg, "cannot stat")))
        return TS_ERR_IO;
    return TS_ERR_FORMAT;
}

ts_status ts_params_in(void *dst, size_t dst_size, const void *src, const char *what, ts_error *err,
                       const ts_logger *lg) {
    size_t size;
    memcpy(&size, src, sizeof size);
    if (size < sizeof(size_t))
        return ts_api_fail(err, lg, TS_ERR_INVALID_ARG,
                           "%s.struct_size %zu is too small: start from the ts_*_default_params() value", what,
                           size);
    if (size > dst_size) {
        /* Built against a newer header: fine as long as the fields this
         * library does not know are left at zero. */
        if (size > (size_t)1 << 20)
            return ts_api_fail(err, lg, TS_ERR_INVALID_ARG, "%s.struct_size %zu is not a struct size", what, size);
        const unsigned char *tail = (const unsigned char *)src + dst_size;
        for (size_t i = 0; i < size - dst_size; i++)
            if (tail[i])
                return ts_api_fail(err, lg, TS_ERR_UNSUPPORTED,
                                   "%s has fields this library (%zu bytes, tessera %s) does not know (struct_size %zu)",
                                   what, dst_size, ts_version(), size);
        size = dst_size;
    }
    memcpy((char *)dst + sizeof(size_t), (const char *)src + sizeof(size_t), size - sizeof(size_t));
    return TS_OK;
}

ts_status ts_struct_out(void *out, const void *full, size_t full_size) {
    size_t size;
    memcpy(&size, out, sizeof size);
    if (size < sizeof(size_t)) return TS_ERR_INVALID_ARG;
    if (size > full_size) size = full_size;
    memcpy((char *)out + sizeof(size_t), (const char *)full + sizeof(size_t), size - sizeof(size_t));
    return TS_OK;
}

int32_t ts_api_threads(int32_t n) {
    if (n > 0) return n;
    int p = ts_physical_cores();
    return p > TS_THREADS_MAX ? TS_THREADS_MAX : p;
}

