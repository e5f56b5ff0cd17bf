#!/usr/bin/env python3
"""serve_load.py - bounded load test of `tessera serve` on loopback.

Starts the server (or uses --url of a running one), computes each prompt's
greedy answer with one client at a time, then runs --clients threads for
--seconds, each sending chat and completion requests (streaming and not,
prompts chosen per thread and iteration) and checking every answer against
its own prompt's reference: no crash, no lost or mixed-up responses. The
server's VmRSS is read after a warm-up phase and again after the run; it
must not grow by more than --rss-slack-mib. Prints the figures (requests,
req/s, generated tok/s, latency percentiles) for docs/PERFORMANCE.md.

  bench/serve_load.py --tessera build/tessera --model models/SmolLM2-135M-Instruct.Q4_1.gguf \
      --clients 8 --seconds 120 --parallel 2

Exit status 0 when every check holds (CTest runs a ~20 s version).
"""
import argparse
import json
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from server_harness import Server, chat_text, stream_text  # noqa: E402

PROMPTS = ["What is the capital of France?", "Name three colors.", "What is 2 + 2?", "Who wrote Hamlet?",
           "Give me a synonym for happy.", "What do bees make?", "Say hello in Spanish.", "What is ice made of?"]


def ask(srv, kind, prompt, stream, max_tokens):
    """One request; returns (status, text or None, completion tokens)."""
    if kind == "chat":
        path, req = "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}]}
    else:
        path, req = "/v1/completions", {"prompt": f"Q: {prompt}\nA:"}
    req.update(max_tokens=max_tokens, temperature=0)
    if stream:
        req.update(stream=True, stream_options={"include_usage": True})
        st, ev, done = srv.stream(path, req)
        if st != 200 or not done:
            return st, None, 0
        usage = [e["usage"] for e in ev if e.get("usage")]
        return st, stream_text(ev, chat=kind == "chat"), usage[0]["completion_tokens"] if usage else 0
    st, r = srv.post(path, req)
    if st != 200:
        return st, None, 0
    text = chat_text(r) if kind == "chat" else r["choices"][0]["text"]
    return st, text, r["usage"]["completion_tokens"]


class Attached:
    """A running server given by --url (no process to watch)."""

    def __init__(self, url):
        host, port = url.split("//")[-1].rstrip("/").split(":")
        self.host, self.port, self.proc = host, int(port), None

    request = Server.request
    conn = Server.conn
    post = Server.post
    stream = Server.stream
    metrics = Server.metrics


def run_phase(srv, refs, clients, seconds, max_tokens, stats):
    deadline = time.time() + seconds
    lock = threading.Lock()

    def client(i):
        k = 0
        while time.time() < deadline:
            kind = ("chat", "completion")[(i + k) % 2]
            prompt = PROMPTS[(i * 3 + k) % len(PROMPTS)]
            stream = (i + k // 2) % 2 == 1
            t0 = time.time()
            try:
                st, text, ntok = ask(srv, kind, prompt, stream, max_tokens)
            except Exception as e:  # a dropped connection counts as lost
                st, text, ntok = repr(e), None, 0
            dt = time.time() - t0
            with lock:
                stats["requests"] += 1
                if st != 200:
                    stats["errors"].append((kind, prompt, st))
                elif text != refs[(kind, prompt)]:
                    stats["mismatches"].append((kind, prompt, text, refs[(kind, prompt)]))
                else:
                    stats["ok"] += 1
                    stats["tokens"] += ntok
                    stats["latency"].append(dt)
            k += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.time() - t0


def new_stats():
    return {"requests": 0, "ok": 0, "tokens": 0, "errors": [], "mismatches": [], "latency": []}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessera", help="the tessera binary (starts a server)")
    ap.add_argument("--model", help="GGUF model for the started server")
    ap.add_argument("--url", help="use a running server instead, e.g. http://127.0.0.1:8080")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="-t per slot of the started server")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--rss-slack-mib", type=float, default=8.0)
    ap.add_argument("--log", default="serve_load.log")
    a = ap.parse_args()

    if a.url:
        srv = Attached(a.url)
    else:
        if not a.model or not os.path.exists(a.model):
            print(f"FAIL: model {a.model} is missing: run tools/fetch_models.sh")
            return 1
        srv = Server(a.tessera, a.model, ["--parallel", str(a.parallel), "-t", str(a.threads), "-c", "1024",
                                           "--max-queue", str(4 * a.clients)], a.log)
    failures = []
    try:
        refs = {}
        for kind in ("chat", "completion"):
            for p in PROMPTS:
                st, text, _ = ask(srv, kind, p, False, a.max_tokens)
                if st != 200:
                    print(f"FAIL: reference request {kind} {p!r}: {st}")
                    return 1
                refs[(kind, p)] = text
        warm = new_stats()
        run_phase(srv, refs, a.clients, max(2.0, a.seconds * 0.2), a.max_tokens, warm)
        rss0 = srv.rss_kib() if srv.proc else -1
        stats = new_stats()
        wall = run_phase(srv, refs, a.clients, a.seconds, a.max_tokens, stats)
        time.sleep(0.5)
        rss1 = srv.rss_kib() if srv.proc else -1
        m = srv.metrics()
        lat = sorted(stats["latency"]) or [0.0]
        pct = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]  # noqa: E731
        print(f"clients {a.clients}, parallel {a.parallel}, {a.seconds:.0f} s, max_tokens {a.max_tokens}")
        print(f"requests {stats['requests']} ({stats['requests'] / wall:.1f}/s), ok {stats['ok']}, "
              f"errors {len(stats['errors'])}, mismatched {len(stats['mismatches'])}")
        print(f"generated tokens {stats['tokens']} ({stats['tokens'] / wall:.1f} tok/s over all clients)")
        print(f"latency p50 {statistics.median(lat) * 1000:.0f} ms, p95 {pct(0.95) * 1000:.0f} ms, "
              f"max {lat[-1] * 1000:.0f} ms")
        print(f"server: prefill {m['tessera_prefill_tokens_per_second']:.0f} tok/s, decode "
              f"{m['tessera_decode_tokens_per_second']:.0f} tok/s per slot, cached prompt tokens "
              f"{m['tessera_prompt_tokens_cached_total']:.0f} of {m['tessera_prompt_tokens_total']:.0f}")
        if srv.proc:
            print(f"VmRSS after warm-up {rss0 / 1024:.1f} MiB, after the run {rss1 / 1024:.1f} MiB "
                  f"({(rss1 - rss0) / 1024:+.1f} MiB)")
        for what, lst in (("error", warm["errors"] + stats["errors"]),
                          ("mismatch", warm["mismatches"] + stats["mismatches"])):
            if lst:
                failures.append(f"{len(lst)} {what}(s), first: {lst[0]!r}")
        if stats["requests"] < a.clients:
            failures.append(f"only {stats['requests']} requests completed")
        if m['tessera_errors_total{kind="internal"}'] != 0:
            failures.append("the server counted internal errors")
        if srv.proc and (rss1 - rss0) / 1024 > a.rss_slack_mib:
            failures.append(f"VmRSS grew by {(rss1 - rss0) / 1024:.1f} MiB (> {a.rss_slack_mib} MiB)")
        if srv.proc and srv.proc.poll() is not None:
            failures.append(f"the server died (status {srv.proc.returncode})")
    finally:
        if srv.proc:
            rc = srv.stop()
            if rc != 0:
                failures.append(f"server exit status {rc} after SIGTERM")
                print("\n".join(srv.log().splitlines()[-30:]))
    for f in failures:
        print("FAIL:", f)
    print("ok: load test passed" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
