/* chat.h - chat templates: turning a conversation into prompt text.
 *
 * GGUF files carry a Jinja template (`tokenizer.chat_template`). We do not run
 * Jinja; we recognise the family from marker strings in the template and
 * render it natively, byte-for-byte as the reference Jinja rendering would
 * (checked against jinja2 by tests/test_chat_template_oracle.py):
 *
 *   chatml  "<|im_start|>"        SmolLM2, Qwen2/2.5. When the template itself
 *                                  injects a literal default system turn for
 *                                  conversations that start without one (SmolLM2,
 *                                  Qwen2.5), that text is extracted and used too.
 *   gemma   "<start_of_turn>"     Gemma 2/3: a system message is merged into the
 *                                  first user turn ("SYSTEM\n\nUSER"), "assistant"
 *                                  is rendered as "model", contents are trimmed,
 *                                  roles must alternate user/assistant.
 *   llama3  "<|start_header_id|>" Llama 3 (the 3.0 instruct template: contents
 *                                  trimmed; no 3.1 "Cutting Knowledge Date" block).
 *
 * BOS: the Gemma and Llama 3 templates begin with {{ bos_token }}. The renderer
 * never invents it: the caller passes bos_text only when the tokenizer will NOT
 * add BOS itself (ts_tok_add_bos false), so BOS is present exactly once.
 */
#ifndef TS_CHAT_H
#define TS_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "text/tokenizer.h"

enum ts_chat_family { TS_CHAT_NONE = 0, TS_CHAT_CHATML, TS_CHAT_GEMMA, TS_CHAT_LLAMA3 };

typedef struct ts_chat_msg {
    const char *role;    /* "system", "user", "assistant" (others pass through) */
    const char *content;
} ts_chat_msg;

typedef struct ts_chat_template ts_chat_template;

/* Family from a Jinja template source (NULL -> TS_CHAT_NONE). */
enum ts_chat_family ts_chat_detect(const char *jinja);
/* "chatml" | "gemma" | "llama3" -> family; -1 with err otherwise. */
int ts_chat_family_parse(const char *name, enum ts_chat_family *out, ts_err *err);
const char *ts_chat_family_name(enum ts_chat_family f);

/* Builds a template from the model's Jinja source (may be NULL) or, when
 * override_name is non-NULL, from that family name (the --chat-template flag).
 * Fails with a message suggesting the override when the family is unknown. */
ts_chat_template *ts_chat_template_new(const char *jinja, const char *override_name, ts_err *err);
void ts_chat_template_free(ts_chat_template *t); /* NULL is a no-op */

enum ts_chat_family ts_chat_template_family(const ts_chat_template *t);
/* True when the reference template emits {{ bos_token }} at the start. */
bool ts_chat_template_wants_bos(const ts_chat_template *t);
/* Literal default system prompt the template injects (ChatML), or NULL. */
const char *ts_chat_template_default_system(const ts_chat_template *t);
/* Text that closes a turn: "<|im_end|>", "<end_of_turn>", "<|eot_id|>". */
const char *ts_chat_end_of_turn(const ts_chat_template *t);
/* Id of that text in the vocabulary, or -1 when the vocabulary lacks it. */
int32_t ts_chat_end_of_turn_id(const ts_chat_template *t, const ts_tokenizer *tok);

/* Renders msgs[0..n) (plus the assistant header when add_generation_prompt).
 * bos_text (may be NULL) is emitted first when the template wants BOS.
 * Returns a malloc'ed NUL-terminated string (length in *out_len when non-NULL),
 * or NULL with err (e.g. Gemma roles not alternating, NULL role/content). */
char *ts_chat_render(const ts_chat_template *t, const ts_chat_msg *msgs, size_t n,
                     bool add_generation_prompt, const char *bos_text, size_t *out_len, ts_err *err);

#endif
