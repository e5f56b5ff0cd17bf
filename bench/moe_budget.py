#!/usr/bin/env python3
"""moe_budget.py - a streamed MoE under memory budgets (issue #17; docs/MOE.md
"Memory budget"): peak RSS, prefill and decode speed and the bytes read per
generated token, for each --budgets value and the model in memory, through
`tessera run --stats json`.

For each budget, two runs of the same greedy prompt: -n 1 and -n N+1; the
second's reads minus the first's, over N, are the reads per decoded token
(the first run of a context reads every streamed layer whole, so prefill's
reads are the first run's). The answers of every budget must equal the
model in memory's (printed). Beside it: the disk's O_DIRECT read speed (dd)
and the memory bandwidth probe, when built (build/bench/bench_bandwidth).

usage: moe_budget.py [-m models/moe/big-moe.gguf] [--budgets 1G,2G,3G,4G] [-n 16] [-t 2] [--json F]
"""
import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT = "The weather today is sunny and the city is busy with people walking to work and"


def run(a, budget, n):
    cmd = [a.tessera, "run", "-m", a.model, "-p", PROMPT, "-n", str(n), "--temp", "0", "-c", "512", "-t",
           str(a.threads), "--stats", "json", "--no-display-prompt"] + (["--mem-budget", budget] + a.extra if budget else [])
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if p.returncode:
        sys.exit(f"moe_budget: {' '.join(cmd)} failed: {p.stderr[-2000:]}")
    js = [l for l in p.stderr.splitlines() if l.startswith("{")]
    return p.stdout, json.loads(js[-1])


def disk_speed(path):
    try:
        p = subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=4M", "count=256", "iflag=direct"],
                           capture_output=True, text=True, timeout=600)
        m = re.search(r"([\d.]+) ([GM])B/s", p.stderr)
        return float(m.group(1)) * (1000 if m.group(2) == "G" else 1) if m else None
    except (OSError, subprocess.SubprocessError):
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "tessera"))
    ap.add_argument("-m", "--model", default=os.path.join(ROOT, "models", "moe", "big-moe.gguf"))
    ap.add_argument("--budgets", default="1G,2G,3G,4G")
    ap.add_argument("-n", type=int, default=16)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--extra", default="", help="more tessera run flags for the budget runs, space-separated (e.g. '--cache-mb 512')")
    ap.add_argument("--json")
    a = ap.parse_args()
    a.extra = a.extra.split()
    if not os.path.exists(a.model):
        sys.exit(f"moe_budget: {a.model} is missing: run tools/gen_big_moe.py")
    size = os.path.getsize(a.model)
    mbps = disk_speed(a.model)
    bw = None
    probe = os.path.join(ROOT, "build", "bench", "bench_bandwidth")
    if os.path.exists(probe):
        p = subprocess.run([probe], capture_output=True, text=True)
        bw = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else None
    rows = []
    ref = None
    for b in [None] + a.budgets.split(","):
        out1, s1 = run(a, b, 1)
        out2, s2 = run(a, b, a.n + 1)
        if ref is None:
            ref = out2
        per_tok = (s2.get("stream_read_mib", 0) - s1.get("stream_read_mib", 0)) / a.n
        rows.append({"budget": b or "in memory", "peak_rss_mib": s2["peak_rss_mib"], "prefill_tps": s2["prefill_tps"],
                     "decode_tps": s2["decode_tps"], "layers": s2.get("stream_layers", 0),
                     "slot_mib": s2.get("stream_slot_mib", 0), "prefill_read_mib": s1.get("stream_read_mib", 0),
                     "read_mib_per_token": per_tok, "stall_ms": s2.get("stream_stall_ms", 0),
                     "hit": s2.get("stream_predict_hit_rate", 0), "same": out2 == ref})
        print(f"moe_budget: {rows[-1]}", file=sys.stderr, flush=True)
    print(f"model {os.path.basename(a.model)} ({size / 2**30:.2f} GiB), prompt {s2['n_prompt_tokens']} tokens, "
          f"{a.n} decoded, {a.threads} threads; disk O_DIRECT read {mbps} MB/s (dd, 1 GiB); bandwidth probe: {bw}")
    print("| budget | layers streamed | slot MiB | peak RSS MiB | prefill tok/s | prefill MiB read | decode tok/s "
          "| MiB read / token | stall ms | prediction hit | answer = in memory |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['budget']} | {r['layers']} | {r['slot_mib']:.0f} | {r['peak_rss_mib']:.0f} | {r['prefill_tps']:.2f} "
              f"| {r['prefill_read_mib']:.0f} | {r['decode_tps']:.2f} | {r['read_mib_per_token']:.1f} "
              f"| {r['stall_ms']:.0f} | {r['hit']:.2f} | {'yes' if r['same'] else 'NO'} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": a.model, "disk_mbps": mbps, "bandwidth": bw, "rows": rows}, f, indent=1)
    return 0 if all(r["same"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
