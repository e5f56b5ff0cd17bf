/* test_sampler.c - the sampler on designed logits: greedy ties, top-k / top-p /
 * min-p masks, penalties, seeding, the temperature -> 0 limit, and sampled
 * frequencies against the expected distribution (chi-square bound). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/sampler.h"

#include "check.h"

/* Sampling with only the named stage active. */
static ts_sampler_params plain(float temp) {
    ts_sampler_params p = ts_sampler_default_params();
    p.temp = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.presence_penalty = 0.0f;
    p.seed = 1234;
    return p;
}

/* Draws n samples and counts them per id. */
static void histogram(ts_sampler *s, const float *logits, int nv, int n, long *counts) {
    memset(counts, 0, sizeof(long) * (size_t)nv);
    for (int i = 0; i < n; i++) {
        int32_t id = ts_sampler_sample(s, logits);
        if (id >= 0 && id < nv) counts[id]++;
    }
}

/* Pearson chi-square of counts vs probabilities (bins with p = 0 must be empty). */
static double chi2(const long *counts, const double *p, int nv, long n) {
    double x = 0.0;
    for (int i = 0; i < nv; i++) {
        if (p[i] == 0.0) {
            if (counts[i] != 0) return INFINITY;
            continue;
        }
        double e = p[i] * (double)n;
        x += (counts[i] - e) * (counts[i] - e) / e;
    }
    return x;
}

static void test_greedy(void) {
    ts_sampler_params p = plain(0.0f);
    ts_sampler *s = ts_sampler_new(&p, 5);
    float a[5] = {1, 5, 5, 2, -1};
    CHECK(ts_sampler_sample(s, a) == 1, "tie must go to the lowest id");
    float b[5] = {0, 0, 0, 0, 0};
    CHECK(ts_sampler_sample(s, b) == 0, "all equal -> id 0");
    float c[5] = {NAN, 1, NAN, 3, 3};
    CHECK(ts_sampler_sample(s, c) == 3, "NaN is never chosen");
    float d[5] = {-INFINITY, -INFINITY, -2, -INFINITY, -INFINITY};
    CHECK(ts_sampler_sample(s, d) == 2, "-inf elsewhere");
    ts_sampler_free(s);
    p.temp = -1.0f; /* negative is greedy too */
    s = ts_sampler_new(&p, 5);
    CHECK(ts_sampler_sample(s, a) == 1, "temp < 0 is greedy");
    ts_sampler_free(s);
}

/* probabilities {0.5, 0.3, 0.15, 0.05} as logits (shifted: softmax ignores shifts) */
static const double P4[4] = {0.5, 0.3, 0.15, 0.05};
static void p4_logits(float *l) {
    for (int i = 0; i < 4; i++) l[i] = (float)log(P4[i]) + 7.0f;
}

static void expect_dist(const char *what, ts_sampler_params p, const float *l, int nv, const double *expect,
                        long n, double bound) {
    ts_sampler *s = ts_sampler_new(&p, nv);
    long *counts = calloc((size_t)nv, sizeof *counts);
    histogram(s, l, nv, (int)n, counts);
    double x = chi2(counts, expect, nv, n);
    CHECK(x < bound, "%s: chi2 %.2f >= %.2f (counts %ld %ld %ld %ld)", what, x, bound, counts[0],
          nv > 1 ? counts[1] : 0, nv > 2 ? counts[2] : 0, nv > 3 ? counts[3] : 0);
    free(counts);
    ts_sampler_free(s);
}

/* With k bins of nonzero probability, chi2 has k-1 degrees of freedom; 30
 * exceeds the 1e-5 upper quantile for up to 6 dof, so a correct sampler fails
 * this with probability < 1e-5 per check (and seeds are fixed anyway), while a
 * wrong mask or renormalisation produces a chi2 in the thousands at n = 40000. */
#define CHI2_BOUND 30.0
#define N_DRAWS 40000

