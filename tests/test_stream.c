/* test_stream.c - a model under a memory budget (ts_model_params.mem_budget,
 * model/stream.c, runtime/arena.c) through the public API.
 *
 *   test_stream MODE MODEL.gguf [DEVICE ...]
 *
 * A session (one context: a short prompt, a chunk, truncation, a long
 * prompt, reset, another prompt; greedy generations after each; every
 * evaluated position's logits hashed) runs on the model in memory and on
 * the same file under budgets that stream some, most or all of the layers
 * it can.
 *   gate       bit-identical logits and tokens for: a budget streaming one
 *              layer, about half, and the most the file allows; with one
 *              loader slowed by loader_delay_us=; through the page cache
 *              (direct=0); whole MoE layers (routed=0); an expert cache
 *              (cache_mb=1, hits and misses counted); two contexts of one
 *              streamed model in turn; prefill on each DEVICE (default
 *              loop: its two slots filled from the arena, a device that
 *              converts or packs making its form as it uploads; decode on
 *              the CPU) against the model in memory on the same device; the counters: layers streamed,
 *              fills, bytes read; on a MoE model, routed reads reading
 *              fewer bytes than whole layers.
 *   devices    only the prefill on each DEVICE at the smallest budget (the
 *              device part of gate, a test of its own so that each fits
 *              its time limit under the sanitizers).
 *   break-demand  skip_demand=1 (a MoE model: the routing node neither
 *              reads nor checks the routed experts not read ahead): the
 *              logits MUST change, so the routed gate cannot pass by luck.
 *   break-skip skip_fill=1 (the loaders report a layer filled without
 *              reading it): the first eval MUST fail, naming stale bytes;
 *              never a result.
 *   faults     an EIO and a short read injected on one read (fault=,
 *              fault_at=), and the file truncated under a running context:
 *              the request fails with a message naming the tensor and the
 *              file offset, and the same context then serves the session
 *              again, bit-identical to the model in memory.
 * Modes using test hooks exit 77 (skipped) in a build without them.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "logit_hash.h"
#include "tessera.h"

#ifdef TS_TEST_HOOKS
#define TS_HOOKS_BUILT 1
#else
#define TS_HOOKS_BUILT 0
#endif


#define MAX_REC 1024

typedef struct record {
    uint64_t hash[MAX_REC];
    int n;
    int32_t tokens[64];
    int n_tok;
    ts_stats st;
    char err[600];      /* the failing call's message */
    char fallback[600]; /* the device's fallback line, if any */
    int64_t dev_tokens; /* prompt tokens prefilled on the device, over the session */
} record;

static void rec_row(record *r, const float *row, int32_t n_vocab) {
    if (r->n < MAX_REC) r->hash[r->n++] = logit_hash(row, n_vocab);
}

static bool on_logits(const float *logits, int32_t n_vocab, void *ud) {
    rec_row(ud, logits, n_vocab);
    return true;
}

static bool on_token(const char *piece, size_t len, int32_t token, void *ud) {
    (void)piece, (void)len;
    record *r = ud;
    if (token >= 0 && r->n_tok < 64) r->tokens[r->n_tok++] = token;
    return true;
}

static int step(ts_context *ctx, record *r, int n_prompt, uint64_t seed, int n_gen, int32_t n_vocab) {
    int32_t ids[256];
    logit_prompt_ids(ids, n_prompt, seed, n_vocab);
    float *rows = malloc((size_t)n_prompt * (size_t)n_vocab * sizeof(float));
    if (!rows) return -1;
    if (ts_context_eval(ctx, ids, n_prompt, rows) != TS_OK) {
        snprintf(r->err, sizeof r->err, "%s", ts_last_error(ctx));
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
        snprintf(r->err, sizeof r->err, "%s", ts_last_error(ctx));
        return -1;
    }
    ts_stats st = TS_STRUCT_INIT(ts_stats);
    ts_context_get_stats(ctx, &st);
    r->dev_tokens += st.prefill_dev_tokens; /* the counters are the step's */
    return 0;
}

static int session(ts_context *ctx, record *r, int32_t n_vocab) {
    memset(r, 0, sizeof *r);
    if (ts_context_reset(ctx) != TS_OK) return -1;
    if (step(ctx, r, 6, 1, 3, n_vocab) || step(ctx, r, 40, 2, 3, n_vocab)) return -1;
    if (ts_context_kv_truncate(ctx, 5) != TS_OK) return -1;
    if (step(ctx, r, 100, 3, 3, n_vocab)) return -1;
    if (ts_context_reset(ctx) != TS_OK) return -1;
    if (step(ctx, r, 20, 4, 2, n_vocab)) return -1;
    r->st.struct_size = sizeof r->st;
    ts_context_get_stats(ctx, &r->st);
    if (r->st.device_fallback) snprintf(r->fallback, sizeof r->fallback, "%s", r->st.device_fallback);
    r->st.device = r->st.device_fallback = r->st.engine = NULL; /* the context's strings */
    return 0;
}

