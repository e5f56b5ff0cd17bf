"""test_server_diffusion.py - `tessera serve` with a diffusion LLM: the tiny
random llada and dream models (tools/gen_dllm_models.py, generated into the
work dir) answer /v1/completions and /v1/chat/completions through
ts_context_diffuse. For each model, each decoder setting (block with the
prefix / dual / no cache, vanilla with LLaDA's and Dream's schedules, no
early stop, Gumbel sampling with a seed, an early stop on EOS, the
defaults) must give exactly the text, finish reason and token counts that
`tessera diffuse` prints for the same prompt and options, streamed and not.
Also: /health and /v1/models say diffusion and the decoder defaults; every
decoder field's 400 (type, range, the decoder it does not apply to, steps <
blocks, a canvas over the context, autoregressive sampler options); a
client that hangs up cancels a long vanilla run (streaming and not); 4
concurrent clients on --parallel 2 get the same answers; and an
autoregressive model (SmolLM2) rejects the decoder fields as unknown.

usage: test_server_diffusion.py TESSERA_BIN GEN_DLLM_MODELS.py MODELS_DIR WORK_DIR
"""
import json
import os
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_harness import Server, chat_text, need_model, stream_finish, stream_text  # noqa: E402

failures = []
CHAT = "/v1/chat/completions"
COMP = "/v1/completions"
PROMPT = "The quick brown fox jumps over"
SYSTEM, USER = "You are terse.", "Name a color."
FIELDS = ["decoder", "block", "steps", "threshold", "cache", "alg", "eps", "early_stop"]


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)
    return cond


def is_error(status, body, want_status, want_code, want_param=None):
    ok = status == want_status and isinstance(body, dict) and set(body.get("error", {})) >= {
        "message", "type", "param", "code"} and body["error"]["code"] == want_code
    return ok and (want_param is None or body["error"]["param"] == want_param)


def diffuse(binary, model, gen, flags, chat=False):
    """`tessera diffuse` for PROMPT (or the chat turn): (text, stats)."""
    cmd = [binary, "diffuse", "-m", model, "--gen", str(gen), "-t", "1", "--no-display-prompt", "--stats", "json"]
    cmd += ["--chat", "--system", SYSTEM, "-p", USER] if chat else ["-p", PROMPT]
    r = subprocess.run(cmd + flags, capture_output=True)
    if r.returncode != 0:
        raise RuntimeError(f"{cmd + flags}: exit {r.returncode}: {r.stderr.decode(errors='replace')}")
    out = r.stdout.decode("utf-8")
    assert out.endswith("\n")
    return out[:-1], json.loads(r.stderr.decode().strip().splitlines()[-1])


# (label, max_tokens, body fields, `tessera diffuse` flags); gen None = the defaults
CASES = [
    ("defaults", None, {}, []),
    ("block 8", 24, {"block": 8}, ["--block", "8"]),
    ("block dual, threshold 0.05", 24, {"block": 8, "cache": "dual", "threshold": 0.05},
     ["--block", "8", "--dual-cache", "--threshold", "0.05"]),
    ("block no cache", 24, {"block": 8, "cache": "none"}, ["--block", "8", "--no-cache"]),
    ("block, threshold, no early stop", 24, {"block": 8, "threshold": 0.01, "early_stop": False},
     ["--block", "8", "--threshold", "0.01", "--no-early-stop"]),
    ("vanilla", 24, {"decoder": "vanilla", "block": 8, "steps": 12},
     ["--decoder", "vanilla", "--block", "8", "--steps", "12"]),
    # a window of the whole canvas, wider than a small n_batch: the
    # slots' batch must be sized to their context
    ("vanilla, canvas of 200", 200, {"decoder": "vanilla", "block": 200, "steps": 20},
     ["--decoder", "vanilla", "--block", "200", "--steps", "20"]),
    ("vanilla eps entropy", 24, {"decoder": "vanilla", "steps": 6, "eps": 0.001, "alg": "entropy"},
     ["--decoder", "vanilla", "--steps", "6", "--eps", "0.001", "--alg", "entropy"]),
    ("block entropy, threshold -0.5", 16, {"block": 8, "alg": "entropy", "threshold": -0.5},
     ["--block", "8", "--alg", "entropy", "--threshold", "-0.5"]),
    ("maskgit_plus, temperature 0.7 seed 42", 24, {"block": 8, "alg": "maskgit_plus", "temperature": 0.7, "seed": 42},
     ["--block", "8", "--alg", "maskgit_plus", "--temp", "0.7", "--seed", "42"]),
]
# Gumbel sampling at temperature 2 with these seeds draws an EOS early (found
# by trying seeds): finish_reason "stop" and a reply shorter than max_tokens.
EARLY_STOP_SEED = {"llada": 1, "dream": 8}


