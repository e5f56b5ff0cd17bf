/* test_api.c - the public C API used the way an application uses it: only
 * "tessera.h", linked against libtessera.so.
 *
 * Covers: two models (SmolLM2 and Gemma 3) loaded and generating in one
 * process; two contexts on one model generating in parallel threads with
 * output identical to a single-threaded run (greedy); cancellation from
 * another thread; every error path returning a status and a message (missing
 * file, malformed file, context overflow, bad parameters, NULL arguments,
 * struct_size rules) - run under ASan+UBSan/LSan this also checks that the
 * failures leak nothing; the log callback; counters after a run; the
 * tokenizer, chat, metadata and quantize calls.
 *
 * usage: test_api MODELS_DIR WORK_DIR
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "tessera.h"

static const char *models_dir, *work_dir;
static char smol_path[4096], gemma_path[4096];

#define SMOL_PROMPT "The capital of France is"
#define GEMMA_PROMPT "Q: What is the capital of France?\nA:"

/* ---- helpers ---- */

/* Growable text collected by the token callback; also checks that every
 * piece handed out is complete, valid UTF-8. */
typedef struct collect {
    char buf[8192];
    size_t len;
    int n_tokens, n_calls, bad_utf8;
    atomic_int seen;          /* tokens so far, read by the cancelling thread */
    int stop_after;           /* return false after this many tokens (0 = never) */
} collect;

static int valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t l = c < 0x80 ? 1 : (c >= 0xc2 && c <= 0xdf) ? 2 : (c >= 0xe0 && c <= 0xef) ? 3 : (c >= 0xf0 && c <= 0xf4) ? 4 : 0;
        if (!l || i + l > n) return 0;
        for (size_t k = 1; k < l; k++)
            if ((s[i + k] & 0xc0) != 0x80) return 0;
        i += l;
    }
    return 1;
}

static bool on_token(const char *piece, size_t len, int32_t token, void *ud) {
    collect *c = ud;
    c->n_calls++;
    if (!valid_utf8((const unsigned char *)piece, len)) c->bad_utf8++;
    if (c->len + len < sizeof c->buf) {
        memcpy(c->buf + c->len, piece, len);
        c->len += len;
        c->buf[c->len] = '\0';
    }
    if (token >= 0) {
        c->n_tokens++;
        atomic_fetch_add(&c->seen, 1);
    }
    return !(c->stop_after && c->n_tokens >= c->stop_after);
}

/* Log messages, per model/context (user_data), never global. */
typedef struct logbook {
    int n[4];
    char last[4][512];
} logbook;

static void log_cb(ts_log_level level, const char *msg, void *ud) {
    logbook *b = ud;
    if ((int)level < 0 || (int)level > 3) return;
    b->n[level]++;
    snprintf(b->last[level], sizeof b->last[level], "%s", msg);
}

static ts_model *load(const char *path, logbook *lb) {
    ts_model_params mp = ts_model_default_params();
    if (lb) {
        mp.log = log_cb;
        mp.log_user_data = lb;
    }
    ts_model *m = NULL;
    ts_error err;
    ts_status st = ts_model_load(path, &mp, &m, &err);
    CHECK(st == TS_OK && m, "load %s: %s", path, err.message);
    return m;
}

static ts_context *context(const ts_model *m, int32_t n_ctx, int32_t n_threads, float temp) {
    ts_sampling_params sp = ts_sampling_default_params();
    sp.temp = temp;
    sp.seed = 42;
    ts_context_params cp = ts_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_threads = n_threads;
    cp.sampling = &sp;
    ts_context *c = NULL;
    ts_error err;
    ts_status st = ts_context_create(m, &cp, &c, &err);
    CHECK(st == TS_OK && c, "context: %s", err.message);
    return c;
}

/* Greedy generation of n tokens from prompt on a fresh context state. */
static ts_status gen(ts_context *ctx, const char *prompt, int n, collect *out) {
    memset(out, 0, sizeof *out);
    ts_context_reset(ctx);
    ts_generate_params gp = ts_generate_default_params();
    gp.n_predict = n;
    gp.on_token = on_token;
    gp.user_data = out;
    return ts_generate(ctx, prompt, &gp);
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        CHECK(0, "cannot write %s", path);
        return;
    }
    fwrite(data, 1, n, f);
    fclose(f);
}

/* ---- tests ---- */

static void test_version(void) {
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", TS_VERSION_MAJOR, TS_VERSION_MINOR, TS_VERSION_PATCH);
    CHECK(!strcmp(ts_version(), want), "ts_version %s vs header %s", ts_version(), want);
    CHECK(!strcmp(ts_status_string(TS_ERR_CONTEXT_FULL), "context full"), "status string");
    CHECK(!strcmp(ts_stop_reason_name(TS_STOP_CONTEXT_FULL), "context_full"), "stop reason name");
}

