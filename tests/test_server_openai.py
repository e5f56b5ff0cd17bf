"""test_server_openai.py - `tessera serve` driven by the official `openai`
Python client (pinned in tools/requirements.txt), for what agents use
beyond plain chat:

- logprobs: the completions endpoint's token_logprobs and top_logprobs
  equal the log-softmax of `tessera run --logits-out`'s rows for the same
  prompt and tokens (greedy); chat logprobs/top_logprobs are consistent
  (greedy: the chosen token is the first alternative, same logprob) and the
  tokens' texts concatenate to the reply;
- n > 1 with a seed: the same request twice gives the same choices, choice
  0 equals the n = 1 answer with that seed, the choices differ; streamed
  (deltas by index, with logprobs) equals non-streamed;
- /tokenize and /detokenize: round trip, pieces, and the count agrees with
  usage.prompt_tokens;
- constrained output: response_format json_object (100 samples at
  temperature 1: every finished reply parses as a JSON object), json_schema
  (100 samples: every finished reply validates with the `jsonschema`
  package), a recursive schema, a GBNF `grammar`; refusals of schemas and
  grammars that cannot be honoured (the keyword or the line named), and the
  server still serving;
- /v1/embeddings: mean and last pooling of the final hidden state (after
  the output norm) against transformers' last_hidden_state of the same
  GGUF (dequantized to f32): cosine > 0.999 each; strings, token ids and
  batches agree; refusals (dimensions, base64, empty input);
- refusals: top_logprobs without logprobs, n over the limit, bad token ids.

usage: test_server_openai.py TESSERA_BIN MODELS_DIR WORK_DIR [--samples N] [--model FILE --constrained-only]
(--model FILE --constrained-only: the constrained-output checks alone on
another model of MODELS_DIR, e.g. qwen2.5-coder-1.5b-instruct-q4_k_m.gguf;
docs/SERVER.md records that run)
(--samples: replies per constrained-output case, default 100; the sanitizer
build runs 10)
"""
import math
import os
import subprocess
import sys

import json

import jsonschema
import numpy as np
import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_harness import ANIMAL_SCHEMA, Checks, Server, need_model  # noqa: E402

check = Checks()


def log_softmax(row):
    r = row.astype(np.float64)
    m = r.max()
    return r - (m + math.log(np.exp(r - m).sum()))


def test_logprobs_vs_run(cli, srv, binary, model, work):
    prompt = "The three primary colors are"
    n = 8
    r = cli.completions.create(model="m", prompt=prompt, max_tokens=n, temperature=0, logprobs=3)
    c = r.choices[0]
    lp = c.logprobs
    check(len(lp.tokens) == n and len(lp.token_logprobs) == n and len(lp.top_logprobs) == n,
          f"completions logprobs: {n} entries")
    check("".join(lp.tokens) == c.text, "completions logprobs: the tokens spell the text")
    check(lp.text_offset == [sum(len(t.encode()) for t in lp.tokens[:i]) for i in range(n)],
          "completions logprobs: text_offset are the byte offsets of the tokens")
    # the same prompt and tokens through `tessera run --logits-out`
    tok = srv.post("/tokenize", {"content": prompt, "add_special": True})[1]["tokens"]
    check(len(tok) == r.usage.prompt_tokens, f"/tokenize count {len(tok)} == usage.prompt_tokens")
    path = os.path.join(work, "openai_logits.f32")
    out = subprocess.run([binary, "run", "-m", model, "-p", prompt, "-n", str(n), "--temp", "0", "-t", "1",
                          "--no-display-prompt", "--logits-out", path], capture_output=True, text=True)
    check(out.returncode == 0 and out.stdout in (c.text, c.text + "\n"), f"tessera run gives the same greedy text ({out.stdout!r})")
    rows = np.fromfile(path, dtype=np.float32)
    n_vocab = rows.size // (len(tok) + n - 1)
    rows = rows.reshape(-1, n_vocab)
    ids = srv.post("/tokenize", {"content": c.text})[1]["tokens"]
    worst = 0.0
    top_ok = True
    for i in range(n):
        ls = log_softmax(rows[len(tok) - 1 + i])
        want = ls[ids[i]] if len(ids) == n else float("nan")
        worst = max(worst, abs(want - lp.token_logprobs[i]))
        best = np.argsort(-ls, kind="stable")[:3]
        got = lp.top_logprobs[i]
        for b in best:
            piece = srv.post("/detokenize", {"tokens": [int(b)]})[1]["content"]
            if piece in got and abs(got[piece] - ls[b]) > 1e-4:
                top_ok = False
        top_ok = top_ok and abs(max(got.values()) - ls[best[0]]) < 1e-4
    check(len(ids) == n and worst < 1e-4,
          f"token_logprobs == log-softmax of run --logits-out (max |diff| {worst:.2e} < 1e-4)")
    check(top_ok, "top_logprobs == the 3 largest of that log-softmax")