static ts_model *load(const char *path, uint64_t budget, const char *opts, char *msg, size_t n) {
    ts_model_params mp = ts_model_default_params();
    mp.mem_budget = budget;
    mp.stream_options = opts;
    ts_model *m = NULL;
    ts_error err;
    if (ts_model_load(path, &mp, &m, &err) != TS_OK) {
        if (msg) snprintf(msg, n, "%s", err.message);
        return NULL;
    }
    return m;
}

static ts_context *make_ctx_on(const ts_model *m, const char *dev);
static ts_context *make_ctx(const ts_model *m) { return make_ctx_on(m, "none"); }

/* A context whose prompt chunks of 32 (from 32 tokens) run on dev. */
static ts_context *make_ctx_on(const ts_model *m, const char *dev) {
    static ts_sampling_params sp;
    sp = ts_sampling_default_params();
    sp.temp = 0.0f;
    ts_context_params cp = ts_context_default_params();
    cp.n_ctx = 256;
    cp.n_batch = 32; /* several batches per long prompt */
    cp.n_threads = 2;
    cp.sampling = &sp;
    cp.prefill_device = dev;
    cp.chunk = 32;
    cp.prefill_min_tokens = 32;
    ts_context *ctx = NULL;
    ts_error err;
    if (ts_context_create(m, &cp, &ctx, &err) != TS_OK) {
        fprintf(stderr, "context: %s\n", err.message);
        return NULL;
    }
    return ctx;
}

static int32_t vocab_of(const ts_model *m) {
    ts_model_info mi = TS_STRUCT_INIT(ts_model_info);
    ts_model_get_info(m, &mi);
    return mi.n_vocab;
}

static uint64_t size_of(const ts_model *m) {
    ts_model_info mi = TS_STRUCT_INIT(ts_model_info);
    ts_model_get_info(m, &mi);
    return mi.size_bytes;
}

/* Runs the session on path under budget/opts into r; 0, or -1 (r->err). */
static int run_budget(const char *path, uint64_t budget, const char *opts, record *r) {
    char msg[600] = "";
    ts_model *m = load(path, budget, opts, msg, sizeof msg);
    if (!m) {
        snprintf(r->err, sizeof r->err, "load: %s", msg);
        return -1;
    }
    ts_context *ctx = make_ctx(m);
    int rc = ctx ? session(ctx, r, vocab_of(m)) : -1;
    ts_context_free(ctx);
    ts_model_free(m);
    return rc;
}

static void same(const char *what, const record *ref, const record *r) {
    int diff = r->n != ref->n, first = -1;
    for (int i = 0; i < r->n && i < ref->n; i++)
        if (r->hash[i] != ref->hash[i]) {
            if (first < 0) first = i;
            diff++;
        }
    const bool tok = r->n_tok == ref->n_tok && !memcmp(r->tokens, ref->tokens, (size_t)r->n_tok * sizeof(int32_t));
    printf("  %-44s %d positions, %s; %d layers streamed, %lld fills, %.1f MiB read, stall %.1f ms", what, r->n,
           diff ? "DIFFERENT" : "bit-identical", (int)r->st.stream_layers, (long long)r->st.stream_fills,
           r->st.stream_read_mib, r->st.stream_stall_ms);
    if (r->st.stream_experts_routed)
        printf("; experts: %lld ahead, %lld on demand, %lld routed, prediction hit %.2f, %lld whole",
               (long long)r->st.stream_experts_ahead, (long long)r->st.stream_experts_demand,
               (long long)r->st.stream_experts_routed, r->st.stream_predict_hit_rate,
               (long long)r->st.stream_whole_layers);
    putchar('\n');
    CHECK(diff == 0, "%s: %d of %d positions differ (first %d)", what, diff, ref->n, first);
    CHECK(tok, "%s: generated tokens differ", what);
}

/* The smallest budget (in steps of 1/32 of the model) the file loads under. */
static uint64_t min_budget(const char *path, uint64_t size) {
    uint64_t best = size;
    for (int i = 31; i >= 1; i--) {
        const uint64_t b = size / 32 * (uint64_t)i;
        ts_model *m = load(path, b, NULL, NULL, 0);
        if (!m) break;
        ts_model_free(m);
        best = b;
    }
    return best;
}

