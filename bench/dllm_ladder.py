#!/usr/bin/env python3
"""dllm_ladder.py - the seed's Table 6 (000, llada.cpp) as one command: each
row adds one component to block-wise diffusion decoding, run through
`tessera diffuse --stats json` on the same held-out prompts.

Rows (flag sets; a row whose component tessera does not have yet is printed
as "not built", never timed):
  CPU vanilla        block decoder, --no-cache (every forward recomputes
                     prompt + finished blocks + block): the quality reference
  + prefix cache     the prompt's and finished blocks' K/V reused (CPU)
  device             --no-cache with the window forwards on --device
  + cache            the prefix cache on the device
  + SOMR             the swap-optimized memory runtime (place=somr: what
                     fits the device window stays resident, packed; the rest
                     streams through two slots ahead of use and across
                     forwards). With --device-window SIZE the device rows
                     before it run in that window with plain per-use staging
                     (place=peruse: every layer uploaded just before its
                     use), the rows from it on with place=somr; without it
                     the device rows keep the device's default placement
  + MBSD             --window BLOCK --lookahead auto (the device's width ->
                     latency table, timed at start by tessera)
  + STS              --sts (visible 0.7, stable 0.9: the seed's defaults)
  + SLS              --skip-logits
  + SCR              --scr (up to 8 visible prefix positions recomputed on
                     the CPU per step, beside the device's forward)

Prompts: --prompts windows of 64 tokens spread over the held-out last 10% of
tinyshakespeare (as tools/train_tiny_dllm.py splits it). Every prompt runs
every row once before the next prompt (alternating, for a noisy machine).
Columns: latency per request (prefill + denoising, median over prompts) and
its speed-up over CPU vanilla, denoising forwards and positions evaluated
(mean per prompt), tokens committed per denoising forward, the share of
window forwards that ran on the device, and agreement: the fraction of
generated tokens equal to CPU vanilla's at the same position, and quality:
the trained model's own pseudo-log-likelihood per token of what the row
generated (dllm_common.Scorer: log p(x_i | everything else, x_i masked),
over --score positions per prompt, the same positions for every row;
higher is better; 0 turns it off; it needs the committed delta of
tools/train_tiny_dllm.py, so only the trained model is scored).

Columns also: the MiB staged to the device per request (weights and K/V
rows uploaded) and the device's stall on weight uploads (ms per request).

usage: dllm_ladder.py TESSERA MODEL [--device amx,act=int8] [--prompts 50]
                      [--gen 64] [--block 32] [--threshold 0.9] [-t 2]
                      [--device-window 96M] [--chunk 64] [--score 16]
                      [--json OUT]
"""
import argparse
import json
import random
import statistics
import sys

import dllm_common as C

# counters summed over the prompts into --json
SUMMED = ["draft_accepted", "logits_skipped", "revisions", "unstable_at_block_end", "visible_at_end", "sts_forced",
          "scr_refreshed", "scr_revisions", "scr_stabilized", "scr_ms", "scr_overlap_ms", "dev_upload_mib", "dev_stall_ms"]