static void test_distribution(void) {
    float l[4];
    p4_logits(l);
    expect_dist("plain", plain(1.0f), l, 4, P4, N_DRAWS, CHI2_BOUND);

    /* temperature 2: p_i ∝ P_i^(1/2) */
    double e[4], z = 0;
    for (int i = 0; i < 4; i++) z += e[i] = sqrt(P4[i]);
    for (int i = 0; i < 4; i++) e[i] /= z;
    expect_dist("temp 2", plain(2.0f), l, 4, e, N_DRAWS, CHI2_BOUND);
}

static void test_top_k(void) {
    float l[4];
    p4_logits(l);
    ts_sampler_params p = plain(1.0f);
    p.top_k = 2;
    const double e[4] = {0.5 / 0.8, 0.3 / 0.8, 0, 0};
    expect_dist("top-k 2", p, l, 4, e, N_DRAWS, CHI2_BOUND);
    p.top_k = 1;
    const double e1[4] = {1, 0, 0, 0};
    expect_dist("top-k 1", p, l, 4, e1, 2000, 1e-9);
    p.top_k = 100; /* larger than the vocabulary: no-op */
    expect_dist("top-k > n", p, l, 4, P4, N_DRAWS, CHI2_BOUND);
}

static void test_top_p(void) {
    float l[4];
    p4_logits(l);
    ts_sampler_params p = plain(1.0f);
    p.top_p = 0.75f; /* 0.5 < 0.75 <= 0.8: keep {0,1} */
    const double e2[4] = {0.5 / 0.8, 0.3 / 0.8, 0, 0};
    expect_dist("top-p 0.75", p, l, 4, e2, N_DRAWS, CHI2_BOUND);
    p.top_p = 0.9f; /* keep {0,1,2} */
    const double e3[4] = {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0};
    expect_dist("top-p 0.9", p, l, 4, e3, N_DRAWS, CHI2_BOUND);
    p.top_p = 0.0f; /* at least one token survives */
    const double e1[4] = {1, 0, 0, 0};
    expect_dist("top-p 0", p, l, 4, e1, 2000, 1e-9);
    /* top-p after top-k uses the renormalised top-k mass: with k = 2 the
     * kept probabilities are {0.625, 0.375}; p = 0.6 keeps only id 0 */
    p.top_k = 2;
    p.top_p = 0.6f;
    expect_dist("top-k then top-p", p, l, 4, e1, 2000, 1e-9);
}

static void test_min_p(void) {
    float l[4];
    p4_logits(l);
    ts_sampler_params p = plain(1.0f);
    p.min_p = 0.2f; /* threshold 0.1: keep {0,1,2} */
    const double e3[4] = {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0};
    expect_dist("min-p 0.2", p, l, 4, e3, N_DRAWS, CHI2_BOUND);
    p.min_p = 0.5f; /* threshold 0.25: keep {0,1} */
    const double e2[4] = {0.5 / 0.8, 0.3 / 0.8, 0, 0};
    expect_dist("min-p 0.5", p, l, 4, e2, N_DRAWS, CHI2_BOUND);
    /* min-p is applied before temperature: at temp 2 the mask is the same
     * but the survivors are flattened */
    p.temp = 2.0f;
    double z = sqrt(0.5) + sqrt(0.3);
    const double e2t[4] = {sqrt(0.5) / z, sqrt(0.3) / z, 0, 0};
    expect_dist("min-p then temp", p, l, 4, e2t, N_DRAWS, CHI2_BOUND);
}