/* Calls with NULL handles / arguments: a status, never a crash. */
static void test_null_args(void) {
    ts_error err;
    ts_model *m = (ts_model *)1;
    CHECK(ts_model_load(NULL, NULL, &m, &err) == TS_ERR_INVALID_ARG && m == NULL && err.message[0], "NULL path");
    CHECK(ts_model_load(smol_path, NULL, NULL, &err) == TS_ERR_INVALID_ARG && strstr(err.message, "out"), "NULL out: %s",
          err.message);
    CHECK(ts_model_load(NULL, NULL, NULL, NULL) == TS_ERR_INVALID_ARG, "NULL everything, NULL err");
    ts_context *c = (ts_context *)1;
    CHECK(ts_context_create(NULL, NULL, &c, &err) == TS_ERR_INVALID_ARG && c == NULL && strstr(err.message, "model"),
          "NULL model: %s", err.message);
    ts_model_free(NULL);
    ts_context_free(NULL);
    ts_file_close(NULL);
    ts_free(NULL);
    CHECK(ts_context_eval(NULL, NULL, 0, NULL) == TS_ERR_INVALID_ARG, "eval NULL ctx");
    CHECK(ts_context_generate(NULL, NULL) == TS_ERR_INVALID_ARG, "generate NULL ctx");
    CHECK(ts_generate(NULL, "x", NULL) == TS_ERR_INVALID_ARG, "ts_generate NULL ctx");
    CHECK(ts_context_reset(NULL) == TS_ERR_INVALID_ARG, "reset NULL");
    CHECK(ts_context_get_stats(NULL, NULL) == TS_ERR_INVALID_ARG, "stats NULL");
    CHECK(ts_last_error(NULL)[0] != '\0', "ts_last_error(NULL) says something");
    ts_context_cancel(NULL);
    CHECK(ts_context_logits(NULL) == NULL && ts_context_n_past(NULL) == 0, "accessors on NULL");
    int64_t n = 5;
    CHECK(ts_model_tokenize(NULL, "x", 1, true, true, NULL, 0, &n, &err) == TS_ERR_INVALID_ARG && n == 0, "tokenize NULL");
    CHECK(!ts_model_token_is_eog(NULL, 0), "is_eog NULL");
    CHECK(ts_model_file(NULL) == NULL && ts_model_get_info(NULL, NULL) == TS_ERR_INVALID_ARG, "model accessors NULL");
    ts_file *f = (ts_file *)1;
    CHECK(ts_file_open(NULL, &f, &err) == TS_ERR_INVALID_ARG && f == NULL, "file_open NULL");
    CHECK(ts_value_render(NULL, TS_RENDER_TEXT, NULL, 0) == -1, "render NULL");
    CHECK(ts_quantize(NULL, NULL, NULL, NULL, &err) == TS_ERR_INVALID_ARG && err.message[0], "quantize NULL");
}

static void test_file_errors(void) {
    ts_error err;
    ts_model *m = (ts_model *)1;
    char path[4200];
    /* missing file */
    snprintf(path, sizeof path, "%s/does-not-exist.gguf", work_dir);
    CHECK(ts_model_load(path, NULL, &m, &err) == TS_ERR_IO && m == NULL, "missing file: status %d", err.status);
    CHECK(err.status == TS_ERR_IO && strstr(err.message, "does-not-exist.gguf"), "message names the file: %s",
          err.message);
    ts_file *f = (ts_file *)1;
    CHECK(ts_file_open(path, &f, &err) == TS_ERR_IO && f == NULL, "file_open missing: %s", err.message);
    /* malformed: not GGUF at all */
    snprintf(path, sizeof path, "%s/garbage.gguf", work_dir);
    write_file(path, "this is not a gguf file, just some text\n", 40);
    CHECK(ts_model_load(path, NULL, &m, &err) == TS_ERR_FORMAT && m == NULL && err.message[0], "garbage: %d %s",
          err.status, err.message);
    /* malformed: a real model cut short */
    FILE *in = fopen(smol_path, "rb");
    CHECK(in != NULL, "open %s", smol_path);
    if (in) {
        static char head[1 << 20];
        size_t got = fread(head, 1, sizeof head, in);
        fclose(in);
        snprintf(path, sizeof path, "%s/truncated.gguf", work_dir);
        write_file(path, head, got);
        CHECK(ts_model_load(path, NULL, &m, &err) == TS_ERR_FORMAT && m == NULL, "truncated: %d %s", err.status,
              err.message);
        CHECK(strstr(err.message, "gguf:") != NULL, "truncated: the reader's message: %s", err.message);
        ts_model_params mp = ts_model_default_params();
        mp.use_mmap = false; /* the read-into-memory path fails the same way */
        CHECK(ts_model_load(path, &mp, &m, &err) == TS_ERR_FORMAT && m == NULL, "truncated, no mmap: %s", err.message);
    }
    /* quantize errors */
    snprintf(path, sizeof path, "%s/q.gguf", work_dir);
    CHECK(ts_quantize(smol_path, path, "Q5_K", NULL, &err) == TS_ERR_INVALID_ARG && strstr(err.message, "Q8_0"),
          "quantize bad type: %s", err.message);
    CHECK(ts_quantize(smol_path, smol_path, "Q8_0", NULL, &err) == TS_ERR_INVALID_ARG, "quantize onto itself: %s",
          err.message);
    char missing[4200];
    snprintf(missing, sizeof missing, "%s/nope.gguf", work_dir);
    CHECK(ts_quantize(missing, path, "Q8_0", NULL, &err) == TS_ERR_IO && strstr(err.message, "nope.gguf"),
          "quantize missing input: %s", err.message);
    CHECK(ts_quantize_type_name(0) && !strcmp(ts_quantize_type_name(0), "Q4_0") && ts_quantize_type_name(6) == NULL,
          "quantize type list");
}