def test_chat_logprobs(cli):
    r = cli.chat.completions.create(model="m", messages=[{"role": "user", "content": "Name a fruit."}],
                                    max_tokens=10, temperature=0, logprobs=True, top_logprobs=4)
    c = r.choices[0]
    ents = c.logprobs.content
    check(len(ents) == r.usage.completion_tokens, f"chat logprobs: one entry per token ({len(ents)})")
    check("".join(e.token for e in ents) == c.message.content, "chat logprobs: the tokens spell the reply")
    check(all(len(e.top_logprobs) == 4 for e in ents), "chat top_logprobs: 4 alternatives each")
    check(all(e.top_logprobs[0].token == e.token and abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6
              for e in ents), "greedy: the chosen token is the most likely alternative")
    check(all(bytes(e.bytes) == e.token.encode() for e in ents), "chat logprobs: bytes are the token's UTF-8")
    check(all(sum(math.exp(a.logprob) for a in e.top_logprobs) <= 1 + 1e-5 and
              all(x.logprob >= y.logprob for x, y in zip(e.top_logprobs, e.top_logprobs[1:])) for e in ents),
          "top_logprobs in descending order, probabilities summing to <= 1")
    r2 = cli.chat.completions.create(model="m", messages=[{"role": "user", "content": "Name a fruit."}],
                                     max_tokens=10, temperature=0)
    check(r2.choices[0].logprobs is None and r2.choices[0].message.content == c.message.content,
          "without logprobs: logprobs null, same text")


def collect_stream(stream):
    text, lps, finish = {}, {}, {}
    for ch in stream:
        for c in ch.choices:
            d = c.delta
            text[c.index] = text.get(c.index, "") + (d.content or "")
            if c.logprobs and c.logprobs.content:
                lps.setdefault(c.index, []).extend(c.logprobs.content)
            if c.finish_reason:
                finish[c.index] = c.finish_reason
    return text, lps, finish


def test_n_choices(cli):
    msgs = [{"role": "user", "content": "Write one word about the sea."}]
    kw = dict(model="m", messages=msgs, max_tokens=12, temperature=1.0, top_p=1.0, seed=1234)
    extra = {"top_k": 0, "min_p": 0.0}  # tessera's own fields: the whole distribution
    a = cli.chat.completions.create(n=4, extra_body=extra, **kw)
    b = cli.chat.completions.create(n=4, extra_body=extra, **kw)
    ta = [c.message.content for c in a.choices]
    tb = [c.message.content for c in b.choices]
    check([c.index for c in a.choices] == [0, 1, 2, 3], "n = 4: four choices, indices 0..3")
    check(ta == tb, f"n = 4 with a seed is reproducible ({ta})")
    check(len(set(ta)) >= 2, "the choices differ from each other")
    one = cli.chat.completions.create(n=1, extra_body=extra, **kw)
    check(one.choices[0].message.content == ta[0], "choice 0 == the n = 1 answer with the same seed")
    # streamed, with logprobs: deltas by index reassemble to the non-streamed choices
    s_text, s_lps, s_fin = collect_stream(cli.chat.completions.create(n=3, stream=True, logprobs=True,
                                                                      extra_body=extra, **kw))
    ns = cli.chat.completions.create(n=3, logprobs=True, extra_body=extra, **kw)
    check([s_text.get(i) for i in range(3)] == [c.message.content for c in ns.choices],
          "n = 3 streamed == non-streamed, choice by choice")
    check(all([e.logprob for e in s_lps.get(i, [])] == [e.logprob for e in ns.choices[i].logprobs.content]
              for i in range(3)), "streamed logprobs == non-streamed logprobs")
    check(all(s_fin.get(i) == ns.choices[i].finish_reason for i in range(3)), "a finish_reason per choice")
    check(ns.usage.completion_tokens == sum(len(c.logprobs.content) for c in ns.choices),
          f"usage.completion_tokens counts every choice's tokens ({ns.usage.completion_tokens})")
    comp = cli.completions.create(model="m", prompt="Once upon a time", n=2, max_tokens=6, seed=9,
                                  temperature=1.0)
    check(len(comp.choices) == 2 and comp.usage.completion_tokens == 12,
          f"completions n = 2: two choices, usage {comp.usage.completion_tokens} tokens")


