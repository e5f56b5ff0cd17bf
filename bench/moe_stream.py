#!/usr/bin/env python3
"""moe_stream.py - routed reads against whole-layer reads for a MoE model
streamed under a memory budget (issue #17; docs/MOE.md "Routed reads"), on an
agent-like workload served by `tessera serve` (one slot, so the prompts of
the sequence follow each other in one context: its prefix cache and the
arena's predictions carry over from prompt to prompt, as on a phone).

The workload (--prompts N, default 36): a UI agent's steps, each a short
system text, a screen (a few widgets whose labels change a little from step
to step) and "Action:" (the first two thirds: similar consecutive prompts),
then a domain change: lines of tinyshakespeare's held-out part to continue.
Each request asks for --tokens greedy tokens (/v1/completions).

Runs, one after the other on the same prompts: the model in memory (the
reference answers), routed reads (default), whole layers
(--no-prefill-routed), and routed reads with an expert cache (--cache-mb).
After every request /metrics gives the MiB read and the experts read ahead,
on demand and routed. Prints a table (total MiB read; MiB per prompt in the
similar phase and after the domain change; experts; answers equal to the
reference) and writes --json.

usage: moe_stream.py [--tessera build/tessera] [-m models/moe/smollm2-moefied-e16k4.gguf]
                     [--budget 60M] [--prompts 36] [--tokens 8] [--cache-mb 16] [--json out.json]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

APPS = ["Settings", "Messages", "Camera", "Maps", "Clock"]
WIDGETS = [["Wi-Fi", "Bluetooth", "Airplane mode", "Battery"], ["New message", "Search", "Inbox", "Archive"],
           ["Photo", "Video", "Flash", "Timer"], ["Directions", "Search here", "Layers", "Saved"],
           ["Alarm", "Stopwatch", "Timer", "Bedtime"]]


def agent_prompt(i):
    a = (i // 5) % len(APPS)
    w = WIDGETS[a]
    state = ["on" if (i + j) % 3 else "off" for j in range(len(w))]
    screen = "; ".join(f"[{j}] {w[j]} ({state[j]})" for j in range(len(w)))
    goal = ["turn on Wi-Fi", "open the inbox", "take a photo", "find a cafe", "set an alarm for 7"][a]
    return (f"You are a phone assistant. Reply with one action.\nGoal: {goal}.\nApp: {APPS[a]}.\n"
            f"Screen: {screen}.\nStep {i % 5 + 1}. Action:")


def shakespeare_prompts(n):
    path = None
    for d in (os.environ.get("TS_DATA_DIR"), os.path.join(ROOT, "..", "shared", "data")):
        if d and os.path.exists(os.path.join(d, "tinyshakespeare.txt")):
            path = os.path.join(d, "tinyshakespeare.txt")
    if not path:
        sys.exit("moe_stream: no ../shared/data/tinyshakespeare.txt (set TS_DATA_DIR)")
    text = open(path, encoding="utf-8").read()
    held = text[int(len(text) * 0.9):]
    lines = [l for l in held.split("\n") if len(l) > 30]
    step = max(1, len(lines) // (n + 1))
    return [lines[i * step] for i in range(n)]


def workload(n):
    n_agent = (2 * n) // 3
    return [("agent", agent_prompt(i)) for i in range(n_agent)] + \
        [("shakespeare", p) for p in shakespeare_prompts(n - n_agent)]


def metrics(port):
    txt = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    out = {}
    for line in txt.splitlines():
        m = re.match(r'^(tessera_stream_[a-z_]+)(\{kind="(\w+)"\}|\{result="(\w+)"\})? ([-0-9.e+]+)$', line)
        if m:
            key = m.group(1) + ("." + (m.group(3) or m.group(4)) if m.group(2) else "")
            out[key] = float(m.group(5))
    return out


def complete(port, prompt, n_tok):
    body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": n_tok, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                 {"Content-Type": "application/json"})
    r = json.loads(urllib.request.urlopen(req, timeout=600).read().decode())
    return r["choices"][0]["text"]


def run_mode(a, name, extra, prompts):
    cmd = [a.tessera, "serve", "-m", a.model, "--port", "0", "-t", str(a.threads), "-c", "1024"] + extra
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    port = None
    t_end = time.time() + 120
    while port is None and time.time() < t_end:
        line = p.stderr.readline()
        if not line:
            break
        m = re.search(r"listening on http://[^:]+:(\d+)/", line)
        if m:
            port = int(m.group(1))
    if port is None:
        p.kill()
        sys.exit(f"moe_stream: {name}: the server did not start")
    rows, answers = [], []
    prev = metrics(port)
    t0 = time.time()
    for kind, prompt in prompts:
        answers.append(complete(port, prompt, a.tokens))
        cur = metrics(port)
        rows.append({"kind": kind, **{k: cur.get(k, 0.0) - prev.get(k, 0.0) for k in cur}})
        prev = cur
    wall = time.time() - t0
    p.terminate()
    p.wait(timeout=30)
    return {"mode": name, "flags": extra, "answers": answers, "per_prompt": rows, "wall_s": wall}


def summary(r):
    per = r["per_prompt"]
    tot = lambda k, kind=None: sum(x.get(k, 0.0) for x in per if kind is None or x["kind"] == kind)
    na = sum(1 for x in per if x["kind"] == "agent")
    ns = len(per) - na
    return {"read_mib": tot("tessera_stream_read_mib_total"),
            "mib_agent": tot("tessera_stream_read_mib_total", "agent") / max(na, 1),
            "mib_shake": tot("tessera_stream_read_mib_total", "shakespeare") / max(ns, 1),
            "ahead": tot("tessera_stream_experts_total.ahead"), "demand": tot("tessera_stream_experts_total.demand"),
            "routed": tot("tessera_stream_experts_total.routed"),
            "hits": tot("tessera_stream_cache_total.hit"), "misses": tot("tessera_stream_cache_total.miss")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "tessera"))
    ap.add_argument("-m", "--model", default=os.path.join(ROOT, "models", "moe", "smollm2-moefied-e16k4.gguf"))
    ap.add_argument("--budget", default="60M")
    ap.add_argument("--prompts", type=int, default=36)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--cache-mb", type=int, default=16)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    if not os.path.exists(a.model):
        sys.exit(f"moe_stream: {a.model} is missing: run tools/moefy.py --experts 16 --k 4")
    prompts = workload(a.prompts)
    modes = [("in memory", []), ("routed", ["--mem-budget", a.budget]),
             ("whole layers", ["--mem-budget", a.budget, "--no-prefill-routed"]),
             (f"routed + cache {a.cache_mb} MiB", ["--mem-budget", a.budget, "--cache-mb", str(a.cache_mb)])]
    results = []
    for name, extra in modes:
        print(f"moe_stream: {name} ...", file=sys.stderr, flush=True)
        results.append(run_mode(a, name, extra, prompts))
    ref = results[0]["answers"]
    print(f"model {os.path.basename(a.model)}, budget {a.budget}, {len(prompts)} prompts "
          f"({sum(1 for k, _ in prompts if k == 'agent')} agent steps, then a domain change), {a.tokens} tokens each")
    print("| mode | MiB read | MiB/prompt (agent) | MiB/prompt (after change) | experts ahead | on demand | routed "
          "| cache hits/misses | answers = in memory | wall s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        s = summary(r)
        same = sum(1 for x, y in zip(r["answers"], ref) if x == y)
        r["summary"] = s
        r["same_answers"] = same
        print(f"| {r['mode']} | {s['read_mib']:.1f} | {s['mib_agent']:.2f} | {s['mib_shake']:.2f} | {s['ahead']:.0f} "
              f"| {s['demand']:.0f} | {s['routed']:.0f} | {s['hits']:.0f}/{s['misses']:.0f} | {same}/{len(ref)} "
              f"| {r['wall_s']:.1f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": a.model, "budget": a.budget, "prompts": prompts, "results": results}, f, indent=1)
    bad = [r["mode"] for r in results if r["same_answers"] != len(ref)]
    if bad:
        print("moe_stream: answers differ from the model in memory in: " + ", ".join(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
