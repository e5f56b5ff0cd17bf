/* test_diffusion_device.c - diffusion window forwards on the prefill device
 * (ts_context_params.prefill_device with ts_context_diffuse), through the
 * public API on the tiny random llada / dream models
 * (tools/gen_dllm_models.py).
 *
 *   test_diffusion_device gate   MODEL.gguf [DEVICE]  DEVICE (default
 *                                `loop`; e.g. `loop,window=12M` to stream
 *                                the weights) gives the CPU's tokens
 *                                bit for bit and the same counters (device
 *                                counters aside) for the block decoder
 *                                (prefix, dual, no cache) and the vanilla
 *                                decoder, the decoding window (with and
 *                                without lookahead), selective logits
 *                                skipping, staged token stabilization and
 *                                the sparse cache refresh,
 *                                with device tokens > 0; windows
 *                                narrower than prefill_min_tokens stay on
 *                                the CPU (0 device tokens); a mix (prompt
 *                                window on the device, block windows on the
 *                                CPU) gives them too. On `loop:npu`
 *                                (widths 32/64 required) the narrower
 *                                windows run padded to the width: padding
 *                                rows counted, the CPU's tokens still.
 *   test_diffusion_device break  MODEL.gguf [NOWAIT_DEVICE]  the
 *                                broken-on-purpose orderings MUST change
 *                                something: `loop,nodrain=1` (the CPU reads
 *                                the residual stream before the device wrote
 *                                it) and, given, NOWAIT_DEVICE, e.g.
 *                                `loop,nowait=1,window=12M` streaming the
 *                                weights of tests/gen_deep_dllm.py's model
 *                                (no wait between a layer's upload and its
 *                                use; a 2-layer model streams the same two
 *                                layers into the same two slots every run,
 *                                so it cannot show that break).
 *   test_diffusion_device compare MODEL.gguf DEVICE   runs DEVICE (e.g.
 *                                opencl, f32 arithmetic in another order)
 *                                and the CPU, prints how many tokens agree;
 *                                fails unless all do (see compare()).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

#define N_GEN 24

typedef struct outcome {
    int ok;
    int32_t tokens[N_GEN];
    int32_t n;
    ts_diffusion_stats st;
    char device[64]; /* ts_stats.device, "" for none */
} outcome;

typedef struct mode {
    const char *label;
    ts_diffusion_decoder decoder;
    ts_diffusion_cache cache;
    int32_t steps;
    float temp;
    int32_t window, lookahead; /* multi-block speculative decoding */
    bool skip_logits;
    bool sts; /* staged token stabilization, visible 0.2 / stable 0.5 */
    bool scr; /* sparse cache refresh (with sts) */
} mode;

static const mode MODES[] = {
    {"block prefix", TS_DIFFUSION_BLOCK, TS_DIFFUSION_CACHE_PREFIX, 0, 0.0f, 0, 0, false, false, false},
    {"block dual", TS_DIFFUSION_BLOCK, TS_DIFFUSION_CACHE_DUAL, 0, 0.0f, 0, 0, false, false, false},
    {"block none", TS_DIFFUSION_BLOCK, TS_DIFFUSION_CACHE_NONE, 0, 0.0f, 0, 0, false, false, false},
    {"vanilla", TS_DIFFUSION_VANILLA, TS_DIFFUSION_CACHE_PREFIX, 12, 0.0f, 0, 0, false, false, false},
    {"block prefix temp", TS_DIFFUSION_BLOCK, TS_DIFFUSION_CACHE_PREFIX, 0, 0.7f, 0, 0, false, false, false},
    {"window", TS_DIFFUSION_BLOCK, TS_DIFFUSION_CACHE_PREFIX, 0, 0.0f, 12, 0, false, false, false},
    {"window lookahead", TS_DIFFUSION_BLOCK, TS_DIFFUSION_CACHE_PREFIX, 0, 0.0f, 8, 4, false, false, false},
    {"window skip-logits", TS_DIFFUSION_BLOCK, TS_DIFFUSION_CACHE_PREFIX, 0, 0.0f, 12, 4, true, false, false},
    {"vanilla skip-logits", TS_DIFFUSION_VANILLA, TS_DIFFUSION_CACHE_PREFIX, 12, 0.0f, 0, 0, true, false, false},
    {"sts", TS_DIFFUSION_BLOCK, TS_DIFFUSION_CACHE_PREFIX, 0, 0.0f, 0, 0, false, true, false},
    {"sts window skip", TS_DIFFUSION_BLOCK, TS_DIFFUSION_CACHE_PREFIX, 0, 0.0f, 12, 4, true, true, false},
    {"sts scr", TS_DIFFUSION_BLOCK, TS_DIFFUSION_CACHE_PREFIX, 0, 0.0f, 0, 0, false, true, true},
    {"sts scr window temp", TS_DIFFUSION_BLOCK, TS_DIFFUSION_CACHE_PREFIX, 0, 0.7f, 12, 4, true, true, true},
};
#define N_MODES ((int)(sizeof MODES / sizeof MODES[0]))

