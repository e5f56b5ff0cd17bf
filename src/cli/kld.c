/* kld.c - llama-perplexity's KL-divergence file and statistics (kld.h).
 * The encoding and the sums follow llama-perplexity's so that a file either
 * tool writes gives the same figures in the other. */
#define _FILE_OFFSET_BITS 64
#include "kld.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct kld_file {
    FILE *f;
    char *path;
    bool writing;
    int32_t n_vocab;
    size_t nv;        /* uint16 per record */
    uint16_t *rec;    /* one record */
};

static size_t record_u16(int32_t n_vocab) { return 2 * (((size_t)n_vocab + 1) / 2) + 4; }

static kld_file *file_new(FILE *fp, const char *path, bool writing, int32_t n_vocab) {
    kld_file *k = calloc(1, sizeof *k);
    if (k) {
        k->nv = record_u16(n_vocab);
        k->rec = calloc(k->nv, sizeof *k->rec);
        k->path = strdup(path);
    }
    if (!k || !k->rec || !k->path) {
        fprintf(stderr, "error: out of memory for a KL-divergence record of %d logits\n", (int)n_vocab);
        if (k) free(k->rec), free(k->path);
        free(k);
        fclose(fp);
        return NULL;
    }
    k->f = fp;
    k->writing = writing;
    k->n_vocab = n_vocab;
    return k;
}

kld_file *kld_create(const char *path, int32_t n_ctx, int32_t n_vocab, int32_t n_chunk, const int32_t *tokens) {
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        fprintf(stderr, "error: --kl-divergence-base: cannot create '%s': %s\n", path, strerror(errno));
        return NULL;
    }
    kld_file *k = file_new(fp, path, true, n_vocab);
    if (!k) return NULL;
    const int32_t head[3] = {n_ctx, n_vocab, n_chunk};
    if (fwrite("_logits_", 1, 8, fp) != 8 || fwrite(head, sizeof head, 1, fp) != 1 ||
        fwrite(tokens, sizeof *tokens, (size_t)n_chunk * (size_t)n_ctx, fp) != (size_t)n_chunk * (size_t)n_ctx) {
        fprintf(stderr, "error: --kl-divergence-base: writing '%s': %s\n", path, strerror(errno));
        kld_close(k);
        return NULL;
    }
    return k;
}

kld_file *kld_open(const char *path, int32_t *n_ctx, int32_t *n_vocab, int32_t *n_chunk, int32_t **tokens) {
    *tokens = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        fprintf(stderr, "error: --kl-divergence-base: cannot open '%s': %s\n", path, strerror(errno));
        return NULL;
    }
    char magic[8];
    int32_t head[3];
    if (fread(magic, 1, 8, fp) != 8 || memcmp(magic, "_logits_", 8) != 0 || fread(head, sizeof head, 1, fp) != 1) {
        fprintf(stderr,
                "error: '%s' is not a file of log-probabilities (written by perplexity --kl-divergence-base): "
                "no \"_logits_\" header\n",
                path);
        fclose(fp);
        return NULL;
    }
    if (head[0] < 4 || head[1] < 1 || head[1] > (1 << 24) || head[2] < 1) {
        fprintf(stderr, "error: '%s': bad header (n_ctx %d, n_vocab %d, n_chunk %d)\n", path, (int)head[0],
                (int)head[1], (int)head[2]);
        fclose(fp);
        return NULL;
    }
    /* the size the header implies: 20 + n_chunk * (n_ctx * 4 + scored * nv * 2) bytes; each factor is below
     * 2^31 (nv below 2^25), so the per-chunk size fits in 64 bits and the chunk count is checked by division */
    const uint64_t ctx = (uint64_t)head[0], chunk = (uint64_t)head[2];
    const uint64_t scored = ctx - 1 - ctx / 2, nv = record_u16(head[1]);
    const uint64_t per_chunk = ctx * 4 + scored * nv * 2;
    uint64_t size = 0;
    if (fseeko(fp, 0, SEEK_END) == 0) {
        off_t end = ftello(fp);
        size = end > 0 ? (uint64_t)end : 0;
    }
    if (size < 20 || (size - 20) % per_chunk != 0 || (size - 20) / per_chunk != chunk || fseeko(fp, 20, SEEK_SET)) {
        fprintf(stderr,
                "error: '%s' holds %llu bytes; a header of n_ctx %d, n_vocab %d, n_chunk %d needs 20 + %d x %llu "
                "(truncated, or not written for this header)\n",
                path, (unsigned long long)size, (int)head[0], (int)head[1], (int)head[2], (int)head[2],
                (unsigned long long)per_chunk);
        fclose(fp);
        return NULL;
    }
    const uint64_t tok_bytes = ctx * chunk * 4;
    int32_t *t = malloc((size_t)tok_bytes);
    if (!t || fread(t, 4, (size_t)(ctx * chunk), fp) != ctx * chunk) {
        fprintf(stderr, "error: reading the tokens of '%s'%s\n", path, t ? "" : ": out of memory");
        free(t);
        fclose(fp);
        return NULL;
    }
    for (uint64_t i = 0; i < ctx * chunk; i++)
        if (t[i] < 0 || t[i] >= head[1]) {
            fprintf(stderr, "error: '%s': token %llu is %d, outside the vocabulary of %d\n", path,
                    (unsigned long long)i, (int)t[i], (int)head[1]);
            free(t);
            fclose(fp);
            return NULL;
        }
    kld_file *k = file_new(fp, path, false, head[1]);
    if (!k) {
        free(t);
        return NULL;
    }
    *n_ctx = head[0];
    *n_vocab = head[1];
    *n_chunk = head[2];
    *tokens = t;
    return k;
}

