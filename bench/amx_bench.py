#!/usr/bin/env python3
"""amx_bench.py - the AMX matrix engine against the CPU and llama.cpp
(docs/PERFORMANCE.md "AMX"): one alternating run that prints

  1. the machine's probes: CPU model, bench_amx_peak (TDPBSSD / TDPBF16PS,
     1 and 2 threads), bench_int8_peak (AVX-512 VNNI), bench_bandwidth;
  2. prefill tok/s (median of -r) at each prompt length for each engine:
     the CPU alone, --prefill-device amx in each act= mode, and each
     llama-bench given (label=PATH), alternating engine by engine within
     every repetition so that load changes show as noise, not as ratios;
     decode tok/s (tg) for the CPU and each amx mode (decode stays on the
     CPU: it must not move);
  3. the matmul MAC rate each prefill reaches (layer weights x tok/s) as a
     fraction of the measured AMX int8 peak;
  4. one layer's width -> latency curve per engine (tessera devices
     --profile, the model's widths);
  5. PNG plots (with matplotlib: pip install matplotlib) of prefill tok/s
     vs prompt length and of the width curve, under --out.

usage: bench/amx_bench.py [-m MODEL.gguf]... [--tessera build/tessera]
         [--llama-bench noamx=PATH]... [-p 32,128,512,2048] [-r 3] [-t 2]
         [--modes exact,q8,int8] [--emulated] [--out bench/out] [--json FILE]
       bench/amx_bench.py --replot FILE.json [--out DIR]   (the plots of an earlier --json)

Where AMX is absent the amx rows say why (the engine's one line) and are
skipped; --emulated adds amx,emulate=1 rows, which check the pipeline but
are no speed of anything. Never run it while something else builds.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def sh(cmd, timeout=3600):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def has_amx_flags():
    try:
        return "amx_int8" in open("/proc/cpuinfo").read()
    except OSError:
        return False


def probes(build):
    out = {}
    for name, args in (("amx_peak", ["-r", "3"]), ("int8_peak", ["-t", "2", "-r", "3"]), ("bandwidth", [])):
        exe = os.path.join(build, "bench", "bench_" + name)
        if not os.path.exists(exe):
            out[name] = f"(no {exe})"
            continue
        rc, so, se = sh([exe] + args, timeout=600)
        out[name] = (so + se).strip()
    return out


def amx_int8_peak_tmacs(text):
    """the 2-thread (else the best) int8 TMAC/s from bench_amx_peak's table"""
    best = None
    for line in text.splitlines():
        if "int8" in line.lower():
            nums = re.findall(r"(\d+\.\d+)", line)
            if nums:
                v = float(nums[0])
                best = v if best is None or v > best else best
    return best


def layer_macs(model):
    """multiply-adds per token in the layers' matrices (blk.* 2-D tensors)"""
    try:
        import gguf  # the oracle venv has it
        r = gguf.GGUFReader(model)
        return sum(int(t.n_elements) for t in r.tensors if t.name.startswith("blk.") and len(t.shape) == 2)
    except Exception:
        return None


def tessera_bench(exe, model, engine, lengths, threads, gen):
    args = [exe, "bench", "-m", model, "-p", ",".join(map(str, lengths)), "-n", str(gen), "-r", "1", "-t",
            str(threads), "-b", str(max(lengths)), "--json"]
    if engine != "cpu":
        args += ["--prefill-device", engine, "--prefill-min-tokens", "2"]
    rc, so, se = sh(args)
    fb = [l for l in se.splitlines() if "unavailable" in l]
    if rc != 0:
        return None, f"exit {rc}: {se.strip()[-300:]}"
    if fb:
        return None, fb[0]
    return json.loads(so), None


def llama_bench(exe, model, lengths, threads, gen):
    rc, so, se = sh([exe, "-m", model, "-p", ",".join(map(str, lengths)), "-n", str(gen), "-r", "1", "-t",
                     str(threads), "-o", "json"])
    if rc != 0:
        return None, f"exit {rc} ({'segfault' if rc in (-11, 139) else 'error'}): {se.strip()[-300:]}"
    return json.loads(so[so.find("["):]), None