def compare(srv, binary, model, name, label, gen, fields, flags, chat=False, stream_too=True):
    text, st = diffuse(binary, model, gen if gen else 128, flags, chat)
    want_finish = {"eos": "stop", "length": "length"}[st["stop_reason"]]
    body = dict(fields)
    if gen:
        body["max_tokens"] = gen
    if chat:
        path, body["messages"] = CHAT, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]
    else:
        path, body["prompt"] = COMP, PROMPT
    s, r = srv.post(path, body)
    if not check(s == 200, f"{name} {label}: 200" + ("" if s == 200 else f" (got {s} {r})")):
        return st
    got = chat_text(r) if chat else r["choices"][0]["text"]
    u, d = r["usage"], r["diffusion"]
    check(got == text and r["choices"][0]["finish_reason"] == want_finish,
          f"{name} {label}{' chat' if chat else ''}: {got!r} {r['choices'][0]['finish_reason']} == diffuse's "
          f"{text!r} {want_finish}")
    check(u["prompt_tokens"] == st["n_prompt_tokens"] and u["completion_tokens"] == st["n_gen_tokens"]
          and u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
          and u["prompt_tokens_details"]["cached_tokens"] == 0
          and d["forwards"] == st["forwards"] and d["early_stop_at"] == st["early_stop_at"],
          f"{name} {label}: usage {u['prompt_tokens']}+{u['completion_tokens']}, {d['forwards']} forwards "
          f"== diffuse's {st['n_prompt_tokens']}+{st['n_gen_tokens']}, {st['forwards']}")
    if stream_too:
        s, ev, done = srv.stream(path, dict(body, stream=True, stream_options={"include_usage": True}))
        usage = [e["usage"] for e in ev if e.get("usage")]
        check(s == 200 and done and stream_text(ev, chat) == text and stream_finish(ev) == want_finish
              and len(usage) == 1 and usage[0]["completion_tokens"] == st["n_gen_tokens"],
              f"{name} {label}: streamed {stream_text(ev, chat)!r} {stream_finish(ev)}, usage {usage}, [DONE] {done}")
    return st


def test_replies(srv, binary, model, name):
    for label, gen, fields, flags in CASES:
        compare(srv, binary, model, name, label, gen, fields, flags, stream_too=label in ("block 8", "vanilla"))
    seed = EARLY_STOP_SEED[name]
    st = compare(srv, binary, model, name, f"early stop (temperature 2, seed {seed})", 48,
                 {"block": 8, "temperature": 2, "seed": seed}, ["--block", "8", "--temp", "2", "--seed", str(seed)])
    check(st["stop_reason"] == "eos" and st["n_gen_tokens"] < 48, f"{name}: the early-stop case stops early ({st})")
    compare(srv, binary, model, name, "block 8", 24, {"block": 8}, ["--block", "8"], chat=True)


def test_info(srv, name):
    want = {"decoder": "block", "block": 32, "threshold": 0.9, "cache": "prefix", "alg": "low_confidence",
            "steps": None, "eps": 0.0, "temperature": 0.0, "early_stop": True, "max_tokens": 128}
    st, h = srv.get_json("/health")
    check(st == 200 and h["diffusion"] is True and h["architecture"] == name and h["diffusion_defaults"] == want
          and h["engine"] == {"prefill": "cpu", "decode": "cpu"}, f"{name}: /health {h}")
    st, m = srv.get_json("/v1/models")
    meta = m["data"][0]["meta"]
    check(st == 200 and meta["diffusion"] is True and meta["diffusion_defaults"] == want, f"{name}: /v1/models {meta}")


