#include "core/err.h"

#include <stdio.h>
#include <string.h>

int ts_err_vset(ts_err *e, const char *fmt, va_list ap) {
    if (e) vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    return -1;
}

int ts_err_set(ts_err *e, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ts_err_vset(e, fmt, ap);
    va_end(ap);
    return -1;
}

int ts_err_prefix(ts_err *e, const char *fmt, ...) {
    if (!e) return -1;
    char old[sizeof e->msg];
    memcpy(old, e->msg, sizeof old);
    char pre[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    snprintf(e->msg, sizeof e->msg, "%s: %s", pre, old);
    return -1;
}
