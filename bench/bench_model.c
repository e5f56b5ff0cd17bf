/* bench_model.c - llama-bench-style throughput of tessera's forward pass
 * (internal API: src/model). Not a test; see docs/PERFORMANCE.md.
 *
 *   bench_model -m MODEL.gguf [-m ...] [-p 32,128,512] [-n 128] [-t 2] [-r 3]
 *               [-b 512] [--json]
 *
 * Tests, as llama-bench runs them (each preceded by one untimed warm-up run
 * of the same test, then repeated -r times):
 *   ppN  prefill N random tokens into an empty KV cache, one ts_forward call
 *        (micro-batches of -b tokens, default 512 = llama-bench's n_ubatch);
 *        logits of the last token only. t/s = N / time.
 *   tgN  from an empty cache, N calls of one token each (random ids, logits
 *        every step, no sampling). t/s = N / time.
 * Reported per test: mean and sample standard deviation of the per-run t/s
 * (avg_ts, stddev_ts), as llama-bench. The table goes to stdout in
 * llama-bench's markdown shape; --json prints a JSON array with
 * llama-bench's field names instead. The model's load time, resident memory
 * after loading (VmRSS) and the repacked bytes go to stderr.
 *
 * The activation precision (TS_ACT=q8 for the lo one) and kernel level
 * (TS_CPU_LEVEL) come from the environment, as for any tessera program.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu.h"
#include "model/model_impl.h"

#define MAX_LIST 16

typedef struct {
    int v[MAX_LIST];
    int n;
} int_list;

static int parse_list(const char *s, int_list *out) {
    out->n = 0;
    while (*s) {
        char *end;
        long x = strtol(s, &end, 10);
        if (end == s || x < 0 || x > 1000000 || out->n == MAX_LIST) return -1;
        out->v[out->n++] = (int)x;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return out->n ? 0 : -1;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static long status_kb(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    const size_t n = strlen(field);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && line[n] == ':') {
            v = strtol(line + n + 1, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static int32_t rand_token(int32_t n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (int32_t)(rng % (uint64_t)n);
}

typedef struct {
    int n_prompt, n_gen;
    double ts[64];
    int n;
} result;

/* one timed run of a test; returns seconds, < 0 on error */
static double run_test(ts_state *s, int n_prompt, int n_gen, int32_t n_tok_ids, int32_t *buf, ts_err *err) {
    ts_state_kv_truncate(s, 0);
    if (n_prompt > 0) {
        for (int i = 0; i < n_prompt; i++) buf[i] = rand_token(n_tok_ids);
        const double t0 = now_s();
        if (ts_forward(s, buf, n_prompt, NULL, err)) return -1;
        return now_s() - t0;
    }
    const double t0 = now_s();
    for (int i = 0; i < n_gen; i++) {
        int32_t tok = rand_token(n_tok_ids);
        if (ts_forward(s, &tok, 1, NULL, err)) return -1;
    }
    return now_s() - t0;
}

