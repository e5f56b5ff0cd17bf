/* sampler.c - next-token selection from a row of logits.
 *
 * The chain follows llama.cpp's default order:
 *   penalties -> top-k -> top-p -> min-p -> temperature -> softmax -> draw
 * and temp <= 0 means greedy (argmax after the penalties, ties -> lowest id).
 *
 * Candidates are (id, logit) pairs ordered by logit descending, then id
 * ascending: a total order, so every step is deterministic for a given seed
 * regardless of the sort algorithm. Top-k / top-p only need the largest few
 * candidates in order, so we sort a growing prefix (select + sort) instead of
 * the whole vocabulary (262k entries for Gemma 3).
 *
 * All scratch (candidates, the penalty window, per-token counts) is allocated
 * in ts_sampler_new; ts_sampler_sample allocates nothing.
 */
#include "text/sampler.h"
#include "core/rng.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct cand {
    int32_t id;
    float logit;
} cand;

struct ts_sampler {
    ts_sampler_params p;
    int32_t n_vocab;
    cand *cand;        /* [n_vocab] scratch */
    int32_t *window;   /* ring of the last repeat_last_n accepted ids */
    int32_t win_cap, win_len, win_head; /* head: index of the oldest entry */
    int32_t *count;    /* [n_vocab] occurrences inside the window */
    uint64_t rng[4];   /* xoshiro256** state */
};

ts_sampler_params ts_sampler_default_params(void) {
    ts_sampler_params p;
    p.temp = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.repeat_penalty = 1.0f;
    p.repeat_last_n = 64;
    p.presence_penalty = 0.0f;
    p.seed = 0xC0FFEEu;
    return p;
}

