#!/usr/bin/env python3
"""kld_table.py - fidelity of tessera's q8 mode and of llama.cpp, each judged
against tessera's exact mode the way the field judges quantization: mean /
median / p99 KL divergence, top-1 agreement and perplexity over a text
(issue #20; docs/FIDELITY.md "Two modes").

Per model: `tessera perplexity --kl-divergence-base` writes the exact mode's
log-probabilities, then `tessera perplexity --act q8 --kl-divergence` and
`llama-perplexity --kl-divergence` (reading the same file) are compared with
them; and, the other way round, tessera's exact mode reads the file
llama-perplexity writes (the KLD of the exact mode from llama.cpp).

usage: bench/kld_table.py [--tessera build/tessera] [--llama-perplexity PATH]
                          [-f TEXT] [-c 512] [--chunks N] [-t 2] MODEL.gguf...
Prints a markdown table.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"kld_table: failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return p.stdout + p.stderr


def grab(out, label):
    m = re.search(re.escape(label) + r"\s*:\s*(-?[\d.]+)", out)
    if not m:
        sys.exit(f"kld_table: no '{label}' in:\n{out[-2000:]}")
    return float(m.group(1))


def summary(out):
    return {"ppl": grab(out, "Mean PPL(Q)"), "ppl_base": grab(out, "Mean PPL(base)"),
            "kld": grab(out, "Mean    KLD"), "median": grab(out, "Median  KLD"), "p99": grab(out, "99.0%   KLD"),
            "top": grab(out, "Same top p")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "tessera"))
    ap.add_argument("--llama-perplexity", default=os.path.expanduser(
        "~/.cache/tessera/llamacpp/build-noamx/bin/llama-perplexity"))
    ap.add_argument("-f", "--file", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("-c", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=0)
    ap.add_argument("-t", type=int, default=2)
    a = ap.parse_args()
    chunks = ["--chunks", str(a.chunks)] if a.chunks else []
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for m in a.models:
            base, llbase = os.path.join(tmp, "exact.kld"), os.path.join(tmp, "llama.kld")
            out = run([a.tessera, "perplexity", "-m", m, "-f", a.file, "-c", str(a.c), "-t", str(a.t),
                       "--kl-divergence-base", base] + chunks)
            ppl = float(re.search(r"PPL = ([\d.]+)", out).group(1))
            scored = int(re.search(r"(\d+) scored tokens", out).group(1))
            q8 = summary(run([a.tessera, "perplexity", "-m", m, "--kl-divergence-base", base, "--kl-divergence",
                              "-t", str(a.t), "--act", "q8"]))
            ll = summary(run([a.llama_perplexity, "-m", m, "--kl-divergence-base", base, "--kl-divergence",
                              "-c", str(a.c), "-b", str(a.c), "-t", str(a.t)]))
            run([a.llama_perplexity, "-m", m, "-f", a.file, "--kl-divergence-base", llbase, "-c", str(a.c),
                 "-b", str(a.c), "-t", str(a.t)] + chunks)
            back = summary(run([a.tessera, "perplexity", "-m", m, "--kl-divergence-base", llbase, "--kl-divergence",
                                "-t", str(a.t)]))
            rows.append((os.path.basename(m), scored, ppl, q8, ll, back))
            print(f"kld_table: {os.path.basename(m)} done", file=sys.stderr, flush=True)
    print(f"Text `{a.file}`, windows of {a.c}, the second half of each scored; {a.t} threads.\n")
    print("| model | scored | PPL exact | PPL q8 | PPL llama.cpp | KLD q8 (mean / median / p99) | top-1 q8 "
          "| KLD llama.cpp (mean / median / p99) | top-1 llama.cpp | KLD exact from llama.cpp's file |")
    print("|---|---:|---:|---:|---:|---|---:|---|---:|---:|")
    for name, scored, ppl, q8, ll, back in rows:
        print(f"| {name} | {scored} | {ppl:.4f} | {q8['ppl']:.4f} | {ll['ppl']:.4f} | "
              f"{q8['kld']:.6f} / {q8['median']:.6f} / {q8['p99']:.6f} | {q8['top']:.2f}% | "
              f"{ll['kld']:.6f} / {ll['median']:.6f} / {ll['p99']:.6f} | {ll['top']:.2f}% | {back['kld']:.6f} |")


if __name__ == "__main__":
    main()
