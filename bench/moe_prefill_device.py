#!/usr/bin/env python3
"""moe_prefill_device.py - prefill of a streamed MoE on a prefill device
against the CPU (issue #17; docs/MOE.md "Memory budget", "With a prefill
device"): for each device (none = the CPU) and each budget ("" = the model
in memory), `tessera run -n 1` on the same prompt, the configurations
alternated in each round and the median of --rounds taken. Prints prefill
tok/s, peak RSS, MiB read from the file and uploaded to the device, and
whether the first token equals the CPU's in memory (a device's arithmetic
may differ from the CPU's; streamed vs in memory on one device must not).

usage: moe_prefill_device.py [-m models/moe/big-moe.gguf] [--devices none,amx,min_width=64]
                             [--budgets ,2G] [--chars 1750] [--rounds 3] [--chunk 512] [-t 2]
Devices are separated by ';' when a device string has commas.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def data_text(n):
    for d in (os.environ.get("TS_DATA_DIR"), os.path.join(ROOT, "..", "shared", "data")):
        if d and os.path.exists(os.path.join(d, "tinyshakespeare.txt")):
            with open(os.path.join(d, "tinyshakespeare.txt"), encoding="utf-8") as f:
                return f.read(n)
    sys.exit("moe_prefill_device: no tinyshakespeare.txt (set TS_DATA_DIR)")


def run(a, prompt, dev, budget):
    cmd = [a.tessera, "run", "-m", a.model, "-p", prompt, "-n", "1", "--temp", "0", "-c", "1024", "-t", str(a.threads),
           "--stats", "json", "--no-display-prompt", "--prefill-device", dev, "--chunk", str(a.chunk)] + (["--mem-budget", budget] if budget else [])
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if p.returncode:
        sys.exit(f"moe_prefill_device: {' '.join(cmd[:6])} ... failed: {p.stderr[-800:]}")
    st = json.loads([l for l in p.stderr.splitlines() if l.startswith("{")][-1])
    if "unavailable" in p.stderr:
        sys.exit(f"moe_prefill_device: {dev} fell back: {p.stderr[-600:]}")
    return p.stdout, st


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "tessera"))
    ap.add_argument("-m", "--model", default=os.path.join(ROOT, "models", "moe", "big-moe.gguf"))
    ap.add_argument("--devices", default="none;amx,min_width=64")
    ap.add_argument("--budgets", default=",2G")
    ap.add_argument("--chars", type=int, default=1750)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=512,
                    help="device chunk (default 512: the prompt in one run; every run streams every layer)")
    ap.add_argument("-t", "--threads", type=int, default=2)
    a = ap.parse_args()
    prompt = data_text(a.chars)
    cfgs = [(d, b) for b in a.budgets.split(",") for d in a.devices.split(";")]
    res = {c: [] for c in cfgs}
    for r in range(a.rounds):
        for c in cfgs:
            out, st = run(a, prompt, *c)
            res[c].append((out, st))
            print(f"round {r + 1}: {c[0]:>18} {c[1] or 'in memory':>9}: {st['prefill_tps']:.2f} tok/s", flush=True)
    ref = res[(a.devices.split(";")[0], a.budgets.split(",")[0])][0][0]
    print(f"\n{res[cfgs[0]][0][1]['n_prompt_tokens']} prompt tokens, --chunk {a.chunk}, -t {a.threads}, median of {a.rounds} rounds\n")
    print("| device | budget | prefill tok/s | peak RSS MiB | MiB read | MiB uploaded | device tokens | answer = CPU in memory |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for c in cfgs:
        sts = [s for _, s in res[c]]
        med = statistics.median(s["prefill_tps"] for s in sts)
        s = sts[0]
        print(f"| {c[0]} | {c[1] or 'in memory'} | {med:.2f} | {max(x['peak_rss_mib'] for x in sts):.0f} | "
              f"{s.get('stream_read_mib', 0):.0f} | {s.get('dev_upload_mib', 0):.0f} | {s.get('prefill_dev_tokens', 0)} | "
              f"{'yes' if all(o == ref for o, _ in res[c]) else 'NO'} |")


if __name__ == "__main__":
    main()