/* Parameter validation and the struct_size rules. */
static void test_bad_params(const ts_model *m) {
    ts_error err;
    ts_context *c = (ts_context *)1;
    ts_context_params cp = ts_context_default_params();
    cp.n_ctx = -1;
    CHECK(ts_context_create(m, &cp, &c, &err) == TS_ERR_INVALID_ARG && c == NULL && strstr(err.message, "n_ctx"),
          "n_ctx < 0: %s", err.message);
    cp = ts_context_default_params();
    cp.n_threads = 100000;
    CHECK(ts_context_create(m, &cp, &c, &err) == TS_ERR_INVALID_ARG && strstr(err.message, "n_threads"), "n_threads: %s",
          err.message);
    cp = ts_context_default_params();
    cp.n_batch = -3;
    CHECK(ts_context_create(m, &cp, &c, &err) == TS_ERR_INVALID_ARG && strstr(err.message, "n_batch"), "n_batch: %s",
          err.message);
    cp = ts_context_default_params();
    cp.decoder = (ts_decoder_type)7;
    CHECK(ts_context_create(m, &cp, &c, &err) == TS_ERR_UNSUPPORTED && strstr(err.message, "decoder"), "decoder: %s",
          err.message);
    cp = ts_context_default_params();
    cp.activations = (ts_activations)7;
    CHECK(ts_context_create(m, &cp, &c, &err) == TS_ERR_INVALID_ARG && strstr(err.message, "activations"),
          "activations: %s", err.message);
    cp = ts_context_default_params();
    cp.chat_template = "vicuna";
    CHECK(ts_context_create(m, &cp, &c, &err) == TS_ERR_INVALID_ARG && strstr(err.message, "vicuna"), "template: %s",
          err.message);
    ts_sampling_params sp = ts_sampling_default_params();
    sp.top_p = 2.0f;
    cp = ts_context_default_params();
    cp.sampling = &sp;
    CHECK(ts_context_create(m, &cp, &c, &err) == TS_ERR_INVALID_ARG && strstr(err.message, "top_p"), "top_p: %s",
          err.message);
    sp = ts_sampling_default_params();
    sp.struct_size = 0;
    CHECK(ts_context_create(m, &cp, &c, &err) == TS_ERR_INVALID_ARG && strstr(err.message, "struct_size"),
          "struct_size 0: %s", err.message);
    /* a caller built against a newer header: unknown fields must be zero */
    struct {
        ts_context_params p;
        uint64_t future;
    } newer;
    memset(&newer, 0, sizeof newer);
    newer.p = ts_context_default_params();
    newer.p.struct_size = sizeof newer;
    newer.p.n_ctx = 32;
    newer.future = 0;
    CHECK(ts_context_create(m, &newer.p, &c, &err) == TS_OK && c && ts_context_n_ctx(c) == 32, "newer header, zero tail: %s",
          err.message);
    ts_context_free(c);
    newer.future = 1;
    CHECK(ts_context_create(m, &newer.p, &c, &err) == TS_ERR_UNSUPPORTED && c == NULL, "newer header, set tail: %s",
          err.message);
    /* a caller built against an older header: missing fields keep their defaults */
    cp = ts_context_default_params();
    cp.n_ctx = 48;
    cp.n_threads = 1;
    cp.kv_f32 = true;
    cp.struct_size = offsetof(ts_context_params, n_batch); /* knows only n_ctx */
    CHECK(ts_context_create(m, &cp, &c, &err) == TS_OK && c, "older header: %s", err.message);
    if (c) {
        CHECK(ts_context_n_ctx(c) == 48 && ts_context_n_batch(c) == 48, "older header: n_ctx %d n_batch %d",
              ts_context_n_ctx(c), ts_context_n_batch(c));
        ts_context_free(c);
    }
    ts_model_params mp = ts_model_default_params();
    mp.struct_size = 3;
    ts_model *m2 = (ts_model *)1;
    CHECK(ts_model_load(smol_path, &mp, &m2, &err) == TS_ERR_INVALID_ARG && m2 == NULL, "model struct_size: %s",
          err.message);
}

/* Failures on a live context: a status, a message in ts_last_error, and the
 * context still usable. */
static void test_context_errors(const ts_model *m) {
    ts_context *c = context(m, 16, 1, 0.0f);
    if (!c) return;
    CHECK(ts_last_status(c) == TS_OK && ts_last_error(c)[0] == '\0', "fresh context has no error");
    collect out;
    ts_generate_params gp = ts_generate_default_params();
    CHECK(ts_context_generate(c, &gp) == TS_ERR_INVALID_STATE && strstr(ts_last_error(c), "logits"),
          "generate before eval: %s", ts_last_error(c));
    int32_t sample_id;
    CHECK(ts_context_sample(c, &sample_id) == TS_ERR_INVALID_STATE, "sample before eval");
    int32_t toks[20];
    for (int i = 0; i < 20; i++) toks[i] = 100 + i;
    CHECK(ts_context_eval(c, toks, 20, NULL) == TS_ERR_CONTEXT_FULL && strstr(ts_last_error(c), "context"),
          "eval past n_ctx: %s", ts_last_error(c));
    CHECK(ts_last_status(c) == TS_ERR_CONTEXT_FULL && ts_context_n_past(c) == 0, "nothing evaluated on overflow");
    toks[3] = 1 << 30;
    CHECK(ts_context_eval(c, toks, 5, NULL) == TS_ERR_INVALID_ARG && strstr(ts_last_error(c), "vocabulary"),
          "bad token id: %s", ts_last_error(c));
    CHECK(ts_context_eval(c, toks, -1, NULL) == TS_ERR_INVALID_ARG, "negative count");
    CHECK(ts_context_eval(c, NULL, 3, NULL) == TS_ERR_INVALID_ARG, "NULL tokens");
    CHECK(ts_context_kv_truncate(c, 5) == TS_ERR_INVALID_ARG, "truncate beyond n_past: %s", ts_last_error(c));
    CHECK(ts_generate(c, "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
                         "seventeen eighteen",
                      NULL) == TS_ERR_CONTEXT_FULL,
          "prompt longer than the context: %s", ts_last_error(c));
    CHECK(ts_generate(c, "", NULL) == TS_ERR_INVALID_ARG || ts_context_n_past(c) > 0, "empty prompt: %s",
          ts_last_error(c));
    ts_context_reset(c);
    gp.n_predict = -2;
    CHECK(ts_generate(c, "Hi", &gp) == TS_ERR_INVALID_ARG && strstr(ts_last_error(c), "n_predict"), "n_predict -2: %s",
          ts_last_error(c));
    /* the context fills during generation: a clean stop, not an error */
    memset(&out, 0, sizeof out);
    ts_context_reset(c);
    gp = ts_generate_default_params();
    gp.n_predict = -1;
    gp.on_token = on_token;
    gp.user_data = &out;
    CHECK(ts_generate(c, "Count: 1, 2, 3,", &gp) == TS_OK, "fill: %s", ts_last_error(c));
    ts_stats st = TS_STRUCT_INIT(ts_stats);
    CHECK(ts_context_get_stats(c, &st) == TS_OK, "stats");
    CHECK(st.stop_reason == TS_STOP_CONTEXT_FULL && st.n_past == 16, "stop %s n_past %d",
          ts_stop_reason_name(st.stop_reason), (int)st.n_past);
    /* still usable after all that */
    CHECK(gen(c, SMOL_PROMPT, 2, &out) == TS_OK && out.n_tokens == 2, "usable after errors: %s", ts_last_error(c));
    ts_stats bad = {0};
    CHECK(ts_context_get_stats(c, &bad) == TS_ERR_INVALID_ARG, "stats without struct_size");
    ts_context_free(c);
}