static const int32_t PROMPT[] = {300, 412, 77, 518, 263, 391, 455, 120, 610, 288, 333, 501};
#define N_PROMPT ((int32_t)(sizeof PROMPT / sizeof PROMPT[0]))

/* One decode of the prompt with mode md on device dev (NULL: CPU only);
 * min_tokens: ts_context_params.prefill_min_tokens. */
static outcome run(const ts_model *m, const mode *md, const char *dev, int32_t min_tokens, int32_t chunk) {
    outcome o;
    memset(&o, 0, sizeof o);
    ts_diffusion_params dp = ts_diffusion_default_params();
    dp.decoder = md->decoder;
    dp.cache = md->cache;
    dp.n_gen = N_GEN;
    dp.block = 8;
    dp.steps = md->steps;
    dp.temp = md->temp;
    dp.window = md->window;
    dp.lookahead = md->lookahead;
    dp.lookahead_trigger = 6;
    dp.skip_logits = md->skip_logits;
    dp.sts = md->sts;
    dp.scr = md->scr;
    dp.visible = 0.2f;
    dp.stable = 0.5f;
    dp.threshold = 0.2f; /* the tiny random models are unsure: commit several per step */
    dp.early_stop = false;
    ts_context_params cp = ts_context_default_params();
    /* a device that requires widths pads a narrower window into the cache
     * rows past it: room for the last one (ts_forward_window) */
    cp.n_ctx = N_PROMPT + N_GEN + (dev && strstr(dev, "npu") ? chunk : 0);
    cp.n_batch = ts_diffusion_n_batch(m, &dp, N_PROMPT);
    cp.n_threads = 2;
    cp.decoder = TS_DECODER_DIFFUSION;
    cp.prefill_device = dev;
    cp.prefill_min_tokens = min_tokens;
    cp.chunk = chunk;
    ts_context *ctx = NULL;
    ts_error err;
    if (ts_context_create(m, &cp, &ctx, &err) != TS_OK) {
        fprintf(stderr, "context (%s, %s): %s\n", md->label, dev ? dev : "cpu", err.message);
        return o;
    }
    o.st = (ts_diffusion_stats)TS_STRUCT_INIT(ts_diffusion_stats);
    if (ts_context_diffuse(ctx, PROMPT, N_PROMPT, &dp, o.tokens, N_GEN, &o.n, &o.st) != TS_OK) {
        fprintf(stderr, "diffuse (%s, %s): %s\n", md->label, dev ? dev : "cpu", ts_last_error(ctx));
    } else {
        ts_stats cs = TS_STRUCT_INIT(ts_stats);
        ts_context_get_stats(ctx, &cs);
        if (cs.device_fallback) fprintf(stderr, "%s\n", cs.device_fallback);
        snprintf(o.device, sizeof o.device, "%s", cs.device ? cs.device : "");
        o.ok = 1;
    }
    ts_context_free(ctx);
    return o;
}

static bool same_tokens(const outcome *a, const outcome *b) {
    return a->n == b->n && !memcmp(a->tokens, b->tokens, (size_t)a->n * sizeof(int32_t));
}

/* every counter except times and the device's */
static bool same_counters(const outcome *a, const outcome *b) {
    const ts_diffusion_stats *x = &a->st, *y = &b->st;
    return x->forwards == y->forwards && x->denoise_forwards == y->denoise_forwards &&
           x->tokens_evaluated == y->tokens_evaluated && x->tokens_committed == y->tokens_committed &&
           !memcmp(x->commit_per_forward_hist, y->commit_per_forward_hist, sizeof x->commit_per_forward_hist) &&
           x->early_stop_at == y->early_stop_at && x->n_prompt_tokens == y->n_prompt_tokens &&
           x->n_gen_tokens == y->n_gen_tokens && x->n_blocks == y->n_blocks && x->stop_reason == y->stop_reason &&
           x->window_max == y->window_max && x->draft_evals == y->draft_evals &&
           x->draft_accepted == y->draft_accepted && x->lookahead_tokens == y->lookahead_tokens &&
           x->logits_skipped == y->logits_skipped && x->sts_visible == y->sts_visible &&
           x->sts_forced == y->sts_forced && x->sts_stable == y->sts_stable && x->revisions == y->revisions &&
           x->unstable_at_block_end == y->unstable_at_block_end && x->visible_at_end == y->visible_at_end &&
           x->scr_refreshed == y->scr_refreshed && x->scr_revisions == y->scr_revisions &&
           x->scr_stabilized == y->scr_stabilized && x->scr_merged == y->scr_merged;
}