int kld_write(kld_file *k, const float *l) {
    const int32_t n = k->n_vocab;
    float mx = l[0], mn = l[0];
    for (int32_t i = 1; i < n; i++) {
        mx = l[i] > mx ? l[i] : mx;
        mn = l[i] < mn ? l[i] : mn;
    }
    if (mn < mx - 16) mn = mx - 16; /* 16 nats below the top: p < 1.1e-7 */
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) sum += expf(l[i] - mx);
    const float lse = (float)log(sum), scale = (mx - mn) / 65535.f, min_log_prob = mn - mx - lse;
    memcpy(k->rec, &scale, 4);
    memcpy(k->rec + 2, &min_log_prob, 4);
    uint16_t *q = k->rec + 4;
    if (scale > 0) {
        const float inv = 1 / scale;
        for (int32_t i = 0; i < n; i++) {
            float v = l[i] > mn ? rintf(inv * (l[i] - mn)) : 0.f; /* round half to even, as llama.cpp */
            q[i] = (uint16_t)(v > 65535.f ? 65535.f : v);
        }
    } else {
        memset(q, 0, (size_t)n * sizeof *q);
    }
    if (fwrite(k->rec, sizeof *k->rec, k->nv, k->f) != k->nv) {
        fprintf(stderr, "error: --kl-divergence-base: writing '%s': %s\n", k->path, strerror(errno));
        return -1;
    }
    return 0;
}

int kld_read(kld_file *k) {
    if (fread(k->rec, sizeof *k->rec, k->nv, k->f) != k->nv) {
        fprintf(stderr, "error: '%s': a record of log-probabilities could not be read (truncated while in use?)\n",
                k->path);
        return -1;
    }
    return 0;
}

const uint16_t *kld_record(const kld_file *k) { return k->rec; }

int kld_close(kld_file *k) {
    if (!k) return 0;
    int rc = 0;
    if (fclose(k->f) != 0 && k->writing) {
        fprintf(stderr, "error: --kl-divergence-base: closing '%s': %s\n", k->path, strerror(errno));
        rc = -1;
    }
    free(k->rec);
    free(k->path);
    free(k);
    return rc;
}

int kld_stats_init(kld_stats *s, int64_t n) {
    memset(s, 0, sizeof *s);
    s->kld = malloc((size_t)(n > 0 ? n : 1) * sizeof *s->kld);
    s->p_diff = malloc((size_t)(n > 0 ? n : 1) * sizeof *s->p_diff);
    if (!s->kld || !s->p_diff) {
        fprintf(stderr, "error: out of memory for the KL divergence of %lld tokens\n", (long long)n);
        kld_stats_free(s);
        return -1;
    }
    s->cap = n;
    return 0;
}

void kld_stats_free(kld_stats *s) {
    free(s->kld);
    free(s->p_diff);
    s->kld = s->p_diff = NULL;
}