/* activations: q8 is reported by the stats and changes the logits a little
 * (the exact mode is the default; TS_ACT unset in this test) */
static void test_activations(const ts_model *m) {
    if (getenv("TS_ACT")) return;
    enum { NV_MAX = 1 << 18 };
    static float lg[2][NV_MAX];
    ts_model_info info = TS_STRUCT_INIT(ts_model_info);
    ts_model_get_info(m, &info);
    if (info.n_vocab > NV_MAX) return;
    int32_t ids[64];
    int64_t n = 0;
    ts_error err;
    CHECK(ts_model_tokenize(m, SMOL_PROMPT, strlen(SMOL_PROMPT), true, true, ids, 64, &n, &err) == TS_OK && n > 3,
          "tokenize: %s", err.message);
    for (int a = 0; a < 2; a++) {
        ts_context_params cp = ts_context_default_params();
        cp.n_ctx = 64;
        cp.n_threads = 2;
        cp.activations = a ? TS_ACTIVATIONS_Q8 : TS_ACTIVATIONS_EXACT;
        ts_context *c = NULL;
        CHECK(ts_context_create(m, &cp, &c, &err) == TS_OK, "create: %s", err.message);
        if (!c) return;
        CHECK(ts_context_eval(c, ids, (int32_t)n, lg[a]) == TS_OK, "eval: %s", ts_last_error(c));
        ts_stats st = TS_STRUCT_INIT(ts_stats);
        ts_context_get_stats(c, &st);
        CHECK(st.activations == cp.activations, "stats.activations %d, asked %d", (int)st.activations,
              (int)cp.activations);
        ts_context_free(c);
    }
    float diff = 0, mx = 0;
    for (int32_t i = 0; i < info.n_vocab; i++) {
        float d = fabsf(lg[0][i] - lg[1][i]);
        diff = d > diff ? d : diff;
        mx = fabsf(lg[0][i]) > mx ? fabsf(lg[0][i]) : mx;
    }
    CHECK(diff > 0 && diff < 0.1f * mx, "q8 vs exact logits: max difference %g (max |logit| %g)", diff, mx);
}

static void test_stats_and_logits(const ts_model *m) {
    ts_context_params cp = ts_context_default_params();
    ts_sampling_params sp = ts_sampling_default_params();
    sp.temp = 0.0f;
    sp.seed = 1234;
    cp.n_ctx = 128;
    cp.n_batch = 4;
    cp.n_threads = 2;
    cp.sampling = &sp;
    ts_context *c = NULL;
    ts_error err;
    CHECK(ts_context_create(m, &cp, &c, &err) == TS_OK, "create: %s", err.message);
    if (!c) return;
    int32_t ids[64];
    int64_t n = 0;
    CHECK(ts_model_tokenize(m, SMOL_PROMPT, strlen(SMOL_PROMPT), true, true, ids, 64, &n, &err) == TS_OK && n > 3,
          "tokenize: %s", err.message);
    ts_model_info info = TS_STRUCT_INIT(ts_model_info);
    CHECK(ts_model_get_info(m, &info) == TS_OK && info.n_vocab == 49152 && !strcmp(info.arch, "llama"),
          "info: %d %s", info.n_vocab, info.arch);
    float *rows = malloc((size_t)n * (size_t)info.n_vocab * sizeof *rows);
    CHECK(ts_context_eval(c, ids, (int32_t)n, rows) == TS_OK, "eval: %s", ts_last_error(c));
    const float *last = ts_context_logits(c);
    CHECK(last && !memcmp(last, rows + (size_t)(n - 1) * info.n_vocab, sizeof(float) * (size_t)info.n_vocab),
          "last logits row == ts_context_logits");
    free(rows);
    collect out;
    memset(&out, 0, sizeof out);
    ts_generate_params gp = ts_generate_default_params();
    gp.n_predict = 5;
    gp.on_token = on_token;
    gp.user_data = &out;
    CHECK(ts_context_generate(c, &gp) == TS_OK, "generate: %s", ts_last_error(c));
    CHECK(strstr(out.buf, "Paris") != NULL, "greedy continuation lacks Paris: '%s'", out.buf);
    ts_stats st = TS_STRUCT_INIT(ts_stats);
    CHECK(ts_context_get_stats(c, &st) == TS_OK, "stats");
    CHECK(st.n_prompt_tokens == n && st.n_gen_tokens == 5 && st.stop_reason == TS_STOP_LENGTH,
          "counters: prompt %lld gen %lld stop %s", (long long)st.n_prompt_tokens, (long long)st.n_gen_tokens,
          ts_stop_reason_name(st.stop_reason));
    CHECK(st.prefill_ms > 0 && st.decode_ms > 0 && st.prefill_tps > 0 && st.decode_tps > 0, "times %g %g", st.prefill_ms,
          st.decode_ms);
    CHECK(st.n_ctx == 128 && st.n_batch == 4 && st.n_threads == 2 && st.seed == 1234, "settings in the counters");
    CHECK(st.n_past == n + 4, "n_past %d: prompt + all generated but the last", (int)st.n_past);
    CHECK(st.peak_rss_mib > 0 && st.engine && !strcmp(st.engine, "cpu"), "rss / engine");
    CHECK(out.n_tokens == 5 && out.bad_utf8 == 0, "5 token callbacks, all valid UTF-8");
    /* an older caller's smaller ts_stats: fields it does not have stay untouched */
    ts_stats old;
    memset(&old, 0x5a, sizeof old);
    old.struct_size = offsetof(ts_stats, n_gen_tokens);
    CHECK(ts_context_get_stats(c, &old) == TS_OK && old.n_prompt_tokens == n, "old stats struct");
    int64_t canary;
    memset(&canary, 0x5a, sizeof canary);
    CHECK(old.n_gen_tokens == canary, "bytes past the caller's struct_size are not written");
    /* on_token returning false stops, as a cancel */
    memset(&out, 0, sizeof out);
    out.stop_after = 2;
    ts_context_reset(c);
    CHECK(ts_generate(c, SMOL_PROMPT, &gp) == TS_OK, "stop from callback");
    ts_context_get_stats(c, &st);
    CHECK(st.stop_reason == TS_STOP_CANCELLED && st.n_gen_tokens == 2, "callback stop: %s %lld",
          ts_stop_reason_name(st.stop_reason), (long long)st.n_gen_tokens);
    /* a cancel issued between calls does not hit the next call */
    ts_context_cancel(c);
    memset(&out, 0, sizeof out);
    ts_context_reset(c);
    CHECK(ts_generate(c, SMOL_PROMPT, &gp) == TS_OK, "after a stale cancel");
    ts_context_get_stats(c, &st);
    CHECK(st.stop_reason == TS_STOP_LENGTH && st.n_gen_tokens == 5, "stale cancel ignored: %s",
          ts_stop_reason_name(st.stop_reason));
    ts_context_free(c);
}

