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
- refusals: top_logprobs without logprobs, n over the limit, bad token ids.

usage: test_server_openai.py TESSERA_BIN MODELS_DIR WORK_DIR
"""
import math
import os
import subprocess
import sys

import numpy as np
import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_harness import Server, need_model  # noqa: E402

failures = []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)
    return cond


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
    os.makedirs(work, exist_ok=True)
    model = need_model(models_dir)
    srv = Server(binary, model, ["-t", "1", "-c", "1024"], os.path.join(work, "server_openai.log"))
    cli = openai.OpenAI(base_url=f"http://{srv.host}:{srv.port}/v1", api_key="none", max_retries=0)
    try:
        test_logprobs_vs_run(cli, srv, binary, model, work)
        test_chat_logprobs(cli)
        test_n_choices(cli)
        test_tokenize(srv)
        test_refusals(cli)
    except Exception as e:
        failures.append(repr(e))
        print("FAIL: exception", repr(e))
        raise
    finally:
        rc = srv.stop()
        check(rc == 0, f"server exits 0 on SIGTERM (got {rc})")
        if failures:
            print("---- server log (tail) ----")
            print("\n".join(srv.log().splitlines()[-30:]))
    print(f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
