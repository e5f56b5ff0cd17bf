#!/usr/bin/env python3
"""vs_llamacpp.py - tessera and llama.cpp side by side on the same GGUF files.

Runs llama.cpp's llama-bench and `tessera bench` one after the other, per
file, with the same threads, prompt lengths and repetitions, and prints one
table of tokens per second with tessera/llama.cpp ratios. Both programs print
llama-bench's JSON, so one reader serves both.

  bench/vs_llamacpp.py --tessera build/tessera \
      --llama-bench $(tools/build_llamacpp.sh) [-t 2] [-r 3] \
      [-p 32,128,512] [-n 128] [--act exact,q8] FILE.gguf...

--act lists tessera's activation modes to run (default: exact, the 16-bit
default; q8: 8-bit activations, llama.cpp's precision), one column each.
Run it on a quiet machine: the programs alternate per file (llama.cpp, then
each tessera mode; --rounds N repeats that N times and takes the median of
all samples), so a load change between them shows up as a ratio change.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    # llama-bench may print log lines before the JSON array
    start = out.find("[")
    return json.loads(out[start:])


def key(o):
    return (o["n_prompt"], o["n_gen"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("-p", default="32,128,512")
    ap.add_argument("-n", default="128")
    ap.add_argument("--act", default="exact", help="tessera modes, comma-separated: exact, q8")
    ap.add_argument("--rounds", type=int, default=1, help="alternate the programs this many times per file")
    ap.add_argument("--json", help="write the raw samples of both to this file")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    common = ["-t", str(a.t), "-r", str(a.r), "-p", a.p, "-n", a.n]
    modes = [m for m in a.act.split(",") if m]
    rows, raw = [], {}
    for f in a.files:
        samples = {}  # (program, test) -> samples_ts over the rounds
        raw[f] = []
        for _ in range(a.rounds):
            runs = [("llama.cpp", [a.llama_bench, "-m", f, "-o", "json"] + common)]
            runs += [(m, [a.tessera, "bench", "-m", f, "--json", "--act", m] + common) for m in modes]
            for prog, cmd in runs:
                out = run_json(cmd)
                raw[f].append({prog: out})
                for o in out:
                    samples.setdefault((prog, key(o)), []).extend(o["samples_ts"])
        for k in sorted({k for _, k in samples}, key=lambda k: (k[1] != 0, k)):
            test = f"pp{k[0]}" if k[0] else f"tg{k[1]}"
            med = {p: statistics.median(samples[(p, k)]) if (p, k) in samples else float("nan")
                   for p in ["llama.cpp"] + modes}
            rows.append((os.path.basename(f), test, med))
        sys.stdout.flush()
    n = a.r * a.rounds
    print(f"| file | test | llama.cpp t/s | " + " | ".join(f"tessera {m} t/s | {m} / llama.cpp" for m in modes) + " |")
    print("|---|---|---:|" + "---:|---:|" * len(modes))
    for name, test, med in rows:
        print(f"| {name} | {test} | {med['llama.cpp']:.1f} | " +
              " | ".join(f"{med[m]:.1f} | {med[m] / med['llama.cpp']:.2f}x" for m in modes) + " |")
    print(f"\n(t/s: medians of {n} samples each: -r {a.r} x {a.rounds} rounds, programs alternating per file)")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(raw, fh, indent=1)


if __name__ == "__main__":
    main()