/* Constrained decoding (ts_context_set_grammar): what comes out is what the
 * grammar allows; a grammar the greedy text already satisfies changes
 * nothing (no step masked); bad grammars are refused and the previous one
 * kept; NULL removes it. */
static void test_grammar(const ts_model *m) {
    ts_error err;
    CHECK(ts_grammar_check("root ::= [0-9]+", NULL, &err) == TS_OK, "check: %s", err.message);
    CHECK(ts_grammar_check("root ::= x", NULL, &err) == TS_ERR_INVALID_ARG && strstr(err.message, "'x'"),
          "check names the undefined rule: %s", err.message);
    ts_context *c = context(m, 256, 2, 1.0f);
    if (!c) return;
    collect out;
    ts_stats st = TS_STRUCT_INIT(ts_stats);
    CHECK(ts_context_set_grammar(c, "root ::= (\"yes\" | \"no\") \".\"", NULL) == TS_OK, "set: %s", ts_last_error(c));
    for (uint64_t seed = 1; seed <= 6; seed++) {
        ts_sampling_params sp = ts_sampling_default_params();
        sp.temp = 1.0f;
        sp.seed = seed;
        ts_context_set_sampling(c, &sp);
        CHECK(gen(c, "Is water wet? Answer:", 16, &out) == TS_OK, "gen: %s", ts_last_error(c));
        ts_context_get_stats(c, &st);
        CHECK((!strcmp(out.buf, "yes.") || !strcmp(out.buf, "no.")) && st.stop_reason == TS_STOP_EOS,
              "seed %llu: '%s' stop %s", (unsigned long long)seed, out.buf, ts_stop_reason_name(st.stop_reason));
        CHECK(st.grammar_checks >= 2 && st.grammar_ms >= 0, "grammar counters: %lld checks",
              (long long)st.grammar_checks);
    }
    /* a bad grammar keeps the one set */
    CHECK(ts_context_set_grammar(c, "root ::= (\"a\"", NULL) == TS_ERR_INVALID_ARG &&
              strstr(ts_last_error(c), "line 1"),
          "bad grammar refused: %s", ts_last_error(c));
    CHECK(ts_context_set_grammar(c, "root ::= root \"a\" | \"a\"", NULL) == TS_ERR_INVALID_ARG &&
              strstr(ts_last_error(c), "left-recursive"),
          "left recursion refused: %s", ts_last_error(c));
    CHECK(gen(c, "Is water wet? Answer:", 16, &out) == TS_OK && (!strcmp(out.buf, "yes.") || !strcmp(out.buf, "no.")),
          "the previous grammar still holds: '%s'", out.buf);
    /* three digits exactly, then the grammar allows nothing more: EOS */
    CHECK(ts_context_set_grammar(c, "root ::= [0-9]{3}", NULL) == TS_OK, "set digits");
    CHECK(gen(c, "My favourite number is", 16, &out) == TS_OK && strlen(out.buf) == 3 &&
              strspn(out.buf, "0123456789") == 3,
          "three digits: '%s'", out.buf);
    ts_context_get_stats(c, &st);
    CHECK(st.stop_reason == TS_STOP_EOS, "stop once the grammar is done: %s", ts_stop_reason_name(st.stop_reason));
    /* greedy: a grammar that the free text satisfies gives the same text with no mask */
    ts_sampling_params sp = ts_sampling_default_params();
    sp.temp = 0.0f;
    ts_context_set_sampling(c, &sp);
    CHECK(ts_context_set_grammar(c, NULL, NULL) == TS_OK, "remove");
    collect free_text;
    CHECK(gen(c, SMOL_PROMPT, 6, &free_text) == TS_OK, "free: %s", ts_last_error(c));
    char g[600];
    snprintf(g, sizeof g, "root ::= \"");
    for (const char *p = free_text.buf; *p && strlen(g) < sizeof g - 16; p++) {
        if (*p == '"' || *p == '\\') snprintf(g + strlen(g), sizeof g - strlen(g), "\\%c", *p);
        else if ((unsigned char)*p < 0x20) snprintf(g + strlen(g), sizeof g - strlen(g), "\\x%02X", *p);
        else snprintf(g + strlen(g), sizeof g - strlen(g), "%c", *p);
    }
    snprintf(g + strlen(g), sizeof g - strlen(g), "\" [a-z ]*");
    CHECK(ts_context_set_grammar(c, g, NULL) == TS_OK, "literal grammar: %s", ts_last_error(c));
    CHECK(gen(c, SMOL_PROMPT, 6, &out) == TS_OK && !strcmp(out.buf, free_text.buf), "greedy under a grammar it "
          "satisfies: '%s' vs '%s'", out.buf, free_text.buf);
    ts_context_get_stats(c, &st);
    CHECK(st.grammar_checks == 6 && st.grammar_masks == 0, "no mask needed: %lld checks, %lld masks",
          (long long)st.grammar_checks, (long long)st.grammar_masks);
    ts_context_free(c);
}

