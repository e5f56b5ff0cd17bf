/* check.h - the small harness shared by the C unit tests: a CHECK macro that
 * counts failures (printing the first 40) and a seeded splitmix64 generator
 * for random test data. Include once per test program. */
#ifndef TS_TEST_CHECK_H
#define TS_TEST_CHECK_H

#include <stdint.h>
#include <stdio.h>

static int failures;

#define CHECK(cond, ...)                                                           \
    do {                                                                           \
        if (!(cond)) {                                                             \
            if (failures++ < 40) {                                                 \
                fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
                fprintf(stderr, __VA_ARGS__);                                      \
                fputc('\n', stderr);                                               \
            }                                                                      \
        }                                                                          \
    } while (0)

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static inline void rng_seed(uint64_t s) { rng_state = s; }
static inline uint64_t rng(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline float frand(void) { /* uniform in [-1, 1) */
    return (float)((double)(rng() >> 11) * 0x1p-53 * 2.0 - 1.0);
}
static inline float nrand(void) { /* roughly normal: sum of four uniforms */
    return (frand() + frand() + frand() + frand()) * 0.866f;
}

#endif
