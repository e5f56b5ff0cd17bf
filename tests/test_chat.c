/* test_chat.c - chat template detection and rendering against expected strings
 * (the same strings jinja2 renders for the reference templates; that
 * equivalence itself is checked by tests/test_chat_template_oracle.py). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat.h"

#include "check.h"

/* SmolLM2-135M-Instruct's template (from its GGUF), with a default system turn. */
static const char SMOL_TMPL[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

static const ts_chat_msg CONV[] = {
    {"system", "You are terse."},
    {"user", "Hi there!"},
    {"assistant", " Hello. "},
    {"user", "\tWhat is 2+2?\n"},
    {"assistant", "4"},
    {"user", "Thanks\u00a0"}, /* U+00A0 is whitespace for Python's strip() */
};
#define N_CONV (sizeof CONV / sizeof CONV[0])

static void expect_render(const char *what, const char *jinja, const char *override, const ts_chat_msg *m,
                          size_t n, int gen, const char *bos, const char *want) {
    ts_err err = {{0}};
    ts_chat_template *t = ts_chat_template_new(jinja, override, &err);
    CHECK(t != NULL, "%s: template_new: %s", what, err.msg);
    if (!t) return;
    size_t len = 0;
    char *got = ts_chat_render(t, m, n, gen != 0, bos, &len, &err);
    CHECK(got != NULL, "%s: render: %s", what, err.msg);
    if (got) {
        CHECK(!strcmp(got, want) && len == strlen(want), "%s:\n got: [%s]\nwant: [%s]", what, got, want);
        free(got);
    }
    ts_chat_template_free(t);
}

static void test_detect(void) {
    CHECK(ts_chat_detect(SMOL_TMPL) == TS_CHAT_CHATML, "smollm is chatml");
    CHECK(ts_chat_detect("{{ bos_token }}<start_of_turn>user") == TS_CHAT_GEMMA, "gemma");
    CHECK(ts_chat_detect("<|start_header_id|>") == TS_CHAT_LLAMA3, "llama3");
    CHECK(ts_chat_detect("[INST]") == TS_CHAT_NONE, "mistral is unknown");
    CHECK(ts_chat_detect(NULL) == TS_CHAT_NONE, "NULL");

    ts_err err = {{0}};
    CHECK(ts_chat_template_new("[INST] {{ x }}", NULL, &err) == NULL, "unknown template fails");
    CHECK(strstr(err.msg, "--chat-template chatml|gemma|llama3") != NULL, "message suggests the flag: %s", err.msg);
    err.msg[0] = 0;
    CHECK(ts_chat_template_new(NULL, NULL, &err) == NULL, "missing template fails");
    CHECK(strstr(err.msg, "--chat-template") != NULL, "message suggests the flag: %s", err.msg);
    CHECK(ts_chat_template_new(NULL, "vicuna", &err) == NULL, "bad override fails");
    CHECK(strstr(err.msg, "vicuna") != NULL, "names the bad value: %s", err.msg);

    ts_chat_template *t = ts_chat_template_new("[INST]", "gemma", &err); /* override wins */
    CHECK(t && ts_chat_template_family(t) == TS_CHAT_GEMMA, "override");
    CHECK(t && !strcmp(ts_chat_end_of_turn(t), "<end_of_turn>"), "gemma eot");
    CHECK(t && ts_chat_template_wants_bos(t), "gemma wants bos");
    ts_chat_template_free(t);
    t = ts_chat_template_new(SMOL_TMPL, NULL, &err);
    CHECK(t && !strcmp(ts_chat_end_of_turn(t), "<|im_end|>"), "chatml eot");
    CHECK(t && !ts_chat_template_wants_bos(t), "smollm template has no bos_token");
    CHECK(t && ts_chat_template_default_system(t) &&
              !strcmp(ts_chat_template_default_system(t),
                      "You are a helpful AI assistant named SmolLM, trained by Hugging Face"),
          "default system extracted");
    ts_chat_template_free(t);
    /* an override has no model-specific default system */
    t = ts_chat_template_new(SMOL_TMPL, "chatml", &err);
    CHECK(t && ts_chat_template_default_system(t) == NULL, "override: no default system");
    ts_chat_template_free(t);
    /* Qwen2.5 style: escaped \n inside the literal, plus a non-literal occurrence first */
    t = ts_chat_template_new("{{- '<|im_start|>system\\n' + messages[0]['content'] }}{{- "
                             "'<|im_start|>system\\nYou are Qwen.\\tOK<|im_end|>\\n' }}",
                             NULL, &err);
    CHECK(t && ts_chat_template_default_system(t) && !strcmp(ts_chat_template_default_system(t), "You are Qwen.\tOK"),
          "escaped default system: [%s]", t && ts_chat_template_default_system(t) ? ts_chat_template_default_system(t) : "(null)");
    ts_chat_template_free(t);
    ts_chat_template_free(NULL);
}

static void test_render(void) {
    expect_render("chatml 3 turns", SMOL_TMPL, NULL, CONV, N_CONV, 1, NULL,
                  "<|im_start|>system\nYou are terse.<|im_end|>\n"
                  "<|im_start|>user\nHi there!<|im_end|>\n"
                  "<|im_start|>assistant\n Hello. <|im_end|>\n"
                  "<|im_start|>user\n\tWhat is 2+2?\n<|im_end|>\n"
                  "<|im_start|>assistant\n4<|im_end|>\n"
                  "<|im_start|>user\nThanks\u00a0<|im_end|>\n"
                  "<|im_start|>assistant\n");
    expect_render("chatml default system", SMOL_TMPL, NULL, CONV + 1, 1, 1, NULL,
                  "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
                  "<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\n");
    expect_render("chatml no generation prompt", SMOL_TMPL, NULL, CONV, 2, 0, NULL,
                  "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi there!<|im_end|>\n");
    expect_render("gemma 3 turns", NULL, "gemma", CONV, N_CONV, 1, "<bos>",
                  "<bos><start_of_turn>user\nYou are terse.\n\nHi there!<end_of_turn>\n"
                  "<start_of_turn>model\nHello.<end_of_turn>\n"
                  "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n"
                  "<start_of_turn>model\n4<end_of_turn>\n"
                  "<start_of_turn>user\nThanks<end_of_turn>\n"
                  "<start_of_turn>model\n");
    expect_render("gemma no system, BOS from the tokenizer", NULL, "gemma", CONV + 1, 1, 1, NULL,
                  "<start_of_turn>user\nHi there!<end_of_turn>\n<start_of_turn>model\n");
    expect_render("llama3 3 turns", NULL, "llama3", CONV, N_CONV, 1, "<|begin_of_text|>",
                  "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nHi there!<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nThanks<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n");
    expect_render("llama3 empty conversation has no BOS", NULL, "llama3", CONV, 0, 1, "<|begin_of_text|>",
                  "<|start_header_id|>assistant<|end_header_id|>\n\n");
    /* trim: only whitespace, Unicode-aware; inner whitespace kept */
    ts_chat_msg ws[] = {{"user", " \u3000\u2003 a \n b\u2029 \r\n"}};
    expect_render("llama3 unicode trim", NULL, "llama3", ws, 1, 0, NULL,
                  "<|start_header_id|>user<|end_header_id|>\n\na \n b<|eot_id|>");
    ts_chat_msg allws[] = {{"user", " \t\n "}};
    expect_render("gemma all-whitespace", NULL, "gemma", allws, 1, 0, NULL,
                  "<start_of_turn>user\n<end_of_turn>\n");
    /* a lone continuation byte or invalid UTF-8 at the edges is content, not space */
    ts_chat_msg bad[] = {{"user", "\x80 x \xc2"}};
    expect_render("gemma invalid utf-8 edges", NULL, "gemma", bad, 1, 0, NULL,
                  "<start_of_turn>user\n\x80 x \xc2<end_of_turn>\n");

    /* gemma requires alternation */
    ts_err err = {{0}};
    ts_chat_template *t = ts_chat_template_new(NULL, "gemma", &err);
    ts_chat_msg two_users[] = {{"user", "a"}, {"user", "b"}};
    CHECK(ts_chat_render(t, two_users, 2, true, NULL, NULL, &err) == NULL, "gemma rejects user,user");
    CHECK(strstr(err.msg, "alternate") != NULL, "message: %s", err.msg);
    ts_chat_msg null_content[] = {{"user", NULL}};
    CHECK(ts_chat_render(t, null_content, 1, true, NULL, NULL, &err) == NULL, "NULL content rejected");
    ts_chat_template_free(t);
}

int main(void) {
    test_detect();
    test_render();
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("test_chat: all checks passed\n");
    return 0;
}