def test_tokenize(srv):
    text = "Hello world, héllo <|im_start|>"
    st, r = srv.post("/tokenize", {"content": text, "with_pieces": True})
    check(st == 200 and all(set(p) == {"id", "piece"} for p in r["tokens"]), "/tokenize with_pieces")
    ids = [p["id"] for p in r["tokens"]]
    st, r2 = srv.post("/tokenize", {"content": text})
    check(r2["tokens"] == ids, "/tokenize ids == with_pieces ids")
    st, d = srv.post("/detokenize", {"tokens": ids})
    check(st == 200 and d["content"] == "Hello world, héllo ", f"/detokenize round trip (special token not "
          f"rendered): {d.get('content')!r}")
    st, r3 = srv.post("/tokenize", {"content": text, "parse_special": False})
    check(len(r3["tokens"]) > len(ids), "parse_special false: the control text is plain text")
    for what, path, body, code in [
            ("tokenize without content", "/tokenize", {}, "missing_field"),
            ("tokenize content not a string", "/tokenize", {"content": 5}, "invalid_type"),
            ("tokenize unknown field", "/tokenize", {"content": "a", "foo": 1}, "unknown_field"),
            ("detokenize id out of range", "/detokenize", {"tokens": [10 ** 9]}, "invalid_value"),
            ("detokenize negative id", "/detokenize", {"tokens": [-1]}, "invalid_value"),
            ("detokenize not integers", "/detokenize", {"tokens": ["a"]}, "invalid_type")]:
        st, e = srv.post(path, body)
        check(st == 400 and e["error"]["code"] == code, f"{what}: 400 {code}")


ANIMAL = ANIMAL_SCHEMA


def samples(cli, fmt, total=100, per=10, max_tokens=160, extra=None):
    """total replies at temperature 1 (n = per each request): (texts of finished replies, truncated count)"""
    done, cut = [], 0
    for k in range(total // per):
        r = cli.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Describe a random animal as JSON."}],
            max_tokens=max_tokens, temperature=1.0, n=per, seed=100 + k, response_format=fmt, extra_body=extra)
        for c in r.choices:
            if c.finish_reason == "stop":
                done.append(c.message.content)
            else:
                cut += 1
    return done, cut


def parses(text, want_type=dict):
    try:
        return isinstance(json.loads(text), want_type)
    except ValueError:
        return False


