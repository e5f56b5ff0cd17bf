/* sampler.h - turning logits into the next token: greedy, temperature, top-k,
 * top-p, min-p, repetition and presence penalties, seeded RNG.
 * A sampler belongs to one sequence; it allocates its scratch once at creation. */
#ifndef TS_SAMPLER_H
#define TS_SAMPLER_H

#include <stdint.h>

typedef struct ts_sampler_params {
    float temp;            /* <= 0: greedy (argmax), as llama.cpp's --temp 0 */
    int32_t top_k;         /* <= 0: off; default 40 */
    float top_p;           /* 1: off; default 0.95 */
    float min_p;           /* 0: off; default 0.05 */
    float repeat_penalty;  /* 1: off; default 1.0 */
    int32_t repeat_last_n; /* window for the penalties; default 64 */
    float presence_penalty;/* 0: off */
    uint64_t seed;         /* default: fixed 0xC0FFEE; CLI may randomise */
} ts_sampler_params;

ts_sampler_params ts_sampler_default_params(void);

typedef struct ts_sampler ts_sampler;
ts_sampler *ts_sampler_new(const ts_sampler_params *p, int32_t n_vocab);
void ts_sampler_free(ts_sampler *s);
void ts_sampler_reset(ts_sampler *s);            /* forget history, reseed */
void ts_sampler_accept(ts_sampler *s, int32_t id); /* record a token (prompt or generated) for penalties */
int32_t ts_sampler_sample(ts_sampler *s, const float *logits); /* does not accept */

#endif