/* ---- PRNG: splitmix64 (core/rng.h) expands the seed into xoshiro256** state ---- */

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t s[4]) {
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform double in [0, 1) from the top 53 bits. */
static double rng_uniform(uint64_t s[4]) { return (double)(xoshiro_next(s) >> 11) * 0x1.0p-53; }

static void seed_rng(ts_sampler *s) {
    uint64_t x = s->p.seed;
    for (int i = 0; i < 4; i++) s->rng[i] = ts_splitmix64(&x);
}

/* ---- lifecycle ---- */

ts_sampler *ts_sampler_new(const ts_sampler_params *p, int32_t n_vocab) {
    if (n_vocab <= 0) return NULL;
    ts_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = p ? *p : ts_sampler_default_params();
    s->n_vocab = n_vocab;
    s->win_cap = s->p.repeat_last_n > 0 ? s->p.repeat_last_n : 0;
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    s->count = calloc((size_t)n_vocab, sizeof *s->count);
    s->window = malloc((size_t)(s->win_cap > 0 ? s->win_cap : 1) * sizeof *s->window);
    if (!s->cand || !s->count || !s->window) {
        ts_sampler_free(s);
        return NULL;
    }
    seed_rng(s);
    return s;
}

void ts_sampler_free(ts_sampler *s) {
    if (!s) return;
    free(s->cand);
    free(s->count);
    free(s->window);
    free(s);
}

void ts_sampler_reset(ts_sampler *s) {
    if (!s) return;
    for (int32_t i = 0; i < s->win_len; i++) s->count[s->window[(s->win_head + i) % s->win_cap]]--;
    s->win_len = 0;
    s->win_head = 0;
    seed_rng(s);
}

void ts_sampler_accept(ts_sampler *s, int32_t id) {
    if (!s || s->win_cap == 0 || id < 0 || id >= s->n_vocab) return;
    if (s->win_len == s->win_cap) { /* drop the oldest */
        s->count[s->window[s->win_head]]--;
        s->window[s->win_head] = id;
        s->win_head = (s->win_head + 1) % s->win_cap;
    } else {
        s->window[(s->win_head + s->win_len) % s->win_cap] = id;
        s->win_len++;
    }
    s->count[id]++;
}

/* ---- candidate ordering ---- */

/* a ranks before b: larger logit, then smaller id. */
static inline int before(const cand *a, const cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cand_cmp(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    if (before(a, b)) return -1;
    if (before(b, a)) return 1;
    return 0;
}

static inline void swap_cand(cand *a, cand *b) {
    cand t = *a;
    *a = *b;
    *b = t;
}

/* Rearranges c[0..n) so that its first k entries are the k best (unordered).
 * Quickselect with a median-of-three pivot; depth-limited, after which the
 * range is simply sorted, so the worst case stays O(n log n). */
static void select_best(cand *c, int32_t n, int32_t k) {
    int32_t lo = 0, hi = n - 1, depth = 0;
    while (hi > lo) {
        if (++depth > 64) {
            qsort(c + lo, (size_t)(hi - lo + 1), sizeof *c, cand_cmp);
            return;
        }
        int32_t mid = lo + (hi - lo) / 2;
        if (before(&c[mid], &c[lo])) swap_cand(&c[mid], &c[lo]);
        if (before(&c[hi], &c[lo])) swap_cand(&c[hi], &c[lo]);
        if (before(&c[hi], &c[mid])) swap_cand(&c[hi], &c[mid]);
        /* now c[lo] <= c[mid] <= c[hi] in rank order; use c[mid] as pivot */
        swap_cand(&c[mid], &c[hi]);
        cand pivot = c[hi];
        int32_t store = lo;
        for (int32_t i = lo; i < hi; i++)
            if (before(&c[i], &pivot)) swap_cand(&c[i], &c[store++]);
        swap_cand(&c[store], &c[hi]);
        /* c[lo..store) rank before the pivot at c[store] */
        if (store == k - 1 || store == k) return;
        if (store > k) hi = store - 1;
        else lo = store + 1;
    }
}

/* Makes c[0..m) the m best of c[0..n), sorted, given c[0..sorted) already are. */
static void sort_prefix(cand *c, int32_t n, int32_t sorted, int32_t m) {
    if (m > n) m = n;
    if (m <= sorted) return;
    int32_t rest = n - sorted, want = m - sorted;
    if (want < rest) select_best(c + sorted, rest, want);
    qsort(c + sorted, (size_t)want, sizeof *c, cand_cmp);
}

/* ---- sampling ---- */

static void apply_penalties(ts_sampler *s) {
    const ts_sampler_params *p = &s->p;
    if (s->win_len == 0 || (p->repeat_penalty == 1.0f && p->presence_penalty == 0.0f)) return;
    /* candidates are still indexed by id here. Each distinct id in the window
     * is penalised once: its count is negated while visited, then restored. */
    for (int32_t i = 0; i < s->win_len; i++) {
        int32_t id = s->window[(s->win_head + i) % s->win_cap];
        if (s->count[id] <= 0) continue; /* already done */
        float *l = &s->cand[id].logit;
        if (p->repeat_penalty != 1.0f && p->repeat_penalty > 0.0f) {
            if (*l <= 0.0f) *l *= p->repeat_penalty;
            else *l /= p->repeat_penalty;
        }
        *l -= p->presence_penalty;
        s->count[id] = -s->count[id];
    }
    for (int32_t i = 0; i < s->win_len; i++) {
        int32_t id = s->window[(s->win_head + i) % s->win_cap];
        if (s->count[id] < 0) s->count[id] = -s->count[id];
    }
}

int32_t ts_sampler_sample(ts_sampler *s, const float *logits) {
    const ts_sampler_params *p = &s->p;
    int32_t n = s->n_vocab;
    cand *c = s->cand;
    /* NaN would break the total order; +inf would make the softmax NaN. */
    for (int32_t i = 0; i < n; i++) {
        float l = logits[i];
        if (isnan(l)) l = -INFINITY;
        else if (l > FLT_MAX) l = FLT_MAX;
        c[i].id = i;
        c[i].logit = l;
    }
    apply_penalties(s);

    if (!(p->temp > 0.0f)) { /* greedy; scanning ascending ids keeps the lowest on ties */
        int32_t best = 0;
        for (int32_t i = 1; i < n; i++)
            if (c[i].logit > c[best].logit) best = i;
        return best;
    }

    int32_t sorted = 0; /* c[0..sorted) hold the best `sorted` candidates in order */
    if (p->top_k > 0 && p->top_k < n) {
        sort_prefix(c, n, 0, p->top_k);
        sorted = n = p->top_k;
    }

    if (p->top_p < 1.0f) {
        /* top-p over the softmax (temperature 1) of the remaining candidates:
         * keep the shortest sorted prefix whose mass reaches top_p (at least 1). */
        if (sorted == 0) sort_prefix(c, n, 0, sorted = (n < 64 ? n : 64));
        float mx = c[0].logit;
        double z = 0.0;
        for (int32_t i = 0; i < n; i++) z += exp((double)c[i].logit - mx);
        double target = (double)p->top_p * z, cum = 0.0;
        int32_t i = 0, keep = n;
        for (;;) {
            for (; i < sorted; i++) {
                cum += exp((double)c[i].logit - mx);
                if (cum >= target) break;
            }
            if (i < sorted) {
                keep = i + 1;
                break;
            }
            if (sorted >= n) break;
            int32_t m = sorted > n / 2 ? n : sorted * 2;
            sort_prefix(c, n, sorted, m);
            sorted = m;
        }
        n = keep;
        if (sorted > n) sorted = n;
    }

    float mx = c[0].logit;
    if (sorted == 0)
        for (int32_t i = 1; i < n; i++)
            if (c[i].logit > mx) mx = c[i].logit;

    if (p->min_p > 0.0f && p->min_p <= 1.0f) {
        /* keep p_i >= min_p * p_max, i.e. logit >= max + log(min_p); order-preserving */
        float thr = mx + logf(p->min_p);
        int32_t j = 0;
        for (int32_t i = 0; i < n; i++)
            if (c[i].logit >= thr) c[j++] = c[i];
        if (j > 0) n = j; /* max always passes unless logits are -inf everywhere */
    }

    /* temperature + softmax + draw, in double for the sums */
    double inv_t = 1.0 / (double)p->temp, sum = 0.0;
    for (int32_t i = 0; i < n; i++) sum += exp(((double)c[i].logit - mx) * inv_t);
    if (!(sum > 0.0) || !isfinite(sum)) { /* all -inf: fall back to the first candidate */
        int32_t best = 0;
        for (int32_t i = 1; i < n; i++)
            if (before(&c[i], &c[best])) best = i;
        return c[best].id;
    }
    double u = rng_uniform(s->rng) * sum, cum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        double w = exp(((double)c[i].logit - mx) * inv_t);
        cum += w;
        if (u < cum && w > 0.0) return c[i].id;
    }
    /* rounding left u just past the total: return the last candidate with weight */
    for (int32_t i = n - 1; i >= 0; i--)
        if (exp(((double)c[i].logit - mx) * inv_t) > 0.0) return c[i].id;
    return c[0].id;
}
