#!/usr/bin/env python3
"""KL divergence in `tessera perplexity` (docs/FIDELITY.md "Two modes"):
--kl-divergence-base FILE writes the log-probabilities of every scored token
in llama-perplexity's format, --kl-divergence compares a run with them.

  self     the exact mode against its own file: KLD within the file's
           rounding (|mean| < 1e-5, max < 1e-4), same top token everywhere,
           the same perplexity to 1e-4
  q8       --act q8 against the exact file: a KLD above 1e-4 (the comparison
           sees a change) and below 0.05, top token agreeing on >= 90%
  errors   a truncated file, a file that is not one, another model's
           vocabulary, -c differing from the file: refused, naming why
  llamacpp (with LLAMA_PERPLEXITY, tools/build_llamacpp.sh) each tool reads
           the other's file: the same header and tokens, and llama.cpp's
           KLD against tessera's exact file within 2x of tessera's own
           reading of llama.cpp's file; exit 77 (skipped) without the binary

usage: test_kld_cli.py TESSERA MODEL.gguf WORKDIR {self|errors|llamacpp} [OTHER_MODEL.gguf]
"""
import os
import re
import subprocess
import sys

TEXT = "/usr/share/common-licenses/GPL-3"
ARGS = ["-c", "128", "--chunks", "4", "-t", "2"]


def run(cmd, ok=True):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if ok and p.returncode:
        print("FAIL:", " ".join(cmd), p.stdout[-800:], p.stderr[-1500:])
        sys.exit(1)
    return p


def stats(out):
    def grab(label):
        m = re.search(re.escape(label) + r"\s*:\s*(-?[\d.]+)", out)
        if not m:
            print("FAIL: no", label, "in", out[-1500:])
            sys.exit(1)
        return float(m.group(1))
    return {"kld": grab("Mean    KLD"), "max": grab("Maximum KLD"), "top": grab("Same top p"),
            "ppl_q": grab("Mean PPL(Q)"), "ppl_base": grab("Mean PPL(base)")}


def compare(tessera, model, base, extra=()):
    return stats(run([tessera, "perplexity", "-m", model, "--kl-divergence-base", base, "--kl-divergence",
                      "-t", "2"] + list(extra)).stdout)


def refused(cmd, want):
    p = run(cmd, ok=False)
    if p.returncode == 0 or want not in p.stderr:
        print(f"FAIL: expected a refusal naming '{want}':", " ".join(cmd), p.stderr[-800:])
        sys.exit(1)
    print(f"refused: {p.stderr.strip().splitlines()[-1]}")


def main():
    tessera, model, work, mode = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    base = os.path.join(work, "exact.kld")
    run([tessera, "perplexity", "-m", model, "-f", TEXT, "--kl-divergence-base", base] + ARGS)
    if mode == "self":
        s = compare(tessera, model, base)
        print("exact vs its file:", s)
        if not (abs(s["kld"]) < 1e-5 and s["max"] < 1e-4 and s["top"] == 100.0 and
                abs(s["ppl_q"] / s["ppl_base"] - 1) < 1e-4):
            print("FAIL: the exact mode does not read back as itself")
            return 1
        q = compare(tessera, model, base, ["--act", "q8"])
        print("q8 vs exact:", q)
        if not (1e-4 < q["kld"] < 0.05 and q["top"] >= 90.0):
            print("FAIL: q8 against exact out of [1e-4, 0.05] or top-1 below 90%")
            return 1
        return 0
    if mode == "errors":
        size = os.path.getsize(base)
        cut = os.path.join(work, "cut.kld")
        with open(base, "rb") as f, open(cut, "wb") as g:
            g.write(f.read(size - 1000))
        kl = ["--kl-divergence", "-t", "2"]
        refused([tessera, "perplexity", "-m", model, "--kl-divergence-base", cut] + kl, "truncated")
        refused([tessera, "perplexity", "-m", model, "--kl-divergence-base", TEXT] + kl, "not a file of log-probabilities")
        refused([tessera, "perplexity", "-m", model, "--kl-divergence-base", base, "-c", "256"] + kl, "-c 256 differs")
        refused([tessera, "perplexity", "-m", model, "--kl-divergence"], "--kl-divergence-base")
        if len(sys.argv) > 5:
            refused([tessera, "perplexity", "-m", sys.argv[5], "--kl-divergence-base", base] + kl, "vocabulary")
        return 0
    # llamacpp
    # the build without AMX (LLAMACPP_AMX=off), or on a CPU without AMX the
    # default build (its AMX path segfaults where the CPU has AMX)
    cache = os.path.expanduser("~/.cache/tessera/llamacpp")
    lp = os.environ.get("LLAMA_PERPLEXITY") or os.path.join(cache, "build-noamx/bin/llama-perplexity")
    try:
        has_amx = "amx_tile" in open("/proc/cpuinfo").read()
    except OSError:
        has_amx = True
    if not os.environ.get("LLAMA_PERPLEXITY") and not os.access(lp, os.X_OK) and not has_amx:
        lp = os.path.join(cache, "build/bin/llama-perplexity")
    if not os.access(lp, os.X_OK):
        print(f"SKIP: no llama-perplexity at {lp} (tools/build_llamacpp.sh builds it; LLAMA_PERPLEXITY names it)")
        return 77
    p = run([lp, "-m", model, "--kl-divergence-base", base, "--kl-divergence", "-c", "128", "-b", "128", "-t", "2"])
    theirs = stats(p.stdout + p.stderr)
    llbase = os.path.join(work, "llamacpp.kld")
    run([lp, "-m", model, "-f", TEXT, "--kl-divergence-base", llbase, "-c", "128", "-b", "128", "--chunks", "4",
         "-t", "2"])
    with open(base, "rb") as f, open(llbase, "rb") as g:
        n_tok_bytes = 20 + 4 * 128 * 4
        same_head = f.read(n_tok_bytes) == g.read(n_tok_bytes)
    ours = compare(tessera, model, llbase)
    print("llama.cpp vs tessera exact (llama.cpp reading tessera's file):", theirs)
    print("tessera exact vs llama.cpp (tessera reading llama.cpp's file):", ours)
    if not same_head:
        print("FAIL: the two tools wrote different headers or tokens for the same text")
        return 1
    if not (0 < theirs["kld"] < 0.05 and 0 < ours["kld"] < 0.05 and
            0.5 < theirs["kld"] / ours["kld"] < 2 and abs(theirs["ppl_base"] / ours["ppl_q"] - 1) < 1e-3):
        print("FAIL: the two readings disagree")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