static void gate(const ts_model *m, const char *devname) {
    for (int i = 0; i < N_MODES; i++) {
        const mode *md = &MODES[i];
        outcome ref = run(m, md, NULL, 0, 0), dev = run(m, md, devname, 2, 64);
        CHECK(ref.ok && dev.ok, "%s: a run failed", md->label);
        if (!ref.ok || !dev.ok) continue;
        CHECK(ref.st.dev_forwards == 0 && ref.st.dev_tokens == 0, "%s: CPU run counted device work", md->label);
        CHECK(!strncmp(dev.device, "loop", 4), "%s: device '%s', not loop", md->label, dev.device);
        CHECK(dev.st.dev_tokens > 0 && dev.st.dev_forwards > 0, "%s: no window ran on the device", md->label);
        CHECK(dev.st.dev_tokens <= dev.st.tokens_evaluated, "%s: %lld device tokens of %lld evaluated", md->label,
              (long long)dev.st.dev_tokens, (long long)dev.st.tokens_evaluated);
        /* loop:npu at width 64: every window here is narrower, so each device one is padded */
        const bool npu = strstr(devname, "npu") != NULL;
        CHECK(npu ? dev.st.dev_pad_tokens >= dev.st.dev_forwards : dev.st.dev_pad_tokens == 0,
              "%s: %lld padding rows in %lld device forwards", md->label, (long long)dev.st.dev_pad_tokens,
              (long long)dev.st.dev_forwards);
        CHECK(!md->scr || (ref.st.scr_refreshed > 0 && ref.st.scr_merged > 0), "%s: nothing was refreshed (%lld)",
              md->label, (long long)ref.st.scr_refreshed);
        CHECK(same_tokens(&ref, &dev), "%s: tokens differ from the CPU's", md->label);
        CHECK(same_counters(&ref, &dev), "%s: counters differ from the CPU's", md->label);
        printf("%-18s %s: %d tokens, %lld forwards (%lld on the device, %lld of %lld positions, %lld padding rows): "
               "%s\n", md->label, devname, (int)dev.n, (long long)dev.st.forwards, (long long)dev.st.dev_forwards,
               (long long)dev.st.dev_tokens, (long long)dev.st.tokens_evaluated, (long long)dev.st.dev_pad_tokens,
               same_tokens(&ref, &dev) && same_counters(&ref, &dev) ? "identical to the CPU" : "DIFFERS");
        if (strstr(devname, "place=somr")) {
            /* the 12 MiB window holds part of the deep model: some layers resident, some streamed */
            CHECK(dev.st.dev_resident_layers > 0 && dev.st.dev_streamed_layers > 0,
                  "%s: somr placed %d resident, %d streamed", md->label, (int)dev.st.dev_resident_layers,
                  (int)dev.st.dev_streamed_layers);
            printf("%-18s   somr: %d layers resident, %d streamed; %.2f MiB uploaded, stall %.2f ms\n", "",
                   (int)dev.st.dev_resident_layers, (int)dev.st.dev_streamed_layers,
                   (double)dev.st.dev_upload_bytes / 1048576.0, dev.st.dev_stall_ms);
        }
        if (i == 0) {
            /* windows narrower than the minimum (and wider than the chunk) stay on the CPU */
            outcome narrow = run(m, md, devname, 64, 64);
            CHECK(narrow.ok && narrow.st.dev_tokens == 0 && same_tokens(&ref, &narrow),
                  "%s: min 64: %lld device tokens", md->label, (long long)narrow.st.dev_tokens);
            /* (loop:npu has no width <= 4: it takes its smallest, 32, and pads) */
            outcome wide = run(m, md, devname, 2, 4);
            CHECK(wide.ok && (npu || wide.st.dev_tokens == 0) && same_tokens(&ref, &wide),
                  "%s: chunk 4: %lld device tokens", md->label, (long long)wide.st.dev_tokens);
        }
        if (i <= 1) {
            /* mixed: the 12-token prompt window on the device, the 8-token
             * block windows on the CPU over the cache rows the device wrote */
            outcome mixed = run(m, md, devname, 10, 64);
            CHECK(mixed.ok && mixed.st.dev_tokens > 0 && mixed.st.dev_tokens < mixed.st.tokens_evaluated &&
                      same_tokens(&ref, &mixed) && same_counters(&ref, &mixed),
                  "%s: mixed (min 10): %lld of %lld device tokens, tokens %s", md->label,
                  (long long)mixed.st.dev_tokens, (long long)mixed.st.tokens_evaluated,
                  same_tokens(&ref, &mixed) ? "same" : "differ");
        }
    }
}

