#!/usr/bin/env python3
"""dllm_somr.py - the swap-optimized memory runtime against plain staging
under shrinking device windows: the seed's Table 7 (000, llada.cpp: which
configurations complete) and Fig. 13c (staging time on the critical path vs
the device-visible budget), through `tessera diffuse --stats json`.

For each window (--windows, sizes as the engine option window= takes them)
and each placement (the device option place=):
  peruse   plain per-use staging: one slot, every layer uploaded just before
           its use, nothing ahead, every forward (the baseline);
  stream   every layer streamed through two slots, the next one uploaded
           while the current one computes (tessera's placement before SOMR
           whenever the weights did not fit);
  somr     what fits beside two slots stays resident, packed in consumption
           order into few buffers; the rest, spread through the run, streams
           through the two slots, which keep their layers across forwards;
one `tessera diffuse` per prompt (alternating placements within a prompt),
the same flags otherwise (--flags, default the prefix cache). Columns: the
layers resident / streamed, the median latency per request, host -> device
MiB per request, the device's stall on weight uploads per request (the
staging time left on the critical path), and whether it completed on the
device ("CPU fallback" with the reason when the window refused it).

--copy-mbps N adds the emulated device's staging bandwidth (loop's option
copy_mbps: copies take at least bytes / N MB/s); 0 leaves the memcpy alone.

usage: dllm_somr.py TESSERA MODEL [--device loop] [--windows 300M,200M,...]
                    [--prompts 3] [--gen 64] [--block 32] [-t 2]
                    [--copy-mbps 0] [--flags "..."] [--json OUT]
"""
import argparse
import json
import shlex
import statistics
import sys

import dllm_common as C

PLACES = ["peruse", "stream", "somr"]


def run(a, prompt, dev):
    return C.diffuse(a, prompt, a.threshold, ["--prefill-device", dev, "--prefill-min-tokens", "2"] +
                     shlex.split(a.flags), "dllm_somr")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.add_args(ap, 3)
    ap.add_argument("--device", default="loop")
    ap.add_argument("--windows", default="400M,200M,150M,100M,60M,20M")
    ap.add_argument("--threshold", type=float, default=0.9)
    ap.add_argument("--copy-mbps", type=int, default=0)
    ap.add_argument("--flags", default="", help="more tessera diffuse flags, the same for every run")
    a = ap.parse_args()
    prompts = C.T.held_out_prompts(a.prompts)
    wins = a.windows.split(",")
    extra = f",copy_mbps={a.copy_mbps}" if a.copy_mbps else ""
    res = {(w, p): [] for w in wins for p in PLACES}
    for i, pr in enumerate(prompts):
        for w in wins:
            for p in PLACES:
                res[(w, p)].append(run(a, pr, f"{a.device},window={w},place={p}{extra}"))
        print(f"dllm_somr: prompt {i + 1}/{len(prompts)} done", file=sys.stderr, flush=True)
    print(f"\n{a.model}, {len(prompts)} prompts, gen {a.gen}, block {a.block}, -t {a.threads}, device {a.device}"
          f"{extra}, flags '{a.flags}'")
    print("| window | place | resident / streamed | ms / request | staged MiB | stall ms | on the device |")
    print("|---|---|---:|---:|---:|---:|---|")
    out = []
    for w in wins:
        for p in PLACES:
            ss = res[(w, p)]
            ok = all(s["dev_forwards"] > 0 for s in ss)
            ms = statistics.median(s["prefill_ms"] + s["denoise_ms"] for s in ss)
            up = statistics.mean(s["dev_upload_mib"] for s in ss)
            stall = statistics.mean(s["dev_stall_ms"] for s in ss)
            lay = f"{ss[0]['dev_resident_layers']} / {ss[0]['dev_streamed_layers']}" if ok else ""
            why = "completed" if ok else "CPU fallback: " + (ss[0]["fallback"] or "no device forwards")
            print(f"| {w} | {p} | {lay} | {ms:.0f} | {up:.0f} | {stall:.0f} | {why} |")
            out.append(dict(window=w, place=p, completed=ok, ms_median=ms, upload_mib=up, stall_ms=stall,
                            resident=ss[0]["dev_resident_layers"], streamed=ss[0]["dev_streamed_layers"],
                            fallback=ss[0]["fallback"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(model=a.model, device=a.device, copy_mbps=a.copy_mbps, prompts=len(prompts), gen=a.gen,
                           block=a.block, flags=a.flags, rows=out), f, indent=1)


if __name__ == "__main__":
    main()