def profile(exe, dev, model, threads):
    rc, so, se = sh([exe, "devices", "--profile", dev, "-m", model, "-t", str(threads), "--widths", "16:512:16",
                     "--reps", "3", "--json"])
    return (json.loads(so), None) if rc == 0 else (None, se.strip().splitlines()[-1] if se.strip() else f"exit {rc}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", action="append")
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "tessera"))
    ap.add_argument("--llama-bench", action="append", default=[], help="LABEL=PATH (repeatable)")
    ap.add_argument("-p", "--prompts", default="32,128,512,2048")
    ap.add_argument("-n", "--gen", type=int, default=32, help="decode tokens per run (tg)")
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--modes", default="exact,q8,int8")
    ap.add_argument("--emulated", action="store_true")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--out", default=os.path.join(HERE, "out"))
    ap.add_argument("--json")
    ap.add_argument("--replot", help="draw the plots of an earlier --json report and stop")
    a = ap.parse_args()
    if a.replot:
        rep = json.load(open(a.replot))
        for name, e in rep["models"].items():
            med = {eng: {(k[:2], int(k[2:])): v for k, v in d.items()} for eng, d in e["median_tps"].items()}
            lengths = sorted({n for d in med.values() for (kind, n) in d if kind == "pp"})
            plot(a.out, name, lengths, med, e.get("profile", {}))
        return
    models = a.model or [os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")]
    lengths = [int(x) for x in a.prompts.split(",")]
    build = os.path.dirname(os.path.abspath(a.tessera))
    report = {"cpu": cpu_model(), "amx_flags": has_amx_flags(), "threads": a.threads}
    print(f"# machine: {report['cpu']}; AMX in /proc/cpuinfo: {'yes' if report['amx_flags'] else 'no'}; "
          f"{a.threads} threads")
    report["probes"] = probes(build)
    for k, v in report["probes"].items():
        print(f"## probe {k}\n```\n{v}\n```")
    peak = amx_int8_peak_tmacs(report["probes"].get("amx_peak", ""))

    engines = ["cpu"] + [f"amx,act={m}" for m in a.modes.split(",")]
    if a.emulated:
        engines += [f"amx,emulate=1,act={m}" for m in a.modes.split(",")]
    lbs = [tuple(x.split("=", 1)) for x in a.llama_bench]
    report["models"] = {}
    for model in models:
        name = os.path.basename(model)
        macs = layer_macs(model)
        samples, why = {}, {}
        def add(eng, res, w):
            if res is None:
                why[eng] = w
                return
            for o in res:
                key = ("pp", o["n_prompt"]) if o["n_prompt"] else ("tg", o["n_gen"])
                samples.setdefault(eng, {}).setdefault(key, []).extend(o["samples_ts"])

        for rep in range(a.reps):  # alternating: every engine once per repetition
            for eng in engines:
                if eng not in why:
                    add(eng, *tessera_bench(a.tessera, model, eng, lengths, a.threads, a.gen))
            for label, exe in lbs:
                if "llama.cpp " + label not in why:
                    add("llama.cpp " + label, *llama_bench(exe, model, lengths, a.threads, a.gen))
        med = {e: {k: statistics.median(v) for k, v in d.items()} for e, d in samples.items()}
        cpu = med.get("cpu", {})
        print(f"\n## {name} (layer matrices: {macs / 1e6:.1f} M MAC/token)" if macs else f"\n## {name}")
        for e, w in why.items():
            print(f"- {e}: {w}")
        cols = [e for e in engines if e in med] + [("llama.cpp " + l) for l, _ in lbs if ("llama.cpp " + l) in med]
        print("| test | " + " | ".join(cols) + " |")
        print("|---|" + "---:|" * len(cols))
        keys = [("pp", n) for n in lengths] + [("tg", a.gen)]
        for k in keys:
            cells = []
            for e in cols:
                v = med[e].get(k)
                if v is None:
                    cells.append("-")
                    continue
                c = f"{v:.1f}"
                if e != "cpu" and k in cpu:
                    c += f" ({v / cpu[k]:.2f}x)"
                if k[0] == "pp" and macs and peak and e.startswith("amx"):
                    c += f" [{v * macs / (peak * 1e12) * 100:.0f}% of AMX int8 peak]"
                cells.append(c)
            print(f"| {k[0]}{k[1]} | " + " | ".join(cells) + " |")
        entry = {"layer_macs": macs, "median_tps": {e: {f"{k[0]}{k[1]}": v for k, v in d.items()} for e, d in med.items()},
                 "unavailable": why}
        if not a.no_profile:
            entry["profile"] = {}
            for eng in engines:
                if eng in why and eng != "cpu":
                    continue
                prof, w = profile(a.tessera, eng, model, a.threads)
                entry["profile"][eng] = prof if prof else {"error": w}
            print("\nwidth -> ms of one layer (tessera devices --profile):")
            ws = None
            for eng, p in entry["profile"].items():
                if "points" in p:
                    ws = [q["width"] for q in p["points"]]
            if ws:
                shown = [w for w in ws if w in (16, 32, 48, 64, 128, 256, 384, 512)]
                print("| width | " + " | ".join(entry["profile"]) + " |")
                print("|---:|" + "---:|" * len(entry["profile"]))
                for w in shown:
                    row = []
                    for eng, p in entry["profile"].items():
                        pt = [q for q in p.get("points", []) if q["width"] == w]
                        row.append(f"{pt[0]['ms']:.3f}" if pt else "-")
                    print(f"| {w} | " + " | ".join(row) + " |")
        report["models"][name] = entry
        plot(a.out, name, lengths, med, entry.get("profile", {}))
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)


def plot(out, name, lengths, med, prof):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no plots: pip install matplotlib)", file=sys.stderr)
        return
    os.makedirs(out, exist_ok=True)
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for e, d in med.items():
        ys = [d.get(("pp", n)) for n in lengths]
        if any(y is not None for y in ys):
            ax[0].plot(lengths, [y or float("nan") for y in ys], marker="o", label=e)
    ax[0].set_xscale("log", base=2)
    ax[0].set_xlabel("prompt tokens")
    ax[0].set_ylabel("prefill tok/s")
    ax[0].set_title(name)
    ax[0].legend(fontsize=7)
    for e, p in prof.items():
        if "points" in p:
            ax[1].plot([q["width"] for q in p["points"]], [q["ms"] for q in p["points"]], label=e)
    ax[1].set_xlabel("graph width (tokens)")
    ax[1].set_ylabel("ms per layer")
    ax[1].set_title("one layer: width -> latency")
    ax[1].legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(out, f"amx_{os.path.splitext(name)[0]}.png")
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