/* The session on the model in memory into ref, and the model's size and
 * smallest budget into *size and *lo (either may be NULL); -1 when the
 * reference fails. */
static int reference(const char *path, record *ref, uint64_t *size, uint64_t *lo) {
    if (run_budget(path, 0, NULL, ref)) {
        fprintf(stderr, "reference: %s\n", ref->err);
        return -1;
    }
    ts_model *m = load(path, 0, NULL, NULL, 0);
    const uint64_t sz = m ? size_of(m) : 0;
    ts_model_free(m);
    if (size) *size = sz;
    if (lo) *lo = min_budget(path, sz);
    return 0;
}

/* Prefill on device dev (the device gets only its two slots, filled from
 * the arena; a device that converts or packs makes its form of each layer
 * as it uploads it), decode on the CPU, at the smallest budget: the same
 * bits as the model in memory prefilled on the same device. A device that
 * does not take the model in memory either is reported as skipped. */
static void device_case(const char *path, uint64_t lo, const char *dev) {
    static record ref, r;
    char msg[600] = "";
    ts_model *m = load(path, 0, NULL, msg, sizeof msg);
    ts_context *c = m ? make_ctx_on(m, dev) : NULL;
    const int rc = c ? session(c, &ref, vocab_of(m)) : -1;
    ts_context_free(c);
    ts_model_free(m);
    CHECK(rc == 0, "%s, the model in memory: %s%s", dev, msg, ref.err);
    if (rc) return;
    if (ref.dev_tokens == 0) {
        printf("  prefill on %s: skipped, the model in memory does not prefill there either (%s)\n", dev,
               ref.fallback[0] ? ref.fallback : "no chunk went to the device");
        return;
    }
    m = load(path, lo, NULL, msg, sizeof msg);
    c = m ? make_ctx_on(m, dev) : NULL;
    CHECK(c != NULL, "a %s context of a streamed model: %s", dev, msg);
    if (c) {
        char what[80];
        snprintf(what, sizeof what, "prefill on %s (the most layers)", dev);
        CHECK(!session(c, &r, vocab_of(m)), "session on %s: %s", dev, r.err);
        same(what, &ref, &r);
        CHECK(r.dev_tokens > 0 && !r.fallback[0], "the %s context ran no prompt chunk on the device (%lld tokens; %s)",
              dev, (long long)r.dev_tokens, r.fallback);
        printf("    %s: %lld prompt tokens on the device (in memory: %lld)\n", dev, (long long)r.dev_tokens,
               (long long)ref.dev_tokens);
    }
    ts_context_free(c);
    ts_model_free(m);
}

