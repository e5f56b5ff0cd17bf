#!/usr/bin/env python3
"""constrained.py - what constrained decoding costs (docs/PERFORMANCE.md).

For one model and several seeds, alternating in one run: `tessera run` with
no grammar, with a JSON schema, and with a grammar that refuses the model's
first choice at almost every step (a worst case: every step checks the whole
vocabulary). Prints decode tok/s medians, and from the library's counters
(--stats json: grammar_checks, grammar_masks, grammar_ms) the time per
checked token, per full mask and its share of the decode time.

usage: constrained.py --tessera BIN --model GGUF [--runs 5] [--tokens 96] [-t 1]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from server_harness import ANIMAL_SCHEMA  # noqa: E402

SCHEMA = json.dumps(ANIMAL_SCHEMA)
# no spaces: the model's usual " word" tokens are refused, so most steps mask the vocabulary
WORST = 'root ::= [a-z]{1,400}'


def run(args, extra, seed, chat=True):
    cmd = [args.tessera, "run", "-m", args.model, "-p", "Describe a random animal as JSON.", "-n", str(args.tokens),
           "--temp", "1", "--seed", str(seed), "-t", str(args.threads), "--no-display-prompt", "--stats", "json",
           *(["--chat"] if chat else []), *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(p.stderr.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("-t", "--threads", type=int, default=1)
    args = ap.parse_args()
    modes = [("free", []), ("json schema", ["--json-schema", SCHEMA]), ("worst case", ["--grammar", WORST])]
    res = {m: [] for m, _ in modes}
    for r in range(args.runs):  # alternating, one seed per round
        for name, extra in modes:
            res[name].append(run(args, extra, 1000 + r))
    print(f"model {args.model}, {args.runs} runs per mode (seeds 1000..), -t {args.threads}, up to {args.tokens} "
          f"tokens, temperature 1")
    print("| mode | decode tok/s (median) | tokens (median) | checks / token | masks / token | grammar ms / token "
          "| grammar ms / mask (all grammar time) | grammar share of decode |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, _ in modes:
        rs = res[name]
        tps = statistics.median(x["decode_tps"] for x in rs)
        ntok = statistics.median(x["n_gen_tokens"] for x in rs)
        if name == "free":
            print(f"| {name} | {tps:.1f} | {ntok:.0f} | - | - | - | - | - |")
            continue
        checks = sum(x["grammar_checks"] for x in rs)
        masks = sum(x["grammar_masks"] for x in rs)
        gms = sum(x["grammar_ms"] for x in rs)
        dms = sum(x["decode_ms"] for x in rs)
        toks = sum(max(x["n_gen_tokens"], 1) for x in rs)
        per_mask = f"{gms / masks:.2f}" if masks else "-"
        print(f"| {name} | {tps:.1f} | {ntok:.0f} | {checks / toks:.2f} | {masks / toks:.2f} | {gms / toks:.3f} | "
              f"{per_mask} | {100 * gms / dms:.1f}% |")


if __name__ == "__main__":
    main()
