/* metrics.c - the server's counters and their Prometheus text exposition
 * (GET /metrics, format 0.0.4): requests by endpoint and status class,
 * errors by kind, cancellations, tokens, prefill/decode time and speed,
 * queue length and busy slots. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv.h"

static const char *const err_names[TSRV_E_COUNT] = {
    "invalid_json",  "invalid_utf8",     "invalid_type", "invalid_value", "unknown_field",
    "missing_field", "body_too_large",   "context_exceeded", "unsupported", "auth",
    "not_found",     "method_not_allowed", "overloaded", "internal"};

const char *tsrv_err_kind_name(tsrv_err_kind k) { return (unsigned)k < TSRV_E_COUNT ? err_names[k] : "?"; }

static const char *const ep_names[TSRV_N_ENDPOINTS] = {
    "/", "/health", "/v1/models", "/metrics", "/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize",
    "/apply-template", "/v1/embeddings", "other"};

_Static_assert(TSRV_EP_OTHER + 1 == TSRV_N_ENDPOINTS, "ep_names and enum tsrv_endpoint differ");

const char *tsrv_endpoint_name(int ep) { return ep >= 0 && ep < TSRV_N_ENDPOINTS ? ep_names[ep] : "other"; }

void tsrv_metrics_init(tsrv_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
}

void tsrv_metrics_destroy(tsrv_metrics *m) { pthread_mutex_destroy(&m->mu); }

void tsrv_metrics_request(tsrv_metrics *m, int ep, int status) {
    int cls = status / 100;
    if (ep < 0 || ep >= TSRV_N_ENDPOINTS) ep = TSRV_EP_OTHER;
    if (cls < 1 || cls > 5) cls = 5;
    pthread_mutex_lock(&m->mu);
    m->requests[ep][cls]++;
    pthread_mutex_unlock(&m->mu);
}

void tsrv_metrics_error(tsrv_metrics *m, tsrv_err_kind k) {
    if ((unsigned)k >= TSRV_E_COUNT) k = TSRV_E_INTERNAL;
    pthread_mutex_lock(&m->mu);
    m->errors[k]++;
    pthread_mutex_unlock(&m->mu);
}

void tsrv_metrics_cancel(tsrv_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->cancelled++;
    pthread_mutex_unlock(&m->mu);
}

void tsrv_metrics_generation(tsrv_metrics *m, const tsrv_job *j) {
    pthread_mutex_lock(&m->mu);
    m->generations++;
    m->prompt_tokens += (uint64_t)j->n_prompt;
    m->cached_tokens += (uint64_t)j->n_cached;
    m->evaluated_tokens += (uint64_t)j->n_evaluated;
    m->completion_tokens += (uint64_t)j->n_gen;
    m->device_tokens += (uint64_t)j->n_dev_tokens;
    m->prefill_s += j->prefill_ms / 1000.0;
    m->decode_s += j->decode_ms / 1000.0;
    if (j->prefill_ms > 0) m->last_prefill_tps = j->n_evaluated * 1000.0 / j->prefill_ms;
    if (j->decode_ms > 0) m->last_decode_tps = j->n_gen * 1000.0 / j->decode_ms;
    pthread_mutex_unlock(&m->mu);
}

void tsrv_metrics_stream(tsrv_metrics *m, int slot, const ts_stats *st) {
    if (slot < 0 || slot >= 64 || !st->stream_layers) return;
    pthread_mutex_lock(&m->mu);
    m->stream_layers = st->stream_layers;
    m->stream[slot].read_mib = st->stream_read_mib;
    m->stream[slot].stall_ms = st->stream_stall_ms;
    m->stream[slot].fills = st->stream_fills;
    m->stream[slot].ahead = st->stream_experts_ahead;
    m->stream[slot].demand = st->stream_experts_demand;
    m->stream[slot].routed = st->stream_experts_routed;
    m->stream[slot].cache_hits = st->stream_cache_hits;
    m->stream[slot].cache_misses = st->stream_cache_misses;
    pthread_mutex_unlock(&m->mu);
}

static void put(tsrv_buf *b, int *oom, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void put(tsrv_buf *b, int *oom, const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof line || tsrv_buf_add(b, line, (size_t)n) < 0) *oom = 1;
}

static void head(tsrv_buf *b, int *oom, const char *name, const char *type, const char *help) {
    put(b, oom, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

char *tsrv_metrics_text(tsrv_server *s) {
    int queued, busy;
    tsrv_sched_counts(s, &queued, &busy);
    tsrv_metrics m;
    pthread_mutex_lock(&s->metrics.mu);
    m = s->metrics; /* a consistent snapshot (the copied mutex is not used) */
    pthread_mutex_unlock(&s->metrics.mu);

    tsrv_buf b = {0};
    int oom = 0;
    head(&b, &oom, "tessera_requests_total", "counter", "HTTP requests answered, by endpoint and status class.");
    for (int ep = 0; ep < TSRV_N_ENDPOINTS; ep++)
        for (int c = 1; c <= 5; c++)
            if (m.requests[ep][c])
                put(&b, &oom, "tessera_requests_total{endpoint=\"%s\",code=\"%dxx\"} %llu\n", ep_names[ep], c,
                    (unsigned long long)m.requests[ep][c]);
    head(&b, &oom, "tessera_errors_total", "counter", "Requests refused or failed, by kind.");
    for (int k = 0; k < TSRV_E_COUNT; k++)
        put(&b, &oom, "tessera_errors_total{kind=\"%s\"} %llu\n", err_names[k], (unsigned long long)m.errors[k]);
    head(&b, &oom, "tessera_cancelled_total", "counter", "Generations stopped because the client disconnected.");
    put(&b, &oom, "tessera_cancelled_total %llu\n", (unsigned long long)m.cancelled);
    head(&b, &oom, "tessera_generations_total", "counter", "Generations completed.");
    put(&b, &oom, "tessera_generations_total %llu\n", (unsigned long long)m.generations);
    head(&b, &oom, "tessera_prompt_tokens_total", "counter", "Prompt tokens of completed generations.");
    put(&b, &oom, "tessera_prompt_tokens_total %llu\n", (unsigned long long)m.prompt_tokens);
    head(&b, &oom, "tessera_prompt_tokens_cached_total", "counter", "Prompt tokens reused from a slot's KV cache.");
    put(&b, &oom, "tessera_prompt_tokens_cached_total %llu\n", (unsigned long long)m.cached_tokens);
    head(&b, &oom, "tessera_prompt_tokens_evaluated_total", "counter", "Prompt tokens evaluated (prefill).");
    put(&b, &oom, "tessera_prompt_tokens_evaluated_total %llu\n", (unsigned long long)m.evaluated_tokens);
    head(&b, &oom, "tessera_prompt_tokens_device_total", "counter",
         "Prompt tokens whose layers ran on the prefill device (--prefill-device).");
    put(&b, &oom, "tessera_prompt_tokens_device_total %llu\n", (unsigned long long)m.device_tokens);
    head(&b, &oom, "tessera_completion_tokens_total", "counter", "Tokens generated.");
    put(&b, &oom, "tessera_completion_tokens_total %llu\n", (unsigned long long)m.completion_tokens);
    head(&b, &oom, "tessera_prefill_seconds_total", "counter", "Wall time spent evaluating prompts.");
    put(&b, &oom, "tessera_prefill_seconds_total %.6f\n", m.prefill_s);
    head(&b, &oom, "tessera_decode_seconds_total", "counter", "Wall time spent generating.");
    put(&b, &oom, "tessera_decode_seconds_total %.6f\n", m.decode_s);
    head(&b, &oom, "tessera_prefill_tokens_per_second", "gauge", "Prefill speed overall (evaluated tokens / time).");
    put(&b, &oom, "tessera_prefill_tokens_per_second %.3f\n", m.prefill_s > 0 ? m.evaluated_tokens / m.prefill_s : 0.0);
    head(&b, &oom, "tessera_decode_tokens_per_second", "gauge", "Decode speed overall (generated tokens / time).");
    put(&b, &oom, "tessera_decode_tokens_per_second %.3f\n", m.decode_s > 0 ? m.completion_tokens / m.decode_s : 0.0);
    head(&b, &oom, "tessera_last_prefill_tokens_per_second", "gauge", "Prefill speed of the last generation.");
    put(&b, &oom, "tessera_last_prefill_tokens_per_second %.3f\n", m.last_prefill_tps);
    head(&b, &oom, "tessera_last_decode_tokens_per_second", "gauge", "Decode speed of the last generation.");
    put(&b, &oom, "tessera_last_decode_tokens_per_second %.3f\n", m.last_decode_tps);
    head(&b, &oom, "tessera_queue_length", "gauge", "Requests waiting for a slot.");
    put(&b, &oom, "tessera_queue_length %d\n", queued);
    head(&b, &oom, "tessera_slots_busy", "gauge", "Slots generating now.");
    put(&b, &oom, "tessera_slots_busy %d\n", busy);
    head(&b, &oom, "tessera_slots_total", "gauge", "Slots (--parallel).");
    put(&b, &oom, "tessera_slots_total %d\n", s->n_slots);
    if (m.stream_layers) { /* --mem-budget: sums over the slots (the expert cache is the model's: one) */
        double rd = 0, stall = 0;
        long long fills = 0, ahead = 0, demand = 0, routed = 0, hits = 0, misses = 0;
        for (int i = 0; i < 64; i++) {
            rd += m.stream[i].read_mib, stall += m.stream[i].stall_ms;
            fills += m.stream[i].fills, ahead += m.stream[i].ahead, demand += m.stream[i].demand;
            routed += m.stream[i].routed;
            if (m.stream[i].cache_hits + m.stream[i].cache_misses > hits + misses)
                hits = m.stream[i].cache_hits, misses = m.stream[i].cache_misses;
        }
        head(&b, &oom, "tessera_stream_layers", "gauge", "Layers streamed from the file under --mem-budget.");
        put(&b, &oom, "tessera_stream_layers %d\n", m.stream_layers);
        head(&b, &oom, "tessera_stream_read_mib_total", "counter", "MiB the slots' loaders read from the file.");
        put(&b, &oom, "tessera_stream_read_mib_total %.3f\n", rd);
        head(&b, &oom, "tessera_stream_stall_seconds_total", "counter", "Time the forward waited for streamed weights.");
        put(&b, &oom, "tessera_stream_stall_seconds_total %.6f\n", stall / 1000.0);
        head(&b, &oom, "tessera_stream_fills_total", "counter", "Streamed layers filled.");
        put(&b, &oom, "tessera_stream_fills_total %lld\n", fills);
        head(&b, &oom, "tessera_stream_experts_total", "counter",
             "MoE experts: read ahead of the routing node, read on demand at it, routed to.");
        put(&b, &oom, "tessera_stream_experts_total{kind=\"ahead\"} %lld\n", ahead);
        put(&b, &oom, "tessera_stream_experts_total{kind=\"demand\"} %lld\n", demand);
        put(&b, &oom, "tessera_stream_experts_total{kind=\"routed\"} %lld\n", routed);
        head(&b, &oom, "tessera_stream_cache_total", "counter", "Expert cache lookups (--cache-mb), by result.");
        put(&b, &oom, "tessera_stream_cache_total{result=\"hit\"} %lld\n", hits);
        put(&b, &oom, "tessera_stream_cache_total{result=\"miss\"} %lld\n", misses);
    }
    if (oom) {
        tsrv_buf_free(&b);
        return NULL;
    }
    return b.p;
}