static void test_penalties(void) {
    ts_sampler_params p = plain(0.0f);
    p.repeat_penalty = 4.0f;
    ts_sampler *s = ts_sampler_new(&p, 4);
    float a[4] = {2.0f, -2.0f, 1.0f, 0.5f};
    CHECK(ts_sampler_sample(s, a) == 0, "no history, no penalty");
    ts_sampler_accept(s, 0); /* 2 -> 0.5 < 1 */
    CHECK(ts_sampler_sample(s, a) == 2, "positive logit divided by the penalty");
    ts_sampler_free(s);

    s = ts_sampler_new(&p, 2);
    float b[2] = {-1.0f, -3.0f};
    ts_sampler_accept(s, 0); /* -1 -> -4 < -3 */
    CHECK(ts_sampler_sample(s, b) == 1, "negative logit multiplied by the penalty");
    ts_sampler_free(s);

    /* a token seen twice is penalised once (llama.cpp's repeat penalty ignores counts) */
    p.repeat_penalty = 2.0f;
    s = ts_sampler_new(&p, 2);
    float c[2] = {3.0f, 1.0f};
    ts_sampler_accept(s, 0);
    ts_sampler_accept(s, 0);
    CHECK(ts_sampler_sample(s, c) == 0, "3/2 = 1.5 > 1 (applied twice would give 0.75)");
    ts_sampler_free(s);

    /* window: only the last repeat_last_n accepted ids count */
    p.repeat_penalty = 4.0f;
    p.repeat_last_n = 2;
    s = ts_sampler_new(&p, 8);
    float d[8] = {2.0f, 1.0f, 0, 0, 0, 0, 0, 0};
    ts_sampler_accept(s, 0);
    CHECK(ts_sampler_sample(s, d) == 1, "0 is inside the window");
    ts_sampler_accept(s, 5);
    ts_sampler_accept(s, 6);
    CHECK(ts_sampler_sample(s, d) == 0, "0 fell out of the window");
    ts_sampler_accept(s, 0);
    ts_sampler_reset(s);
    CHECK(ts_sampler_sample(s, d) == 0, "reset forgets the history");
    ts_sampler_free(s);

    /* presence penalty subtracts a constant once per seen token */
    p = plain(0.0f);
    p.presence_penalty = 0.5f;
    s = ts_sampler_new(&p, 2);
    float e[2] = {1.0f, 0.8f};
    ts_sampler_accept(s, 0);
    CHECK(ts_sampler_sample(s, e) == 1, "1.0 - 0.5 < 0.8");
    ts_sampler_free(s);

    /* repeat_last_n = 0 disables the penalties */
    p = plain(0.0f);
    p.repeat_penalty = 100.0f;
    p.repeat_last_n = 0;
    s = ts_sampler_new(&p, 2);
    ts_sampler_accept(s, 0);
    CHECK(ts_sampler_sample(s, e) == 0, "window 0 = off");
    ts_sampler_free(s);
}

static void test_seed(void) {
    enum { NV = 100, N = 200 };
    float l[NV];
    for (int i = 0; i < NV; i++) l[i] = (float)sin(i * 1.7) * 2.0f;
    ts_sampler_params p = ts_sampler_default_params();
    p.top_k = 0;
    p.min_p = 0;
    p.seed = 42;
    ts_sampler *a = ts_sampler_new(&p, NV), *b = ts_sampler_new(&p, NV);
    p.seed = 43;
    ts_sampler *c = ts_sampler_new(&p, NV);
    int32_t sa[N];
    int same_ab = 1, same_ac = 1;
    for (int i = 0; i < N; i++) {
        sa[i] = ts_sampler_sample(a, l);
        int32_t xb = ts_sampler_sample(b, l), xc = ts_sampler_sample(c, l);
        same_ab &= sa[i] == xb;
        same_ac &= sa[i] == xc;
    }
    CHECK(same_ab, "same seed must give the same sequence");
    CHECK(!same_ac, "different seeds gave identical %d-token sequences", N);
    ts_sampler_reset(a);
    int same_reset = 1;
    for (int i = 0; i < N; i++) same_reset &= sa[i] == ts_sampler_sample(a, l);
    CHECK(same_reset, "reset must reseed");
    ts_sampler_free(a);
    ts_sampler_free(b);
    ts_sampler_free(c);
}

static void test_temp_limit(void) {
    float l[5] = {1.0f, 1.5f, 1.2f, 1.49f, -3.0f};
    ts_sampler_params p = plain(1e-3f);
    ts_sampler *s = ts_sampler_new(&p, 5);
    int all = 1;
    for (int i = 0; i < 2000; i++) all &= ts_sampler_sample(s, l) == 1;
    CHECK(all, "temp -> 0 must converge to the argmax");
    ts_sampler_free(s);
}

/* Large vocabulary: the prefix-sorting paths (top-k select, growing top-p
 * prefix) against a brute-force full sort. */