void kld_add(kld_stats *s, const float *l, const uint16_t *base, int32_t n, int32_t tok) {
    float mx = l[0];
    int32_t imax = 0;
    for (int32_t i = 1; i < n; i++)
        if (l[i] > mx) mx = l[i], imax = i;
    double sum_exp = 0.0;
    for (int32_t i = 0; i < n; i++) sum_exp += expf(l[i] - mx);
    const float lse = (float)log(sum_exp);
    float scale, min_log_prob;
    memcpy(&scale, base, 4);
    memcpy(&min_log_prob, base + 2, 4);
    const uint16_t *q = base + 4;

    const float nll = mx + lse - l[tok], nll_base = -(scale * q[tok] + min_log_prob);
    s->sum_nll += nll;
    s->sum_nll2 += (double)nll * nll;
    s->sum_nll_base += nll_base;
    s->sum_nll_base2 += (double)nll_base * nll_base;
    s->sum_nll_nll_base += (double)nll * nll_base;

    /* KL(base || model) = sum_i p_base_i (log p_base_i - log p_i), terms with p_base < e^-16 left out */
    const float log_z = mx + lse;
    double kld = 0.0;
    int32_t imax_base = 0;
    float top_base = 0.f;
    for (int32_t i = 0; i < n; i++) {
        const float lb = scale * q[i] + min_log_prob;
        if (i == 0 || lb > top_base) top_base = lb, imax_base = i;
        if (lb > -16.f) kld += expf(lb) * (lb - l[i] + log_z);
    }
    s->sum_kld += kld;
    s->sum_kld2 += kld * kld;
    s->n_same_top += imax == imax_base;
    const float p_diff = expf(-nll) - expf(-nll_base);
    s->sum_p_diff += p_diff;
    s->sum_p_diff2 += (double)p_diff * p_diff;
    s->sum_p_diff4 += (double)p_diff * p_diff * p_diff * p_diff;
    if (s->count < s->cap) {
        s->kld[s->count] = (float)kld;
        s->p_diff[s->count] = p_diff;
    }
    s->count++;
}

/* mean and its standard error, as llama-perplexity gives them */
static void mean_unc(double sum, double sum2, int64_t n, double *m, double *u) {
    *m = n > 0 ? sum / (double)n : 0.0;
    double var = n > 0 ? sum2 / (double)n - *m * *m : 0.0;
    *u = var > 0 && n > 10 ? sqrt(var / (double)(n - 1)) : 0.0;
}

static int cmp_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static float quantile(const float *v, int64_t n, double frac) {
    if (frac <= 0) return v[0];
    if (frac >= 1) return v[n - 1];
    double p = frac * (double)(n - 1);
    int64_t i = (int64_t)p;
    p -= (double)i;
    return (float)((1 - p) * v[i] + p * v[i + 1 < n ? i + 1 : n - 1]);
}

typedef struct kld_summary {
    double ppl, ppl_unc, ppl_base, ppl_base_unc, cor, ln_ratio, ln_ratio_unc, kld, kld_unc;
    double dp, dp_unc, dp_rms, dp_rms_unc, same_top, same_top_unc;
} kld_summary;

static kld_summary summarize(const kld_stats *s) {
    kld_summary r;
    const int64_t n = s->count;
    double lp, lpu, lb, lbu, d2, d2u;
    mean_unc(s->sum_nll, s->sum_nll2, n, &lp, &lpu);
    mean_unc(s->sum_nll_base, s->sum_nll_base2, n, &lb, &lbu);
    double cov = n >= 10 ? (s->sum_nll_nll_base / (double)n - lp * lb) / (double)(n - 1) : 0.0;
    r.ppl = exp(lp), r.ppl_unc = r.ppl * lpu;
    r.ppl_base = exp(lb), r.ppl_base_unc = r.ppl_base * lbu;
    r.cor = lpu > 0 && lbu > 0 ? cov / (lpu * lbu) : 0.0;
    r.ln_ratio = lp - lb;
    double v = lpu * lpu + lbu * lbu - 2 * cov;
    r.ln_ratio_unc = v > 0 ? sqrt(v) : 0.0;
    mean_unc(s->sum_kld, s->sum_kld2, n, &r.kld, &r.kld_unc);
    mean_unc(s->sum_p_diff, s->sum_p_diff2, n, &r.dp, &r.dp_unc);
    mean_unc(s->sum_p_diff2, s->sum_p_diff4, n, &d2, &d2u);
    r.dp_rms = sqrt(d2 > 0 ? d2 : 0);
    r.dp_rms_unc = r.dp_rms > 0 ? 0.5 / r.dp_rms * d2u : 0.0;
    r.same_top = n > 0 ? (double)s->n_same_top / (double)n : 0.0;
    r.same_top_unc = n > 1 ? sqrt(r.same_top * (1 - r.same_top) / (double)(n - 1)) : 0.0;
    return r;
}