static void test_text_calls(const ts_model *m) {
    ts_error err;
    const char *s = "Hello wörld <|im_start|> 😀";
    int32_t ids[64];
    int64_t n = 0;
    CHECK(ts_model_tokenize(m, s, strlen(s), false, false, NULL, 0, &n, &err) == TS_OK && n > 4, "count only");
    int64_t n2 = 0;
    CHECK(ts_model_tokenize(m, s, strlen(s), false, false, ids, 64, &n2, &err) == TS_OK && n2 == n, "tokenize");
    char buf[256];
    size_t len = 0;
    CHECK(ts_model_detokenize(m, ids, n, false, buf, sizeof buf, &len, &err) == TS_OK && len == strlen(s) &&
              !strcmp(buf, s),
          "round trip: '%s'", buf);
    CHECK(ts_model_detokenize(m, ids, n, false, buf, 3, &len, &err) == TS_OK && len == strlen(s), "short buffer: needed");
    CHECK(ts_model_token_piece(m, ids[0], false, buf, sizeof buf, &len, &err) == TS_OK && len > 0 &&
              !strncmp(buf, "Hello", len),
          "piece '%s'", buf);
    CHECK(ts_model_token_piece(m, -5, false, buf, sizeof buf, &len, &err) == TS_ERR_INVALID_ARG, "bad id piece");
    int32_t bad = 999999;
    CHECK(ts_model_detokenize(m, &bad, 1, false, buf, sizeof buf, &len, &err) == TS_ERR_INVALID_ARG &&
              strstr(err.message, "999999"),
          "bad id detokenize: %s", err.message);
    ts_model_info info = TS_STRUCT_INIT(ts_model_info);
    ts_model_get_info(m, &info);
    CHECK(ts_model_token_is_eog(m, info.token_eos) && !ts_model_token_is_eog(m, ids[0]), "eog");
    CHECK(info.chat_template && !strcmp(info.chat_template, "chatml"), "chat template family");

    /* chat formatting through a context */
    ts_context *c = context(m, 64, 1, 0.0f);
    if (!c) return;
    ts_chat_message msgs[] = {{"system", "Be brief."}, {"user", "Hi"}};
    char *out = NULL;
    size_t out_len = 0;
    CHECK(ts_context_chat_format(c, msgs, 2, true, &out, &out_len) == TS_OK, "chat_format: %s", ts_last_error(c));
    const char *want = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
    CHECK(out && !strcmp(out, want) && out_len == strlen(want), "chat text '%s'", out ? out : "(null)");
    ts_free(out);
    CHECK(!strcmp(ts_context_chat_template(c), "chatml"), "template name");
    ts_chat_message bad_msg = {NULL, "x"};
    CHECK(ts_context_chat_format(c, &bad_msg, 1, true, &out, NULL) == TS_ERR_INVALID_ARG && out == NULL,
          "NULL role: %s", ts_last_error(c));
    ts_context_free(c);

    /* metadata and tensor table */
    const ts_file *f = ts_model_file(m);
    ts_file_info fi = TS_STRUCT_INIT(ts_file_info);
    CHECK(ts_file_get_info(f, &fi) == TS_OK && fi.version == 3 && fi.n_tensors > 100, "file info");
    int64_t k = ts_file_find_meta(f, "general.architecture");
    const char *key = NULL;
    ts_value v;
    CHECK(k >= 0 && ts_file_meta(f, k, &key, &v) == TS_OK && v.type == TS_VALUE_STRING && v.len == 5 &&
              !memcmp(v.str, "llama", 5),
          "general.architecture");
    char r[64];
    CHECK(ts_value_render(&v, TS_RENDER_JSON, r, sizeof r) == 7 && !strcmp(r, "\"llama\""), "render json '%s'", r);
    k = ts_file_find_meta(f, "tokenizer.ggml.tokens");
    CHECK(k >= 0 && ts_file_meta(f, k, NULL, &v) == TS_OK && v.type == TS_VALUE_ARRAY && v.len == 49152, "tokens array");
    ts_value e;
    CHECK(ts_value_array_get(&v, 0, &e) == TS_OK && e.type == TS_VALUE_STRING, "element");
    CHECK(ts_value_array_get(&v, v.len, &e) == TS_ERR_INVALID_ARG, "element out of range");
    int64_t need = ts_value_render(&v, TS_RENDER_TEXT, NULL, 0);
    CHECK(need > 0 && ts_value_render(&v, TS_RENDER_TEXT, r, 10) == need && strlen(r) == 9, "sizing call");
    CHECK(ts_file_find_meta(f, "no.such.key") == -1, "absent key");
    ts_tensor_info ti = TS_STRUCT_INIT(ts_tensor_info);
    CHECK(ts_file_tensor(f, 0, &ti) == TS_OK && ti.name && ti.n_dims >= 1 && ti.nbytes > 0, "tensor 0");
    CHECK(ts_file_tensor(f, fi.n_tensors, &ti) == TS_ERR_INVALID_ARG, "tensor out of range");
    ts_file_close((ts_file *)f); /* a model's own view: closing it is a no-op */

    /* vocab_only: tokenizer calls work, contexts are refused */
    ts_model_params mp = ts_model_default_params();
    mp.vocab_only = true;
    ts_model *vm = NULL;
    CHECK(ts_model_load(smol_path, &mp, &vm, &err) == TS_OK && vm, "vocab_only: %s", err.message);
    int64_t n3 = 0;
    CHECK(ts_model_tokenize(vm, s, strlen(s), false, false, NULL, 0, &n3, &err) == TS_OK && n3 == n, "vocab_only tokens");
    ts_context *vc = (ts_context *)1;
    CHECK(ts_context_create(vm, NULL, &vc, &err) == TS_ERR_INVALID_ARG && vc == NULL && strstr(err.message, "vocab_only"),
          "vocab_only context: %s", err.message);
    ts_model_free(vm);
}

