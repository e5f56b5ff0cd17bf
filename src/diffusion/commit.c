/* commit.c - the decisions of a diffusion step: how many positions the
 * vanilla schedule unmasks, the candidate token and confidence of a logits
 * row (with the confidence variants of LLaDA and Dream), and which
 * candidates are committed (top-k or threshold with the at-least-one rule).
 * Pure functions over caller buffers: nothing here allocates. */
#include <math.h>

#include "diffusion/diffusion.h"
#include "core/rng.h"

int32_t ts_diff_schedule(int32_t n_mask, int32_t n_left, int32_t steps, int32_t i, float eps) {
    if (steps <= 0 || n_left <= 0) return 0;
    if (i >= steps - 1) return n_left; /* the last step commits whatever is left */
    if (eps <= 0.0f) {
        /* LLaDA get_num_transfer_tokens: the block's mask count split evenly,
         * the remainder going to the first steps */
        int32_t base = n_mask / steps, rem = n_mask % steps;
        int32_t k = base + (i < rem ? 1 : 0);
        return k < n_left ? k : n_left;
    }
    /* Dream: timesteps t_j = linspace(1, eps, steps + 1); at step i the
     * fraction 1 - t_{i+1}/t_i of the positions still masked is unmasked */
    const double step = ((double)eps - 1.0) / (double)steps;
    const double t = 1.0 + (double)i * step;
    const double s = (i + 1 == steps) ? (double)eps : 1.0 + (double)(i + 1) * step;
    double k = floor((double)n_left * (1.0 - s / t));
    if (!(k >= 0.0)) k = 0.0;
    return k < (double)n_left ? (int32_t)k : n_left;
}

/* The Gumbel noise: uniform in (0, 1) from ts_splitmix64 (seeded per call,
 * so runs repeat), never 0 or 1, so -log(-log(u)) is finite. */
static double rng_uniform(uint64_t *st) { return ((double)(ts_splitmix64(st) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

double ts_diff_confidence(const float *row, int32_t n_vocab, int32_t mask_id, enum ts_diff_alg alg, float temp,
                          uint64_t *rng, int32_t *token) {
    /* x0: argmax, or Gumbel-max at temperature temp (LLaDA adds the noise as
     * exp(l) / (-log u)^temp, whose argmax is that of l + temp * g) */
    int32_t best = -1;
    double best_v = -INFINITY, mx = -INFINITY;
    for (int32_t v = 0; v < n_vocab; v++) {
        if (v == mask_id) continue; /* the mask token is never a prediction */
        double l = row[v];
        if (l > mx) mx = l;
        if (temp > 0.0f) l += (double)temp * -log(-log(rng_uniform(rng)));
        if (best < 0 || l > best_v) {
            best = v;
            best_v = l;
        }
    }
    *token = best;
    if (best < 0 || !isfinite(mx)) return -INFINITY;
    /* Dream's variants read the tempered distribution; LLaDA's low
     * confidence the plain softmax */
    const double inv_t = (alg != TS_DIFF_LOW_CONFIDENCE && temp > 0.0f) ? 1.0 / (double)temp : 1.0;
    const double m = mx * inv_t;
    double z = 0.0;
    for (int32_t v = 0; v < n_vocab; v++)
        if (v != mask_id) z += exp((double)row[v] * inv_t - m);
    switch (alg) {
    case TS_DIFF_LOW_CONFIDENCE:
    case TS_DIFF_MASKGIT_PLUS:
        return exp((double)row[best] * inv_t - m) / z;
    case TS_DIFF_TOPK_MARGIN: {
        double p1 = -1.0, p2 = -1.0; /* the two largest probabilities */
        for (int32_t v = 0; v < n_vocab; v++) {
            if (v == mask_id) continue;
            double p = exp((double)row[v] * inv_t - m) / z;
            if (p > p1) {
                p2 = p1;
                p1 = p;
            } else if (p > p2) {
                p2 = p;
            }
        }
        return p2 < 0.0 ? p1 : p1 - p2;
    }
    case TS_DIFF_ENTROPY: {
        double h = 0.0; /* sum p log(p + 1e-10): minus the entropy, higher = surer */
        for (int32_t v = 0; v < n_vocab; v++) {
            if (v == mask_id) continue;
            double p = exp((double)row[v] * inv_t - m) / z;
            h += p * log(p + 1e-10);
        }
        return h;
    }
    }
    return -INFINITY;
}

/* a ranks before b: higher confidence, then lower index. NaN ranks last. */
static bool ranks_before(const double *conf, int32_t a, int32_t b) {
    double ca = conf[a], cb = conf[b];
    if (isnan(ca)) return isnan(cb) && a < b;
    if (isnan(cb)) return true;
    return ca > cb || (ca == cb && a < b);
}

int32_t ts_diff_select(const double *conf, int32_t n, int32_t k, double threshold, int32_t *order, int32_t *out) {
    if (n <= 0) return 0;
    /* rank all candidates (insertion sort: n is at most a block or a canvas) */
    for (int32_t i = 0; i < n; i++) {
        int32_t j = i;
        while (j > 0 && ranks_before(conf, i, order[j - 1])) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    int32_t m;
    if (isnan(threshold)) {
        m = k < 0 ? 0 : (k > n ? n : k);
    } else {
        m = 0;
        while (m < n && conf[order[m]] >= threshold) m++;
        if (m == 0) m = 1; /* always at least the most confident one */
    }
    /* the chosen ones in position order */
    for (int32_t i = 0; i < m; i++) {
        int32_t v = order[i], j = i;
        while (j > 0 && out[j - 1] > v) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = v;
    }
    return m;
}
