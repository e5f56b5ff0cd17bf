/* test_prefill_device.c - prefill on a device, decode on the CPU, through
 * the public API (ts_context_params.prefill_device) on a real model.
 *
 *   test_prefill_device MODE MODEL.gguf
 *
 * Every mode runs one session twice, in two contexts of the same model: a
 * reference and the device under test. The session (one context, several
 * prompts and generations, truncation and reset between) covers a prompt
 * shorter than the minimum, exactly one chunk, many chunks plus a tail, and
 * greedy generations after each; every evaluated position's logits (as a
 * 64-bit hash of their bytes) and every generated token are compared.
 *
 *   gate1         `loop` (resident weights) and `loop,window=..` (weights
 *                 streamed through two slots) against the CPU: bit-identical.
 *   gate2         `loop:npu,window=16M` (a window far smaller than the
 *                 model: streamed, matmuls only, weights converted to
 *                 F16/Q8_0/Q4_0) against `cpu,wtypes=f16+q8_0+q4_0`: the CPU
 *                 computing the same chunks with the same converted weights
 *                 (the probe picks the same types on both). Bit-identical,
 *                 and the window peak never above the window.
 *   break-upload  `loop,nowait=1` streaming (the device skips the wait
 *                 between a layer's upload and its use): MUST differ.
 *   break-drain   `loop,nodrain=1` (a prefill run returns before the device
 *                 is done, so the CPU reads the residual stream and KV rows
 *                 early): MUST differ.
 *   gate1-amx     `amx,emulate=1` (the AMX engine on its tile emulator,
 *                 act=exact), resident and streamed, against the CPU:
 *                 bit-identical; the same on the real unit (`amx`) where
 *                 this machine has AMX (else said, and only the emulator).
 *   gate1-amx-q8  `amx,emulate=1,act=q8` (and `amx,act=q8`) against the CPU
 *                 run with TS_ACT=q8 (its 8-bit activations; CTest sets
 *                 it): bit-identical.
 *   break-upload-amx, break-drain-amx  the two breaks on the amx engine
 *                 (emulated): MUST differ.
 *   gate-ooo      sched=ooo (several chunks in flight, out of order):
 *                 `loop,sched=ooo` against the CPU, `loop:npu,sched=ooo`
 *                 against `loop:npu` in order, and on the real unit where
 *                 present `amx,ops=matmul,threads=1,sched=ooo` (act=exact
 *                 against the CPU; act=int8 against itself in order):
 *                 (elsewhere `amx,emulate=1,ops=matmul,...` against the
 *                 CPU) bit-identical, with the multi-chunk step's 3 chunks
 *                 counted as run out of order.
 *   break-ooo     `loop:npu,sched=ooo,ooo_nowait=1` (a chunk's attention
 *                 does not wait for the previous chunk's K/V rows):
 *                 MUST differ from loop:npu in order.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "logit_hash.h"
#include "tessera.h"

/* the break-on-purpose engine options exist only in a TS_TEST_HOOKS build */
#ifdef TS_TEST_HOOKS
#define TS_HOOKS_BUILT 1
#else
#define TS_HOOKS_BUILT 0
#endif

static int g_fail;
#define CHECK(c, ...)                                                                                                  \
    do {                                                                                                               \
        if (!(c)) {                                                                                                    \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                       \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fputc('\n', stderr);                                                                                       \
            g_fail++;                                                                                                  \
        }                                                                                                              \
    } while (0)

#define MAX_REC 2048

/* What a session produced: one hash per evaluated position, the tokens. */
typedef struct record {
    uint64_t hash[MAX_REC];
    int32_t argmax[MAX_REC];
    int n;
    int32_t tokens[64];
    int n_tok;
    ts_stats st[8]; /* per step (its strings point into the context: see device[]) */
    char device[8][48];
    int n_st;
} record;


static int32_t argmax(const float *x, int64_t n) {
    int32_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = (int32_t)i;
    return b;
}

static void rec_row(record *r, const float *row, int32_t n_vocab) {
    if (r->n < MAX_REC) {
        r->hash[r->n] = logit_hash(row, n_vocab);
        r->argmax[r->n] = argmax(row, n_vocab);
        r->n++;
    }
}

static bool on_logits(const float *logits, int32_t n_vocab, void *ud) {
    rec_row(ud, logits, n_vocab);
    return true;
}

typedef struct gen_ud {
    record *r;
} gen_ud;

