"""test_server_tools.py - function calling on `tessera serve` with the
official `openai` client (docs/SERVER.md "Tools"):

- the prompt: /apply-template with tools, an assistant's tool_calls and
  tool results equals Qwen2.5's own template rendered by jinja2 with
  transformers' chat-template environment (Qwen2.5-Coder-1.5B's GGUF; skipped
  with the reason when that optional model is absent);
- forced calls (tool_choice required, and a named function) at temperature
  1 on SmolLM2: every reply is a tool call whose arguments parse and
  validate against the function's parameter schema (`jsonschema`);
- streaming: the tool-call deltas reassemble to the non-streamed call;
- a conversation continues with role "tool" results;
- bad tools (invalid names, duplicate names, a bad parameter schema, an
  unknown named choice): 400, the server still serving;
- Qwen2.5 (when present) in auto mode calls the tool by itself, greedy.

usage: test_server_tools.py TESSERA_BIN MODELS_DIR WORK_DIR [--samples N]
"""
import json
import os
import sys

import jsonschema
import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_harness import Checks, Server, need_model  # noqa: E402

check = Checks()


WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                            "unit": {"enum": ["C", "F"]}},
           "required": ["city"], "additionalProperties": False}
SEARCH = {"type": "object", "properties": {"query": {"type": "string", "maxLength": 60},
                                           "limit": {"type": "integer"}},
          "required": ["query", "limit"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Get the weather for a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "web_search", "description": "Search the web",
                                           "parameters": SEARCH}}]
SCHEMAS = {"get_weather": WEATHER, "web_search": SEARCH}
ASK = [{"role": "user", "content": "What is the weather in Paris today?"}]


def valid_call(call):
    try:
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
        return True
    except (ValueError, KeyError, jsonschema.ValidationError):
        return False


def test_forced(cli, total):
    n_ok = 0
    for k in range(total // 5):
        r = cli.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="required", n=5,
                                        temperature=1.0, seed=10 + k, max_tokens=120)
        for c in r.choices:
            calls = c.message.tool_calls or []
            if c.finish_reason == "tool_calls" and len(calls) == 1 and valid_call(calls[0]):
                n_ok += 1
            else:
                print("  not a valid call:", c.finish_reason, c.message)
    check(n_ok == total, f"tool_choice required: {n_ok} of {total} replies are one call whose arguments validate")
    r = cli.chat.completions.create(model="m", messages=ASK, tools=TOOLS, n=5, temperature=1.0, seed=3, max_tokens=120,
                                    tool_choice={"type": "function", "function": {"name": "web_search"}})
    check(all(c.message.tool_calls and c.message.tool_calls[0].function.name == "web_search" and
              valid_call(c.message.tool_calls[0]) for c in r.choices),
          "a named tool_choice: 5 of 5 call web_search with valid arguments")
    ids = [c.message.tool_calls[0].id for c in r.choices if c.message.tool_calls]
    check(len(set(ids)) == len(ids), f"call ids are unique ({ids})")


def test_stream(cli):
    kw = dict(model="m", messages=ASK, tools=TOOLS, tool_choice="required", temperature=1.0, seed=77, max_tokens=120)
    whole = cli.chat.completions.create(**kw).choices[0]
    calls, finish, content = {}, None, ""
    for ch in cli.chat.completions.create(stream=True, **kw):
        for c in ch.choices:
            content += c.delta.content or ""
            for tc in c.delta.tool_calls or []:
                d = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                d["id"] = tc.id or d["id"]
                d["name"] += (tc.function.name or "") if tc.function else ""
                d["arguments"] += (tc.function.arguments or "") if tc.function else ""
            finish = c.finish_reason or finish
    want = whole.message.tool_calls[0]
    got = calls.get(0, {})
    check(got.get("name") == want.function.name and got.get("arguments") == want.function.arguments and
          (got.get("id") or "").startswith("call_") and finish == "tool_calls" and content == "",
          f"streamed tool-call deltas reassemble to the non-streamed call ({got} vs {want.function})")


def test_conversation(cli):
    first = cli.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="required", temperature=0,
                                        max_tokens=120).choices[0].message
    msgs = ASK + [{"role": "assistant", "content": None, "tool_calls": [tc.model_dump() for tc in first.tool_calls]},
                  {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "18 C, light rain"}]
    r = cli.chat.completions.create(model="m", messages=msgs, tools=TOOLS, temperature=0, max_tokens=40,
                                    tool_choice="none")
    c = r.choices[0]
    check(c.finish_reason in ("stop", "length") and c.message.content and not c.message.tool_calls,
          f"the conversation goes on after a tool result ({c.message.content!r})")


