#!/usr/bin/env python3
"""video_dit.py - time per block of the Wan2.1 DiT at several token counts,
engines and weight types, from `tessera video --stats json` (one denoising
step, no guidance: one forward = n_layer block runs), repeated and
alternated; prints a markdown table with the achieved GFLOP/s and its share
of the machine's int8 dot-product peak (bench_int8_peak; the CPU matmuls run
16-bit activations as two int8 planes, so their ceiling is half of it).

Token counts (Wan2.1: VAE stride 4x8x8, patch 1x2x2):
  768   = 9 frames of 256x256   (3 latent frames of 16x16 patches)
  1560  = 1 frame of 480x832    (30x52 patches)
  7800  = 17 frames of 480x832  (5 latent frames)
Models: Wan2.1-1.3B-shaped random weights (tools/gen_wan_models.py shaped;
generated, never committed). Per-block time does not depend on the block
count, so a file with fewer blocks (--layers 4) keeps the large sizes short.

usage: video_dit.py --tessera build/tessera --model Q8.gguf [--model Q4.gguf]
           [--sizes 768,1560] [--engines 'cpu;amx,act=int8'] [-t 2] [-r 3] [--text T.npy] [--peak build/bench/bench_int8_peak]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

SIZES = {768: (9, 256, 256), 1560: (1, 480, 832), 7800: (17, 480, 832), 32760: (81, 480, 832)}


def run(tessera, model, engine, tokens, threads, text):
    frames, h, w = SIZES[tokens]
    cmd = [tessera, "video", "-m", model, "--text-embeddings", text, "--frames", str(frames), "--size", f"{h}x{w}",
           "--steps", "1", "--stats", "json", "-q", "-t", str(threads), "--engine", engine]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr}")
    line = [l for l in r.stderr.splitlines() if l.startswith("{")][-1]
    return json.loads(line)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessera", default="build/tessera")
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--sizes", default="768,1560")
    ap.add_argument("--engines", default="cpu",
                    help="engines separated by ';' (or by ',' when none takes options), e.g. 'cpu;amx;amx,act=int8'")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--repeats", type=int, default=3)
    ap.add_argument("--text", help="text states .npy [512][4096] (default: random, generated)")
    ap.add_argument("--peak", default="build/bench/bench_int8_peak")
    a = ap.parse_args()
    text = a.text
    if not text:
        import numpy as np
        text = os.path.join(tempfile.mkdtemp(), "text.npy")
        np.save(text, (np.random.default_rng(0).standard_normal((512, 4096)) * 0.3).astype(np.float32))
    peak = None
    if os.path.exists(a.peak):
        out = subprocess.run([a.peak], capture_output=True, text=True).stdout
        for l in out.splitlines():
            if l.startswith("int8 vpdpbusd zmm") or (peak is None and l.startswith("int8")):
                peak = float(l.split("median")[1].split()[0])
        print(f"int8 peak ({a.peak}): {peak} GOP/s")
    sizes = [int(s) for s in a.sizes.split(",")]
    engines = a.engines.split(";") if (";" in a.engines or "=" in a.engines) else a.engines.split(",")
    configs = [(m, e, s) for s in sizes for m in a.model for e in engines]
    res = {c: [] for c in configs}
    for rep in range(a.repeats):
        for c in configs:  # alternated: every configuration once per round
            res[c].append(run(a.tessera, c[0], c[1], c[2], a.threads, text))
    print(f"\n| tokens M | model | engine | ms / block (median of {a.repeats}) | GFLOP/s | share of int8 peak / 2 |"
          " text K/V ms | embed + head ms | peak RSS GB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for c in configs:
        ms = statistics.median(r["ms_per_block"] for r in res[c])
        gf = statistics.median(r["block_gflops"] for r in res[c])
        share = f"{100 * gf / (peak / 2):.0f}%" if peak else "-"
        r0 = res[c][0]
        print(f"| {c[2]} | {os.path.basename(c[0])} | {c[1]} | {ms:.1f} | {gf:.1f} | {share} | "
              f"{statistics.median(r['text_ms'] for r in res[c]):.0f} | "
              f"{statistics.median(r['embed_ms'] + r['head_ms'] for r in res[c]):.1f} | "
              f"{max(r['peak_rss_bytes'] for r in res[c]) / 2**30:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
