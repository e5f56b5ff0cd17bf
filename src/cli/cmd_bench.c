/* cmd_bench.c - `tessera bench`: llama-bench-style throughput through the
 * public API (the same calls an application makes).
 *
 *   tessera bench -m MODEL.gguf [-m ...] [-p 32,128,512] [-n 128] [-t 2]
 *                 [-r 3] [-b 512] [--json]
 *
 * Tests, as llama-bench runs them (one untimed warm-up run of each test,
 * then -r timed repetitions):
 *   ppN  from an empty KV cache, one ts_context_eval of N random token ids
 *        (micro-batches of -b tokens; default 512 = llama-bench's n_ubatch,
 *        so a prompt up to 512 tokens is one batch). t/s = N / time.
 *   tgN  from an empty cache, N ts_context_eval calls of one token each
 *        (random ids, no sampling). t/s = N / time.
 * Per test: mean and sample standard deviation of the per-run t/s. The table
 * has llama-bench's markdown shape; --json prints a JSON array with
 * llama-bench's field names instead. Load time goes to stderr.
 *
 * bench/bench_model.c measures the same tests below the API (internal
 * headers, with repacking/kernel details); this command is what users run.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cli_util.h"
#include "tessera.h"

#define BENCH_MAX_LIST 16
#define BENCH_MAX_REPS 64
#define BENCH_MAX_TOKENS 1000000

typedef struct {
    int v[BENCH_MAX_LIST];
    int n;
} int_list;

/* "32,128,512" -> list; "0" alone -> empty list (llama-bench: skip those tests).
 * -1 on junk, a value outside [lo, BENCH_MAX_TOKENS] or too many entries. */