static bool on_token(const char *piece, size_t len, int32_t token, void *ud) {
    (void)piece, (void)len;
    record *r = ud;
    if (token >= 0 && r->n_tok < 64) r->tokens[r->n_tok++] = token;
    return true;
}


/* One step: evaluate a prompt with every position's logits, then a greedy
 * generation of n_gen tokens (each one evaluated, its logits recorded). */
static int step(ts_context *ctx, record *r, int n_prompt, uint64_t seed, int n_gen, int32_t n_vocab) {
    int32_t ids[512];
    logit_prompt_ids(ids, n_prompt, seed, n_vocab);
    float *rows = malloc((size_t)n_prompt * (size_t)n_vocab * sizeof(float));
    if (!rows) return -1;
    if (ts_context_eval(ctx, ids, n_prompt, rows) != TS_OK) {
        fprintf(stderr, "eval: %s\n", ts_last_error(ctx));
        free(rows);
        return -1;
    }
    for (int i = 0; i < n_prompt; i++) rec_row(r, rows + (size_t)i * (size_t)n_vocab, n_vocab);
    free(rows);
    ts_generate_params gp = ts_generate_default_params();
    gp.n_predict = n_gen;
    gp.eval_last = true;
    gp.on_token = on_token;
    gp.on_logits = on_logits;
    gp.user_data = r;
    if (ts_context_generate(ctx, &gp) != TS_OK) {
        fprintf(stderr, "generate: %s\n", ts_last_error(ctx));
        return -1;
    }
    if (r->n_st < 8) {
        r->st[r->n_st].struct_size = sizeof(ts_stats);
        ts_context_get_stats(ctx, &r->st[r->n_st]);
        snprintf(r->device[r->n_st], sizeof r->device[0], "%s", r->st[r->n_st].device ? r->st[r->n_st].device : "");
        r->st[r->n_st].device = r->st[r->n_st].device_fallback = NULL; /* freed with the context */
        r->n_st++;
    }
    return 0;
}

/* The session: short prompt; one exact chunk after it (the device reads the
 * CPU's decode rows); truncation, then many chunks plus a tail; reset, one
 * chunk plus a short tail. Chunks of 32, minimum 32. */
static int session(ts_context *ctx, record *r, int32_t n_vocab) {
    memset(r, 0, sizeof *r);
    if (step(ctx, r, 10, 1, 3, n_vocab)) return -1; /* shorter than the minimum: all CPU */
    if (step(ctx, r, 32, 2, 3, n_vocab)) return -1; /* exactly one chunk */
    if (ts_context_kv_truncate(ctx, 5) != TS_OK) return -1;
    if (step(ctx, r, 3 * 32 + 7, 3, 3, n_vocab)) return -1; /* many chunks plus a tail */
    if (ts_context_reset(ctx) != TS_OK) return -1;
    if (step(ctx, r, 40, 4, 2, n_vocab)) return -1; /* one chunk, tail of 8 */
    return 0;
}

/* Device tokens each step must show with chunks of 32, minimum 32. */
static const int64_t want_dev[4] = {0, 32, 96, 32};

static ts_context *make_ctx(const ts_model *m, const char *dev, char *fallback, size_t fb_n) {
    static ts_sampling_params sp;
    sp = ts_sampling_default_params();
    sp.temp = 0.0f; /* greedy */
    ts_context_params cp = ts_context_default_params();
    cp.n_ctx = 256;
    cp.n_threads = 2;
    cp.sampling = &sp;
    cp.prefill_device = dev;
    cp.chunk = 32;
    cp.prefill_min_tokens = 32;
    ts_context *ctx = NULL;
    ts_error err;
    if (ts_context_create(m, &cp, &ctx, &err) != TS_OK) {
        fprintf(stderr, "context on %s: %s\n", dev ? dev : "cpu", err.message);
        return NULL;
    }
    ts_stats st = TS_STRUCT_INIT(ts_stats);
    ts_context_get_stats(ctx, &st);
    if (fallback) snprintf(fallback, fb_n, "%s", st.device_fallback ? st.device_fallback : "");
    return ctx;
}