static void stats(const double *v, int n, double *mean, double *sd) {
    double m = 0, q = 0;
    for (int i = 0; i < n; i++) m += v[i];
    m /= n;
    for (int i = 0; i < n; i++) q += (v[i] - m) * (v[i] - m);
    *mean = m;
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0.0;
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* "llama 135M Q4_0": architecture, parameter count, the type of most of the
 * layer weights */
static void model_type(const ts_mdl *m, char *buf, size_t cap) {
    const ts_hparams *hp = ts_mdl_hparams(m);
    const double np = (double)ts_mdl_n_params(m);
    char sz[32];
    if (np >= 1e9)
        snprintf(sz, sizeof sz, "%.0fB", np / 1e9);
    else
        snprintf(sz, sizeof sz, "%.0fM", np / 1e6);
    const ts_type_traits *t = ts_type_info(m->layers[0].w_gate.type);
    snprintf(buf, cap, "%s %s %s", hp->arch_name, sz, t ? t->name : "?");
}

static int usage(void) {
    fprintf(stderr, "usage: bench_model -m MODEL.gguf [-m ...] [-p 32,128,512] [-n 128] [-t 2] [-r 3] [-b 512] "
                    "[--json]\n");
    return 2;
}

int main(int argc, char **argv) {
    const char *models[MAX_LIST];
    int n_models = 0, reps = 3, n_batch = 512, json = 0;
    int_list pp, tg, th;
    parse_list("32,128,512", &pp);
    parse_list("128", &tg);
    parse_list("2", &th);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json") || (!strcmp(a, "-o") && v && !strcmp(v, "json"))) {
            json = 1;
            if (!strcmp(a, "-o")) i++;
            continue;
        }
        if (!v) return usage();
        i++;
        if (!strcmp(a, "-m") && n_models < MAX_LIST)
            models[n_models++] = v;
        else if (!strcmp(a, "-p")) {
            if (!strcmp(v, "0")) pp.n = 0;
            else if (parse_list(v, &pp)) return usage();
        } else if (!strcmp(a, "-n")) {
            if (!strcmp(v, "0")) tg.n = 0;
            else if (parse_list(v, &tg)) return usage();
        } else if (!strcmp(a, "-t")) {
            if (parse_list(v, &th)) return usage();
        } else if (!strcmp(a, "-r")) {
            reps = atoi(v);
            if (reps < 1 || reps > 64) return usage();
        } else if (!strcmp(a, "-b")) {
            n_batch = atoi(v);
            if (n_batch < 1) return usage();
        } else
            return usage();
    }
    if (!n_models) return usage();

    int max_p = 0, max_n = 0;
    for (int i = 0; i < pp.n; i++) max_p = pp.v[i] > max_p ? pp.v[i] : max_p;
    for (int i = 0; i < tg.n; i++) max_n = tg.v[i] > max_n ? tg.v[i] : max_n;
    int32_t *buf = malloc(sizeof(int32_t) * (size_t)(max_p + 1));
    if (!buf) return 1;

    if (json)
        printf("[\n");
    else {
        printf("| model                          |       size |     params | backend    | threads |            test |"
               "                  t/s |\n");
        printf("| ------------------------------ | ---------: | ---------: | ---------- | ------: | --------------: |"
               " -------------------: |\n");
    }
    int first = 1;
    for (int mi = 0; mi < n_models; mi++) {
        ts_err err = {{0}};
        const double t0 = now_s();
        ts_mdl *m = ts_mdl_load(models[mi], NULL, &err);
        if (!m) {
            fprintf(stderr, "bench_model: %s\n", err.msg);
            return 1;
        }
        fprintf(stderr, "%s: loaded in %.2f s, VmRSS %.1f MiB, repacked %.1f MiB%s, kernels %s, activations %s\n",
                base_name(models[mi]), now_s() - t0, status_kb("VmRSS") / 1024.0, m->packed_bytes / 1048576.0,
                m->packed_map ? " (own buffer, file pages dropped)" : m->packed_bytes ? " (in place)" : "",
                m->ref_kernels ? "reference (TS_KERNELS=ref)" : ts_cpu_level_name(ts_cpu_level_active()),
                m->ref_kernels ? "f32" : getenv("TS_ACT") && !strcmp(getenv("TS_ACT"), "q8") ? "q8 (lo)" : "16-bit (hi)");
        char mtype[64];
        model_type(m, mtype, sizeof mtype);
        const ts_hparams *hp = ts_mdl_hparams(m);
        /* random ids from the tokenizer's range (the bench files have vocabularies larger than it) */
        const int32_t n_ids = hp->n_vocab < 49152 ? hp->n_vocab : 49152;
        for (int ti = 0; ti < th.n; ti++) {
            ts_state_params sp = ts_state_default_params();
            sp.n_ctx = max_p + max_n + 1;
            sp.n_batch = n_batch;
            sp.n_threads = th.v[ti];
            ts_state *s = ts_state_new(m, &sp, &err);
            if (!s) {
                fprintf(stderr, "bench_model: %s\n", err.msg);
                return 1;
            }
            for (int k = 0; k < pp.n + tg.n; k++) {
                result r = {k < pp.n ? pp.v[k] : 0, k < pp.n ? 0 : tg.v[k - pp.n], {0}, 0};
                if (r.n_prompt == 0 && r.n_gen == 0) continue;
                /* warm-up (as llama-bench) */
                if (run_test(s, r.n_prompt, r.n_gen > 0 ? 1 : 0, n_ids, buf, &err) < 0) {
                    fprintf(stderr, "bench_model: %s\n", err.msg);
                    return 1;
                }
                double ns_samples[64];
                for (int rep = 0; rep < reps; rep++) {
                    const double dt = run_test(s, r.n_prompt, r.n_gen, n_ids, buf, &err);
                    if (dt < 0) {
                        fprintf(stderr, "bench_model: %s\n", err.msg);
                        return 1;
                    }
                    r.ts[r.n++] = (r.n_prompt + r.n_gen) / dt;
                    ns_samples[rep] = dt * 1e9;
                }
                double avg, sd, avg_ns, sd_ns;
                stats(r.ts, r.n, &avg, &sd);
                stats(ns_samples, r.n, &avg_ns, &sd_ns);
                char test[32];
                snprintf(test, sizeof test, "%s%d", r.n_prompt ? "pp" : "tg", r.n_prompt ? r.n_prompt : r.n_gen);
                if (json) {
                    printf("%s  {\"model_filename\": \"%s\", \"model_type\": \"%s\", \"model_size\": %llu, "
                           "\"model_n_params\": %llu, \"n_batch\": %d, \"n_ubatch\": %d, \"n_threads\": %d, "
                           "\"type_k\": \"%s\", \"n_prompt\": %d, \"n_gen\": %d, \"avg_ns\": %.0f, \"stddev_ns\": %.0f, "
                           "\"avg_ts\": %.6f, \"stddev_ts\": %.6f, \"samples_ns\": [",
                           first ? "" : ",\n", models[mi], mtype, (unsigned long long)ts_mdl_size_bytes(m),
                           (unsigned long long)ts_mdl_n_params(m), n_batch, n_batch, th.v[ti], "f16", r.n_prompt,
                           r.n_gen, avg_ns, sd_ns, avg, sd);
                    for (int i = 0; i < r.n; i++) printf("%s%.0f", i ? ", " : "", ns_samples[i]);
                    printf("], \"samples_ts\": [");
                    for (int i = 0; i < r.n; i++) printf("%s%.6f", i ? ", " : "", r.ts[i]);
                    printf("]}");
                    first = 0;
                } else {
                    char size[32], params[32], ts[48];
                    snprintf(size, sizeof size, "%.2f MiB", ts_mdl_size_bytes(m) / 1048576.0);
                    const double np = (double)ts_mdl_n_params(m);
                    if (np >= 1e9)
                        snprintf(params, sizeof params, "%.2f B", np / 1e9);
                    else
                        snprintf(params, sizeof params, "%.2f M", np / 1e6);
                    snprintf(ts, sizeof ts, "%.2f ± %.2f", avg, sd);
                    printf("| %-30s | %10s | %10s | %-10s | %7d | %15s | %20s |\n", mtype, size, params, "CPU",
                           th.v[ti], test, ts);
                }
                fflush(stdout);
            }
            ts_state_free(s);
        }
        ts_mdl_free(m);
    }
    if (json) printf("\n]\n");
    free(buf);
    return 0;
}