def test_constrained(cli, srv, total):
    # A free-form object lets a small model add keys until max_tokens: the
    # property is that every reply that ended parses; how many end is the
    # model's (SmolLM2 at temperature 1: ~2 in 3 within 160 tokens).
    done, cut = samples(cli, {"type": "json_object"}, total=total)
    bad = [t for t in done if not parses(t)]
    check(not bad and len(done) >= max(1, total * 4 // 10),
          f"json_object: {len(done)} of {total} finished, all parse as objects ({len(bad)} do not: {bad[:2]}); "
          f"{cut} cut by max_tokens")
    fmt = {"type": "json_schema", "json_schema": {"name": "animal", "schema": ANIMAL, "strict": True}}
    done, cut = samples(cli, fmt, total=total)
    bad = []
    for t in done:
        try:
            jsonschema.validate(json.loads(t), ANIMAL)
        except (ValueError, jsonschema.ValidationError) as e:
            bad.append((t, str(e)[:80]))
    check(not bad and len(done) >= total * 9 // 10,
          f"json_schema: {len(done)} of {total} finished, all validate ({len(bad)} do not: {bad[:2]}); {cut} cut")
    tree = {"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
        "required": ["v"], "additionalProperties": False}}, "$ref": "#/$defs/node"}
    done, cut = samples(cli, {"type": "json_schema", "json_schema": {"name": "tree", "schema": tree}}, total=10,
                        max_tokens=300)
    ok = all(jsonschema.validate(json.loads(t), tree) is None for t in done)
    check(ok and len(done) >= 1, f"recursive $ref schema: {len(done)} of 10 finished (trees grow; 3 here), all validate")
    r = cli.chat.completions.create(model="m", messages=[{"role": "user", "content": "Is the sky blue?"}],
                                    max_tokens=8, temperature=1.0, n=8, seed=5,
                                    extra_body={"grammar": 'root ::= ("yes" | "no") "."'})
    check(all(c.message.content in ("yes.", "no.") and c.finish_reason == "stop" for c in r.choices),
          f"grammar field: {[c.message.content for c in r.choices]}")
    g = r.model_extra.get("timings", {}).get("grammar")
    check(g and g["checks"] >= 8, f"timings.grammar counts the checks ({g})")
    st, comp = srv.post("/v1/completions", {"prompt": "Answer yes or no:", "max_tokens": 4,
                                            "grammar": 'root ::= " " ("yes" | "no")'})
    check(st == 200 and comp["choices"][0]["text"] in (" yes", " no"), "completions take a grammar too")
    # what cannot be honoured is refused, by name
    cyc = {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}
    for what, body, code, word in [
            ("unsupported keyword", {"response_format": {"type": "json_schema", "json_schema": {
                "name": "x", "schema": {"type": "string", "pattern": "a+"}}}}, "unsupported", "'pattern'"),
            ("malformed schema", {"response_format": {"type": "json_schema", "json_schema": {
                "name": "x", "schema": {"type": 5}}}}, "unsupported", "'type'"),
            ("unknown type", {"response_format": {"type": "json_schema", "json_schema": {
                "name": "x", "schema": {"type": "strin"}}}}, "unsupported", "strin"),
            ("recursive $ref matching nothing", {"response_format": {"type": "json_schema", "json_schema": {
                "name": "x", "schema": cyc}}}, "unsupported", "left-recursive"),
            ("$ref that does not resolve", {"response_format": {"type": "json_schema", "json_schema": {
                "name": "x", "schema": {"$ref": "#/$defs/nope"}}}}, "unsupported", "does not resolve"),
            ("huge enum", {"response_format": {"type": "json_schema", "json_schema": {
                "name": "x", "schema": {"enum": list(range(5000))}}}}, "unsupported", "at most 1024"),
            ("response_format type", {"response_format": {"type": "xml"}}, "invalid_value", "xml"),
            ("response_format not an object", {"response_format": "json"}, "invalid_type", "object"),
            ("grammar syntax", {"grammar": 'root ::= "a" |\n  ( "b"'}, "invalid_value", "line 2"),
            ("grammar undefined rule", {"grammar": "root ::= thing"}, "invalid_value", "'thing'"),
            ("grammar too ambiguous", {"grammar": 'e ::= "" | ""\nroot ::=' + " e" * 40 + ' "x"'},
             "invalid_value", "too ambiguous"),
            ("grammar and response_format", {"grammar": 'root ::= "a"', "response_format": {"type": "json_object"}},
             "invalid_value", "not both")]:
        st, e = srv.post("/v1/chat/completions", dict(body, messages=[{"role": "user", "content": "x"}],
                                                      max_tokens=4))
        err = e.get("error", {}) if isinstance(e, dict) else {}
        check(st == 400 and err.get("code") == code and word in err.get("message", ""),
              f"{what}: 400 {code} naming {word} ({st} {err.get('message')})")
    st, r = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    check(st == 200, "still serving after the refused schemas")


