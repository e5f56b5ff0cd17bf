#!/usr/bin/env python3
"""dllm_sweeps.py - the seed's sensitivity sweep of Fig. 13a (000, llada.cpp):
latency against the lookahead trigger of multi-block speculative decoding
(`tessera diffuse --window W --lookahead auto --lookahead-trigger N`), on
held-out prompts, every trigger once per prompt before the next prompt.

Fig. 13b (tokens below the stability threshold at block end against the
visible / stable thresholds) needs staged token stabilization, which tessera
does not have yet: it is printed as not built.

Columns per trigger: latency per request (prefill + denoising; median over
prompts), denoising forwards and positions evaluated (mean), positions the
lookahead added, drafts computed and accepted (sums), tokens per denoising
forward.

usage: dllm_sweeps.py TESSERA MODEL [--device amx,act=int8] [--prompts 5]
                      [--triggers 0,2,4,8,16,32] [--window 32] [--gen 64]
                      [--block 32] [--threshold 0.9] [-t 2] [--json OUT]
"""
import argparse
import json
import statistics
import sys

import dllm_common as C


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.add_args(ap, 5)
    ap.add_argument("--device", default="amx,act=int8", help="the window device ('' for the CPU)")
    ap.add_argument("--triggers", default="0,2,4,8,16,32")
    ap.add_argument("--window", type=int, default=32)
    ap.add_argument("--threshold", type=float, default=0.9)
    a = ap.parse_args()
    triggers = [int(x) for x in a.triggers.split(",")]
    prompts = C.T.held_out_prompts(a.prompts)
    dev = ["--prefill-device", a.device, "--prefill-min-tokens", "2"] if a.device else []
    res = {k: [] for k in triggers}
    for i, p in enumerate(prompts):
        for k in triggers:
            res[k].append(C.diffuse(a, p, a.threshold, ["--window", str(a.window), "--lookahead", "auto",
                                                        "--lookahead-trigger", str(k)] + dev, "dllm_sweeps"))
        print(f"dllm_sweeps: prompt {i + 1}/{len(prompts)} done", file=sys.stderr, flush=True)

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
    print("\nFig. 13b (tokens below the stability threshold vs the visible / stable thresholds): not built "
          "(staged token stabilization is not in tessera yet)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(model=a.model, device=a.device, prompts=len(prompts), window=a.window, rows=out), f,
                      indent=1)


if __name__ == "__main__":
    main()