def test_bad_input(srv):
    base = {"prompt": PROMPT, "max_tokens": 24}
    cases = [
        ({"decoder": "greedy"}, "invalid_value", "decoder"),
        ({"decoder": 1}, "invalid_type", "decoder"),
        ({"block": 0}, "invalid_value", "block"),
        ({"block": "8"}, "invalid_type", "block"),
        ({"block": 100000}, "invalid_value", "block"),
        ({"steps": 3}, "invalid_value", "steps"),                       # block decoder
        ({"eps": 0.1}, "invalid_value", "eps"),                         # block decoder
        ({"decoder": "vanilla", "cache": "dual"}, "invalid_value", "cache"),
        ({"decoder": "vanilla", "threshold": 0.5}, "invalid_value", "threshold"),
        ({"decoder": "vanilla", "block": 8, "steps": 2}, "invalid_value", "steps"),  # 3 blocks
        ({"decoder": "vanilla", "steps": 0}, "invalid_value", "steps"),
        ({"decoder": "vanilla", "eps": 1.0}, "invalid_value", "eps"),
        ({"threshold": 1.5}, "invalid_value", "threshold"),
        ({"threshold": -0.5}, "invalid_value", "threshold"),            # only entropy's are <= 0
        ({"threshold": "high"}, "invalid_type", "threshold"),
        ({"cache": "full"}, "invalid_value", "cache"),
        ({"alg": "margin"}, "invalid_value", "alg"),
        ({"early_stop": "yes"}, "invalid_type", "early_stop"),
        ({"temperature": 3}, "invalid_value", "temperature"),
        ({"max_tokens": 500}, "context_length_exceeded", "max_tokens"),  # prompt + canvas > -c 512
        ({"top_p": 0.5}, "unsupported", "top_p"),
        ({"top_k": 40}, "unsupported", "top_k"),
        ({"repeat_penalty": 1.1}, "unsupported", "repeat_penalty"),
        ({"dekoder": "block"}, "unknown_field", "dekoder"),
        ({"logprobs": 1}, "unsupported", "logprobs"),
    ]
    for fields, code, param in cases:
        st, r = srv.post(COMP, dict(base, **fields))
        check(is_error(st, r, 400, code, param), f"{fields}: 400 {code} ({st} {r})")
    st, r = srv.post(CHAT, {"messages": [{"role": "user", "content": "hi"}], "cache": "nope"})
    check(is_error(st, r, 400, "invalid_value", "cache"), "chat: a bad decoder field is a 400 too")
    st, r = srv.post(COMP, dict(base, top_p=1, top_k=0, min_p=0, presence_penalty=0, repeat_penalty=1,
                                frequency_penalty=0, stop=None, n=1, user="u", model="x"))
    check(st == 200, f"sampler options at their no-op values are accepted ({st})")
    st, r = srv.post(COMP, dict(base, block=8))
    check(st == 200, "still serving after the 400s")
    # n = 2: two canvases one after the other (seed + i); at temperature 0 both are the argmax reply
    st, r2 = srv.post(COMP, dict(base, block=8, n=2))
    ch = r2.get("choices", []) if st == 200 else []
    check(st == 200 and len(ch) == 2 and [c["index"] for c in ch] == [0, 1] and ch[0]["text"] == ch[1]["text"]
          == r["choices"][0]["text"] and r2["usage"]["completion_tokens"] == 2 * r["usage"]["completion_tokens"],
          f"n = 2 on a diffusion model: two equal argmax choices ({st})")


