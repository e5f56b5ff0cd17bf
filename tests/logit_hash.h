/* logit_hash.h - what the session tests over the public API share
 * (test_prefill_device.c, test_stream.c): a 64-bit FNV-1a hash of a logit
 * row's bytes (two runs agree bit for bit when their hashes do), and
 * deterministic prompt ids drawn from ordinary tokens of a vocabulary. */
#ifndef TS_TEST_LOGIT_HASH_H
#define TS_TEST_LOGIT_HASH_H

#include <stdint.h>

static inline uint64_t logit_hash(const float *x, int64_t n) {
    const uint8_t *p = (const uint8_t *)x;
    uint64_t h = 1469598103934665603ull;
    for (int64_t i = 0; i < n * 4; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* n ids from seed: xorshift over [260, 260 + span) (span 20000, or the
 * vocabulary past its first 300 ids); a vocabulary of 600 or fewer tokens
 * (the tiny test models) draws from all of it. */
static inline void logit_prompt_ids(int32_t *ids, int n, uint64_t seed, int32_t n_vocab) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    const int32_t span = n_vocab > 20000 ? 20000 : n_vocab - 300;
    for (int i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        ids[i] = n_vocab > 600 ? 260 + (int32_t)(s % (uint64_t)span) : (int32_t)(s % (uint64_t)n_vocab);
    }
}

#endif