static int parse_list(const char *s, int lo, int_list *out) {
    out->n = 0;
    if (!strcmp(s, "0") && lo == 0) return 0;
    if (!*s) return -1;
    while (*s) {
        char *end;
        long x = strtol(s, &end, 10);
        if (end == s || x < (lo ? lo : 1) || x > BENCH_MAX_TOKENS || out->n == BENCH_MAX_LIST) return -1;
        if (*end && *end != ',') return -1;
        out->v[out->n++] = (int)x;
        s = *end == ',' ? end + 1 : end;
        if (end[0] == ',' && !*s) return -1; /* trailing comma */
    }
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Fixed-seed xorshift: the same ids every process, no sampler cost. */
static int32_t rand_token(uint64_t *rng, int32_t n) {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    return (int32_t)(*rng % (uint64_t)n);
}

static double run_test_inner(ts_context *ctx, int n_prompt, int n_gen, int32_t n_vocab, int32_t *buf,
                             uint64_t *rng);

/* One timed run from an empty cache; seconds, or < 0 (message printed). */
static double run_test(ts_context *ctx, int n_prompt, int n_gen, int32_t n_vocab, int32_t *buf, uint64_t *rng,
                       ts_stats *st) {
    const double dt = run_test_inner(ctx, n_prompt, n_gen, n_vocab, buf, rng);
    st->struct_size = sizeof *st;
    ts_context_get_stats(ctx, st); /* the run's device counters */
    return dt;
}

static double run_test_inner(ts_context *ctx, int n_prompt, int n_gen, int32_t n_vocab, int32_t *buf,
                             uint64_t *rng) {
    if (ts_context_reset(ctx) != TS_OK) goto fail;
    double t0;
    if (n_prompt > 0) {
        for (int i = 0; i < n_prompt; i++) buf[i] = rand_token(rng, n_vocab);
        t0 = now_s();
        if (ts_context_eval(ctx, buf, n_prompt, NULL) != TS_OK) goto fail;
        return now_s() - t0;
    }
    t0 = now_s();
    for (int i = 0; i < n_gen; i++) {
        int32_t tok = rand_token(rng, n_vocab);
        if (ts_context_eval(ctx, &tok, 1, NULL) != TS_OK) goto fail;
    }
    return now_s() - t0;
fail:
    fprintf(stderr, "tessera bench: %s\n", ts_last_error(ctx));
    return -1;
}

static void mean_sd(const double *v, int n, double *mean, double *sd) {
    double m = 0, q = 0;
    for (int i = 0; i < n; i++) m += v[i];
    m /= n;
    for (int i = 0; i < n; i++) q += (v[i] - m) * (v[i] - m);
    *mean = m;
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0.0;
}

/* "llama 135M Q4_1": architecture, parameter count, and the type of the
 * first layer's FFN gate (most of the weights), as llama-bench's model_type. */
static void model_type(const ts_model *m, const ts_model_info *info, char *buf, size_t cap) {
    const char *wtype = "?";
    const ts_file *f = ts_model_file(m);
    ts_file_info fi = TS_STRUCT_INIT(ts_file_info);
    if (f && ts_file_get_info(f, &fi) == TS_OK)
        for (int64_t i = 0; i < fi.n_tensors; i++) {
            ts_tensor_info ti = TS_STRUCT_INIT(ts_tensor_info);
            if (ts_file_tensor(f, i, &ti) == TS_OK && !strcmp(ti.name, "blk.0.ffn_gate.weight")) {
                wtype = ti.type_name;
                break;
            }
        }
    const double np = (double)info->n_params;
    char sz[32];
    if (np >= 1e9)
        snprintf(sz, sizeof sz, "%.0fB", np / 1e9);
    else
        snprintf(sz, sizeof sz, "%.0fM", np / 1e6);
    snprintf(buf, cap, "%s %s %s", info->arch, sz, wtype);
}

static void usage(FILE *f) {
    fprintf(f, "usage: tessera bench -m MODEL.gguf [-m ...] [-p 32,128,512] [-n 128] [-t 2] [-r 3] [-b 512] [--json]\n"
               "  -m FILE     model (repeatable)\n"
               "  -p LIST     prompt lengths for the ppN tests (comma-separated; 0: none)\n"
               "  -n LIST     generated tokens for the tgN tests (0: none)\n"
               "  -t LIST     thread counts\n"
               "  -r N        timed repetitions after one warm-up (1..%d)\n"
               "  -b N        prompt micro-batch in tokens (default 512, llama-bench's n_ubatch)\n"
               "  --json      JSON array with llama-bench's field names instead of the table\n"
               "  --prefill-device DEV   prompt chunks on a device (loop, loop:npu, opencl, ...): the\n"
               "              backend column says so and the JSON adds prefill_device, dev_stall_ms,\n"
               "              dev_busy_ms, dev_host_wait_ms (means per run) and prefill_dev_tokens (per run)\n"
               "  --chunk N   tokens per device chunk (default 256)\n"
               "  --sched S   inorder (default) or ooo: prompt chunks out of order on the device\n"
               "  --prefill-min-tokens N  narrower chunks stay on the CPU (default 32)\n"
               "  --act MODE  exact (default) or q8: the CPU's activation precision; the backend\n"
               "              column says CPU,q8 for q8\n" CLI_MEM_HELP,
            BENCH_MAX_REPS);
}

static int bad_arg(const char *opt, const char *val, const char *why) {
    fprintf(stderr, "tessera bench: %s '%s': %s\n", opt, val, why);
    return 2;
}

typedef struct {
    const char *models[BENCH_MAX_LIST];
    int n_models, reps, n_batch;
    bool json;
    int_list pp, tg, th;
    const char *prefill_device; /* --prefill-device, or NULL */
    const char *sched;          /* --sched, or NULL */
    char device_buf[512];
    int chunk, prefill_min;     /* 0: library defaults */
    cli_mem_opts mem;           /* --mem-budget, --loaders, --stream-opts */
    ts_activations act;         /* --act */
} bench_opts;

/* 0 ok, 1 help printed, 2 usage error (printed). */
static int parse_args(int argc, char **argv, bench_opts *o) {
    memset(o, 0, sizeof *o);
    o->mem = (cli_mem_opts)CLI_MEM_INIT;
    o->reps = 3;
    o->n_batch = 512;
    parse_list("32,128,512", 0, &o->pp);
    parse_list("128", 0, &o->tg);
    parse_list("2", 1, &o->th);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 1;
        }
        if (!strcmp(a, "--json")) {
            o->json = true;
            continue;
        }
        if (!strcmp(a, "--no-prefill-routed")) {
            o->mem.no_routed = true;
            continue;
        }
        const bool known = !strcmp(a, "-m") || !strcmp(a, "-p") || !strcmp(a, "-n") || !strcmp(a, "-t") ||
                           !strcmp(a, "-r") || !strcmp(a, "-b") || !strcmp(a, "-o") ||
                           !strcmp(a, "--prefill-device") || !strcmp(a, "--chunk") ||
                           !strcmp(a, "--prefill-min-tokens") || !strcmp(a, "--sched") || cli_mem_flag(a) ||
                           !strcmp(a, "--act");
        if (!known) {
            fprintf(stderr, "tessera bench: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "tessera bench: %s needs a value\n", a);
            return 2;
        }
        const char *v = argv[++i];
        char *end;
        if (!strcmp(a, "-m")) {
            if (o->n_models == BENCH_MAX_LIST) return bad_arg(a, v, "too many models");
            o->models[o->n_models++] = v;
        } else if (!strcmp(a, "--prefill-device")) {
            o->prefill_device = v;
        } else if (!strcmp(a, "--sched")) {
            o->sched = v;
        } else if (!strcmp(a, "--act")) {
            if (cli_parse_act(a, v, &o->act)) return 2;
        } else if (cli_mem_flag(a)) {
            if (cli_mem_parse(a, v, &o->mem)) return 2;
        } else if (!strcmp(a, "--chunk") || !strcmp(a, "--prefill-min-tokens")) {
            long x = strtol(v, &end, 10);
            if (end == v || *end || x < 1 || x > 65536) return bad_arg(a, v, "expected a token count 1..65536");
            *(!strcmp(a, "--chunk") ? &o->chunk : &o->prefill_min) = (int)x;
        } else if (!strcmp(a, "-o")) {
            if (strcmp(v, "json") && strcmp(v, "md")) return bad_arg(a, v, "expected json or md");
            o->json = !strcmp(v, "json");
        } else if (!strcmp(a, "-p")) {
            if (parse_list(v, 0, &o->pp)) return bad_arg(a, v, "expected comma-separated token counts 1..1000000, or 0");
        } else if (!strcmp(a, "-n")) {
            if (parse_list(v, 0, &o->tg)) return bad_arg(a, v, "expected comma-separated token counts 1..1000000, or 0");
        } else if (!strcmp(a, "-t")) {
            if (parse_list(v, 1, &o->th)) return bad_arg(a, v, "expected comma-separated thread counts >= 1");
            for (int k = 0; k < o->th.n; k++)
                if (o->th.v[k] > TS_THREADS_MAX) return bad_arg(a, v, "more threads than TS_THREADS_MAX");
        } else if (!strcmp(a, "-r")) {
            long r = strtol(v, &end, 10);
            if (end == v || *end || r < 1 || r > BENCH_MAX_REPS) return bad_arg(a, v, "expected a repetition count 1..64");
            o->reps = (int)r;
        } else { /* -b */
            long b = strtol(v, &end, 10);
            if (end == v || *end || b < 1 || b > BENCH_MAX_TOKENS) return bad_arg(a, v, "expected a batch size >= 1");
            o->n_batch = (int)b;
        }
    }
    if (!o->n_models) {
        fprintf(stderr, "tessera bench: no model (-m FILE)\n");
        usage(stderr);
        return 2;
    }
    if (!o->pp.n && !o->tg.n) {
        fprintf(stderr, "tessera bench: nothing to run (-p 0 and -n 0)\n");
        return 2;
    }
    if (o->sched &&
        !(o->prefill_device = cli_device_sched("bench", o->prefill_device, o->sched, o->device_buf, sizeof o->device_buf)))
        return 2;
    return 0;
}