def test_stop_string(srv, binary, model):
    text, _ = diffuse(binary, model, 24, ["--block", "8"])
    stop = text[len(text) // 2:len(text) // 2 + 3]
    st, r = srv.post(COMP, {"prompt": PROMPT, "max_tokens": 24, "block": 8, "stop": stop})
    check(st == 200 and r["choices"][0]["text"] == text[:text.find(stop)] and r["choices"][0]["finish_reason"] == "stop",
          f"stop string {stop!r}: {r['choices'][0]['text']!r}, finish {r['choices'][0]['finish_reason']}")


def test_cancel(srv):
    """A long vanilla run (every step a forward over the whole canvas), left by its client."""
    long = {"prompt": PROMPT, "max_tokens": 480, "decoder": "vanilla", "block": 480, "early_stop": False}
    before = srv.metrics()["tessera_cancelled_total"]
    for stream in (True, False):
        sock = socket.create_connection((srv.host, srv.port))
        body = json.dumps(dict(long, stream=stream)).encode()
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        if stream:
            sock.recv(100)  # the 200 and headers: the job runs
        time.sleep(0.6)
        sock.close()
        t0 = time.time()
        st, r = srv.post(COMP, {"prompt": PROMPT, "max_tokens": 8, "block": 8})
        dt = time.time() - t0
        check(st == 200 and dt < 10, f"cancel (stream {stream}): the next request answered in {dt:.1f} s")
    time.sleep(0.3)
    # one block of 480: nothing is handed out before the run ends, so a
    # cancelled run says "generated 0" (a finished one would say 480)
    lines = [ln for ln in srv.log().splitlines() if "cancelled: client disconnected" in ln]
    check(len(lines) == 2 and all("generated 0," in ln for ln in lines), "the log says both runs were cancelled "
          "mid-run:\n  " + "\n  ".join(lines))
    m = srv.metrics()
    check(m["tessera_cancelled_total"] - before == 2, f"tessera_cancelled_total +2 ({m['tessera_cancelled_total']})")
    check(m["tessera_slots_busy"] == 0 and m["tessera_queue_length"] == 0, "no slot busy, nothing queued")


def test_concurrent(srv, binary, model):
    """4 clients at once on --parallel 2, two settings: each answer = `tessera diffuse`'s."""
    settings = [({"block": 8}, ["--block", "8"]),
                ({"decoder": "vanilla", "block": 8, "steps": 12}, ["--decoder", "vanilla", "--block", "8", "--steps", "12"])]
    want = [diffuse(binary, model, 24, flags)[0] for _, flags in settings]
    got = [None] * 4

    def client(i):
        st, r = srv.post(COMP, dict(settings[i % 2][0], prompt=PROMPT, max_tokens=24))
        got[i] = r["choices"][0]["text"] if st == 200 else (st, r)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(all(got[i] == want[i % 2] for i in range(4)), f"4 concurrent clients on 2 slots: {got} == {want}")


def test_autoregressive_rejects(binary, model, work):
    srv = Server(binary, model, ["-t", "1", "-c", "256"], os.path.join(work, "diffusion_ar.log"))
    try:
        st, h = srv.get_json("/health")
        check(h["diffusion"] is False and h["diffusion_defaults"] is None, "autoregressive model: /health diffusion false")
        vals = {"decoder": "block", "block": 8, "steps": 8, "threshold": 0.9, "cache": "prefix",
                "alg": "low_confidence", "eps": 0.0, "early_stop": True}
        for f in FIELDS:
            st, r = srv.post(COMP, {"prompt": "Hi", "max_tokens": 2, f: vals[f]})
            check(is_error(st, r, 400, "unknown_field", f), f"autoregressive model: '{f}' is an unknown field")
        st, r = srv.post(CHAT, {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "decoder": "block"})
        check(is_error(st, r, 400, "unknown_field", "decoder"), "autoregressive model, chat: 'decoder' unknown")
    finally:
        check(srv.stop() == 0, "autoregressive server exits 0")


def main():
    binary, gen_script, models_dir, work = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    smol = need_model(models_dir)
    out = os.path.join(work, "dllm_serve")
    subprocess.run([sys.executable, gen_script, out, "--only", "llada,dream", "--models-dir", models_dir],
                   check=True, stdout=subprocess.DEVNULL)
    t0 = time.time()
    for name in ("llada", "dream"):
        model = os.path.join(out, name + ".gguf")
        srv = Server(binary, model, ["-t", "1"] + (["-c", "256"] if name == "dream" else ["-c", "512", "--parallel", "2"]),
                     os.path.join(work, f"diffusion_{name}.log"))
        try:
            test_info(srv, name)
            if name == "llada":
                test_bad_input(srv)
                test_stop_string(srv, binary, model)
                test_cancel(srv)
                test_concurrent(srv, binary, model)
            test_replies(srv, binary, model, name)
        except Exception as e:  # keep the log visible
            failures.append(repr(e))
            print("FAIL: exception", repr(e))
        finally:
            rc = srv.stop()
            check(rc == 0, f"{name} server exits 0 on SIGTERM (got {rc})")
            if failures:
                print("---- server log (tail) ----")
                print("\n".join(srv.log().splitlines()[-30:]))
    test_autoregressive_rejects(binary, smol, work)
    print(f"{len(failures)} failure(s), {time.time() - t0:.1f} s")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
