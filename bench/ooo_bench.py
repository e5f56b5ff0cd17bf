#!/usr/bin/env python3
"""ooo_bench.py - out-of-order prefill (seed 003, `sched=ooo`) against in
order, with INT8 alone, with shadow outliers and with pruning
(docs/PERFORMANCE.md "Out-of-order prefill"). One alternating run that
prints, per model:

  prefill tok/s (median of -r rounds; every configuration once per round,
  in the same order, so load changes show as noise and not as ratios) at
  each prompt length for each configuration, and beside it the device's
  idle time per prompt: the prompt's wall time minus the time the device's
  compute unit ran graphs (ts_stats.dev_busy_ms, measured on the device's
  thread), as a fraction of the wall time, and the time the CPU thread sat
  blocked with nothing of its own to run (dev_host_wait_ms, ooo only).

Configurations (a label each; a CALIB one is skipped for a model without
--calib MODEL=FILE):
  cpu             the CPU alone, -t 2
  amx             amx,act=int8 (every node on the engine's 2 threads), in order
  amx/ooo         the same, sched=ooo
  npu             amx,act=int8,ops=matmul,threads=1 and -t 1: the matmuls on
                  one core's tiles, norms/RoPE/attention on the other core
                  (an NPU's split), in order
  npu/ooo         the same, sched=ooo
  shadow, shadow/ooo           npu + calib=FILE (shadow outliers)
  prune50, prune50/ooo         + prune=0.5
  prune85, prune85/ooo         + prune=0.85
  (the /ooo rows keep two chunks in flight, inflight=2)
  amx/ooo4, npu/ooo4, shadow/ooo4, prune85/ooo4   four chunks in flight
                                (inflight=4, the default since) instead of two

usage: bench/ooo_bench.py -m MODEL.gguf [--calib MODEL.gguf=FILE.calib]...
         [--tessera build/tessera] [-p 256,512,1024,2048] [-r 3]
         [--configs cpu,amx,...] [--json FILE]

Every prompt runs as one micro-batch (-b = the longest prompt), so that
every chunk of it can be in flight; the chunk width is the library's
default (256). Needs an AMX machine (the amx rows say why not elsewhere).
Never run it while something else builds.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

BASE = "amx,act=int8"
NPU = "amx,act=int8,ops=matmul,threads=1"
CONFIGS = [
    # label, device (None: cpu), threads, needs calib, extra device options
    ("cpu", None, 2, False, ""),
    ("amx", BASE, 2, False, ""),
    ("amx/ooo", BASE, 2, False, ",sched=ooo,inflight=2"),
    ("npu", NPU, 1, False, ""),
    ("npu/ooo", NPU, 1, False, ",sched=ooo,inflight=2"),
    ("shadow", NPU, 1, True, ""),
    ("shadow/ooo", NPU, 1, True, ",sched=ooo,inflight=2"),
    ("prune50", NPU, 1, True, ",prune=0.5"),
    ("prune50/ooo", NPU, 1, True, ",prune=0.5,sched=ooo,inflight=2"),
    ("prune85", NPU, 1, True, ",prune=0.85"),
    ("prune85/ooo", NPU, 1, True, ",prune=0.85,sched=ooo,inflight=2"),
    # four chunks in flight instead of two (inflight=4)
    ("amx/ooo4", BASE, 2, False, ",sched=ooo,inflight=4"),
    ("npu/ooo4", NPU, 1, False, ",sched=ooo,inflight=4"),
    ("shadow/ooo4", NPU, 1, True, ",sched=ooo,inflight=4"),
    ("prune85/ooo4", NPU, 1, True, ",prune=0.85,sched=ooo,inflight=4"),
]


def run_bench(tessera, model, pp, cfg, calib):
    label, dev, threads, needs_calib, extra = cfg
    cmd = [tessera, "bench", "-m", model, "-p", ",".join(map(str, pp)), "-n", "0", "-r", "1",
           "-t", str(threads), "-b", str(max(pp)), "--json"]
    if dev:
        spec = dev + (",calib=" + calib if needs_calib else "") + extra
        cmd += ["--prefill-device", spec, "--prefill-min-tokens", "2"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write("%s: %s failed (%d): %s\n" % (label, " ".join(cmd), p.returncode, p.stderr[-400:]))
        return None
    if dev and "unavailable" in p.stderr:
        sys.stderr.write("%s: %s\n" % (label, p.stderr.strip().splitlines()[0]))
        return None
    rows = json.loads(p.stdout)
    out = {}
    for r in rows:
        wall_ms = r["avg_ns"] / 1e6
        out[r["n_prompt"]] = {
            "ts": r["avg_ts"],
            "wall_ms": wall_ms,
            "busy_ms": r.get("dev_busy_ms", 0.0),
            "wait_ms": r.get("dev_host_wait_ms", 0.0),
            "dev_tokens": r.get("prefill_dev_tokens", 0),
        }
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", dest="models", action="append", required=True)
    ap.add_argument("--calib", action="append", default=[], help="MODEL=FILE.calib")
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "tessera"))
    ap.add_argument("-p", default="256,512,1024,2048")
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("--configs", default=",".join(c[0] for c in CONFIGS if not c[0].endswith("ooo4")))
    ap.add_argument("--json")
    a = ap.parse_args()
    pp = [int(x) for x in a.p.split(",")]
    want = a.configs.split(",")
    calibs = dict(c.split("=", 1) for c in a.calib)
    cpu = subprocess.run(["sh", "-c", "lscpu | sed -n 's/^Model name: *//p'"], capture_output=True, text=True)
    print("machine: %s, AMX %s" % (cpu.stdout.strip(),
                                   "yes" if "amx_tile" in open("/proc/cpuinfo").read() else "no"))
    result = {}
    for model in a.models:
        calib = calibs.get(model)
        cfgs = [c for c in CONFIGS if c[0] in want and (calib or not c[3])]
        samples = {c[0]: [] for c in cfgs}
        for rnd in range(a.r):
            for c in cfgs:
                r = run_bench(a.tessera, model, pp, c, calib)
                if r:
                    samples[c[0]].append(r)
            sys.stderr.write("%s: round %d of %d done\n" % (os.path.basename(model), rnd + 1, a.r))
        print("\n%s (tok/s, median of %d rounds; idle: wall - dev_busy_ms as %% of wall; wait: ms the CPU thread "
              "blocked with nothing ready)" % (model, a.r))
        hdr = "| config | " + " | ".join("pp%d tok/s | idle | wait ms" % n for n in pp) + " |"
        print(hdr)
        print("|" + "---|" * (1 + 3 * len(pp)))
        res = {}
        for c in cfgs:
            s = samples[c[0]]
            if not s:
                print("| %s | %s |" % (c[0], "failed"))
                continue
            cells, row = [], {}
            for n in pp:
                ts = statistics.median(x[n]["ts"] for x in s)
                idle = statistics.median((x[n]["wall_ms"] - x[n]["busy_ms"]) / x[n]["wall_ms"] for x in s)
                wait = statistics.median(x[n]["wait_ms"] for x in s)
                row[n] = {"ts": ts, "idle": idle, "wait_ms": wait, "samples": [x[n] for x in s]}
                cells.append("%.1f | %s | %s" % (ts, "%.0f%%" % (100 * idle) if c[1] else "",
                                                 "%.0f" % wait if "sched=ooo" in c[4] else ""))
            res[c[0]] = row
            print("| %s | %s |" % (c[0], " | ".join(cells)))
        # out of order against in order, same configuration otherwise
        print("\nooo / in order (tok/s ratio):")
        for c in cfgs:
            stem = c[0].split("/")[0]
            if "/ooo" in c[0] and stem in res and c[0] in res:
                base = res[stem]
                print("  %-12s %s" % (c[0], "  ".join("pp%d %.2fx" % (n, res[c[0]][n]["ts"] / base[n]["ts"])
                                                        for n in pp)))
        result[model] = res
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