/* Runs the session on `dev`; NULL on failure (message printed). */
static record *run_on(const ts_model *m, const char *dev, int32_t n_vocab) {
    char fb[700];
    ts_context *ctx = make_ctx(m, dev, fb, sizeof fb);
    record *r = calloc(1, sizeof *r);
    if (!ctx || !r) {
        free(r);
        ts_context_free(ctx);
        return NULL;
    }
    if (fb[0]) {
        fprintf(stderr, "%s\n", fb);
        CHECK(0, "%s fell back to the CPU", dev);
    }
    if (session(ctx, r, n_vocab)) {
        CHECK(0, "session on %s failed", dev ? dev : "cpu");
        free(r);
        r = NULL;
    }
    ts_context_free(ctx);
    return r;
}

/* Positions whose logits differ, first one, and whether the tokens match. */
static int compare(const record *a, const record *b, int *first, bool *tokens_same) {
    int diff = 0;
    *first = -1;
    for (int i = 0; i < a->n && i < b->n; i++)
        if (a->hash[i] != b->hash[i]) {
            if (*first < 0) *first = i;
            diff++;
        }
    diff += a->n != b->n;
    *tokens_same = a->n_tok == b->n_tok && !memcmp(a->tokens, b->tokens, (size_t)a->n_tok * sizeof(int32_t));
    return diff;
}

static void print_steps(const char *dev, const record *r) {
    for (int i = 0; i < r->n_st; i++) {
        const ts_stats *s = &r->st[i];
        printf("  %s step %d: prompt %lld (device %lld, cpu %lld), %lld device nodes, %lld crossings, stall %.2f ms, "
               "upload %.1f MiB, %lld graph builds, window peak %.2f of %.2f MiB\n",
               dev, i + 1, (long long)s->n_prompt_tokens, (long long)s->prefill_dev_tokens,
               (long long)s->prefill_cpu_tokens, (long long)s->prefill_dev_nodes, (long long)s->crossings,
               s->dev_stall_ms, s->dev_upload_mib, (long long)s->graph_builds, (double)s->dev_window_peak / 1048576.0,
               (double)s->dev_window_bytes / 1048576.0);
    }
}

/* The device run's counters: device tokens per step as the chunking says,
 * no graph built after setup, the peak within the window. */
static void check_counters(const char *dev, const record *r, const char *want_name) {
    CHECK(r->n_st == 4, "%s: %d steps recorded", dev, r->n_st);
    for (int i = 0; i < r->n_st && i < 4; i++) {
        const ts_stats *s = &r->st[i];
        CHECK(!strcmp(r->device[i], want_name), "%s: device '%s', expected '%s'", dev, r->device[i], want_name);
        CHECK(s->prefill_dev_tokens == want_dev[i], "%s step %d: %lld device tokens, expected %lld", dev, i + 1,
              (long long)s->prefill_dev_tokens, (long long)want_dev[i]);
        CHECK(s->prefill_dev_tokens + s->prefill_cpu_tokens == s->n_prompt_tokens, "%s step %d: tokens do not add up",
              dev, i + 1);
        CHECK(!want_dev[i] || s->prefill_dev_nodes > 0, "%s step %d: no device nodes", dev, i + 1);
        CHECK(s->graph_builds == r->st[0].graph_builds && s->graph_builds > 0, "%s step %d: graph builds %lld",
              dev, i + 1, (long long)s->graph_builds);
        CHECK(s->dev_window_peak <= s->dev_window_bytes, "%s step %d: window peak %llu above the window %llu", dev,
              i + 1, (unsigned long long)s->dev_window_peak, (unsigned long long)s->dev_window_bytes);
    }
}

static void gate(const ts_model *m, int32_t n_vocab, const char *ref_dev, const char *dev, const char *name,
                 const record *ref_in, bool expect_stream, uint64_t model_bytes) {
    record *ref = ref_in ? NULL : run_on(m, ref_dev, n_vocab);
    const record *rr = ref_in ? ref_in : ref;
    record *d = run_on(m, dev, n_vocab);
    CHECK(rr && d, "runs failed");
    if (rr && d) {
        int first;
        bool same_tok;
        const int diff = compare(rr, d, &first, &same_tok);
        printf("%s vs %s: %d positions evaluated, %d differ%s, %d tokens generated, tokens %s\n", dev,
               ref_dev ? ref_dev : "cpu", rr->n, diff, diff ? "" : " (bit-identical)", rr->n_tok,
               same_tok ? "identical" : "DIFFER");
        CHECK(diff == 0, "%s: %d of %d positions' logits differ from %s (first %d)", dev, diff, rr->n,
              ref_dev ? ref_dev : "cpu", first);
        CHECK(same_tok, "%s: generated tokens differ", dev);
        check_counters(dev, d, name);
        print_steps(dev, d);
        if (strstr(dev, "sched=ooo")) /* step 3: 3 chunks of 32 + a CPU tail of 7 */
            CHECK(d->n_st == 4 && d->st[2].dev_ooo_chunks == 3 && d->st[1].dev_ooo_chunks == 0,
                  "%s: chunks run out of order per step %lld / %lld, expected 0 / 3", dev,
                  (long long)d->st[1].dev_ooo_chunks, (long long)d->st[2].dev_ooo_chunks);
        const ts_stats *s = &d->st[d->n_st - 1];
        if (expect_stream) /* each run re-uploads the layers: far more than the window */
            CHECK(s->dev_upload_mib * 1048576.0 > (double)s->dev_window_bytes &&
                      (double)s->dev_window_bytes < (double)model_bytes,
                  "%s: upload %.1f MiB does not show streaming through a %.1f MiB window", dev, s->dev_upload_mib,
                  (double)s->dev_window_bytes / 1048576.0);
    }
    free(ref);
    free(d);
}