def test_bad(srv):
    base = {"messages": ASK, "max_tokens": 4}
    bad_tool = lambda **f: [{"type": "function", "function": dict({"name": "f", "parameters": {}}, **f)}]  # noqa: E731
    for what, body, code in [
            ("tool name with a space", dict(base, tools=bad_tool(name="get weather")), "invalid_value"),
            ("tool name of 65 characters", dict(base, tools=bad_tool(name="x" * 65)), "invalid_value"),
            ("two tools with one name", dict(base, tools=bad_tool() + bad_tool()), "invalid_value"),
            ("not a function tool", dict(base, tools=[{"type": "retrieval"}]), "invalid_value"),
            ("unknown field in a function", dict(base, tools=bad_tool(returns={})), "unknown_field"),
            ("parameters not a schema", dict(base, tools=bad_tool(parameters=[1])), "invalid_type"),
            ("parameters with an unsupported keyword", dict(base, tools=bad_tool(
                parameters={"type": "object", "properties": {"a": {"type": "string", "format": "email"}}}),
                tool_choice="required"), "unsupported"),
            ("named choice that is not a tool", dict(base, tools=TOOLS, tool_choice={
                "type": "function", "function": {"name": "nope"}}), "invalid_value"),
            ("tool_choice without tools", dict(base, tool_choice="auto"), "invalid_value"),
            ("tool_choice of another word", dict(base, tools=TOOLS, tool_choice="always"), "invalid_value"),
            ("tools and response_format", dict(base, tools=TOOLS, response_format={"type": "json_object"}),
             "invalid_value"),
            ("tool_calls on a user message", dict(base, messages=[{"role": "user", "content": "x",
                                                                   "tool_calls": []}]), "invalid_value")]:
        st, e = srv.post("/v1/chat/completions", body)
        err = e.get("error", {}) if isinstance(e, dict) else {}
        check(st == 400 and err.get("code") == code, f"{what}: 400 {code} ({st} {err.get('message')})")
    st, r = srv.post("/v1/chat/completions", base)
    check(st == 200, "still serving after the bad tools")


def jinja_prompt(template, messages, tools):
    from transformers.utils.chat_template_utils import _compile_jinja_template
    return _compile_jinja_template(template).render(messages=messages, tools=tools, add_generation_prompt=True,
                                                    bos_token="", eos_token="<|im_end|>")


def test_qwen(binary, qwen, work):
    import gguf
    r = gguf.GGUFReader(qwen)
    f = r.fields["tokenizer.chat_template"]
    template = bytes(f.parts[f.data[0]]).decode()
    srv = Server(binary, qwen, ["-t", "2", "-c", "2048"], os.path.join(work, "server_tools_qwen.log"))
    check.run(srv, lambda: qwen_checks(srv, template))


def qwen_checks(srv, template):
    conv = [
        ("tools, one user turn", ASK, TOOLS),
        ("tools and a system message", [{"role": "system", "content": "Be brief."}] + ASK, TOOLS),
        ("a call and its result", ASK + [
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"C\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "18 C"},
            {"role": "tool", "tool_call_id": "c2", "content": "light rain"}], TOOLS),
        ("content beside two calls", ASK + [
            {"role": "assistant", "content": "Let me look.", "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Nice\"}"}},
                {"id": "b", "type": "function", "function": {"name": "web_search",
                                                             "arguments": "{\"query\": \"Nice\", \"limit\": 3}"}}]},
            {"role": "tool", "tool_call_id": "a", "content": "20 C"}], TOOLS),
        ("history with tool results, no tools", [{"role": "user", "content": "hi"},
                                                 {"role": "tool", "tool_call_id": "x", "content": "r"}], None),
    ]
    for name, msgs, tools in conv:
        body = {"messages": msgs}
        if tools:
            body["tools"] = tools
        st, got = srv.post("/apply-template", body)
        hf = []
        for m in msgs:  # HF's convention: arguments as an object
            m = dict(m)
            if m.get("tool_calls"):
                m["tool_calls"] = [{"type": "function", "function": {
                    "name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}}
                    for c in m["tool_calls"]]
            hf.append(m)
        want = jinja_prompt(template, hf, tools)
        check(st == 200 and got.get("prompt") == want,
              f"Qwen2.5 prompt == its template's ({name})" + ("" if st == 200 and got.get("prompt") == want else
                                                              f"\n got: {got.get('prompt')!r}\nwant: {want!r}"))
    cli = openai.OpenAI(base_url=f"http://{srv.host}:{srv.port}/v1", api_key="none", max_retries=0)
    r = cli.chat.completions.create(model="m", messages=ASK, tools=TOOLS, temperature=0, max_tokens=80)
    c = r.choices[0]
    check(c.finish_reason == "tool_calls" and c.message.tool_calls and
          c.message.tool_calls[0].function.name == "get_weather" and valid_call(c.message.tool_calls[0]),
          f"Qwen2.5 in auto mode calls get_weather by itself ({c.message})")


def main():
    binary, models_dir, work = sys.argv[1:4]
    total = int(sys.argv[sys.argv.index("--samples") + 1]) if "--samples" in sys.argv else 50
    os.makedirs(work, exist_ok=True)
    model = need_model(models_dir)
    srv = Server(binary, model, ["-t", "1", "-c", "1024"], os.path.join(work, "server_tools.log"))
    cli = openai.OpenAI(base_url=f"http://{srv.host}:{srv.port}/v1", api_key="none", max_retries=0)

    def smol():
        test_forced(cli, total)
        test_stream(cli)
        test_conversation(cli)
        test_bad(srv)

    check.run(srv, smol)
    qwen = os.path.join(models_dir, "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
    if os.path.exists(qwen):
        test_qwen(binary, qwen, work)
    else:
        print(f"skipped: the Qwen2.5 checks ({qwen} is absent: tools/fetch_models.sh --qwen15 fetches it)")
    check.exit()


if __name__ == "__main__":
    main()
