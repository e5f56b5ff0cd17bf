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

import dllm_common as C


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.add_args(ap, 20)
    ap.add_argument("--thresholds", type=float, nargs="+", default=[0.9])
    ap.add_argument("--decoder-args", default="--no-cache")
    a = ap.parse_args()

    prompts = C.T.held_out_prompts(a.prompts)
    rows = []
    print(f"{'threshold':>9s} {'prompts':>7s} {'forwards':>8s} {'tokens/forward':>14s}  histogram (k: forwards committing k)")
    for thr in a.thresholds:
        hist, fw, tk = {}, 0, 0
        for p in prompts:
            st = C.diffuse(a, p, thr, a.decoder_args.split(), "dllm_commits")
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