void kld_print(FILE *f, kld_stats *s) {
    const kld_summary r = summarize(s);
    const int64_t n = s->count < s->cap ? s->count : s->cap;
    fprintf(f, "====== Perplexity statistics ======\n");
    fprintf(f, "Mean PPL(Q)                   : %10.6f ± %10.6f\n", r.ppl, r.ppl_unc);
    fprintf(f, "Mean PPL(base)                : %10.6f ± %10.6f\n", r.ppl_base, r.ppl_base_unc);
    fprintf(f, "Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100.0 * r.cor);
    fprintf(f, "Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", r.ln_ratio, r.ln_ratio_unc);
    fprintf(f, "Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", exp(r.ln_ratio), exp(r.ln_ratio) * r.ln_ratio_unc);
    fprintf(f, "Mean PPL(Q)-PPL(base)         : %10.6f\n\n", r.ppl - r.ppl_base);
    fprintf(f, "====== KL divergence statistics ======\n");
    fprintf(f, "Mean    KLD: %10.6f ± %10.6f\n", r.kld, r.kld_unc);
    if (n > 0) {
        qsort(s->kld, (size_t)n, sizeof *s->kld, cmp_f);
        qsort(s->p_diff, (size_t)n, sizeof *s->p_diff, cmp_f);
        static const struct {
            const char *name;
            double q;
        } qs[] = {{"Maximum", 1}, {"99.9%  ", .999}, {"99.0%  ", .99}, {"95.0%  ", .95}, {"90.0%  ", .9},
                  {"Median ", .5}, {"10.0%  ", .1},  {" 5.0%  ", .05}, {" 1.0%  ", .01}, {" 0.1%  ", .001},
                  {"Minimum", 0}};
        for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++)
            fprintf(f, "%s KLD: %10.6f\n", qs[i].name, quantile(s->kld, n, qs[i].q));
    }
    fprintf(f, "\n====== Token probability statistics ======\n");
    fprintf(f, "Mean    Δp: %6.3f ± %5.3f %%\n", 100.0 * r.dp, 100.0 * r.dp_unc);
    if (n > 0) {
        fprintf(f, "Maximum Δp: %6.3f%%\n", 100.0 * s->p_diff[n - 1]);
        fprintf(f, "Median  Δp: %6.3f%%\n", 100.0 * quantile(s->p_diff, n, .5));
        fprintf(f, "Minimum Δp: %6.3f%%\n", 100.0 * s->p_diff[0]);
    }
    fprintf(f, "RMS Δp    : %6.3f ± %5.3f %%\n", 100.0 * r.dp_rms, 100.0 * r.dp_rms_unc);
    fprintf(f, "Same top p: %6.3f ± %5.3f %%\n", 100.0 * r.same_top, 100.0 * r.same_top_unc);
}

void kld_print_json(FILE *f, kld_stats *s) {
    const kld_summary r = summarize(s);
    const int64_t n = s->count < s->cap ? s->count : s->cap;
    if (n > 0) qsort(s->kld, (size_t)n, sizeof *s->kld, cmp_f);
    fprintf(f,
            ",\"kld_mean\":%.8g,\"kld_mean_unc\":%.8g,\"same_top\":%.8g,\"ppl_q\":%.8g,\"ppl_base\":%.8g,"
            "\"ln_ppl_ratio\":%.8g,\"delta_p_rms\":%.8g,\"kld_median\":%.8g,\"kld_p99\":%.8g,\"kld_tokens\":%lld",
            r.kld, r.kld_unc, r.same_top, r.ppl, r.ppl_base, r.ln_ratio, r.dp_rms, n > 0 ? quantile(s->kld, n, .5) : 0.0,
            n > 0 ? quantile(s->kld, n, .99) : 0.0, (long long)s->count);
}
