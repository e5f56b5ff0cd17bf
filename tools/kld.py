#!/usr/bin/env python3
"""kld.py - fidelity of one run's logits against a reference run's, as
llama.cpp's KL-divergence tool reports it: per evaluated position the
KL divergence KL(P_ref || P_test) of the softmax distributions, and whether
the top-1 token agrees; mean, median, 99th percentile and max of the KLD,
the top-1 agreement, and the largest |logit difference|.

  tools/kld.py --vocab N REF.bin TEST.bin [--skip K] [--json]

Both files are `tessera run --logits-out` output (raw little-endian f32,
n_vocab per evaluated position, in order), from the same prompt; --skip
drops the first K positions (e.g. BOS).
"""
import argparse
import json
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--skip", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("ref")
    ap.add_argument("test")
    a = ap.parse_args()
    r = np.fromfile(a.ref, dtype="<f4")
    t = np.fromfile(a.test, dtype="<f4")
    if r.size % a.vocab or t.size % a.vocab:
        sys.exit(f"kld: file sizes {r.size * 4}, {t.size * 4} bytes are not whole rows of {a.vocab} floats")
    n = min(r.size, t.size) // a.vocab
    if r.size != t.size:
        print(f"kld: the files hold {r.size // a.vocab} and {t.size // a.vocab} rows; comparing the first {n}",
              file=sys.stderr)
    r = r[: n * a.vocab].reshape(n, a.vocab)[a.skip:].astype(np.float64)
    t = t[: n * a.vocab].reshape(n, a.vocab)[a.skip:].astype(np.float64)

    def logsoftmax(x):
        m = x.max(axis=1, keepdims=True)
        return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))

    lr, lt = logsoftmax(r), logsoftmax(t)
    kld = (np.exp(lr) * (lr - lt)).sum(axis=1)
    top1 = (r.argmax(axis=1) == t.argmax(axis=1)).mean()
    out = {"positions": int(kld.size), "kld_mean": float(kld.mean()), "kld_median": float(np.median(kld)),
           "kld_p99": float(np.percentile(kld, 99)), "kld_max": float(kld.max()), "top1_agree": float(top1),
           "max_abs_logit_diff": float(np.abs(r - t).max())}
    if a.json:
        print(json.dumps(out))
    else:
        print(f"{out['positions']} positions: KLD mean {out['kld_mean']:.6f}, median {out['kld_median']:.6f}, "
              f"p99 {out['kld_p99']:.6f}, max {out['kld_max']:.6f}; top-1 agreement {100 * top1:.2f}%; "
              f"max |dlogit| {out['max_abs_logit_diff']:.4f}")


if __name__ == "__main__":
    main()
