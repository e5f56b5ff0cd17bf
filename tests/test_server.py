"""test_server.py - `tessera serve` over real HTTP on loopback: every endpoint
streaming and not, stop strings, each class of bad input (400/404/405/413
with an OpenAI error object, the server still serving after them), a
streaming and a non-streaming request whose client hangs up (the generation
is cancelled, /metrics and the log say so), concurrent clients on
--parallel 2 (each answer equal to the same request run alone, greedy),
KV prefix reuse across chat turns, the API key (401), and a clean exit on
SIGTERM.

usage: test_server.py TESSERA_BIN MODELS_DIR WORK_DIR
"""
import json
import os
import re
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_harness import Server, chat_text, need_model, stream_finish, stream_text  # noqa: E402

failures = []


def check(cond, what):
    if cond:
        print("ok:", what)
    else:
        print("FAIL:", what)
        failures.append(what)
    return cond


CHAT = "/v1/chat/completions"
COMP = "/v1/completions"


def msgs(text):
    return [{"role": "user", "content": text}]


def is_error(status, body, want_status, want_code=None):
    ok = status == want_status and isinstance(body, dict) and set(body.get("error", {})) >= {
        "message", "type", "param", "code"}
    if ok and want_code:
        ok = body["error"]["code"] == want_code
    return ok


