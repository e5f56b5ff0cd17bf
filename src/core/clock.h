/* clock.h - the monotonic clock every timer and counter in the library
 * reads (stats, stall time, spin budgets). */
#ifndef TS_CORE_CLOCK_H
#define TS_CORE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t ts_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline double ts_now_ms(void) { return (double)ts_now_ns() * 1e-6; }

/* Sleeps us microseconds (resumed after a signal); nothing for us <= 0. */
static inline void ts_sleep_us(int64_t us) {
    if (us <= 0) return;
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

#endif
