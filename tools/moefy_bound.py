#!/usr/bin/env python3
"""moefy_bound.py - how much of a dense FFN's output MoEfication can keep,
per layer, before any router (issue #17; docs/MOE.md "MoEfication").

For each --layers layer of the base (activations from moefy.py's cache,
collected with --tokens), on held-out tokens (the last quarter):
  neuron   keep the fraction f of the FFN's neurons with the largest
           |h_j| * ||W_down[:, j]|| for each token (the finest routing
           there is: one expert per neuron, a perfect router);
  oracle   moefy's balanced k-means experts (E of them), each token keeping
           the k = f * E experts whose output is largest (a perfect router);
  router   the same experts chosen by moefy's least-squares router fitted
           on the first three quarters.
Each figure is the mean over tokens of ||y - y_kept|| / ||y||, y the dense
FFN output. A small `neuron` with a large `oracle` says the neurons do not
co-activate in groups: experts lose what a per-token choice would keep,
whatever the router.

usage: moefy_bound.py [--base GGUF] [--tokens 32768] [--experts 16 64]
                      [--keep 0.5 0.75 0.875] [--layers 2 15 27]
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import moefy  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default=os.path.join(os.path.dirname(HERE), "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--tokens", type=int, default=32768)
    ap.add_argument("--experts", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--keep", type=float, nargs="+", default=[0.5, 0.75, 0.875])
    ap.add_argument("--layers", type=int, nargs="+", default=[2, 15, 27])
    ap.add_argument("--max-tokens", type=int, default=12288, help="tokens used (memory: tokens x experts x n_embd floats)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", default=os.path.expanduser("~/.cache/tessera/moefy"))
    a = ap.parse_args()
    from gguf import GGUFReader
    X, H = moefy.collect(a)
    tens = {t.name: t for t in GGUFReader(a.base).tensors}
    print("| layer | choice | " + " | ".join(f"keep {f:g}" for f in a.keep) + " |")
    print("|---|---|" + "---:|" * len(a.keep))
    for i in a.layers:
        x = X[i][:a.max_tokens].astype(np.float32)
        h = H[i][:a.max_tokens].astype(np.float32)
        n = len(h)
        tr, te = slice(0, n * 3 // 4), slice(n * 3 // 4, n)
        down = moefy.dequant(tens[f"blk.{i}.ffn_down.weight"])  # [n_embd][n_ff]
        y = h[te] @ down.T
        ny = np.linalg.norm(y, axis=1)

        def err(yk):
            return float(np.mean(np.linalg.norm(y - yk, axis=1) / ny))

        c = np.abs(h[te]) * np.linalg.norm(down, axis=0)[None]
        row = []
        for f in a.keep:
            m = np.zeros_like(c, bool)
            np.put_along_axis(m, np.argsort(-c, 1)[:, :int(h.shape[1] * f)], True, 1)
            row.append(err((h[te] * m) @ down.T))
        print(f"| {i} | neuron | " + " | ".join(f"{v:.3f}" for v in row) + " |", flush=True)
        for E in a.experts:
            feat = np.abs(h[tr]).T
            feat /= np.linalg.norm(feat, axis=1, keepdims=True) + 1e-12
            lab = moefy.balanced_kmeans(feat, E, rounds=4, seed=i)
            groups = [np.nonzero(lab == e)[0] for e in range(E)]
            Y = np.stack([h[:, g] @ down[:, g].T for g in groups], 1)  # [n][E][n_embd]
            S = np.linalg.norm(Y, axis=2)
            A = x[tr].T @ x[tr] + 1e-3 * np.eye(x.shape[1])
            P = x @ np.linalg.solve(A, x[tr].T @ S[tr])
            for name, score in (("oracle", S), ("router", P)):
                row = []
                for f in a.keep:
                    m = np.zeros_like(S, bool)
                    np.put_along_axis(m, np.argsort(-score, 1)[:, :max(1, int(E * f))], True, 1)
                    row.append(err((Y[te] * m[te][:, :, None]).sum(1)))
                print(f"| {i} | E{E} {name} | " + " | ".join(f"{v:.3f}" for v in row) + " |", flush=True)
            del Y


if __name__ == "__main__":
    main()