def test_embeddings(cli, srv, models_dir, model):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    texts = ["The cat sat on the mat.", "Stock markets fell sharply on Monday.", "héllo wörld"]
    mean = cli.embeddings.create(model="m", input=texts)  # the client asks for base64 and decodes it
    st, flt = srv.post("/v1/embeddings", {"input": texts, "encoding_format": "float"})
    check(st == 200 and all(np.allclose(flt["data"][i]["embedding"], mean.data[i].embedding, atol=1e-7)
                            for i in range(3)), "encoding_format float == base64")
    last = cli.embeddings.create(model="m", input=texts, extra_body={"pooling": "last"})
    check(len(mean.data) == 3 and [d.index for d in mean.data] == [0, 1, 2] and mean.usage.prompt_tokens > 3,
          f"embeddings: 3 vectors, usage {mean.usage.prompt_tokens} tokens")
    name = os.path.basename(model)
    tok = AutoTokenizer.from_pretrained(models_dir, gguf_file=name)
    hf = AutoModelForCausalLM.from_pretrained(models_dir, gguf_file=name, dtype=torch.float32)
    hf.eval()
    worst_m = worst_l = 1.0
    for i, t in enumerate(texts):
        ids = srv.post("/tokenize", {"content": t, "add_special": True, "parse_special": False})[1]["tokens"]
        with torch.no_grad():
            h = hf.model(torch.tensor([ids])).last_hidden_state[0].double().numpy()
        for ref, got, tag in ((h.mean(axis=0), mean.data[i].embedding, "m"), (h[-1], last.data[i].embedding, "l")):
            ref = ref / np.linalg.norm(ref)
            g = np.array(got, dtype=np.float64)
            cos = float(ref @ g / np.linalg.norm(g))
            if tag == "m":
                worst_m = min(worst_m, cos)
            else:
                worst_l = min(worst_l, cos)
    check(worst_m > 0.999 and worst_l > 0.999,
          f"embeddings == transformers' pooled last_hidden_state: cosine mean {worst_m:.6f}, last {worst_l:.6f} "
          f"(> 0.999)")
    norms = [float(np.linalg.norm(d.embedding)) for d in mean.data]
    check(all(abs(n - 1) < 1e-5 for n in norms), f"unit length ({norms})")
    one = cli.embeddings.create(model="m", input=texts[1]).data[0].embedding
    ids = srv.post("/tokenize", {"content": texts[1], "add_special": True, "parse_special": False})[1]["tokens"]
    by_ids = cli.embeddings.create(model="m", input=ids).data[0].embedding
    check(np.allclose(one, mean.data[1].embedding, atol=1e-6) and np.allclose(by_ids, one, atol=1e-6),
          "a string alone, in a batch and as token ids: the same vector")
    for what, body, code in [("dimensions", {"input": "a", "dimensions": 8}, "unsupported"),
                             ("encoding_format int8", {"input": "a", "encoding_format": "int8"}, "invalid_value"),
                             ("no input", {"model": "m"}, "missing_field"),
                             ("empty list", {"input": []}, "invalid_value"),
                             ("bad pooling", {"input": "a", "pooling": "max"}, "invalid_value"),
                             ("token id out of range", {"input": [10 ** 8]}, "invalid_value"),
                             ("unknown field", {"input": "a", "foo": 1}, "unknown_field")]:
        st, e = srv.post("/v1/embeddings", body)
        check(st == 400 and e["error"]["code"] == code, f"embeddings {what}: 400 {code}")


def test_refusals(cli):
    msgs = [{"role": "user", "content": "hi"}]
    for what, kw, code in [("top_logprobs without logprobs", dict(top_logprobs=2), "invalid_value"),
                           ("top_logprobs 21", dict(logprobs=True, top_logprobs=21), "invalid_value"),
                           ("n = 17", dict(n=17), "invalid_value")]:
        try:
            cli.chat.completions.create(model="m", messages=msgs, max_tokens=2, **kw)
            check(False, f"{what}: refused")
        except openai.BadRequestError as e:
            check(e.status_code == 400 and e.body.get("code") == code, f"{what}: 400 {code}")
    for what, kw, code in [("completions logprobs 6", dict(logprobs=6), "invalid_value"),
                           ("echo", dict(echo=True), "unsupported")]:
        try:
            cli.completions.create(model="m", prompt="a", max_tokens=2, **kw)
            check(False, f"{what}: refused")
        except openai.BadRequestError as e:
            check(e.status_code == 400 and e.body.get("code") == code, f"{what}: 400 {code}")


def main():
    binary, models_dir, work = sys.argv[1:4]
    total = int(sys.argv[sys.argv.index("--samples") + 1]) if "--samples" in sys.argv else 100
    os.makedirs(work, exist_ok=True)
    other = sys.argv[sys.argv.index("--model") + 1] if "--model" in sys.argv else None
    model = need_model(models_dir, other) if other else need_model(models_dir)
    srv = Server(binary, model, ["-t", "2" if other else "1", "-c", "2048" if other else "1024"],
                 os.path.join(work, "server_openai.log"))
    cli = openai.OpenAI(base_url=f"http://{srv.host}:{srv.port}/v1", api_key="none", max_retries=0)
    if "--constrained-only" in sys.argv:
        check.run(srv, lambda: test_constrained(cli, srv, total))
    else:
        check.run(srv, lambda: run_all(cli, srv, binary, models_dir, model, work, total))
    check.exit()


def run_all(cli, srv, binary, models_dir, model, work, total):
    test_logprobs_vs_run(cli, srv, binary, model, work)
    test_chat_logprobs(cli)
    test_n_choices(cli)
    test_tokenize(srv)
    test_constrained(cli, srv, total)
    test_embeddings(cli, srv, models_dir, model)
    test_refusals(cli)


if __name__ == "__main__":
    main()
