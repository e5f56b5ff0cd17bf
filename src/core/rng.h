/* rng.h - splitmix64, the library's one seedable generator step: the
 * sampler expands its seed with it into xoshiro256** state, the diffusion
 * decoders draw their Gumbel noise from it directly. Same seed, same
 * stream on every platform. */
#ifndef TS_CORE_RNG_H
#define TS_CORE_RNG_H

#include <stdint.h>

static inline uint64_t ts_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#endif
