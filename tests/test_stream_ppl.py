#!/usr/bin/env python3
"""Perplexity of a MoE model streamed under a memory budget (docs/MOE.md
"Routed reads"): equal to the model in memory with routed reads and with
whole layers, and changed by skip_demand=1 (the routing node's reads
skipped on purpose), so the routed gate cannot pass by luck. Micro-batches
of 2 tokens, so that a batch routes to a subset of the experts and the
reads at the routing node matter.

usage: test_stream_ppl.py TESSERA MODEL.gguf
"""
import re
import subprocess
import sys

GPL = "/usr/share/common-licenses/GPL-3"


def ppl(tessera, model, extra):
    cmd = [tessera, "perplexity", "-m", model, "-f", GPL, "-c", "64", "--chunks", "3", "-b", "2", "-t", "2"] + extra
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    m = re.search(r"PPL = ([\d.]+)", p.stdout)
    if p.returncode or not m:
        print("FAIL:", " ".join(cmd), p.stdout[-500:], p.stderr[-1500:])
        sys.exit(1)
    return m.group(1)


def main():
    tessera, model = sys.argv[1], sys.argv[2]
    budget = ["--mem-budget", "400K"]
    ref = ppl(tessera, model, [])
    routed = ppl(tessera, model, budget)
    whole = ppl(tessera, model, budget + ["--no-prefill-routed"])
    hooks = subprocess.run([tessera, "run", "-m", model, "-p", "x", "-n", "1"] + budget +
                           ["--stream-opts", "skip_demand=0"], capture_output=True, text=True)
    print(f"in memory {ref}, routed {routed}, whole layers {whole}")
    if not (ref == routed == whole):
        print("FAIL: perplexity differs under the budget")
        return 1
    if "not in this build" in hooks.stderr:
        print("skip_demand is a test hook, not in this build: the break is skipped")
        return 0
    broken = ppl(tessera, model, budget + ["--stream-opts", "skip_demand=1"])
    print(f"skip_demand=1: {broken}")
    if broken == ref:
        print("FAIL: skipping the routing node's reads left the perplexity unchanged")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
