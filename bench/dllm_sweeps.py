#!/usr/bin/env python3
"""dllm_sweeps.py - the seed's sensitivity sweeps (000, llada.cpp, Fig. 13a
and 13b) on held-out prompts, every setting once per prompt before the next
prompt (alternating, for a noisy machine).

Fig. 13a: latency against the lookahead trigger of multi-block speculative
decoding (`tessera diffuse --window W --lookahead auto --lookahead-trigger
N`). Columns per trigger: latency per request (prefill + denoising; median
over prompts), denoising forwards and positions evaluated (mean), positions
the lookahead added, drafts computed and accepted (sums), tokens per
denoising forward.

Fig. 13b: tokens still below the stability threshold when their block
finishes, against the visible / stable thresholds of staged token
stabilization (`--visible V --stable S`, block decoder, prefix cache, no
window). Columns per (V, S): positions still visible at their block's end
(mean per block), revisions (sum), denoising forwards (mean), tokens per
denoising forward, latency (median).

usage: dllm_sweeps.py TESSERA MODEL [--fig 13a,13b] [--device amx,act=int8]
                      [--prompts 5] [--triggers 0,2,4,8,16,32] [--window 32]
                      [--visible 0.5,0.6,0.7,0.8,0.9] [--stable 0.8,0.9,0.95]
                      [--gen 64] [--block 32] [--threshold 0.9] [-t 2] [--json OUT]
"""
import argparse
import json
import statistics
import sys

import dllm_common as C


def fig13a(a, prompts, dev):
    triggers = [int(x) for x in a.triggers.split(",")]
    res = {k: [] for k in triggers}
    for i, p in enumerate(prompts):
        for k in triggers:
            res[k].append(C.diffuse(a, p, a.threshold, ["--window", str(a.window), "--lookahead", "auto",
                                                        "--lookahead-trigger", str(k)] + dev, "dllm_sweeps"))
        print(f"dllm_sweeps 13a: prompt {i + 1}/{len(prompts)} done", file=sys.stderr, flush=True)
    print(f"\nFig. 13a: {a.model}, {len(prompts)} prompts, gen {a.gen}, block {a.block}, window {a.window}, "
          f"threshold {a.threshold}, -t {a.threads}, device {a.device or 'cpu'}")
    print("| trigger | ms / request | denoise fwd | positions | lookahead positions | drafts | accepted | tok / fwd |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    out = []
    for k in triggers:
        ss = res[k]
        ms = statistics.median(s["prefill_ms"] + s["denoise_ms"] for s in ss)
        fw = sum(s["denoise_forwards"] for s in ss) / len(ss)
        ev = sum(s["tokens_evaluated"] for s in ss) / len(ss)
        la = sum(s["lookahead_tokens"] for s in ss)
        de = sum(s["draft_evals"] for s in ss)
        ac = sum(s["draft_accepted"] for s in ss)
        tpf = sum(s["tokens_committed"] for s in ss) / sum(s["denoise_forwards"] for s in ss)
        print(f"| {k} | {ms:.0f} | {fw:.1f} | {ev:.0f} | {la} | {de} | {ac} | {tpf:.3f} |")
        out.append(dict(trigger=k, ms_median=ms, denoise_forwards=fw, positions=ev, lookahead_tokens=la,
                        draft_evals=de, draft_accepted=ac, tokens_per_forward=tpf,
                        latency_table=ss[0].get("latency_table")))
    return out


def fig13b(a, prompts, dev):
    grid = [(v, s) for s in (float(x) for x in a.stable.split(","))
            for v in (float(x) for x in a.visible.split(",")) if v <= s]
    res = {g: [] for g in grid}
    for i, p in enumerate(prompts):
        for v, s in grid:
            res[(v, s)].append(C.diffuse(a, p, a.threshold, ["--visible", str(v), "--stable", str(s)] + dev,
                                         "dllm_sweeps"))
        print(f"dllm_sweeps 13b: prompt {i + 1}/{len(prompts)} done", file=sys.stderr, flush=True)
    print(f"\nFig. 13b: {a.model}, {len(prompts)} prompts, gen {a.gen}, block {a.block}, -t {a.threads}, "
          f"device {a.device or 'cpu'}")
    print("| visible | stable | still visible at block end (per block) | revisions | denoise fwd | tok / fwd | "
          "ms / request |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    out = []
    for v, s in grid:
        ss = res[(v, s)]
        blocks = sum(x["n_blocks"] for x in ss)
        un = sum(x["unstable_at_block_end"] for x in ss) / max(1, blocks)
        rv = sum(x["revisions"] for x in ss)
        fw = sum(x["denoise_forwards"] for x in ss) / len(ss)
        tpf = sum(x["tokens_committed"] for x in ss) / sum(x["denoise_forwards"] for x in ss)
        ms = statistics.median(x["prefill_ms"] + x["denoise_ms"] for x in ss)
        print(f"| {v} | {s} | {un:.2f} | {rv} | {fw:.1f} | {tpf:.3f} | {ms:.0f} |")
        out.append(dict(visible=v, stable=s, unstable_per_block=un, revisions=rv, denoise_forwards=fw,
                        tokens_per_forward=tpf, ms_median=ms))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.add_args(ap, 5)
    ap.add_argument("--fig", default="13a,13b")
    ap.add_argument("--device", default="amx,act=int8", help="the window device ('' for the CPU)")
    ap.add_argument("--triggers", default="0,2,4,8,16,32")
    ap.add_argument("--window", type=int, default=32)
    ap.add_argument("--threshold", type=float, default=0.9)
    ap.add_argument("--visible", default="0.5,0.6,0.7,0.8,0.9")
    ap.add_argument("--stable", default="0.8,0.9,0.95")
    a = ap.parse_args()
    figs = a.fig.split(",")
    prompts = C.T.held_out_prompts(a.prompts)
    dev = ["--prefill-device", a.device, "--prefill-min-tokens", "2"] if a.device else []
    out = dict(model=a.model, device=a.device, prompts=len(prompts), window=a.window)
    if "13a" in figs:
        out["fig13a"] = fig13a(a, prompts, dev)
    if "13b" in figs:
        out["fig13b"] = fig13b(a, prompts, dev)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
