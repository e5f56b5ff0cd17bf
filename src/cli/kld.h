/* kld.h - KL divergence between two models' next-token distributions, as
 * llama-perplexity measures it (`--kl-divergence-base FILE` writes the base
 * model's log-probabilities, `--kl-divergence` compares a model with them),
 * in llama-perplexity's file format so each tool reads the other's files.
 *
 * The file (little-endian, written and read in host order as llama.cpp does):
 *   "_logits_"                          8 bytes
 *   int32 n_ctx, int32 n_vocab, int32 n_chunk
 *   int32 tokens[n_chunk * n_ctx]       the text's tokens, BOS first where the
 *                                       model adds one (a chunk's first token is
 *                                       replaced by BOS when it is evaluated,
 *                                       not in the file)
 *   per chunk, per scored position (n_ctx - 1 - n_ctx/2 of them, positions
 *   n_ctx/2 .. n_ctx-2), one record of nv = 2*((n_vocab+1)/2) + 4 uint16:
 *     float scale, float min_log_prob   (the first 4 uint16)
 *     uint16 q[n_vocab]                 log p_i = scale * q_i + min_log_prob,
 *                                       clipped 16 nats below the most likely;
 *                                       padded to an even count
 * so a log-probability is kept to within scale / 2 <= 16/65535/2 = 1.2e-4 nats. */
#ifndef TS_CLI_KLD_H
#define TS_CLI_KLD_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct kld_file kld_file;

/* Creates FILE and writes the header and tokens; NULL with a message printed. */
kld_file *kld_create(const char *path, int32_t n_ctx, int32_t n_vocab, int32_t n_chunk, const int32_t *tokens);
/* Opens a file written by either tool: the header read and checked against
 * the file's size; tokens (n_chunk * n_ctx of them) in a malloc'ed array the
 * caller frees. NULL with a message naming what is wrong. */
kld_file *kld_open(const char *path, int32_t *n_ctx, int32_t *n_vocab, int32_t *n_chunk, int32_t **tokens);
/* The next record: encodes logits [n_vocab] (writing), or reads it into the
 * file's buffer (reading; kld_record then points at it). 0, or -1 with a
 * message printed. */
int kld_write(kld_file *f, const float *logits);
int kld_read(kld_file *f);
const uint16_t *kld_record(const kld_file *f);
/* Closes; -1 (message printed) when a write did not reach the file. */
int kld_close(kld_file *f);

/* The statistics of llama-perplexity --kl-divergence over scored tokens. */
typedef struct kld_stats {
    double sum_nll, sum_nll2, sum_nll_base, sum_nll_base2, sum_nll_nll_base;
    double sum_kld, sum_kld2, sum_p_diff, sum_p_diff2, sum_p_diff4;
    int64_t n_same_top, count;
    float *kld, *p_diff; /* per token, for the quantiles (cap of them) */
    int64_t cap;
} kld_stats;

/* Allocates room for n tokens' values; -1 on out of memory (message printed). */
int kld_stats_init(kld_stats *s, int64_t n);
void kld_stats_free(kld_stats *s);
/* One scored token: logits [n_vocab] of the model, the base's record, the target. */
void kld_add(kld_stats *s, const float *logits, const uint16_t *base, int32_t n_vocab, int32_t target);
/* llama-perplexity's summary (PPL of both, their ratio, KLD mean and
 * quantiles, delta-p, same top p) on f. */
void kld_print(FILE *f, kld_stats *s);
/* The summary as a JSON object's members (continues an object: ,"kld_mean":...);
 * sorts the per-token values, as kld_print does. */
void kld_print_json(FILE *f, kld_stats *s);

#endif