def rows_for(dev, block, window=None, chunk=None):
    plain = dev + (f",window={window},place=peruse" if window else "")
    somr = dev + (f",window={window}" if window else "") + ",place=somr"
    width = ["--chunk", str(chunk)] if chunk else []
    d0 = ["--prefill-device", plain, "--prefill-min-tokens", "2"] + width
    d = ["--prefill-device", somr, "--prefill-min-tokens", "2"] + width
    mbsd = ["--window", str(block), "--lookahead", "auto"]
    return [
        ("CPU vanilla", ["--no-cache"]),
        ("+ prefix cache", []),
        ("device", ["--no-cache"] + d0),
        ("+ cache", d0),
        ("+ SOMR", d),
        ("+ MBSD", d + mbsd),
        ("+ STS", d + mbsd + ["--sts"]),
        ("+ SLS", d + mbsd + ["--sts", "--skip-logits"]),
        ("+ SCR", d + mbsd + ["--sts", "--skip-logits", "--scr"]),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.add_args(ap, 50)
    ap.add_argument("--device", default="amx,act=int8")
    ap.add_argument("--threshold", type=float, default=0.9)
    ap.add_argument("--device-window", help="the device's memory window (e.g. 96M): the device rows before SOMR "
                                            "stage per use within it, SOMR's rows place within it")
    ap.add_argument("--chunk", type=int, help="the device rows' graph width (tessera diffuse --chunk): on a device "
                                              "that requires widths (loop:npu, amx) a block window runs padded "
                                              "to it, so 64 suits block 32 (the default 256 pads 33 rows to 256)")
    ap.add_argument("--score", type=int, default=16, help="positions scored per prompt (0: no quality column)")
    a = ap.parse_args()

    prompts = C.T.held_out_prompts(a.prompts)
    rows = rows_for(a.device, a.block, a.device_window, a.chunk)
    res = {name: [] for name, flags in rows if flags is not None}
    for i, p in enumerate(prompts):
        for name, flags in rows:
            if flags is not None:
                res[name].append(C.diffuse(a, p, a.threshold, flags, "dllm_ladder"))
        print(f"dllm_ladder: prompt {i + 1}/{len(prompts)} done", file=sys.stderr, flush=True)

    # quality: after every timed run (the scorer's threads would disturb them)
    qual = {name: [] for name in res}
    if a.score > 0:
        sc = C.Scorer(a.threads)
        for i, p in enumerate(prompts):
            ids = C.prompt_ids(a, p)
            n = min(len(res[name][i]["tokens"]) for name in res)
            pos = sorted(random.Random(i).sample(range(n), min(a.score, n)))
            for name in res:
                st = res[name][i]
                if st["n_prompt_tokens"] != len(ids):
                    sys.exit(f"dllm_ladder: prompt {i}: tessera diffuse saw {st['n_prompt_tokens']} prompt tokens, "
                             f"tokenize {len(ids)}")
                qual[name].append(sc.pll(ids, st["tokens"], pos))
            print(f"dllm_ladder: scored prompt {i + 1}/{len(prompts)}", file=sys.stderr, flush=True)

    ref = res["CPU vanilla"]
    base_ms = statistics.median(s["prefill_ms"] + s["denoise_ms"] for s in ref)
    print(f"\n{a.model}, {len(prompts)} prompts, gen {a.gen}, block {a.block}, threshold {a.threshold}, "
          f"-t {a.threads}, device {a.device}" + (f", window {a.device_window}" if a.device_window else "")
          + (f", chunk {a.chunk}" if a.chunk else ""))
    print(f"| row | ms / request | speed-up | denoise fwd | positions | tok / fwd | on device | staged MiB | "
          f"stall ms | agreement | log-lik / tok |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    out = []
    for name, flags in rows:
        if flags is None:
            print(f"| {name} | not built | | | | | | | | | |")
            out.append(dict(row=name, built=False))
            continue
        ss = res[name]
        ms = statistics.median(s["prefill_ms"] + s["denoise_ms"] for s in ss)
        fw = sum(s["denoise_forwards"] for s in ss) / len(ss)
        ev = sum(s["tokens_evaluated"] for s in ss) / len(ss)
        tpf = sum(s["tokens_committed"] for s in ss) / sum(s["denoise_forwards"] for s in ss)
        dev = sum(s["dev_forwards"] for s in ss) / max(1, sum(s["forwards"] for s in ss))
        same = sum(x == y for s, r in zip(ss, ref) for x, y in zip(s["tokens"], r["tokens"]))
        tot = sum(len(r["tokens"]) for r in ref)
        agree = same / tot if tot else float("nan")
        q = statistics.mean(qual[name]) if qual[name] else None
        up = sum(s.get("dev_upload_mib", 0) for s in ss) / len(ss)
        stall = sum(s.get("dev_stall_ms", 0) for s in ss) / len(ss)
        print(f"| {name} | {ms:.0f} | {base_ms / ms:.2f}x | {fw:.1f} | {ev:.0f} | {tpf:.3f} | {100 * dev:.0f}% | "
              f"{up:.0f} | {stall:.0f} | {100 * agree:.1f}% | {'%.3f' % q if q is not None else ''} |")
        row = dict(row=name, built=True, flags=flags, ms_median=ms, speedup=base_ms / ms, denoise_forwards=fw,
                   positions=ev, tokens_per_forward=tpf, device_share=dev, agreement=agree, loglik_per_token=q)
        row.update({k: sum(s.get(k, 0) for s in ss) for k in SUMMED})
        out.append(row)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(model=a.model, device=a.device, device_window=a.device_window, chunk=a.chunk, prompts=len(prompts), gen=a.gen, block=a.block,
                           threshold=a.threshold, rows=out), f, indent=1)


if __name__ == "__main__":
    main()
