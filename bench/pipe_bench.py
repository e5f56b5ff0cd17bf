#!/usr/bin/env python3
"""pipe_bench.py - seed 002's two-engine stream pipeline (docs/PIPE.md) on a
video model (`tessera video --pipe A --engine B --stats json`), a stream of
prompts (--prompts FILE: `tessera pipe`, prefill) or of diffusion-LLM
decodes (--prompts FILE --diffuse), one run per table, printing

  1. the machine (CPU model, AMX or not) and the setup: block executions per
     video, tokens per block, weights in the file, packed bytes B maps from
     A, PSS;
  2. the rates: seconds per block on A and on B and of the tail (the VAE)
     on B, each engine alone (solo) and both at once (co-run), and the
     co-run slowdown of each (the seed's Table 1);
  3. the cut: Eq. 5's crossing and k* from co-run rates, the solo-rate cut
     and the best step boundary (the seed's ablations);
  4. predicted (Eq. 4) vs measured period for every cut asked (--cuts sweep:
     all of 0 .. B, the seed's Table 5 shape), with each cut's latency;
  5. with --baselines: whole videos on A alone, on B alone, and on both side
     by side (data parallelism), and the stream throughput of the best cut
     against the best single engine and against data parallelism;
  6. --png FILE: period vs cut (predicted line, measured points, the cuts
     marked, the baselines as horizontal lines; needs matplotlib).

usage: bench/pipe_bench.py -m DIT.gguf --text-embeddings T.npy --a ENGINE --b ENGINE
         [--vae VAE.gguf] [--frames 9] [--size 256x256] [--timesteps 1000,992,982,949,905,810]
         [--videos 3] [--cuts sweep|auto|K1,K2,...] [--baselines] [--probe N]
         [--json OUT.json] [--png OUT.png] [--tessera build/tessera]
       bench/pipe_bench.py -m MODEL.gguf --prompts TEXT --a ENGINE --b ENGINE [--prompt-tokens 512]
         [--chunk 256] [--diffuse [--gen 64] [--steps 16] [--block 32]] [--videos N] ...
       bench/pipe_bench.py --replot OUT.json --png OUT.png

Never run it while something else builds: both engines are busy at once
(one core each on a 2-core machine) and the figures are wall-clock.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def cpu_model():
    model, amx = "?", False
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name") and model == "?":
            model = line.split(":", 1)[1].strip()
        if line.startswith("flags"):
            amx = "amx_tile" in line.split()
    return model, amx


def run(a):
    if a.prompts:
        cmd = [a.tessera, "pipe", "-m", a.model, "-f", a.prompts, "--prompt-tokens", str(a.prompt_tokens), "--chunk",
               str(a.chunk), "--pipe", a.a, "--engine", a.b, "--requests", str(a.videos), "--cut", a.cuts, "--stats",
               "json", "-q"]
        if a.diffuse:
            cmd += ["--diffuse", "--gen", str(a.gen), "--steps", str(a.steps), "--block", str(a.block)]
    else:
        cmd = [a.tessera, "video", "-m", a.model, "--text-embeddings", a.text_embeddings, "--frames", str(a.frames),
           "--size", a.size, "--timesteps", a.timesteps, "--pipe", a.a, "--engine", a.b, "--videos", str(a.videos),
           "--cut", a.cuts, "--stats", "json", "-q"]
    if a.vae and not a.prompts:
        cmd += ["--vae", a.vae]
    if a.baselines:
        cmd.append("--baselines")
    if a.probe:
        cmd += ["--probe", str(a.probe)]
    if a.own_copies:
        cmd.append("--own-copies")
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"tessera failed ({p.returncode}):\n{p.stderr[-3000:]}")
    objs = [l for l in p.stderr.splitlines() if l.startswith("{")]
    rep = json.loads(objs[-1])
    rep["command"] = " ".join(cmd)
    return rep


def report(rep):
    model, amx = rep.get("cpu", cpu_model())
    B, L = rep["n_blocks"], rep["step_blocks"]
    print(f"\nmachine: {model}, AMX {'yes' if amx else 'no'}")
    unit = rep.get("unit", "video")
    print(f"A = {rep['engine_a']}, B = {rep['engine_b']}: {B} block executions per {unit} ({B // L} steps x {L} "
          f"blocks), {rep['tokens']} tokens per block")
    mib = 1 << 20
    print(f"weights: {rep['weight_bytes'] / mib:.1f} MiB in the file, {rep['shared_bytes'] / mib:.1f} MiB packed by A "
          f"and mapped by B; PSS {rep['pss_bytes'] / mib:.1f} MiB")
    s, c = rep["solo"], rep["corun"]
    print("\n| rates (s) | block on A | block on B | tail on B |\n|---|---|---|---|")
    print(f"| solo | {s['block_a_s']:.4f} | {s['block_b_s']:.4f} | {s['tail_s']:.3f} |")
    print(f"| co-run | {c['block_a_s']:.4f} | {c['block_b_s']:.4f} | {c['tail_s']:.3f} |")

    def slow(x, y):
        return f"{y / x:.3f}x" if x > 0 else "-"

    print(f"| co-run / solo | {slow(s['block_a_s'], c['block_a_s'])} | {slow(s['block_b_s'], c['block_b_s'])} | "
          f"{slow(s['tail_s'], c['tail_s'])} |")
    print(f"\ncut: crossing {rep['crossing']:.2f} -> k* = {rep['cut_auto']} (co-run rates); solo-rate cut "
          f"{rep['cut_solo']}; best step boundary {rep['cut_step']}")
    marks = {}
    for k, t in ((rep["cut_step"], "step"), (rep["cut_solo"], "solo"), (rep["cut_auto"], "k*")):
        marks.setdefault(k, []).append(t)
    print("\n| cut | predicted period s | measured period s | measured / predicted | latency s | |\n|---|---|---|---|---|---|")
    for r in rep["runs"]:
        print(f"| {r['cut']} | {r['predicted_period_s']:.3f} | {r['period_s']:.3f} | "
              f"{r['period_s'] / r['predicted_period_s']:.3f} | {r['latency_s']:.2f} | "
              f"{', '.join(marks.get(r['cut'], []))} |")
    if rep.get("whole"):
        print(f"\n| whole {rep.get('unit', 'video')}s | period s | latency s |\n|---|---|---|")
        for w in rep["whole"]:
            print(f"| {w['name']} | {w['result']['period_s']:.3f} | {w['result']['latency_s']:.2f} |")
        best_single = min(w["result"]["period_s"] for w in rep["whole"] if w["stages"] < 3)
        dp = [w["result"]["period_s"] for w in rep["whole"] if w["stages"] == 3][0]
        best = min(rep["runs"], key=lambda r: r["period_s"]) if rep["runs"] else None
        kstar = [r for r in rep["runs"] if r["cut"] == rep["cut_auto"]]
        for name, r in (("k*", kstar[0] if kstar else None), ("best measured cut", best)):
            if r:
                print(f"\nstream throughput at {name} (cut {r['cut']}): {best_single / r['period_s']:.2f}x the best "
                      f"single engine, {dp / r['period_s']:.2f}x data parallelism")


def plot(rep, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no plot: pip install matplotlib)", file=sys.stderr)
        return
    B = rep["n_blocks"]
    c = rep["corun"]

    def period(k):
        return max(k * c["block_a_s"], (B - k) * c["block_b_s"] + c["tail_s"])

    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    ks = list(range(B + 1))
    ax.plot(ks, [period(k) for k in ks], "-", color="tab:blue", label="predicted (Eq. 4, co-run rates)")
    ax.plot([r["cut"] for r in rep["runs"]], [r["period_s"] for r in rep["runs"]], "o", color="tab:red",
            label="measured (median interval)")
    for k, name, st in ((rep["cut_auto"], "k* (co-run)", "-"), (rep["cut_solo"], "solo-rate cut", "--"),
                        (rep["cut_step"], "step boundary", ":")):
        ax.axvline(k, color="gray", linestyle=st, linewidth=1, label=f"{name} = {k}")
    for w in rep.get("whole", []):
        ax.axhline(w["result"]["period_s"], linestyle="-.", linewidth=0.8,
                   color={1: "tab:green", 2: "tab:orange", 3: "tab:purple"}[w["stages"]],
                   label=f"{w['name']} (whole {rep.get('unit', 'video')}s)")
    ax.set_xlabel(f"cut k (block executions on A, of {B})")
    ax.set_ylabel(f"period between {rep.get('unit', 'video')}s (s)")
    ax.set_title(f"A = {rep['engine_a']}, B = {rep['engine_b']}, {rep['tokens']} tokens per block", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"plot: {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model")
    ap.add_argument("--text-embeddings")
    ap.add_argument("--vae")
    ap.add_argument("--a")
    ap.add_argument("--b")
    ap.add_argument("--frames", type=int, default=9)
    ap.add_argument("--size", default="256x256")
    ap.add_argument("--timesteps", default="1000,992,982,949,905,810")
    ap.add_argument("--videos", type=int, default=3)
    ap.add_argument("--cuts", default="sweep")
    ap.add_argument("--baselines", action="store_true")
    ap.add_argument("--own-copies", action="store_true")
    ap.add_argument("--probe", type=int, default=0)
    ap.add_argument("--json")
    ap.add_argument("--png")
    ap.add_argument("--replot")
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "tessera"))
    ap.add_argument("--prompts", help="a text: a stream of prompts cut from it (tessera pipe)")
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--diffuse", action="store_true")
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--block", type=int, default=32)
    a = ap.parse_args()
    if a.replot:
        rep = json.load(open(a.replot))
    else:
        if not (a.model and (a.text_embeddings or a.prompts) and a.a and a.b):
            ap.error("-m, --text-embeddings (or --prompts), --a and --b are required (or --replot)")
        rep = run(a)
        rep["cpu"] = cpu_model()
        if a.json:
            json.dump(rep, open(a.json, "w"), indent=1)
    report(rep)
    if a.png:
        plot(rep, a.png)


if __name__ == "__main__":
    main()
