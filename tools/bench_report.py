#!/usr/bin/env python3
"""bench_report.py - runs bench/bench_model several times (separate processes,
so that one unlucky scheduling period cannot skew every test) and prints, per
model and test, the median over the runs of llama-bench's avg_ts, the spread
of those runs (min-max), and the ratio to llama.cpp's figures on this machine
class (docs/PERFORMANCE.md).

usage: bench_report.py BENCH_MODEL [--runs 3] [--env K=V ...] [-- bench_model args]
  e.g. bench_report.py build-perf/bench/bench_model --runs 3 -- \\
           -m models/bench/smollm2-135m-Q4_0.gguf -p 32,128,512 -n 128 -t 2 -r 3
Prints a markdown table, then the raw medians as JSON on the last line.
"""
import json
import os
import statistics
import subprocess
import sys

# llama-bench -t 2 -r 3 on this machine class (t/s), from the task brief
LLAMA_CPP = {
    ("smollm2-135m", "Q4_0"): {"pp32": 769, "pp128": 622, "pp512": 700, "tg128": 158},
    ("smollm2-135m", "Q4_1"): {"pp32": 210, "pp128": 253, "pp512": 264, "tg128": 126},
    ("smollm2-135m", "Q8_0"): {"pp32": 637, "pp128": 732, "pp512": 674, "tg128": 124},
    ("llama3.2-1b", "Q4_0"): {"pp32": 134, "pp128": 140, "pp512": 126, "tg128": 34},
    ("llama3.2-1b", "Q4_1"): {"pp32": 40, "pp128": 35, "pp512": 39, "tg128": 19},
}
TARGET = {"Q4_1": 2.0, "Q4_0": 1.5, "Q8_0": 1.5}  # pp512; tg128: 1.2 (135M), 1.1 (1B)


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    exe, runs, env = args[0], 3, dict(os.environ)
    rest = args[1:]
    bench_args = []
    i = 0
    while i < len(rest):
        if rest[i] == "--runs":
            runs = int(rest[i + 1])
            i += 2
        elif rest[i] == "--env":
            k, v = rest[i + 1].split("=", 1)
            env[k] = v
            i += 2
        elif rest[i] == "--":
            bench_args = rest[i + 1:]
            break
        else:
            sys.exit(f"unknown argument {rest[i]}")
    samples = {}
    for r in range(runs):
        out = subprocess.run([exe, *bench_args, "--json"], capture_output=True, text=True, env=env)
        if out.returncode != 0:
            sys.exit(out.stderr)
        sys.stderr.write(out.stderr)
        for rec in json.loads(out.stdout):
            test = f"pp{rec['n_prompt']}" if rec["n_prompt"] else f"tg{rec['n_gen']}"
            key = (os.path.basename(rec["model_filename"]), rec["model_type"], rec["n_threads"], test)
            samples.setdefault(key, []).append(rec["avg_ts"])
    print("| model file | test | t/s (median of %d runs) | min - max | llama.cpp | ratio |" % runs)
    print("|---|---|---:|---:|---:|---:|")
    medians = {}
    for (fname, mtype, nt, test), v in samples.items():
        med = statistics.median(v)
        stem = fname.rsplit(".", 1)[0]
        shape, ftype = stem.rsplit("-", 1)
        ref = LLAMA_CPP.get((shape, ftype), {}).get(test)
        ratio = f"{med / ref:.2f}x" if ref else "-"
        print(f"| {fname} | {test} | {med:.1f} | {min(v):.1f} - {max(v):.1f} | {ref if ref else '-'} | {ratio} |")
        medians[f"{fname} {test}"] = round(med, 2)
    print(json.dumps(medians))


if __name__ == "__main__":
    main()