int cli_bench(int argc, char **argv) {
    bench_opts o;
    const int prc = parse_args(argc, argv, &o);
    if (prc) return prc == 1 ? 0 : 2;

    int max_p = 0, max_n = 0;
    for (int i = 0; i < o.pp.n; i++) max_p = o.pp.v[i] > max_p ? o.pp.v[i] : max_p;
    for (int i = 0; i < o.tg.n; i++) max_n = o.tg.v[i] > max_n ? o.tg.v[i] : max_n;
    int32_t *buf = malloc(sizeof(int32_t) * (size_t)(max_p + 1));
    if (!buf) {
        fprintf(stderr, "tessera bench: out of memory\n");
        return 1;
    }

    if (o.json)
        printf("[\n");
    else {
        printf("| model                          |       size |     params | backend    | threads |            test |"
               "                  t/s |\n");
        printf("| ------------------------------ | ---------: | ---------: | ---------- | ------: | --------------: |"
               " -------------------: |\n");
    }
    fflush(stdout);
    int status = 1;
    bool first = true;
    ts_model *m = NULL;
    ts_context *ctx = NULL;
    for (int mi = 0; mi < o.n_models; mi++) {
        ts_error err;
        ts_model_params mp = ts_model_default_params();
        mp.log = cli_log;
        cli_mem_apply(&o.mem, &mp);
        const double t0 = now_s();
        if (ts_model_load(o.models[mi], &mp, &m, &err) != TS_OK) {
            fprintf(stderr, "tessera bench: %s\n", err.message);
            goto done;
        }
        ts_model_info info = TS_STRUCT_INIT(ts_model_info);
        ts_model_get_info(m, &info);
        fprintf(stderr, "tessera bench: %s loaded in %.2f s\n", o.models[mi], now_s() - t0);
        char mtype[96];
        model_type(m, &info, mtype, sizeof mtype);
        for (int ti = 0; ti < o.th.n; ti++) {
            ts_context_params cp = ts_context_default_params();
            /* every test starts from an empty cache: the longest one must fit */
            cp.n_ctx = (max_p > max_n ? max_p : max_n) + 1;
            /* the micro-batch is capped at n_ctx; no test is longer, so the
             * effective batch is still min(N, -b) as the JSON reports it */
            cp.n_batch = o.n_batch < cp.n_ctx ? o.n_batch : cp.n_ctx;
            cp.n_threads = o.th.v[ti];
            cp.log = cli_log;
            cp.prefill_device = o.prefill_device;
            cp.activations = o.act;
            if (o.chunk) cp.chunk = o.chunk;
            if (o.prefill_min) cp.prefill_min_tokens = o.prefill_min;
            if (ts_context_create(m, &cp, &ctx, &err) != TS_OK) {
                fprintf(stderr, "tessera bench: %s\n", err.message);
                goto done;
            }
            ts_stats st0 = TS_STRUCT_INIT(ts_stats);
            ts_context_get_stats(ctx, &st0);
            if (st0.device_fallback) fprintf(stderr, "%s\n", st0.device_fallback);
            char backend[64];
            snprintf(backend, sizeof backend, st0.device ? "CPU%s+%s" : "CPU%s",
                     st0.activations == TS_ACTIVATIONS_Q8 ? ",q8" : "", st0.device);
            uint64_t rng = 0x9E3779B97F4A7C15ull;
            for (int k = 0; k < o.pp.n + o.tg.n; k++) {
                const int n_prompt = k < o.pp.n ? o.pp.v[k] : 0;
                const int n_gen = k < o.pp.n ? 0 : o.tg.v[k - o.pp.n];
                /* warm-up (as llama-bench: the same prompt, one generated token) */
                ts_stats rst;
                if (run_test(ctx, n_prompt, n_gen ? 1 : 0, info.n_vocab, buf, &rng, &rst) < 0) goto done;
                double ts[BENCH_MAX_REPS], ns[BENCH_MAX_REPS], stall_ms = 0.0, busy_ms = 0.0, wait_ms = 0.0;
                int64_t dev_tokens = 0;
                for (int rep = 0; rep < o.reps; rep++) {
                    const double dt = run_test(ctx, n_prompt, n_gen, info.n_vocab, buf, &rng, &rst);
                    if (dt < 0) goto done;
                    stall_ms += rst.dev_stall_ms / o.reps;
                    busy_ms += rst.dev_busy_ms / o.reps;
                    wait_ms += rst.dev_host_wait_ms / o.reps;
                    dev_tokens = rst.prefill_dev_tokens;
                    /* a clock too coarse for a tiny test must not divide by 0 */
                    const double d = dt > 1e-9 ? dt : 1e-9;
                    ts[rep] = (n_prompt + n_gen) / d;
                    ns[rep] = d * 1e9;
                }
                double avg, sd, avg_ns, sd_ns;
                mean_sd(ts, o.reps, &avg, &sd);
                mean_sd(ns, o.reps, &avg_ns, &sd_ns);
                if (o.json) {
                    char when[32];
                    const time_t now = time(NULL);
                    struct tm tmv;
                    gmtime_r(&now, &tmv);
                    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tmv);
                    printf("%s  {\"build_number\": 0, \"build_commit\": \"tessera-%s\", \"model_filename\": ",
                           first ? "" : ",\n", ts_version());
                    cli_json_str(stdout, o.models[mi]);
                    printf(", \"model_type\": ");
                    cli_json_str(stdout, mtype);
                    printf(", \"model_size\": %llu, \"model_n_params\": %llu, \"n_batch\": %d, \"n_ubatch\": %d, "
                           "\"n_threads\": %d, \"type_k\": \"f16\", \"type_v\": \"f16\", \"n_prompt\": %d, "
                           "\"n_gen\": %d, \"test_time\": \"%s\", \"avg_ns\": %.0f, \"stddev_ns\": %.0f, "
                           "\"avg_ts\": %.6f, \"stddev_ts\": %.6f, \"samples_ns\": [",
                           (unsigned long long)info.size_bytes, (unsigned long long)info.n_params, o.n_batch,
                           o.n_batch, o.th.v[ti], n_prompt, n_gen, when, avg_ns, sd_ns, avg, sd);
                    for (int i = 0; i < o.reps; i++) printf("%s%.0f", i ? ", " : "", ns[i]);
                    printf("], \"samples_ts\": [");
                    for (int i = 0; i < o.reps; i++) printf("%s%.6f", i ? ", " : "", ts[i]);
                    printf("], \"activations\": \"%s\", \"prefill_device\": ",
                           st0.activations == TS_ACTIVATIONS_Q8 ? "q8" : "exact");
                    if (st0.device)
                        cli_json_str(stdout, st0.device);
                    else
                        printf("null");
                    printf(", \"prefill_dev_tokens\": %lld, \"dev_stall_ms\": %.3f, \"dev_busy_ms\": %.3f, "
                           "\"dev_host_wait_ms\": %.3f}",
                           (long long)dev_tokens, stall_ms, busy_ms, wait_ms);
                    first = false;
                } else {
                    char size[32], params[32], tps[48], test[32];
                    snprintf(size, sizeof size, "%.2f MiB", (double)info.size_bytes / 1048576.0);
                    const double np = (double)info.n_params;
                    if (np >= 1e9)
                        snprintf(params, sizeof params, "%.2f B", np / 1e9);
                    else
                        snprintf(params, sizeof params, "%.2f M", np / 1e6);
                    snprintf(tps, sizeof tps, "%.2f ± %.2f", avg, sd);
                    snprintf(test, sizeof test, "%s%d", n_prompt ? "pp" : "tg", n_prompt ? n_prompt : n_gen);
                    /* "±" is 2 bytes but 1 column: pad one more */
                    printf("| %-30s | %10s | %10s | %-10s | %7d | %15s | %21s |\n", mtype, size, params, backend,
                           o.th.v[ti], test, tps);
                }
                fflush(stdout);
            }
            ts_context_free(ctx);
            ctx = NULL;
        }
        ts_model_free(m);
        m = NULL;
    }
    status = 0;
done:
    if (o.json) printf("\n]\n");
    ts_context_free(ctx);
    ts_model_free(m);
    free(buf);
    return status;
}