/* A broken device must be noticed: some decode differs from the CPU's. */
static void expect_broken(const ts_model *m, const char *dev, const char *what) {
    int differ = 0, ran = 0;
    for (int i = 0; i < N_MODES; i++) {
        outcome ref = run(m, &MODES[i], NULL, 0, 0), bad = run(m, &MODES[i], dev, 2, 64);
        if (!ref.ok || !bad.ok) continue;
        ran += bad.st.dev_tokens > 0;
        if (!same_tokens(&ref, &bad) || !same_counters(&ref, &bad)) differ++;
    }
    CHECK(ran > 0, "%s: the device path never ran", dev);
    CHECK(differ > 0, "%s (%s): every decode matched the CPU: the gate would not notice", dev, what);
    printf("%s (%s): %d of %d decodes differ from the CPU (must be > 0): %s\n", dev, what, differ, N_MODES,
           differ ? "noticed" : "NOT NOTICED");
}

static void compare(const ts_model *m, const char *devname) {
    for (int i = 0; i < N_MODES; i++) {
        const mode *md = &MODES[i];
        outcome ref = run(m, md, NULL, 0, 0), dev = run(m, md, devname, 2, 64);
        CHECK(ref.ok && dev.ok, "%s: a run failed", md->label);
        if (!ref.ok || !dev.ok) continue;
        CHECK(dev.st.dev_tokens > 0, "%s: no window ran on %s", md->label, devname);
        int agree = 0;
        for (int k = 0; k < ref.n && k < dev.n; k++) agree += ref.tokens[k] == dev.tokens[k];
        /* f32 weights, attention NMSE ~1e-13 (test_engine_window): a token
         * could only flip on a near-tie of two logits or of a confidence and
         * the threshold, which these prompts do not have on PoCL */
        CHECK(agree == ref.n && dev.n == ref.n && same_counters(&ref, &dev), "%s: %s differs from the CPU",
              md->label, devname);
        printf("%-18s %s: %d of %d tokens as the CPU's, counters %s, %lld device tokens\n", md->label, dev.device,
               agree, (int)ref.n, same_counters(&ref, &dev) ? "same" : "differ", (long long)dev.st.dev_tokens);
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_diffusion_device gate|break|compare MODEL.gguf [DEVICE]\n");
        return 2;
    }
    ts_model *m = NULL;
    ts_error err;
    if (ts_model_load(argv[2], NULL, &m, &err) != TS_OK) {
        fprintf(stderr, "FAIL: cannot load %s: %s (the tiny models come from tools/gen_dllm_models.py)\n", argv[2],
                err.message);
        return 1;
    }
    if (!strcmp(argv[1], "gate")) {
        gate(m, argc > 3 ? argv[3] : "loop");
    } else if (!strcmp(argv[1], "break") && !TS_HOOKS_BUILT) {
        printf("skipped: break needs the break-on-purpose hooks (configure with -DTS_TEST_HOOKS=ON)\n");
        ts_model_free(m);
        return 77;
    } else if (!strcmp(argv[1], "break")) {
        if (argc > 3) expect_broken(m, argv[3], "no wait between upload and use");
        expect_broken(m, "loop,nodrain=1,delay_us=20000", "no wait between the device's run and the logits");
    } else if (!strcmp(argv[1], "compare") && argc > 3) {
        compare(m, argv[3]);
    } else {
        fprintf(stderr, "unknown mode %s\n", argv[1]);
        g_fail++;
    }
    ts_model_free(m);
    if (g_fail) fprintf(stderr, "%d check(s) failed\n", g_fail);
    else printf("ok\n");
    return g_fail ? 1 : 0;
}