/* ---- threads ---- */

typedef struct job {
    ts_context *ctx;
    const char *prompt;
    int n;
    collect out;
    ts_status st;
} job;

static void *run_job(void *p) {
    job *j = p;
    j->st = gen(j->ctx, j->prompt, j->n, &j->out);
    return NULL;
}

/* Two models at once (SmolLM2 and Gemma), generating concurrently. */
static void test_two_models(void) {
    logbook lb_smol, lb_gemma;
    memset(&lb_smol, 0, sizeof lb_smol);
    memset(&lb_gemma, 0, sizeof lb_gemma);
    ts_model *a = load(smol_path, &lb_smol), *b = load(gemma_path, &lb_gemma);
    if (!a || !b) {
        ts_model_free(a);
        ts_model_free(b);
        return;
    }
    /* each model's callback got its own load message (no global logger) */
    CHECK(lb_smol.n[TS_LOG_INFO] >= 1 && strstr(lb_smol.last[TS_LOG_INFO], "SmolLM2"), "smol log: %s",
          lb_smol.last[TS_LOG_INFO]);
    CHECK(lb_gemma.n[TS_LOG_INFO] >= 1 && strstr(lb_gemma.last[TS_LOG_INFO], "gemma"), "gemma log: %s",
          lb_gemma.last[TS_LOG_INFO]);
    ts_model_info ia = TS_STRUCT_INIT(ts_model_info), ib = TS_STRUCT_INIT(ts_model_info);
    ts_model_get_info(a, &ia);
    ts_model_get_info(b, &ib);
    CHECK(!strcmp(ia.arch, "llama") && !strcmp(ib.arch, "gemma3") && ib.n_vocab > ia.n_vocab, "two archs");
    /* contexts inherit the model's logger */
    int before = lb_gemma.n[TS_LOG_INFO];
    job ja = {.ctx = context(a, 128, 1, 0.0f), .prompt = SMOL_PROMPT, .n = 8};
    job jb = {.ctx = context(b, 128, 1, 0.0f), .prompt = GEMMA_PROMPT, .n = 8};
    CHECK(lb_gemma.n[TS_LOG_INFO] > before, "context creation logged to the model's callback");
    if (ja.ctx && jb.ctx) {
        pthread_t ta, tb;
        pthread_create(&ta, NULL, run_job, &ja);
        pthread_create(&tb, NULL, run_job, &jb);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        CHECK(ja.st == TS_OK && strstr(ja.out.buf, "Paris"), "smol: '%s' %s", ja.out.buf, ts_last_error(ja.ctx));
        CHECK(jb.st == TS_OK && strstr(jb.out.buf, "Paris"), "gemma: '%s' %s", jb.out.buf, ts_last_error(jb.ctx));
        /* chat on a model without a template: a clear error naming the override */
        char *txt = NULL;
        ts_chat_message msg = {"user", "Hi"};
        CHECK(ts_context_chat_format(jb.ctx, &msg, 1, true, &txt, NULL) == TS_ERR_UNSUPPORTED &&
                  strstr(ts_last_error(jb.ctx), "chat_template") && txt == NULL,
              "gemma has no template: %s", ts_last_error(jb.ctx));
        CHECK(lb_gemma.n[TS_LOG_ERROR] >= 1, "errors reach the log callback too");
    }
    ts_context_free(ja.ctx);
    ts_context_free(jb.ctx);
    ts_model_free(a);
    ts_model_free(b);
}

/* Two contexts on one model in parallel threads: greedy outputs equal to
 * those of one context run alone. */
static void test_parallel_contexts(const ts_model *m) {
    const char *pa = "The capital of France is", *pb = "My favourite colour is";
    ts_context *ref = context(m, 128, 1, 0.0f);
    if (!ref) return;
    collect ra, rb;
    CHECK(gen(ref, pa, 12, &ra) == TS_OK && gen(ref, pb, 12, &rb) == TS_OK, "reference runs");
    ts_context_free(ref);
    job ja = {.ctx = context(m, 128, 1, 0.0f), .prompt = pa, .n = 12};
    job jb = {.ctx = context(m, 128, 1, 0.0f), .prompt = pb, .n = 12};
    if (ja.ctx && jb.ctx) {
        pthread_t ta, tb;
        pthread_create(&ta, NULL, run_job, &ja);
        pthread_create(&tb, NULL, run_job, &jb);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        CHECK(ja.st == TS_OK && jb.st == TS_OK, "parallel runs");
        CHECK(!strcmp(ja.out.buf, ra.buf), "context A differs:\n  parallel '%s'\n  alone    '%s'", ja.out.buf, ra.buf);
        CHECK(!strcmp(jb.out.buf, rb.buf), "context B differs:\n  parallel '%s'\n  alone    '%s'", jb.out.buf, rb.buf);
        CHECK(strcmp(ra.buf, rb.buf) != 0 && ra.n_tokens == 12, "the two prompts give different text");
    }
    ts_context_free(ja.ctx);
    ts_context_free(jb.ctx);
}

/* ts_context_cancel from another thread stops a long generation. */
static void test_cancel(const ts_model *m) {
    job j = {.ctx = context(m, 256, 1, 0.0f), .prompt = "Count: 1, 2, 3,", .n = -1};
    if (!j.ctx) return;
    pthread_t t;
    pthread_create(&t, NULL, run_job, &j);
    struct timespec nap = {0, 1000000};
    for (int i = 0; i < 60000 && atomic_load(&j.out.seen) < 4; i++) nanosleep(&nap, NULL);
    ts_context_cancel(j.ctx);
    pthread_join(t, NULL);
    ts_stats st = TS_STRUCT_INIT(ts_stats);
    ts_context_get_stats(j.ctx, &st);
    CHECK(j.st == TS_OK, "cancelled generation returns TS_OK: %s", ts_last_error(j.ctx));
    CHECK(st.stop_reason == TS_STOP_CANCELLED, "stop reason %s (n_gen %lld)", ts_stop_reason_name(st.stop_reason),
          (long long)st.n_gen_tokens);
    CHECK(st.n_gen_tokens >= 4 && st.n_gen_tokens < 200, "stopped soon after the cancel: %lld tokens",
          (long long)st.n_gen_tokens);
    ts_context_free(j.ctx);
}

