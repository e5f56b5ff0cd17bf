#!/usr/bin/env python3
"""dllm_commits.py - the commit histogram of a diffusion LLM on held-out text,
as `tessera diffuse` measures it (its --stats json counters).

Prompts: N windows of 64 tokens spread evenly over the held-out last 10% of
../shared/data/tinyshakespeare.txt (SmolLM2's tokenizer, as
tools/train_tiny_dllm.py splits it), decoded to text and passed with -p.
Each prompt generates --gen tokens in blocks of --block with threshold
commit at each --threshold (default: --no-cache, full recompute per forward,
which is what the issue's figure is defined on; --decoder-args to change).

usage: dllm_commits.py TESSERA MODEL [--prompts N] [--thresholds 0.5 0.9 ...]
                       [--gen 64] [--block 32] [--decoder-args "..."] [--json OUT]
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import train_tiny_dllm as T  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tessera")
    ap.add_argument("model")
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--thresholds", type=float, nargs="+", default=[0.9])
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--block", type=int, default=32)
    ap.add_argument("--decoder-args", default="--no-cache")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()

    prompts = T.held_out_prompts(a.prompts)
    rows = []
    print(f"{'threshold':>9s} {'prompts':>7s} {'forwards':>8s} {'tokens/forward':>14s}  histogram (k: forwards committing k)")
    for thr in a.thresholds:
        hist, fw, tk = {}, 0, 0
        for p in prompts:
            cmd = [a.tessera, "diffuse", "-m", a.model, "-p", p, "-n", str(a.gen), "--block", str(a.block),
                   "--threshold", str(thr), "--no-early-stop", "--no-display-prompt", "--stats", "json",
                   "-t", str(a.threads)] + a.decoder_args.split()
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"dllm_commits: tessera failed: {r.stderr.strip()[-500:]}")
            st = json.loads([ln for ln in r.stderr.splitlines() if ln.startswith("{")][-1])
            h = st["commit_per_forward_hist"]
            for k, c in enumerate(h):
                if c:
                    hist[k] = hist.get(k, 0) + c
            fw += st["denoise_forwards"]
            tk += st["tokens_committed"]
        rows.append(dict(threshold=thr, prompts=len(prompts), forwards=fw, tokens=tk,
                         tokens_per_forward=tk / fw, histogram=hist))
        print(f"{thr:9.2f} {len(prompts):7d} {fw:8d} {tk / fw:14.3f}  " +
              " ".join(f"{k}:{c}" for k, c in sorted(hist.items())))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