def test_endpoints(srv, model_name):
    st, h = srv.get_json("/health")
    check(st == 200 and h["status"] == "ok", "GET /health ok")
    check(h["engine"] == {"prefill": "cpu", "decode": "cpu"}, f"/health engines: {h['engine']}")
    check(h["slots"]["total"] == 2, "/health reports 2 slots")
    st, m = srv.get_json("/v1/models")
    check(st == 200 and m["object"] == "list" and m["data"][0]["id"] == model_name, "GET /v1/models lists the model")
    st, hdr, page = srv.request("GET", "/")
    check(st == 200 and hdr.get("Content-Type", "").startswith("text/html") and b'id="input"' in page,
          "GET / serves the chat page")
    met = srv.metrics()
    check("tessera_queue_length" in met and 'tessera_errors_total{kind="invalid_json"}' in met
          and "tessera_decode_tokens_per_second" in met, "GET /metrics has queue, errors by kind, tok/s")

    # chat, non-streaming and streaming (greedy: the same text)
    req = {"messages": msgs("What is the capital of France?"), "max_tokens": 24, "temperature": 0}
    st, r = srv.post(CHAT, req)
    check(st == 200 and r["object"] == "chat.completion" and r["model"] == model_name, "chat completion 200")
    text = chat_text(r)
    u = r["usage"]
    check(len(text) > 0 and r["choices"][0]["finish_reason"] in ("stop", "length"), f"chat reply: {text!r}")
    check(u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"] and 0 < u["completion_tokens"] <= 24
          and u["prompt_tokens"] > 5, f"chat usage {u}")
    st, ev, done = srv.stream(CHAT, dict(req, stream=True, stream_options={"include_usage": True}))
    check(st == 200 and done, "chat stream ends with data: [DONE]")
    check(all(e["object"] == "chat.completion.chunk" for e in ev), "chat chunks are chat.completion.chunk")
    check(ev[0]["choices"][0]["delta"].get("role") == "assistant", "first chunk carries the role")
    check(stream_text(ev) == text, f"streamed chat text equals the non-streamed one ({stream_text(ev)!r})")
    check(stream_finish(ev) == r["choices"][0]["finish_reason"], "streamed finish_reason matches")
    check(len([e for e in ev if e["choices"]]) >= 3, "chat reply came in several chunks")
    usage_ev = [e for e in ev if e.get("usage")]
    check(len(usage_ev) == 1 and usage_ev[0]["usage"]["completion_tokens"] == u["completion_tokens"],
          "stream_options.include_usage sends one usage chunk")

    # completions
    req = {"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}
    st, r = srv.post(COMP, req)
    check(st == 200 and r["object"] == "text_completion", "completion 200")
    ctext = r["choices"][0]["text"]
    check(r["usage"]["completion_tokens"] <= 8 and len(ctext) > 0, f"completion text {ctext!r}")
    if r["choices"][0]["finish_reason"] == "length":
        check(r["usage"]["completion_tokens"] == 8, "finish_reason length after max_tokens tokens")
    st, ev, done = srv.stream(COMP, dict(req, stream=True))
    check(st == 200 and done and all(e["object"] == "text_completion" for e in ev), "completion stream shape")
    check(stream_text(ev, chat=False) == ctext, "streamed completion equals the non-streamed one")
    st, r2 = srv.post(COMP, dict(req, prompt=["The capital of France is"]))
    check(st == 200 and r2["choices"][0]["text"] == ctext, "prompt as an array of one string")

    # stop strings: the text ends just before the first occurrence, both ways
    req = {"prompt": "Count: 1, 2, 3, 4,", "max_tokens": 24, "temperature": 0}
    st, r = srv.post(COMP, req)
    full = r["choices"][0]["text"]
    k = len(full) // 2
    stop = full[k:k + 2]
    want = full[:full.find(stop)]
    st, r = srv.post(COMP, dict(req, stop=[stop, "\u00e9\u00e9\u00e9"]))
    check(st == 200 and r["choices"][0]["text"] == want and r["choices"][0]["finish_reason"] == "stop",
          f"stop {stop!r}: {r['choices'][0]['text']!r} == {want!r}, finish stop")
    st, ev, done = srv.stream(COMP, dict(req, stop=stop, stream=True))
    check(done and stream_text(ev, chat=False) == want and stream_finish(ev) == "stop",
          "stop string in a stream: text held back and cut the same way")

    # sampling fields accepted; the same seed gives the same text
    req = {"messages": msgs("Tell me a word."), "max_tokens": 12, "temperature": 0.9, "top_p": 0.9, "top_k": 20,
           "min_p": 0.05, "seed": 1234, "presence_penalty": 0.1, "n": 1, "user": "t", "model": "anything",
           "frequency_penalty": 0, "logprobs": False, "stop": None}
    st1, r1 = srv.post(CHAT, req)
    st2, r2 = srv.post(CHAT, req)
    check(st1 == 200 and st2 == 200 and chat_text(r1) == chat_text(r2), "sampling options accepted, seed repeats")


def test_bad_input(srv):
    ok_req = {"messages": msgs("hi"), "max_tokens": 4}
    cases = [
        ("malformed JSON", CHAT, b'{"messages": [', 400, "invalid_json"),
        ("not an object", CHAT, b'[1, 2]', 400, "invalid_type"),
        ("wrong type: temperature string", CHAT, dict(ok_req, temperature="hot"), 400, "invalid_type"),
        ("wrong type: messages string", CHAT, {"messages": "hi"}, 400, "invalid_type"),
        ("wrong type: message content number", CHAT, {"messages": [{"role": "user", "content": 5}]}, 400,
         "invalid_type"),
        ("wrong type: stream", CHAT, dict(ok_req, stream="yes"), 400, "invalid_type"),
        ("unknown field", CHAT, dict(ok_req, max_token=5), 400, "unknown_field"),
        ("unknown field in a message", CHAT, {"messages": [{"role": "user", "content": "x", "foo": 1}]}, 400,
         "unknown_field"),
        ("bad role", CHAT, {"messages": [{"role": "wizard", "content": "x"}]}, 400, "invalid_value"),
        ("missing messages", CHAT, {"max_tokens": 4}, 400, "missing_field"),
        ("empty messages", CHAT, {"messages": []}, 400, "missing_field"),
        ("missing prompt", COMP, {"max_tokens": 4}, 400, "missing_field"),
        ("max_tokens 0", CHAT, dict(ok_req, max_tokens=0), 400, "invalid_value"),
        ("max_tokens negative", CHAT, dict(ok_req, max_tokens=-5), 400, "invalid_value"),
        ("max_tokens absurd", CHAT, dict(ok_req, max_tokens=10**12), 400, "invalid_value"),
        ("max_tokens float", COMP, {"prompt": "a", "max_tokens": 3.5}, 400, "invalid_type"),
        ("temperature out of range", CHAT, dict(ok_req, temperature=7), 400, "invalid_value"),
        ("n = 17", CHAT, dict(ok_req, n=17), 400, "invalid_value"),
        ("top_logprobs without logprobs", CHAT, dict(ok_req, top_logprobs=3), 400, "invalid_value"),
        ("logprobs a string", CHAT, dict(ok_req, logprobs="yes"), 400, "invalid_type"),
        ("five stop strings", CHAT, dict(ok_req, stop=["a", "b", "c", "d", "e"]), 400, "invalid_value"),
        ("duplicate key", CHAT, b'{"messages": [{"role":"user","content":"x"}], "n": 1, "n": 1}', 400,
         "invalid_json"),
        ("invalid UTF-8", COMP, b'{"prompt": "caf\xc3 \xff"}', 400, "invalid_utf8"),
        ("overlong UTF-8", COMP, b'{"prompt": "\xc0\xaf"}', 400, "invalid_utf8"),
        ("lone surrogate escape", COMP, b'{"prompt": "\\ud800"}', 400, "invalid_json"),
        ("NUL escape", COMP, b'{"prompt": "a\\u0000b"}', 400, "invalid_json"),
        ("prompt over the context", COMP, {"prompt": "hello " * 1500, "max_tokens": 4}, 400,
         "context_length_exceeded"),
        ("empty body", CHAT, b"", 400, "invalid_json"),
    ]
    for what, path, body, want, code in cases:
        st, r = srv.post(path, body)
        check(is_error(st, r, want, code), f"bad input, {what}: {st} {r.get('error', r) if isinstance(r, dict) else r!r}")
    # body over --max-body (65536 here): declared, and chunked without a length
    big = json.dumps({"prompt": "x" * 70000}).encode()
    st, r = srv.post(COMP, big)
    check(is_error(st, r, 413, "body_too_large"), f"body over --max-body: {st}")
    c = srv.conn()
    c.putrequest("POST", COMP)
    c.putheader("Content-Type", "application/json")
    c.putheader("Transfer-Encoding", "chunked")
    c.endheaders()
    for _ in range(20):
        chunk = b"x" * 8192
        c.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
    c.send(b"0\r\n\r\n")
    resp = c.getresponse()
    body = json.loads(resp.read())
    c.close()
    check(is_error(resp.status, body, 413, "body_too_large"), f"chunked body over --max-body: {resp.status}")
    st, _, body = srv.request("GET", "/nope")
    check(st == 404 and json.loads(body)["error"]["code"] == "not_found", "unknown path: 404")
    st, hdr, body = srv.request("GET", CHAT)
    check(st == 405 and hdr.get("Allow") == "POST", "GET on a POST endpoint: 405 with Allow")
    st, hdr, body = srv.request("DELETE", "/health")
    check(st == 405, "DELETE /health: 405")
    # and it keeps serving
    st, r = srv.post(CHAT, ok_req)
    check(st == 200 and chat_text(r) is not None, "still serving after the bad requests")
    met = srv.metrics()
    for kind in ("invalid_json", "invalid_type", "unknown_field", "missing_field", "invalid_value", "invalid_utf8",
                 "body_too_large", "context_exceeded", "not_found", "method_not_allowed"):
        check(met.get(f'tessera_errors_total{{kind="{kind}"}}', 0) >= 1, f"/metrics counts {kind} errors")


def raw_post(srv, path, obj):
    s = socket.create_connection((srv.host, srv.port))
    body = json.dumps(obj).encode()
    s.sendall(b"POST %s HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
              % (path.encode(), len(body), body))
    return s


def wait_idle(srv, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        st, h = srv.get_json("/health")
        if h["slots"]["busy"] == 0 and h["queue"] == 0:
            return True
        time.sleep(0.05)
    return False


def test_cancel(srv):
    before = srv.metrics()["tessera_cancelled_total"]
    long_req = {"messages": msgs("Write a very long story about a dragon and a knight."), "max_tokens": 900,
                "temperature": 0.7, "stream": True}
    s = raw_post(srv, CHAT, long_req)
    got = b""
    while got.count(b"data: ") < 6:
        data = s.recv(4096)
        if not data:
            break
        got += data
    check(got.count(b"data: ") >= 6, "streaming request started")
    s.close()  # hang up mid-stream
    check(wait_idle(srv), "slot freed after the streaming client hung up")
    after = srv.metrics()["tessera_cancelled_total"]
    check(after == before + 1, f"/metrics tessera_cancelled_total {before} -> {after}")
    m = re.findall(r"cancelled: client disconnected: job \d+ slot \d+, prompt \d+ \(cached \d+\), generated (\d+)",
                   srv.log())
    check(len(m) == 1 and int(m[0]) < 900, f"log shows the cancel, stopped after {m} of 900 tokens")

    # non-streaming: hang up while it generates
    s = raw_post(srv, CHAT, dict(long_req, stream=False))
    time.sleep(0.5)
    s.close()
    check(wait_idle(srv), "slot freed after the non-streaming client hung up")
    check(srv.metrics()["tessera_cancelled_total"] == before + 2, "non-streaming cancel counted")
    st, r = srv.post(CHAT, {"messages": msgs("Say hi."), "max_tokens": 6, "temperature": 0})
    check(st == 200 and len(chat_text(r)) > 0, "still serving after the cancels")


PROMPTS = ["What is the capital of France?", "Name three colors.", "What is 2 + 2?", "Who wrote Hamlet?",
           "Give me a synonym for happy.", "What do bees make?"]


def test_concurrent(srv):
    def ask(p, stream):
        req = {"messages": msgs(p), "max_tokens": 20, "temperature": 0}
        if stream:
            st, ev, done = srv.stream(CHAT, dict(req, stream=True))
            return st, stream_text(ev) if st == 200 and done else None
        st, r = srv.post(CHAT, req)
        return st, chat_text(r) if st == 200 else None

    ref = {p: ask(p, False)[1] for p in PROMPTS}  # one client at a time
    results, lock = [], threading.Lock()

    def client(i):
        for k in range(3):
            p = PROMPTS[(i + 2 * k) % len(PROMPTS)]
            st, text = ask(p, (i + k) % 2 == 1)
            with lock:
                results.append((p, st, text))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    bad = [(p, st, t, ref[p]) for p, st, t in results if st != 200 or t != ref[p]]
    check(len(results) == 12 and not bad, f"4 concurrent clients x 3 requests on --parallel 2: "
          f"{len(results) - len(bad)}/12 equal to the lone run ({time.time() - t0:.1f} s){' ' + repr(bad[:2]) if bad else ''}")
    m = srv.metrics()
    check(m["tessera_slots_total"] == 2 and m['tessera_errors_total{kind="internal"}'] == 0, "no internal errors")


def test_prefix_reuse(srv):
    conv = msgs("Tell me about cats.")
    st, r = srv.post(CHAT, {"messages": conv, "max_tokens": 16, "temperature": 0})
    conv = conv + [{"role": "assistant", "content": chat_text(r)}, {"role": "user", "content": "And dogs?"}]
    st, r2 = srv.post(CHAT, {"messages": conv, "max_tokens": 8, "temperature": 0})
    cached = r2["usage"]["prompt_tokens_details"]["cached_tokens"]
    check(st == 200 and cached >= r["usage"]["prompt_tokens"],
          f"second chat turn reuses the KV prefix: {cached} of {r2['usage']['prompt_tokens']} prompt tokens cached")
    # a fresh run of the same request (in the other slot, or after truncation) gives the same greedy text
    st, r3 = srv.post(CHAT, {"messages": conv, "max_tokens": 8, "temperature": 0})
    check(chat_text(r3) == chat_text(r2), "the reused prefix gives the same reply again")


def test_auth(binary, model, work):
    srv = Server(binary, model, ["--api-key", "sekrit", "-t", "1", "-c", "512"], os.path.join(work, "auth.log"))
    try:
        req = {"messages": msgs("hi"), "max_tokens": 2}
        st, r = srv.post(CHAT, req)
        check(is_error(st, r, 401, "auth") and r["error"]["type"] == "authentication_error", "no API key: 401")
        st, r = srv.post(CHAT, req, key="wrong")
        check(is_error(st, r, 401, "auth"), "wrong API key: 401")
        st, r = srv.post(CHAT, req, key="sekri")
        check(is_error(st, r, 401, "auth"), "a prefix of the API key: 401")
        st, _, _ = srv.request("GET", "/v1/models")
        check(st == 401, "GET /v1/models without the key: 401")
        st, r = srv.post(CHAT, req, key="sekrit")
        check(st == 200, "right API key: 200")
        st, _, _ = srv.request("GET", "/health")
        check(st == 200, "/health needs no key")
        check(srv.metrics(key="sekrit")['tessera_errors_total{kind="auth"}'] == 4, "auth failures counted")
    finally:
        check(srv.stop() == 0, "auth server exits 0 on SIGTERM")


def test_prefill_device(binary, model, work):
    """--prefill-device is passed to ts_context_params: /health says whether it opened."""
    long_prompt = "Summarize: " + "The quick brown fox jumps over the lazy dog. " * 8
    for dev, opened in (("loop", True), ("no-such-device", False)):
        srv = Server(binary, model, ["-t", "1", "-c", "512", "--prefill-device", dev],
                     os.path.join(work, f"device_{dev}.log"))
        try:
            st, h = srv.get_json("/health")
            pd = h["prefill_device"]
            check(pd["requested"] == dev and pd["opened"] == opened and (pd["fallback"] is None) == opened
                  and h["engine"]["prefill"] == (dev if opened else "cpu") and h["engine"]["decode"] == "cpu",
                  f"--prefill-device {dev}: /health {h['engine']} {pd}")
            st, r = srv.post(COMP, {"prompt": long_prompt, "max_tokens": 4, "temperature": 0})
            check(st == 200 and r["usage"]["completion_tokens"] > 0, f"--prefill-device {dev}: completion 200")
            ndev = srv.metrics()["tessera_prompt_tokens_device_total"]
            check((ndev > 0) == opened, f"--prefill-device {dev}: {ndev:.0f} prompt tokens prefilled on the device")
        finally:
            check(srv.stop() == 0, f"--prefill-device {dev}: server exits 0")


def test_mem_budget(binary, model, work):
    """--mem-budget: two slots each stream the layers beyond it from the file;
    greedy completions equal the server's in memory, and /metrics counts the
    reads (docs/MOE.md)."""
    prompt = "The three primary colours are"
    answers = []
    for args in ([], ["--mem-budget", "40M", "--loaders", "2"]):
        srv = Server(binary, model, ["--parallel", "2", "-t", "1", "-c", "256"] + args,
                     os.path.join(work, f"budget_{len(args)}.log"))
        try:
            got = []
            for _ in range(2):  # the second request reuses the slot's arena and its predictions
                st, r = srv.post(COMP, {"prompt": prompt, "max_tokens": 8, "temperature": 0})
                check(st == 200, f"--mem-budget {args}: completion 200")
                got.append(r["choices"][0]["text"] if st == 200 else None)
            answers.append(got)
            m = srv.metrics()
            if args:
                check(m.get("tessera_stream_layers", 0) > 0 and m.get("tessera_stream_read_mib_total", 0) > 0
                      and m.get("tessera_stream_fills_total", 0) > 0,
                      f"--mem-budget: /metrics streaming counters {[k for k in m if 'stream' in k]}")
            else:
                check("tessera_stream_layers" not in m, "no streaming counters without a budget")
        finally:
            check(srv.stop() == 0, f"--mem-budget {args}: server exits 0")
    check(answers[0] == answers[1], f"--mem-budget: completions {answers[1]} vs in memory {answers[0]}")


def test_shared_device(binary, model, work):
    """--parallel 2 --prefill-device loop: the slots share one device session
    (the weights go up once: the upload is one copy, not two) and each slot's
    greedy text, computed at the same time as the other's, equals a solo
    server's."""
    prompts = ["Summarize: " + "The quick brown fox jumps over the lazy dog. " * 8,
               "Explain why: " + "Water boils at a lower temperature on a mountain. " * 6]

    def ask(srv, p):
        st, r = srv.post(COMP, {"prompt": p, "max_tokens": 24, "temperature": 0})
        return r["choices"][0]["text"] if st == 200 else None

    solo = Server(binary, model, ["-t", "1", "-c", "512", "--prefill-device", "loop"],
                  os.path.join(work, "device_solo.log"))
    try:
        _, h1 = solo.get_json("/health")
        ref = [ask(solo, p) for p in prompts]
    finally:
        check(solo.stop() == 0, "solo device server exits 0")
    srv = Server(binary, model, ["--parallel", "2", "-t", "1", "-c", "512", "--prefill-device", "loop"],
                 os.path.join(work, "device_shared.log"))
    try:
        _, h = srv.get_json("/health")
        pd, pd1 = h["prefill_device"], h1["prefill_device"]
        print(f"device session: solo upload {pd1['upload_mib']:.1f} MiB, window peak {pd1['window_peak_mib']:.1f} MiB; "
              f"--parallel 2: upload {pd['upload_mib']:.1f} MiB (weights {pd['weight_mib']:.1f} MiB), "
              f"window peak {pd['window_peak_mib']:.1f} MiB, {pd['sharing']} slots sharing")
        check(pd["opened"] and pd["sharing"] == 2 and pd["weight_mib"] > 0
              and abs(pd["upload_mib"] - pd1["upload_mib"]) < 0.01 and pd["upload_mib"] < 1.5 * pd["weight_mib"],
              f"--parallel 2 uploads the weights once: {pd} (solo {pd1})")
        check(pd["window_peak_mib"] - pd1["window_peak_mib"] < 0.5 * pd["weight_mib"],
              f"the second slot adds its buffers to the device window, not a weight copy: {pd} (solo {pd1})")
        out = [None, None]

        def client(i):
            out[i] = [ask(srv, prompts[(i + k) % 2]) for k in range(2)]

        threads = [threading.Thread(target=client, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        same = all(out[i] is not None and out[i][k] == ref[(i + k) % 2] for i in range(2) for k in range(2))
        check(same and all(ref), f"both slots at once equal the solo run: {out} vs {ref}")
        ndev = srv.metrics()["tessera_prompt_tokens_device_total"]
        check(ndev >= 4 * 32, f"the prompts were prefilled on the device ({ndev:.0f} tokens)")
    finally:
        check(srv.stop() == 0, "shared device server exits 0")


def main():
    binary, models_dir, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    model = need_model(models_dir)
    srv = Server(binary, model, ["--parallel", "2", "-t", "1", "-c", "1024", "--max-body", "65536"],
                 os.path.join(work, "server.log"))
    try:
        test_endpoints(srv, os.path.basename(model))
        test_bad_input(srv)
        test_cancel(srv)
        test_concurrent(srv)
        test_prefix_reuse(srv)
    except Exception as e:  # keep the log visible
        failures.append(repr(e))
        print("FAIL: exception", repr(e))
        raise
    finally:
        rc = srv.stop()
        check(rc == 0, f"server exits 0 on SIGTERM (got {rc})")
        if failures:
            print("---- server log (tail) ----")
            print("\n".join(srv.log().splitlines()[-40:]))
    test_auth(binary, model, work)
    test_prefill_device(binary, model, work)
    test_shared_device(binary, model, work)
    test_mem_budget(binary, model, work)
    print(f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
