/* umt5.h - the umT5 text encoder (Wan2.1's text encoder, umt5-xxl) on an
 * engine.
 *
 * The model as transformers' UMT5EncoderModel defines it, read from a GGUF
 * file with llama.cpp's names (arch "t5encoder", as its converter writes T5
 * and umT5 encoders; city96's umt5-xxl-encoder files):
 *   embedding   x = token_embd.weight[id]              [n][d_model]
 *               (no scaling)
 *   layer l     x += O(Attn(RMS(x) * attn_norm))
 *               x += down(gelu_tanh(gate(h)) * up(h)), h = RMS(x) * ffn_norm
 *   output      RMS(x) * enc.output_norm.weight
 * RMS(x) = x / sqrt(mean(x^2) + eps) (T5LayerNorm: no mean, no bias);
 * attention: heads of d_kv (n_head * d_kv need not be d_model), no softmax
 * scaling (T5 folds it into the weights), bidirectional, every score of
 * head h plus the relative-position bias rel_b[bucket(key - query)][h] of
 * the layer: umT5 has a table in every layer (T5 only in layer 0, which a
 * layer without enc.blk.N.attn_rel_b.weight then shares, as llama.cpp
 * does). Buckets (transformers' _relative_position_bucket, bidirectional):
 * half the buckets per direction, exact below a quarter of the buckets,
 * logarithmic up to max_distance (128: llama.cpp's and transformers'
 * default; the file does not record it), constant beyond.
 *
 * Tensors (GGUF shapes, ne[0] first; matrices any type the engine's matmul
 * takes, vectors any type that dequantizes):
 *   token_embd.weight            [d_model, n_vocab]
 *   enc.blk.N.attn_norm.weight   [d_model]
 *   enc.blk.N.attn_q/k/v.weight  [d_model, n_head * d_kv]
 *   enc.blk.N.attn_o.weight      [n_head * d_kv, d_model]
 *   enc.blk.N.attn_rel_b.weight  [n_head, n_bucket] (stored [n_bucket][n_head],
 *                                as transformers' embedding; layer 0 required)
 *   enc.blk.N.ffn_norm.weight    [d_model]
 *   enc.blk.N.ffn_gate.weight    [d_model, d_ff]   (wi_0, through gelu_tanh)
 *   enc.blk.N.ffn_up.weight      [d_model, d_ff]   (wi_1)
 *   enc.blk.N.ffn_down.weight    [d_ff, d_model]   (wo)
 *   enc.output_norm.weight       [d_model]
 * Metadata: t5encoder.embedding_length, .feed_forward_length, .block_count,
 * .attention.head_count (required); .attention.key_length (default
 * d_model / heads; .value_length must equal it), .attention.
 * relative_buckets_count (default 32), .attention.layer_norm_rms_epsilon
 * (default 1e-6), .context_length (default 512: the run's default width).
 *
 * A run (ts_umt5_run) is the encoder set up for sequences of up to
 * max_tokens: the engine, one layer graph bound per layer (its matrices, its
 * norms and bias table), the output norm graph, activation buffers. Nothing
 * is allocated per call. The embedding lookup and the copy out run on the
 * host; everything else in the engine's graphs, so the engine must run
 * rel_attn (kernels/relattn.h; cpu, loop and amx do, opencl does not: the
 * run is refused naming the op).
 *
 * Masks (transformers' attention_mask over right-padded ids): keys at or
 * past n_real are excluded from every query's softmax (transformers adds
 * finfo.min to their scores: their weight is exactly 0); padded queries are
 * still computed, over the real keys. Since the bias depends only on the
 * offset key - query, the real tokens' states do not depend on what follows
 * them: encoding the n_real tokens alone gives the masked run's real rows
 * (ts_umt5_encode_padded relies on this).
 */
#ifndef TS_VIDEO_UMT5_H
#define TS_VIDEO_UMT5_H

