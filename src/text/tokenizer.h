/* tokenizer.h - text <-> token ids from the vocabulary stored in a GGUF file.
 *
 * Two families, chosen by `tokenizer.ggml.model`:
 *   "gpt2"  byte-level BPE; the pre-tokenizer split is chosen by
 *           `tokenizer.ggml.pre` (smollm, llama-bpe, qwen2, gpt2, default, ...)
 *           and run with PCRE2 (Unicode properties), never hand-written tables;
 *           an unknown pre name is a load error;
 *   "llama" SentencePiece-style BPE with scores and <0xXX> byte fallback (Gemma 3).
 *   "t5"    SentencePiece unigram (T5, umT5): the precompiled charsmap
 *           normalizer, whitespace split with a "▁" per word, Viterbi over
 *           the token scores (ugm.c).
 * The reference is Hugging Face `tokenizers` as transformers builds it from the
 * same GGUF file; docs/TOKENIZERS.md describes every choice and deviation.
 *
 * A loaded tokenizer is immutable: every function below may be called from
 * several threads at once on the same handle (ts_detok state is the caller's).
 */
#ifndef TS_TOKENIZER_H
#define TS_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "gguf/gguf.h"

typedef struct ts_tokenizer ts_tokenizer;

/* Builds the tokenizer from the file's metadata (copies what it needs; the
 * ts_gguf may be closed afterwards). NULL with err set on failure. */
ts_tokenizer *ts_tokenizer_load(const ts_gguf *g, ts_err *err);
void ts_tokenizer_free(ts_tokenizer *t); /* NULL is a no-op */

int32_t ts_tok_n_vocab(const ts_tokenizer *t);
int32_t ts_tok_bos(const ts_tokenizer *t); /* -1 when the file has none */
int32_t ts_tok_eos(const ts_tokenizer *t);
int32_t ts_tok_eot(const ts_tokenizer *t); /* end-of-turn (<|im_end|>, <end_of_turn>, <|eot_id|>) or -1 */
bool ts_tok_add_bos(const ts_tokenizer *t); /* tokenizer.ggml.add_bos_token (default: true for "llama") */
bool ts_tok_add_eos(const ts_tokenizer *t);
/* True for every id that ends generation (EOS, EOT and other end-of-generation tokens). */
bool ts_tok_is_eog(const ts_tokenizer *t, int32_t id);
/* True for control/special tokens (not rendered as text by default). */
bool ts_tok_is_special(const ts_tokenizer *t, int32_t id);
/* The vocabulary string of id as stored (NUL-terminated), or NULL if out of range. */
const char *ts_tok_text(const ts_tokenizer *t, int32_t id);
/* Finds the id of an exact vocabulary string, or -1. */
int32_t ts_tok_find(const ts_tokenizer *t, const char *text);
/* Length in bytes of the longest piece any token decodes to. */
int64_t ts_tok_max_piece(const ts_tokenizer *t);

/* Tokenizes len bytes of text.
 *  add_special:   prepend BOS / append EOS as the metadata's add_bos/add_eos say;
 *  parse_special: recognise control-token text (e.g. "<|im_start|>") in the input.
 *                 User-defined tokens (Gemma's "<b>", "\n\n", ...) are always
 *                 recognised, as in the reference tokenizers.
 * Writes at most cap ids to out and returns the total count (which may exceed
 * cap: call again with a larger buffer), or -1 with err set.
 * Invalid UTF-8 in the input is not an error: each maximal invalid subpart
 * becomes U+FFFD first (what Python's bytes.decode('utf-8', 'replace') gives),
 * for both families (docs/TOKENIZERS.md). */
int64_t ts_tokenize(const ts_tokenizer *t, const char *text, size_t len, bool add_special,
                    bool parse_special, int32_t *out, int64_t cap, ts_err *err);

/* The bytes token id stands for in output text (byte-level decoding for gpt2,
 * "▁"->" " and <0xXX> bytes for llama, "▁"->" " for t5). Special tokens give their text only
 * when render_special (otherwise nothing). Returns the byte count (may exceed cap:
 * nothing beyond cap is written), or -1 for an id out of range. Bytes may be a
 * partial UTF-8 sequence; use ts_detok to stream. */
int64_t ts_token_piece(const ts_tokenizer *t, int32_t id, bool render_special, char *buf, size_t cap);

/* Whole-sequence detokenization into buf: the concatenated raw pieces (so
 * detokenize(tokenize(s)) == s byte for byte for valid UTF-8 s). Writes at most
 * cap bytes, NUL-terminated when the text fits in cap-1; returns the byte count
 * needed (excluding the NUL), or -1 for an id out of range. Follows the
 * reference decoders for the leading space: a "llama" or "t5" vocabulary
 * with add_space_prefix drops one leading space from the first text. */
int64_t ts_detokenize(const ts_tokenizer *t, const int32_t *ids, int64_t n, bool render_special,
                      char *buf, size_t cap);

/* Streaming detokenizer: hands out only complete UTF-8 sequences, holding a
 * partial one until the next token completes it (or flush). A byte that can
 * never become valid UTF-8 comes out as U+FFFD. Initialise with ts_detok_init. */
typedef struct ts_detok {
    char pending[8]; /* held bytes of an incomplete sequence (at most 3) */
    int n_pending;
    int64_t n_tokens; /* tokens pushed so far */
    int64_t n_text;   /* tokens pushed that contributed bytes */
    int64_t n_bytes;  /* bytes handed out so far */
} ts_detok;

void ts_detok_init(ts_detok *d);
/* Appends token id; writes complete UTF-8 bytes to out and returns how many were
 * written. cap >= 3 * (ts_tok_max_piece(t) + 3) always suffices; when out is
 * too small nothing changes and -1 is returned (also for a bad id). */
int64_t ts_detok_push(ts_detok *d, const ts_tokenizer *t, int32_t id, bool render_special, char *out, size_t cap);
/* Emits whatever is still held (an unfinished sequence as one U+FFFD, 3 bytes);
 * returns the byte count, or -1 if cap < 3 while something is held. */
int64_t ts_detok_flush(ts_detok *d, char *out, size_t cap);

#endif
