#!/usr/bin/env python3
"""Oracle for src/text/chat.c: the native renderers must produce exactly what
jinja2 renders (with transformers' chat-template environment) for

  * SmolLM2's template, read from the real GGUF (tokenizer.chat_template);
  * Gemma 3's official template (the gemma-3-270m GGUF we test with carries no
    tokenizer.chat_template, so the reference copy below is used; if the file
    does carry one, that one is checked too);
  * Llama 3's official (3.0 instruct) template (reference copy below).

Each conversation is rendered by tests' chat_render_tool (ts_chat_render).
For templates that start with {{ bos_token }}: with bos_text passed, the output
must equal the Jinja rendering; with NULL (the tokenizer adds BOS) it must
equal the Jinja rendering minus the leading BOS text - BOS exactly once.

usage: test_chat_template_oracle.py CHAT_RENDER_TOOL MODELS_DIR
"""
import mmap
import os
import struct
import subprocess
import sys
import tempfile

from transformers.utils.chat_template_utils import _compile_jinja_template

# google/gemma-3-*-it tokenizer_config.json "chat_template" (reference data).
GEMMA3_TEMPLATE = (
    "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}\n    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n{%- else -%}\n    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n{%- endif -%}\n{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n    {%- if (message['role'] == 'assistant') -%}\n        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n        {%- set role = message['role'] -%}\n    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n        {%- endfor -%}\n    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n    {%- endif -%}\n    {{ '<end_of_turn>\\n' }}\n"
    "{%- endfor -%}\n{%- if add_generation_prompt -%}\n    {{'<start_of_turn>model\\n'}}\n{%- endif -%}\n"
)

# meta-llama/Meta-Llama-3-8B-Instruct tokenizer_config.json "chat_template" (reference data).
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}"
)

CONVERSATIONS = {
    "3 turns with system": [
        ("system", "You are a concise assistant."),
        ("user", "What is the capital of France?"),
        ("assistant", "Paris."),
        ("user", "And of Italy?"),
        ("assistant", "Rome."),
        ("user", "Thanks! Bye."),
    ],
    "3 turns, whitespace and unicode at the edges": [
        ("system", "  Sys with spaces  "),
        ("user", "\n\tHello\u00a0"),
        ("assistant", " Hi — how can I help?\u2003\n"),
        ("user", "Erkläre «Jinja» ✓\r\n"),
        ("assistant", "\u3000Ok\u2029"),
        ("user", "x"),
    ],
    "no system": [
        ("user", "Hello"),
        ("assistant", "Hi"),
        ("user", "Again"),
    ],
    "single user": [("user", "The capital of France is")],
}


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def read_gguf_meta(path, want):
    """The metadata values named in `want` (strings, ints, and string-array
    elements by index). A minimal reader: gguf.GGUFReader decodes every
    vocabulary string, which takes seconds for Gemma's 262k tokens."""
    scalar = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
    out = {}
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        if m[:4] != b"GGUF":
            fail(f"{path} is not a GGUF file")
        version, n_tensors, n_kv = struct.unpack_from("<IQQ", m, 4)
        pos = 24

        def rstr(pos):
            (n,) = struct.unpack_from("<Q", m, pos)
            return m[pos + 8:pos + 8 + n].decode("utf-8"), pos + 8 + n

        def rval(t, pos, keep):
            if t in scalar:
                (v,) = struct.unpack_from(scalar[t], m, pos)
                return v, pos + struct.calcsize(scalar[t])
            if t == 8:
                return rstr(pos)
            if t == 9:
                et, n = struct.unpack_from("<IQ", m, pos)
                pos += 12
                if et in scalar:
                    return None, pos + n * struct.calcsize(scalar[et])
                items = []
                for _ in range(n):
                    v, pos = rval(et, pos, keep)
                    if keep:
                        items.append(v)
                return (items if keep else None), pos
            fail(f"{path}: unknown GGUF value type {t}")

        for _ in range(n_kv):
            key, pos = rstr(pos)
            (t,) = struct.unpack_from("<I", m, pos)
            val, pos = rval(t, pos + 4, key in want)
            if key in want:
                out[key] = val
    return out


def main():
    tool, models = sys.argv[1], sys.argv[2]
    smol = os.path.join(models, "SmolLM2-135M-Instruct.Q4_1.gguf")
    gemma = os.path.join(models, "gemma-3-270m-q4_k_m.gguf")
    for p in (smol, gemma):
        if not os.path.exists(p):
            fail(f"model file {p} is missing: run tools/fetch_models.sh")

    templates = []  # (name, jinja source, bos text)
    smol_tmpl = read_gguf_meta(smol, {"tokenizer.chat_template"}).get("tokenizer.chat_template")
    if not smol_tmpl:
        fail("SmolLM2 GGUF has no tokenizer.chat_template")
    templates.append(("smollm2 (from GGUF)", smol_tmpl, None))

    meta = read_gguf_meta(gemma, {"tokenizer.chat_template", "tokenizer.ggml.tokens", "tokenizer.ggml.bos_token_id"})
    gemma_bos = meta["tokenizer.ggml.tokens"][meta["tokenizer.ggml.bos_token_id"]]
    if gemma_bos != "<bos>":
        fail(f"unexpected gemma BOS text {gemma_bos!r}")
    templates.append(("gemma3 (reference)", GEMMA3_TEMPLATE, gemma_bos))
    gemma_tmpl = meta.get("tokenizer.chat_template")
    if gemma_tmpl:
        templates.append(("gemma3 (from GGUF)", gemma_tmpl, gemma_bos))
    templates.append(("llama3 (reference)", LLAMA3_TEMPLATE, "<|begin_of_text|>"))

    n_checked = 0
    with tempfile.TemporaryDirectory() as td:
        for name, src, bos in templates:
            path = os.path.join(td, "tmpl.jinja")
            with open(path, "w", encoding="utf-8") as f:
                f.write(src)
            jt = _compile_jinja_template(src)
            for conv_name, conv in CONVERSATIONS.items():
                for gen in (True, False):
                    msgs = [{"role": a, "content": b} for a, b in conv]
                    want = jt.render(messages=msgs, add_generation_prompt=gen, bos_token=bos or "<s>",
                                     eos_token="</s>")
                    flat = [x for pair in conv for x in pair]
                    variants = [(bos, want)] if bos is None else [
                        (bos, want),
                        # tokenizer adds BOS: the text must not carry it
                        (None, want[len(bos):] if want.startswith(bos) else want),
                    ]
                    for bos_arg, expect in variants:
                        cmd = [tool, path, "-", bos_arg if bos_arg is not None else "-", "1" if gen else "0"] + flat
                        p = subprocess.run(cmd, capture_output=True)
                        if p.returncode != 0:
                            fail(f"{name} / {conv_name}: tool failed: {p.stderr.decode()}")
                        got = p.stdout.decode("utf-8")
                        if got != expect:
                            fail(f"{name} / {conv_name} / gen={gen} / bos={bos_arg!r}:\n got: {got!r}\nwant: {expect!r}")
                        n_checked += 1
            # Gemma's template raises on non-alternating roles; so must we.
            if "start_of_turn" in src:
                p = subprocess.run([tool, path, "-", "-", "1", "user", "a", "user", "b"], capture_output=True)
                if p.returncode == 0 or b"alternate" not in p.stderr:
                    fail(f"{name}: user,user must be rejected (rc {p.returncode}, {p.stderr!r})")
    print(f"chat template oracle: {n_checked} renderings match jinja2")


if __name__ == "__main__":
    main()