#include <stdint.h>

#include "core/err.h"
#include "gguf/gguf.h"

typedef struct ts_umt5_config {
    int32_t d_model, d_ff, n_head, d_kv, n_layer;
    int32_t n_vocab;         /* rows of token_embd.weight */
    int32_t n_bucket;        /* relative position buckets (both directions) */
    int32_t max_distance;    /* offsets at or beyond it share a bucket (128) */
    int32_t n_ctx;           /* t5encoder.context_length: the default run width */
    int32_t rel_bias_layers; /* layers with their own bias table (umT5: all; T5: 1) */
    float eps;
} ts_umt5_config;

typedef struct ts_umt5 ts_umt5;

/* Opens and validates a t5encoder GGUF (metadata in range, every tensor
 * present with its shape and a type that dequantizes). NULL with err naming
 * the file and the key or tensor. */
ts_umt5 *ts_umt5_open(const char *path, ts_err *err);
void ts_umt5_close(ts_umt5 *m); /* every run over m must have been freed */
const ts_umt5_config *ts_umt5_cfg(const ts_umt5 *m);
/* The open file (its tokenizer metadata, for ts_tokenizer_load). */
const ts_gguf *ts_umt5_gguf(const ts_umt5 *m);
/* Bytes of the weights in the file. */
uint64_t ts_umt5_weight_bytes(const ts_umt5 *m);

/* The bucket of a key rel = key - query positions from its query,
 * bidirectional, with transformers' float32 arithmetic (the log bucket is
 * truncated from logf(|rel| / exact) / log(max_distance / exact) *
 * (half - exact) in float, half = n_bucket / 2, exact = half / 2).
 * n_bucket even in [4, 1024], max_distance > n_bucket / 4. */
int32_t ts_umt5_bucket(int64_t rel, int32_t n_bucket, int32_t max_distance);

typedef struct ts_umt5_run_params {
    const char *engine; /* engine spec (engine.h), NULL = "cpu" */
    int n_threads;      /* engine threads (<= 0: 1) */
    int max_tokens;     /* longest sequence (<= 0: the file's context length) */
} ts_umt5_run_params;

typedef struct ts_umt5_run ts_umt5_run;

ts_umt5_run *ts_umt5_run_new(ts_umt5 *m, const ts_umt5_run_params *p, ts_err *err);
void ts_umt5_run_free(ts_umt5_run *r);
int ts_umt5_run_max_tokens(const ts_umt5_run *r);

/* The encoder's last_hidden_state (after the output norm) of ids [n]:
 * out [n][d_model] f32. Keys n_real .. n-1 are masked (transformers'
 * attention_mask = n_real ones then zeros); n_real == n: no mask.
 * 1 <= n_real <= n <= max_tokens; every id in [0, n_vocab). */
int ts_umt5_encode(ts_umt5_run *r, const int32_t *ids, int n, int n_real, float *out, ts_err *err);

/* What the Wan pipeline keeps of a prompt padded to n_pad tokens (512) and
 * encoded with its mask: the real tokens' states, then zero rows.
 * out [n_pad][d_model]: rows 0 .. n_real-1 the states of ids [n_real],
 * rows n_real .. n_pad-1 zero. Only the n_real tokens are run (the masked
 * run's real rows equal them, see the top of this file).
 * 1 <= n_real <= min(n_pad, max_tokens). */
int ts_umt5_encode_padded(ts_umt5_run *r, const int32_t *ids, int n_real, int n_pad, float *out, ts_err *err);

typedef struct ts_umt5_stats {
    uint64_t encodes;
    uint64_t tokens;   /* tokens run through the layers */
    uint64_t layer_ns; /* wall time in the layer graphs */
    uint64_t total_ns; /* wall time of the encode calls */
} ts_umt5_stats;
void ts_umt5_run_stats(const ts_umt5_run *r, ts_umt5_stats *out);

#endif
