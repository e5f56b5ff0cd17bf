#!/usr/bin/env python3
"""diffusion_bench.py - speed of the diffusion decoders (docs/DIFFUSION.md,
results go to docs/PERFORMANCE.md). Run it on a quiet machine only.

Default: the LLaDA-8B-shaped random-weight Q4_0 file
(tools/gen_bench_models.py --only llada-8b-Q4_0.gguf -> models/bench/), 2
threads, a ~100-token prompt, 128 generated tokens, block 32:

  1. MEASURED  latency of one denoising forward (a window of W masks after
     the prompt, all W logits rows) at W = 32, 64, 128 (diffusion_tool time);
  2. MEASURED  the whole generation with `tessera diffuse --stats json` for
     vanilla (--steps = gen, one full-sequence forward per token), block
     (prefix cache) and block + dual cache: wall time and forward counts.
     Random weights give flat confidences, so the block decoder never reaches
     the threshold and commits one token per forward (its worst case);
  3. PREDICTED forward counts and positions evaluated for a realistic commit
     profile (diffusion_tool predict: the scripted denoiser with a synthetic
     confidence profile of about 1.6 tokens per forward at threshold 0.9),
     and an ESTIMATED time = those counts x the measured forward latencies.
Every number in the output says which of the three it is.

The vanilla run is long on the 8B shape (128 forwards of ~228 positions);
--vanilla-steps lowers its step count (more tokens per step).

usage: diffusion_bench.py [--build DIR] [--model FILE] [--threads 2] [--gen 128]
                          [--block 32] [--prompt-tokens 100] [--widths 32,64,128]
                          [--repeat 3] [--vanilla-steps N] [--skip vanilla,...]
                          [--json OUT.json]
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# ~100 tokens of plain English (the exact count is printed: tokenizers differ)
PROMPT_WORDS = ("The history of the lighthouse begins in the ancient world, where fires were lit on hills and "
                "towers to guide ships along dangerous coasts. Over the centuries the towers grew taller, the "
                "fires gave way to oil lamps and then to electric lights, and lenses made the beams visible far "
                "out at sea. Today most lighthouses run without keepers, yet sailors still read their patterns "
                "of flashes to know exactly where they are. Write a short story about a keeper who stayed on "
                "after the last ship had passed")


def run_json_lines(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("error: %s failed (%d): %s" % (" ".join(cmd), r.returncode, r.stderr.strip()))
    return [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "bench", "llada-8b-Q4_0.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--block", type=int, default=32)
    ap.add_argument("--threshold", type=float, default=0.9)
    ap.add_argument("--prompt-tokens", type=int, default=100, help="prompt length for the forward timings and "
                    "the prediction (the generation uses the built-in text, about this long)")
    ap.add_argument("--prompt-words", type=int, default=0, help="use only the first N words of the prompt text")
    ap.add_argument("--widths", default="32,64,128")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--vanilla-steps", type=int, default=0, help="vanilla steps (default: --gen)")
    ap.add_argument("--skip", default="", help="comma list of: forward, vanilla, block, dual, predict")
    ap.add_argument("--json", help="also write all results here")
    a = ap.parse_args()
    tessera = os.path.join(a.build, "tessera")
    tool = os.path.join(a.build, "tests", "diffusion_tool")
    for p in (tessera, tool, a.model):
        if not os.path.exists(p):
            sys.exit("error: %s is missing (build with ninja -C %s tessera diffusion_tool; the model comes from "
                     "tools/gen_bench_models.py --only llada-8b-Q4_0.gguf)" % (p, a.build))
    skip = set(s for s in a.skip.split(",") if s)
    prompt = PROMPT_WORDS if a.prompt_words <= 0 else " ".join(PROMPT_WORDS.split()[:a.prompt_words])
    out = {"model": a.model, "threads": a.threads, "gen": a.gen, "block": a.block, "threshold": a.threshold}

    # 1. one forward per width
    lat = {}
    if "forward" not in skip:
        rows = run_json_lines([tool, "time", a.model, "--widths", a.widths, "--prompt", str(a.prompt_tokens),
                               "--repeat", str(a.repeat), "-t", str(a.threads)])
        out["forward_latency"] = rows
        print("MEASURED one denoising forward after a %d-token prefix, %d threads:" % (a.prompt_tokens, a.threads))
        for r in rows:
            if r["what"] == "forward":
                lat[r["width"]] = r["median_ms"]
                print("  width %4d: median %10.1f ms  (min %.1f, %d runs)" % (r["width"], r["median_ms"],
                                                                            r["min_ms"], r["repeat"]))
            else:
                print("  prompt window of %d tokens: %.1f ms (first call, includes page-in)" % (r["tokens"],
                                                                                                  r["ms"]))

    # 2. whole generations
    runs = []
    for label, flags in (("vanilla", ["--decoder", "vanilla", "--steps", str(a.vanilla_steps or a.gen)]),
                         ("block", []), ("dual", ["--dual-cache"])):
        if label in skip:
            continue
        cmd = [tessera, "diffuse", "-m", a.model, "-p", prompt, "--gen", str(a.gen), "--block", str(a.block),
               "--threshold", str(a.threshold), "-t", str(a.threads), "--stats", "json", "--no-display-prompt"] + flags
        t0 = time.time()
        r = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.time() - t0
        if r.returncode != 0:
            sys.exit("error: %s: %s" % (" ".join(cmd), r.stderr.strip()))
        st = json.loads(r.stderr.strip().splitlines()[-1])
        st["label"] = label
        st["wall_s"] = wall
        runs.append(st)
    if runs:
        out["generation"] = runs
        print("MEASURED whole generation (%d tokens, block %d, random weights: flat confidences):" % (a.gen,
                                                                                                      a.block))
        print("  %-8s %7s %8s %9s %11s %11s %9s %8s" % ("decoder", "prompt", "forwards", "evaluated", "prefill_ms",
                                                       "denoise_ms", "tok/s", "stop"))
        for st in runs:
            tot = st["prefill_ms"] + st["denoise_ms"]
            print("  %-8s %7d %8d %9d %11.1f %11.1f %9.2f %8s" % (
                st["label"], st["n_prompt_tokens"], st["forwards"], st["tokens_evaluated"], st["prefill_ms"],
                st["denoise_ms"], st["n_gen_tokens"] * 1000.0 / tot if tot > 0 else 0.0, st["stop_reason"]))

    # 3. predicted counts for a realistic commit profile, and an estimate
    if "predict" not in skip:
        pred = run_json_lines([tool, "predict", "--gen", str(a.gen), "--block", str(a.block), "--prompt",
                               str(a.prompt_tokens), "--threshold", str(a.threshold)] +
                              (["--steps", str(a.vanilla_steps)] if a.vanilla_steps else []))
        out["predicted"] = pred
        print("PREDICTED by the scripted denoiser (synthetic commit profile, not a model):")
        print("  %-15s %8s %9s %16s" % ("decoder", "forwards", "evaluated", "tokens/forward"))
        for p in pred:
            print("  %-15s %8d %9d %16.2f" % (p["decoder"], p["forwards"], p["tokens_evaluated"],
                                             p["tokens_committed"] / max(p["denoise_forwards"], 1)))
        if lat:
            # ESTIMATE: block forwards at width `block` (dual's first step per
            # block at the suffix width), vanilla at prompt + gen
            widths = sorted(lat)

            def ms_at(w):  # linear inter/extrapolation over the measured widths
                if w in lat:
                    return lat[w]
                lo = max([x for x in widths if x <= w] or [widths[0]])
                hi = min([x for x in widths if x >= w] or [widths[-1]])
                if lo == hi:
                    return lat[lo] * w / lo
                return lat[lo] + (lat[hi] - lat[lo]) * (w - lo) / (hi - lo)

            est = {}
            for p in pred:
                n = p["forwards"]
                avg_w = p["tokens_evaluated"] / max(n, 1)
                est[p["decoder"]] = n * ms_at(avg_w)
            out["estimated_ms"] = est
            print("ESTIMATED time = predicted forwards x measured latency at their mean width (not measured):")
            for k, v in est.items():
                print("  %-15s %10.0f ms  (%.2f tok/s)" % (k, v, a.gen * 1000.0 / v if v > 0 else 0.0))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
        print("wrote", a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
