#!/usr/bin/env python3
"""vs_llamacpp.py - tessera and llama.cpp side by side on the same GGUF files.

Runs llama.cpp's llama-bench and `tessera bench` one after the other, per
file, with the same threads, prompt lengths and repetitions, and prints one
table of tokens per second with tessera/llama.cpp ratios. Both programs print
llama-bench's JSON, so one reader serves both.

  bench/vs_llamacpp.py --tessera build/tessera \
      --llama-bench $(tools/build_llamacpp.sh) [-t 2] [-r 3] \
      [-p 32,128,512] [-n 128] FILE.gguf...

Run it on a quiet machine: the two programs alternate per file, so a load
change between them shows up as a ratio change.
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
    ap.add_argument("--json", help="write the raw samples of both to this file")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    common = ["-t", str(a.t), "-r", str(a.r), "-p", a.p, "-n", a.n]
    rows, raw = [], {}
    for f in a.files:
        lc = run_json([a.llama_bench, "-m", f, "-o", "json"] + common)
        ts = run_json([a.tessera, "bench", "-m", f, "--json"] + common)
        raw[f] = {"llama.cpp": lc, "tessera": ts}
        lcd = {key(o): o for o in lc}
        for o in ts:
            ref = lcd.get(key(o))
            test = f"pp{o['n_prompt']}" if o["n_prompt"] else f"tg{o['n_gen']}"
            med_t = statistics.median(o["samples_ts"])
            med_l = statistics.median(ref["samples_ts"]) if ref else float("nan")
            rows.append((os.path.basename(f), test, med_l, med_t, med_t / med_l if ref else float("nan")))
        sys.stdout.flush()
    print(f"| file | test | llama.cpp t/s (median of {a.r}) | tessera t/s (median of {a.r}) | ratio |")
    print("|---|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]:.1f} | {r[3]:.1f} | {r[4]:.2f}x |")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(raw, fh, indent=1)


if __name__ == "__main__":
    main()