/* is the real AMX unit here? (says why not, once) */
static bool amx_here(void) {
    static int known = -1;
    if (known < 0) {
        ts_device_info devs[16];
        devs[0].struct_size = sizeof devs[0];
        const int nd = ts_devices(devs, 16);
        CHECK(nd > 0, "ts_devices returned %d", nd);
        known = 0;
        for (int i = 0; i < nd && i < 16; i++)
            if (!strcmp(devs[i].name, "amx")) {
                known = devs[i].ok;
                if (!known) printf("real AMX not tested here: %s\n", devs[i].reason);
            }
    }
    return known == 1;
}

static void expect_broken_vs(const ts_model *m, int32_t n_vocab, const char *ref_dev, const char *dev,
                             const char *what) {
    record *ref = run_on(m, ref_dev, n_vocab);
    record *d = run_on(m, dev, n_vocab);
    CHECK(ref && d, "runs failed");
    if (ref && d) {
        int first;
        bool same_tok;
        const int diff = compare(ref, d, &first, &same_tok);
        int top_diff = 0;
        for (int i = 0; i < ref->n && i < d->n; i++) top_diff += ref->argmax[i] != d->argmax[i];
        printf("%s (%s, broken on purpose): %d of %d positions' logits differ from %s (first at %d), %d argmax, "
               "tokens %s\n",
               dev, what, diff, ref->n, ref_dev ? ref_dev : "the CPU", first, top_diff, same_tok ? "identical" : "differ");
        CHECK(diff > 0, "%s: the broken ordering went unnoticed (logits bit-identical)", dev);
    }
    free(ref);
    free(d);
}

