/* err.h - error reporting inside the library.
 *
 * Every fallible internal function takes a `ts_err *` (may be NULL) and returns
 * a negative status (or NULL) on failure after writing a message that names
 * what was wrong and the offending value. The library never prints and never
 * exits; front ends decide what to do with the message.
 */
#ifndef TS_CORE_ERR_H
#define TS_CORE_ERR_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ts_err {
    char msg[512];
} ts_err;

/* Writes the formatted message into e (if non-NULL). Always returns -1 so that
 * callers can write `return ts_err_set(e, "...", ...);`. */
int ts_err_set(ts_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int ts_err_vset(ts_err *e, const char *fmt, va_list ap);

/* Prepends "prefix: " to an existing message (for adding context). Returns -1. */
int ts_err_prefix(ts_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Checked arithmetic for sizes taken from untrusted input: return 1 on overflow. */
static inline int ts_mul_overflow_u64(uint64_t a, uint64_t b, uint64_t *r) {
    return __builtin_mul_overflow(a, b, r);
}
static inline int ts_add_overflow_u64(uint64_t a, uint64_t b, uint64_t *r) {
    return __builtin_add_overflow(a, b, r);
}

#endif
