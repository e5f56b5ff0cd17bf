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
    char pre[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    if (n < 0) return -1;
    size_t np = strlen(pre), cap = sizeof e->msg;
    if (np + 2 >= cap) return -1;
    /* shift the old message right by "prefix: " and keep it NUL-terminated */
    size_t old = strnlen(e->msg, cap - 1);
    if (np + 2 + old >= cap) old = cap - 1 - np - 2;
    memmove(e->msg + np + 2, e->msg, old);
    e->msg[np + 2 + old] = 0;
    memcpy(e->msg, pre, np);
    e->msg[np] = ':';
    e->msg[np + 1] = ' ';
    return -1;
}