static void expect_broken(const ts_model *m, int32_t n_vocab, const char *dev, const char *what) {
    expect_broken_vs(m, n_vocab, NULL, dev, what);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: test_prefill_device gate1|gate2|break-upload|break-drain|gate1-amx|gate1-amx-q8|"
                        "break-upload-amx|break-drain-amx|gate-ooo|break-ooo MODEL.gguf\n");
        return 2;
    }
    const char *mode = argv[1], *path = argv[2];
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "FAIL: model %s is missing: run tools/fetch_models.sh\n", path);
        return 1;
    }
    fclose(f);
    ts_model *m = NULL;
    ts_error err;
    if (ts_model_load(path, NULL, &m, &err) != TS_OK) {
        fprintf(stderr, "FAIL: %s\n", err.message);
        return 1;
    }
    ts_model_info info = TS_STRUCT_INIT(ts_model_info);
    ts_model_get_info(m, &info);
    const int32_t V = info.n_vocab;
    /* a window holding two converted layers, activations and graph scratch,
     * but far from the whole model */
    const char *stream_loop = !strcmp(info.arch, "gemma3") ? "loop,window=24M" : "loop,window=16M";
    if (!strcmp(mode, "gate1")) {
        record *ref = run_on(m, NULL, V);
        CHECK(ref, "cpu run failed");
        if (ref) {
            gate(m, V, NULL, "loop", "loop", ref, false, info.size_bytes);
            gate(m, V, NULL, stream_loop, "loop", ref, true, info.size_bytes);
        }
        free(ref);
    } else if (!strcmp(mode, "gate2")) {
        gate(m, V, "cpu,wtypes=f16+q8_0+q4_0", "loop:npu,window=16M,delay_us=50", "loop:npu", NULL, true,
             info.size_bytes);
    } else if (!strcmp(mode, "gate1-amx") || !strcmp(mode, "gate1-amx-q8")) {
        const bool q8 = !strcmp(mode, "gate1-amx-q8");
        const char *act = q8 ? ",act=q8" : "";
        const char *env = getenv("TS_ACT");
        if (q8 && !(env && !strcmp(env, "q8"))) {
            fprintf(stderr, "FAIL: gate1-amx-q8 needs TS_ACT=q8 (the CPU reference's 8-bit activations)\n");
            ts_model_free(m);
            return 1;
        }
        const bool hw = amx_here();
        const char *qe = getenv("TS_GATE_QUICK");
        const bool quick = qe && *qe == '1'; /* the sanitizer build: the emulator is slow there */
        record *ref = run_on(m, NULL, V);
        CHECK(ref, "cpu run failed");
        for (int unit = 0; ref && unit < (hw ? 2 : 1); unit++) {
            char res[64], str[96];
            snprintf(res, sizeof res, "amx%s%s", unit ? "" : ",emulate=1", act);
            snprintf(str, sizeof str, "%s,window=%s", res, !strcmp(info.arch, "gemma3") ? "40M" : "24M");
            gate(m, V, NULL, res, "amx", ref, false, info.size_bytes);
            if (unit || !quick)
                gate(m, V, NULL, str, "amx", ref, true, info.size_bytes);
            else
                printf("%s: not run (TS_GATE_QUICK: the emulated streamed case runs in the plain build)\n", str);
        }
        free(ref);
    } else if (!strcmp(mode, "gate-ooo")) {
        record *ref = run_on(m, NULL, V);
        CHECK(ref, "cpu run failed");
        if (ref) gate(m, V, NULL, "loop,sched=ooo", "loop", ref, false, info.size_bytes);
        gate(m, V, "loop:npu,window=1G", "loop:npu,window=1G,sched=ooo", "loop:npu", NULL, false, info.size_bytes);
        if (ref && amx_here()) {
            gate(m, V, NULL, "amx,ops=matmul,threads=1,sched=ooo", "amx", ref, false, info.size_bytes);
            gate(m, V, NULL, "amx,threads=1,sched=ooo", "amx", ref, false, info.size_bytes);
            gate(m, V, "amx,act=int8,ops=matmul,threads=1", "amx,act=int8,ops=matmul,threads=1,sched=ooo", "amx",
                 NULL, false, info.size_bytes);
        } else if (ref) { /* the matmul-only amx and the schedule over it, on the emulator */
            gate(m, V, NULL, "amx,emulate=1,ops=matmul,threads=1,sched=ooo", "amx", ref, false, info.size_bytes);
        }
        free(ref);
    } else if (!strncmp(mode, "break-", 6) && !TS_HOOKS_BUILT) {
        printf("skipped: %s needs the break-on-purpose hooks (configure with -DTS_TEST_HOOKS=ON)\n", mode);
        ts_model_free(m);
        return 77;
    } else if (!strcmp(mode, "break-upload")) {
        char dev[64];
        snprintf(dev, sizeof dev, "%s,nowait=1", stream_loop);
        expect_broken(m, V, dev, "no wait between a layer's upload and its use");
    } else if (!strcmp(mode, "break-drain")) {
        expect_broken(m, V, "loop,nodrain=1,delay_us=20000", "no wait between device prefill and CPU decode");
    } else if (!strcmp(mode, "break-ooo")) {
        expect_broken_vs(m, V, "loop:npu,window=1G", "loop:npu,window=1G,sched=ooo,ooo_nowait=1",
                         "a chunk's attention before the previous chunk's K/V rows");
    } else if (!strcmp(mode, "break-upload-amx")) {
        expect_broken(m, V, "amx,emulate=1,window=24M,nowait=1", "no wait between a layer's upload and its use");
        if (amx_here())
            expect_broken(m, V, "amx,window=24M,nowait=1", "no wait between a layer's upload and its use");
    } else if (!strcmp(mode, "break-drain-amx")) {
        expect_broken(m, V, "amx,emulate=1,nodrain=1", "no wait between device prefill and CPU decode");
        if (amx_here())
            expect_broken(m, V, "amx,nodrain=1", "no wait between device prefill and CPU decode");
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        g_fail++;
    }
    ts_model_free(m);
    if (g_fail) fprintf(stderr, "%d check(s) failed\n", g_fail);
    else printf("ok\n");
    return g_fail ? 1 : 0;
}