static int mode_gate(const char *path, const char *const *devs, int n_dev) {
    static record ref, r;
    uint64_t size, lo;
    if (reference(path, &ref, &size, &lo)) return 1;
    CHECK(ref.st.stream_layers == 0, "the model in memory streams %d layers", (int)ref.st.stream_layers);
    ts_model *m;
    printf("model %.1f MiB; smallest budget tried that loads: %.1f MiB\n", (double)size / 1048576.0,
           (double)lo / 1048576.0);
    struct {
        const char *name;
        uint64_t budget;
        const char *opts;
    } cases[] = {
        {"one layer streamed (budget = size - 1)", size - 1, NULL},
        {"about half", lo + (size - lo) / 2, NULL},
        {"the most layers", lo, NULL},
        {"the most, one slow loader", lo, "loaders=1,loader_delay_us=3000"},
        {"the most, page cache (direct=0)", lo, "direct=0"},
        {"the most, whole layers (routed=0)", lo, "routed=0"},
        {"the most, expert cache (cache_mb=1)", lo, "cache_mb=1"},
    };
    int max_layers = 0;
    double routed_mib = 0, whole_mib = 0;
    bool moe = false;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (run_budget(path, cases[i].budget, cases[i].opts, &r)) {
            CHECK(0, "%s: %s", cases[i].name, r.err);
            continue;
        }
        same(cases[i].name, &ref, &r);
        CHECK(r.st.stream_layers > 0 && r.st.stream_fills > 0 && r.st.stream_read_mib > 0,
              "%s: nothing streamed (%d layers, %lld fills)", cases[i].name, (int)r.st.stream_layers,
              (long long)r.st.stream_fills);
        if (r.st.stream_layers > max_layers) max_layers = r.st.stream_layers;
        if (!strcmp(cases[i].name, "the most layers")) routed_mib = r.st.stream_read_mib, moe = r.st.stream_experts_routed > 0;
        if (cases[i].opts && !strcmp(cases[i].opts, "routed=0")) whole_mib = r.st.stream_read_mib;
        if (cases[i].opts && !strcmp(cases[i].opts, "cache_mb=1") && r.st.stream_experts_routed) {
            printf("    expert cache: %lld hits, %lld misses, %.1f MiB\n", (long long)r.st.stream_cache_hits,
                   (long long)r.st.stream_cache_misses, r.st.stream_cache_mib);
            CHECK(r.st.stream_cache_hits > 0 && r.st.stream_cache_misses > 0, "the expert cache saw no hits or misses");
        }
    }
    if (moe) {
        printf("  routed reads: %.1f MiB, whole layers: %.1f MiB\n", routed_mib, whole_mib);
        CHECK(routed_mib < whole_mib, "routed reads read %.1f MiB, not fewer than whole layers (%.1f MiB)", routed_mib,
              whole_mib);
    }
    CHECK(max_layers >= 2, "the smallest budget streams only %d layers", max_layers);
    /* two contexts of one streamed model, each with its own arena, in turn */
    m = load(path, lo, NULL, NULL, 0);
    ts_context *a = m ? make_ctx(m) : NULL, *b = m ? make_ctx(m) : NULL;
    static record ra, rb;
    CHECK(a && b, "two contexts of a streamed model");
    if (a && b) {
        const int32_t nv = vocab_of(m);
        CHECK(!session(a, &ra, nv) && !session(b, &rb, nv) && !session(a, &ra, nv), "sessions: %s%s", ra.err,
              rb.err);
        same("two contexts: first (second session)", &ref, &ra);
        same("two contexts: second", &ref, &rb);
    }
    ts_context_free(a);
    ts_context_free(b);
    for (int i = 0; i < n_dev; i++) device_case(path, lo, devs[i]);
    ts_model_free(m);
    return failures ? 1 : 0;
}

static int mode_devices(const char *path, const char *const *devs, int n_dev) {
    /* only the smallest budget: each device case runs its own reference */
    ts_model *m = load(path, 0, NULL, NULL, 0);
    CHECK(m != NULL, "loading %s", path);
    if (!m) return 1;
    const uint64_t lo = min_budget(path, size_of(m));
    ts_model_free(m);
    for (int i = 0; i < n_dev; i++) device_case(path, lo, devs[i]);
    return failures ? 1 : 0;
}

static int mode_break_skip(const char *path) {
    if (!TS_HOOKS_BUILT) {
        printf("skipped: skip_fill is a test hook, not in this build\n");
        return 77;
    }
    ts_model *m = load(path, 0, NULL, NULL, 0);
    const uint64_t size = m ? size_of(m) : 0; /* no reference run: the fill fails before any result */
    ts_model_free(m);
    static record r;
    const int rc = run_budget(path, min_budget(path, size), "skip_fill=1", &r);
    printf("  skip_fill=1: %s\n", rc ? r.err : "the session ran");
    CHECK(rc != 0, "a skipped fill was computed on: the pacing check let stale bytes through");
    CHECK(strstr(r.err, "stale bytes") != NULL, "the failure does not name the stale slot: %s", r.err);
    return failures ? 1 : 0;
}

static int mode_break_demand(const char *path) {
    if (!TS_HOOKS_BUILT) {
        printf("skipped: skip_demand is a test hook, not in this build\n");
        return 77;
    }
    static record ref, r;
    uint64_t lo;
    if (reference(path, &ref, NULL, &lo)) return 1;
    const int rc = run_budget(path, lo, "skip_demand=1", &r);
    CHECK(rc == 0, "skip_demand=1: %s", r.err);
    int diff = r.n != ref.n;
    for (int i = 0; i < r.n && i < ref.n; i++) diff += r.hash[i] != ref.hash[i];
    printf("  skip_demand=1: %d of %d positions differ, %lld experts routed, %lld read on demand\n", diff, ref.n,
           (long long)r.st.stream_experts_routed, (long long)r.st.stream_experts_demand);
    CHECK(r.st.stream_experts_routed > 0, "no routed experts: not a MoE model");
    CHECK(diff > 0, "skipping the routing node's reads changed nothing: the routed gate could pass by luck");
    return failures ? 1 : 0;
}