static int by_logit_desc(const void *a, const void *b, const float *l) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (l[x] != l[y]) return l[x] > l[y] ? -1 : 1;
    return x < y ? -1 : 1;
}
static const float *g_sort_logits;
static int cmp_ids(const void *a, const void *b) { return by_logit_desc(a, b, g_sort_logits); }

static void test_large_vocab(void) {
    enum { NV = 50000 };
    float *l = malloc(NV * sizeof *l);
    int32_t *order = malloc(NV * sizeof *order);
    char *allowed = calloc(NV, 1);
    uint64_t x = 99;
    for (int i = 0; i < NV; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        l[i] = (float)((double)(x >> 11) * 0x1.0p-53 * 12.0); /* uniform [0,12): a long tail */
        order[i] = i;
    }
    l[777] = l[778]; /* a tie */
    g_sort_logits = l;
    qsort(order, NV, sizeof *order, cmp_ids);

    /* top-k 40 */
    ts_sampler_params p = plain(1.0f);
    p.top_k = 40;
    for (int i = 0; i < 40; i++) allowed[order[i]] = 1;
    ts_sampler *s = ts_sampler_new(&p, NV);
    int ok = 1;
    for (int i = 0; i < 300; i++) ok &= allowed[ts_sampler_sample(s, l)];
    CHECK(ok, "top-k 40 sampled outside the 40 largest");
    ts_sampler_free(s);

    /* top-p 0.9 with no top-k: nucleus by brute force */
    memset(allowed, 0, NV);
    double mx = l[order[0]], z = 0, cum = 0;
    for (int i = 0; i < NV; i++) z += exp(l[i] - mx);
    int keep = 0;
    for (int i = 0; i < NV; i++) {
        cum += exp(l[order[i]] - mx);
        allowed[order[i]] = 1;
        if (cum >= 0.9 * z) {
            keep = i + 1;
            break;
        }
    }
    CHECK(keep > 64, "test design: nucleus (%d) must need more than the first 64-prefix", keep);
    p = plain(1.0f);
    p.top_p = 0.9f;
    s = ts_sampler_new(&p, NV);
    ok = 1;
    int hit_tail = 0;
    for (int i = 0; i < 200; i++) {
        int32_t id = ts_sampler_sample(s, l);
        ok &= allowed[id];
        hit_tail |= id == order[keep - 1];
    }
    CHECK(ok, "top-p 0.9 sampled outside the nucleus of %d", keep);
    (void)hit_tail;
    ts_sampler_free(s);

    /* greedy over the tie */
    l[777] = l[778] = 100.0f;
    p = plain(0.0f);
    s = ts_sampler_new(&p, NV);
    CHECK(ts_sampler_sample(s, l) == 777, "greedy tie at 777/778");
    ts_sampler_free(s);
    free(l);
    free(order);
    free(allowed);
}

static void test_api_edges(void) {
    CHECK(ts_sampler_new(NULL, 0) == NULL, "n_vocab 0 is rejected");
    ts_sampler *s = ts_sampler_new(NULL, 3); /* NULL params = defaults */
    CHECK(s != NULL, "defaults");
    ts_sampler_accept(s, -1); /* out of range ids are ignored */
    ts_sampler_accept(s, 3);
    float l[3] = {0, 10, 0};
    CHECK(ts_sampler_sample(s, l) == 1, "defaults keep the dominant token");
    ts_sampler_free(s);
    ts_sampler_free(NULL);
    ts_sampler_params d = ts_sampler_default_params();
    CHECK(d.temp == 0.8f && d.top_k == 40 && d.top_p == 0.95f && d.min_p == 0.05f && d.repeat_last_n == 64 &&
              d.repeat_penalty == 1.0f,
          "llama.cpp defaults");
}

int main(void) {
    test_greedy();
    test_distribution();
    test_top_k();
    test_top_p();
    test_min_p();
    test_penalties();
    test_seed();
    test_temp_limit();
    test_large_vocab();
    test_api_edges();
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("test_sampler: all checks passed\n");
    return 0;
}