/* The model's device: contexts created without one use it and share its
 * weights; "none" keeps a context on the CPU. */
static void test_model_device(void) {
    ts_model_params mp = ts_model_default_params();
    mp.prefill_device = "loop";
    ts_model *m = NULL;
    ts_error err;
    CHECK(ts_model_load(smol_path, &mp, &m, &err) == TS_OK && m, "load with a device: %s", err.message);
    if (!m) return;
    ts_context_params cp = ts_context_default_params();
    cp.n_ctx = 256;
    cp.n_threads = 1;
    ts_context *a = NULL, *b = NULL, *c = NULL;
    CHECK(ts_context_create(m, &cp, &a, &err) == TS_OK, "context a: %s", err.message);
    CHECK(ts_context_create(m, &cp, &b, &err) == TS_OK, "context b: %s", err.message);
    cp.prefill_device = "none";
    CHECK(ts_context_create(m, &cp, &c, &err) == TS_OK, "context c: %s", err.message);
    ts_stats sa = TS_STRUCT_INIT(ts_stats), sb = TS_STRUCT_INIT(ts_stats), sc = TS_STRUCT_INIT(ts_stats);
    if (a && b && c) {
        ts_context_get_stats(a, &sa);
        ts_context_get_stats(b, &sb);
        ts_context_get_stats(c, &sc);
        CHECK(sa.device && !strcmp(sa.device, "loop") && sb.device && sa.dev_sharing == 2 && sb.dev_sharing == 2 &&
                  sa.dev_weight_mib > 0 && sa.dev_upload_mib < 1.5 * sa.dev_weight_mib,
              "the model's device, shared: device %s / %s, sharing %d / %d, weights %.1f MiB, upload %.1f MiB",
              sa.device ? sa.device : "(none)", sb.device ? sb.device : "(none)", (int)sa.dev_sharing,
              (int)sb.dev_sharing, sa.dev_weight_mib, sa.dev_upload_mib);
        CHECK(!sc.device && !sc.device_fallback && sc.dev_sharing == 0, "'none' stays on the CPU: %s",
              sc.device ? sc.device : "(none)");
        printf("model device: 2 contexts on loop sharing %.1f MiB of weights (upload %.1f MiB), one on the CPU\n",
               sa.dev_weight_mib, sa.dev_upload_mib);
        /* the same 48 tokens (a device chunk and a tail) on both sharing
         * contexts, on the CPU one and on a solo model's device: the last
         * position's logits bit for bit */
        int32_t toks[48];
        for (int i = 0; i < 48; i++) toks[i] = (i * 131 + 7) % 4000;
        ts_model *solo_m = NULL;
        ts_context *solo = NULL;
        CHECK(ts_model_load(smol_path, &mp, &solo_m, &err) == TS_OK, "solo model: %s", err.message);
        cp.prefill_device = NULL;
        cp.chunk = 32;
        CHECK(solo_m && ts_context_create(solo_m, &cp, &solo, &err) == TS_OK, "solo context: %s", err.message);
        ts_context *ctxs[4] = {a, b, c, solo};
        float *last[4] = {0};
        size_t nv = 0;
        for (int i = 0; i < 4 && ctxs[i]; i++) {
            CHECK(ts_context_eval(ctxs[i], toks, 48, NULL) == TS_OK, "eval %d", i);
            ts_model_info mi = TS_STRUCT_INIT(ts_model_info);
            ts_model_get_info(m, &mi);
            nv = (size_t)mi.n_vocab;
            last[i] = malloc(nv * sizeof(float));
            memcpy(last[i], ts_context_logits(ctxs[i]), nv * sizeof(float));
        }
        ts_stats sd = TS_STRUCT_INIT(ts_stats);
        ts_context_get_stats(a, &sd);
        CHECK(sd.prefill_dev_tokens == 48, "the shared device ran the prompt: %lld device tokens",
              (long long)sd.prefill_dev_tokens);
        if (last[0] && last[1] && last[2] && last[3]) {
            CHECK(!memcmp(last[0], last[1], nv * 4) && !memcmp(last[0], last[3], nv * 4) &&
                      !memcmp(last[0], last[2], nv * 4),
                  "sharing contexts, the CPU one and a solo device differ");
            printf("model device: logits of the two sharing contexts, the CPU context and a solo device: "
                   "bit-identical\n");
        }
        for (int i = 0; i < 4; i++) free(last[i]);
        ts_context_free(solo);
        ts_model_free(solo_m);
    }
    ts_context_free(a);
    ts_context_free(b);
    ts_context_free(c);
    ts_model_free(m);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: test_api MODELS_DIR WORK_DIR\n");
        return 2;
    }
    models_dir = argv[1];
    work_dir = argv[2];
    snprintf(smol_path, sizeof smol_path, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", models_dir);
    snprintf(gemma_path, sizeof gemma_path, "%s/gemma-3-270m-q4_k_m.gguf", models_dir);
    FILE *probe;
    const char *need[] = {smol_path, gemma_path};
    for (int i = 0; i < 2; i++) {
        if (!(probe = fopen(need[i], "rb"))) {
            fprintf(stderr, "FAIL: model %s is missing: run tools/fetch_models.sh\n", need[i]);
            return 1;
        }
        fclose(probe);
    }
    test_version();
    test_null_args();
    test_file_errors();
    ts_model *smol = load(smol_path, NULL);
    if (smol) {
        test_bad_params(smol);
        test_context_errors(smol);
        test_stats_and_logits(smol);
        test_activations(smol);
        test_text_calls(smol);
        test_grammar(smol);
        test_parallel_contexts(smol);
        test_cancel(smol);
        ts_model_free(smol);
    }
    test_two_models();
    test_model_device();
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("all API checks passed\n");
    return 0;
}