/* One failing request and the session after it, in one context. */
static void fault_case(const char *what, const char *path, uint64_t budget, const char *opts, const record *ref,
                       const char *want) {
    static record r;
    ts_model *m = load(path, budget, opts, r.err, sizeof r.err);
    ts_context *ctx = m ? make_ctx(m) : NULL;
    if (!ctx) {
        CHECK(0, "%s: %s", what, r.err);
        ts_model_free(m);
        return;
    }
    const int32_t nv = vocab_of(m);
    const int rc = session(ctx, &r, nv);
    printf("  %s: %s\n", what, rc ? r.err : "(no failure)");
    CHECK(rc != 0, "%s: the request did not fail", what);
    CHECK(strstr(r.err, "reading tensor 'blk.") && strstr(r.err, "file offset") && strstr(r.err, want),
          "%s: the message does not name the tensor, the offset and '%s': %s", what, want, r.err);
    CHECK(!session(ctx, &r, nv), "%s: the next request failed: %s", what, r.err);
    same("  the next request", ref, &r);
    ts_context_free(ctx);
    ts_model_free(m);
}

static int copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    int rc = a && b ? 0 : -1;
    char buf[1 << 16];
    size_t n;
    while (!rc && (n = fread(buf, 1, sizeof buf, a)) > 0)
        if (fwrite(buf, 1, n, b) != n) rc = -1;
    if (a) fclose(a);
    if (b && fclose(b)) rc = -1;
    return rc;
}

static int mode_faults(const char *path) {
    static record ref;
    uint64_t lo;
    if (reference(path, &ref, NULL, &lo)) return 1;
    ts_model *m;
    if (TS_HOOKS_BUILT) {
        fault_case("EIO on read 5", path, lo, "fault=eio,fault_at=5", &ref, "Input/output error");
        fault_case("short read on read 7", path, lo, "fault=short,fault_at=7", &ref, "short read");
    } else {
        printf("  (the injected faults are test hooks, not in this build: only the truncated file)\n");
    }
    /* a real fault: the file truncated while a context streams from it, then restored */
    char tmp[] = "/tmp/ts_stream_XXXXXX";
    const int fd = mkstemp(tmp);
    if (fd < 0 || copy_file(path, tmp)) {
        CHECK(0, "cannot copy the model to %s", tmp);
        if (fd >= 0) close(fd);
        return 1;
    }
    static record r;
    m = load(tmp, lo, NULL, r.err, sizeof r.err);
    ts_context *ctx = m ? make_ctx(m) : NULL;
    CHECK(ctx != NULL, "load %s: %s", tmp, r.err);
    if (ctx) {
        const int32_t nv = vocab_of(m);
        CHECK(!session(ctx, &r, nv), "before truncation: %s", r.err);
        /* cut the last 1/8 of the file: the last streamed layers' matrices
         * (everything kept in memory was copied out at load) */
        struct stat sb;
        CHECK(stat(path, &sb) == 0 && ftruncate(fd, sb.st_size / 8 * 7) == 0, "truncate");
        const int rc = session(ctx, &r, nv);
        printf("  truncated file: %s\n", rc ? r.err : "(no failure)");
        CHECK(rc != 0, "truncated file: the request did not fail");
        CHECK(strstr(r.err, "short read") && strstr(r.err, "file offset"),
              "truncated file: the message does not say short read at an offset: %s", r.err);
        close(fd);
        CHECK(copy_file(path, tmp) == 0, "restore the file");
        CHECK(!session(ctx, &r, nv), "after restoring the file: %s", r.err);
        same("  after restoring the file", &ref, &r);
    } else {
        close(fd);
    }
    ts_context_free(ctx);
    ts_model_free(m);
    unlink(tmp);
    return failures ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc < 3 || (argc > 3 && strcmp(argv[1], "gate") && strcmp(argv[1], "devices")) ||
        (argc == 3 && !strcmp(argv[1], "devices"))) {
        fprintf(stderr, "usage: test_stream gate|devices|break-skip|break-demand|faults MODEL.gguf [DEVICE ...]\n");
        return 2;
    }
    if (!strcmp(argv[1], "gate")) {
        static const char *const loop[] = {"loop"};
        return argc > 3 ? mode_gate(argv[2], (const char *const *)argv + 3, argc - 3) : mode_gate(argv[2], loop, 1);
    }
    if (!strcmp(argv[1], "devices")) return mode_devices(argv[2], (const char *const *)argv + 3, argc - 3);
    if (!strcmp(argv[1], "break-skip")) return mode_break_skip(argv[2]);
    if (!strcmp(argv[1], "faults")) return mode_faults(argv[2]);
    if (!strcmp(argv[1], "break-demand")) return mode_break_demand(argv[2]);
    fprintf(stderr, "unknown mode %s\n", argv[1]);
    return 2;
}
