#!/usr/bin/env python3
"""Prefill throughput by engine and prompt length: prefill on a device,
decode on the CPU (docs/ENGINE.md, docs/PERFORMANCE.md "Prefill on a device").

For each engine (the CPU alone, then each --prefill-device) and each prompt
length, runs `tessera bench -p N -n 0 --json` (one warm-up, -r timed runs
from an empty cache, random token ids) and prints one table row: prefill
tok/s (mean +- sd), tokens the device computed per run, and the device's
stall time per run (time its queue waited on weight uploads; 0 when the
weights are resident, not measured by OpenCL).

usage: bench/prefill_bench.py [-m MODEL.gguf]... [--tessera build/tessera]
         [--engines cpu,loop,loop:npu,opencl] [-p 32,128,512,2048] [-r 3]
         [-t THREADS] [--chunk 256] [--min 32] [--json]

An engine is a --prefill-device name with options, e.g. "loop:npu,window=16M"
(streams the weights through two slots) or "opencl:0"; "cpu" means no
device. A device that does not open is reported (its fallback line) and
skipped. PoCL runs OpenCL on this machine's own cores: its figures say
nothing about a GPU.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def bench(tessera, model, engine, lengths, reps, threads, chunk, min_tokens):
    args = [tessera, "bench", "-m", model, "-p", ",".join(str(n) for n in lengths), "-n", "0", "-r", str(reps),
            "-t", str(threads), "-b", str(max(lengths)), "--json"]
    if engine != "cpu":
        args += ["--prefill-device", engine, "--chunk", str(chunk), "--prefill-min-tokens", str(min_tokens)]
    p = subprocess.run(args, capture_output=True, text=True)
    err = p.stderr.strip()
    fallback = [l for l in err.splitlines() if "prefill device" in l and "unavailable" in l]
    if p.returncode != 0:
        return None, f"failed (exit {p.returncode}): {err[-500:]}"
    if fallback:
        return None, fallback[0]
    return json.loads(p.stdout), None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", action="append", help="GGUF model (repeatable)")
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "tessera"))
    ap.add_argument("--engines", default="cpu,loop,loop:npu,opencl")
    ap.add_argument("-p", "--prompts", default="32,128,512,2048")
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--min", type=int, default=32, help="--prefill-min-tokens")
    ap.add_argument("--json", action="store_true", help="one JSON array of rows instead of the table")
    a = ap.parse_args()
    models = a.model or [os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")]
    lengths = [int(x) for x in a.prompts.split(",")]
    if not os.path.exists(a.tessera):
        sys.exit(f"no tessera binary at {a.tessera} (build it, or pass --tessera)")
    rows = []
    if not a.json:
        print(f"| {'model':<32} | {'engine':<24} | {'prompt':>6} | {'prefill tok/s':>17} | {'dev tokens':>10} "
              f"| {'stall ms/run':>12} |")
        print(f"| {'-' * 32} | {'-' * 24} | {'-' * 5}: | {'-' * 16}: | {'-' * 9}: | {'-' * 11}: |")
    for model in models:
        for engine in a.engines.split(";" if ";" in a.engines else ","):
            # "loop:npu,window=16M" would be cut by a comma list: give such
            # engines separated by ';' (--engines "cpu;loop:npu,window=16M")
            res, why = bench(a.tessera, model, engine, lengths, a.reps, a.threads, a.chunk, a.min)
            if res is None:
                print(f"# {engine}: {why}", file=sys.stderr)
                continue
            for r in res:
                row = {"model": os.path.basename(model), "engine": engine, "n_prompt": r["n_prompt"],
                       "tps": r["avg_ts"], "tps_sd": r["stddev_ts"],
                       "prefill_dev_tokens": r.get("prefill_dev_tokens", 0),
                       "dev_stall_ms": r.get("dev_stall_ms", 0.0), "threads": r["n_threads"]}
                rows.append(row)
                if not a.json:
                    tps = f"{row['tps']:.1f} +- {row['tps_sd']:.1f}"
                    print(f"| {row['model'][:32]:<32} | {engine[:24]:<24} | {row['n_prompt']:>6} | {tps:>17} "
                          f"| {row['prefill_dev_tokens']:>10} | {row['dev_stall_ms']:>12.2f} |", flush=True)
    if a.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
