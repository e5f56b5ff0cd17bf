#!/usr/bin/env python3
"""moefy.py - MoEfication (Zhang et al. 2022) of a dense llama-family GGUF:
each FFN's neurons split into E experts by clustering their co-activation on
a corpus, and a linear router per layer, fitted on real hidden states, that
predicts each token's experts from the FFN's input. The result is a MoE
model with real routing (prompts route to subsets of experts; similar
prompts route alike) made from real weights, since no trained MoE is
reachable here (issue #17; docs/MOE.md).

How:
  1. activations: the dense model (transformers, from the GGUF) runs over
     --tokens tokens of the training text; per layer the FFN input x (after
     its norm, [n_embd]) and the activation h = silu(gate x) * up x
     ([n_ff]) are kept.
  2. experts: the neurons' co-activation patterns (|h_j| over the tokens,
     each neuron's vector normalized) are clustered by balanced k-means into
     E groups of n_ff / E neurons (every expert the same width, as the
     format needs): k-means++ seeds, then assignment in order of margin
     under each group's capacity, 10 rounds.
  3. router: expert e's score on a token is the norm of its contribution
     to the FFN output, || W_down[:, e] h_e ||. A linear map from x (no
     bias: the format's router has none) is fitted to the scores by least
     squares (ridge 1e-3); at run time the k largest predicted scores route.
  4. gating: the dense FFN is the plain sum of all experts, so a routed
     expert must count with weight 1. Default (--gating uniform): the
     file keeps llama's gating for experts (softmax over the k chosen
     logits) on the router scaled by 2^-16, so each chosen expert gets 1/k
     to within ~1e-4 whatever its score, and the down columns are stored
     times k. With --gating sigmoid (session 18's files): sigmoid gating
     (llama.cpp's expert_gating_func = 2, weights not renormalized) on the
     router scaled by --alpha (default 100): sigmoid(alpha * score) is 1 to
     within float rounding wherever the predicted score exceeds ~0.2 (scores
     are norms, positive), and scaling does not change which k are chosen.
  5. the file: the base's tensors as they are, except each layer's FFN:
     ffn_gate_inp (F32 [E, n_embd]), ffn_gate_exps / ffn_up_exps (the
     base's own quantized rows, regrouped: bit-exact), ffn_down_exps (F32:
     the base's down columns regrouped, dequantized once; a column slice of
     a quantized row is not a whole block). llama.expert_count = E,
     expert_used_count = k, expert_feed_forward_length = n_ff / E.

usage: moefy.py [--base GGUF] [--experts E] [--k K] [--tokens N] [-o OUT.gguf]
                [--work DIR] [--alpha A]
Activations are cached in --work (keyed by base and token count).
"""
import argparse
import hashlib
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)


def data_path():
    for d in (os.environ.get("TS_DATA_DIR"), os.path.join(ROOT, "..", "shared", "data"), "/work/shared/data"):
        if d and os.path.exists(os.path.join(d, "tinyshakespeare.txt")):
            return os.path.join(d, "tinyshakespeare.txt")
    sys.exit("moefy: no ../shared/data/tinyshakespeare.txt (set TS_DATA_DIR)")


def train_text():
    """The first 90% of tinyshakespeare (the last 10% is held out for the
    perplexity figures), then GPL-3's text: two domains."""
    with open(data_path(), encoding="utf-8") as f:
        t = f.read()
    parts = [t[:int(len(t) * 0.9)]]
    if os.path.exists("/usr/share/common-licenses/GPL-3"):
        with open("/usr/share/common-licenses/GPL-3", encoding="utf-8") as f:
            parts.append(f.read())
    return parts


def collect(a):
    """Per layer: x [N][n_embd] (FFN input after its norm) and h [N][n_ff] (f16)."""
    key = hashlib.sha256(f"{os.path.abspath(a.base)}:{os.path.getsize(a.base)}:{a.tokens}".encode()).hexdigest()[:12]
    path = os.path.join(a.work, f"acts-{key}.npz")
    if os.path.exists(path):
        d = np.load(path)
        return [d[f"x{i}"] for i in range(d["n_layer"])], [d[f"h{i}"] for i in range(d["n_layer"])]
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    torch.set_num_threads(a.threads)
    t0 = time.time()
    d, f = os.path.dirname(os.path.abspath(a.base)), os.path.basename(a.base)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32).eval()
    # windows of 256 tokens, alternating the two domains, spread over each text
    rng = np.random.default_rng(7)
    ids = [np.array(tok(p, add_special_tokens=False)["input_ids"]) for p in train_text()]
    W = 256
    wins = []
    while len(wins) * W < a.tokens:
        src = ids[len(wins) % len(ids)]
        s = int(rng.integers(0, len(src) - W))
        wins.append(src[s:s + W])
    L = len(model.model.layers)
    xs, hs = [[] for _ in range(L)], [[] for _ in range(L)]
    hooks = []
    for i, lay in enumerate(model.model.layers):
        hooks.append(lay.mlp.register_forward_pre_hook(lambda m, inp, i=i: xs[i].append(inp[0][0].detach().clone())))
        hooks.append(lay.mlp.down_proj.register_forward_pre_hook(
            lambda m, inp, i=i: hs[i].append(inp[0][0].detach().half().clone())))
    with torch.no_grad():
        for w in wins:
            model(torch.from_numpy(w)[None])
    for h in hooks:
        h.remove()
    X = [torch.cat(x).numpy() for x in xs]
    H = [torch.cat(h).numpy() for h in hs]
    os.makedirs(a.work, exist_ok=True)
    np.savez(path, n_layer=L, **{f"x{i}": X[i] for i in range(L)}, **{f"h{i}": H[i] for i in range(L)})
    print(f"moefy: activations of {len(wins) * W} tokens, {L} layers in {time.time() - t0:.0f} s", flush=True)
    return X, H


def balanced_kmeans(feat, E, rounds=10, seed=0):
    """feat [n][d] rows (neurons), unit norm; returns labels [n], E groups of n/E."""
    n = feat.shape[0]
    cap = n // E
    rng = np.random.default_rng(seed)
    # k-means++ seeds (cosine distance)
    c = [int(rng.integers(n))]
    for _ in range(1, E):
        sim = feat @ feat[c].T
        dist = np.clip(1 - sim.max(1), 0, None)
        c.append(int(rng.choice(n, p=dist / dist.sum())))
    cent = feat[c].copy()
    lab = np.zeros(n, dtype=np.int64)
    for _ in range(rounds):
        sim = feat @ cent.T  # [n][E]
        # each neuron's best group first, in order of how much it prefers it
        order = np.argsort(-(np.sort(sim, 1)[:, -1] - np.sort(sim, 1)[:, -2]))
        left = np.full(E, cap)
        for j in order:
            for e in np.argsort(-sim[j]):
                if left[e]:
                    lab[j] = e
                    left[e] -= 1
                    break
        for e in range(E):
            m = feat[lab == e].mean(0)
            cent[e] = m / (np.linalg.norm(m) + 1e-12)
    return lab


def dequant(t):
    from gguf.quants import dequantize
    return dequantize(t.data, t.tensor_type).astype(np.float32).reshape([int(x) for x in reversed(t.shape.tolist())])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--k", type=int, nargs="+", default=[4], help="experts per token (several: one file each)")
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--alpha", type=float, default=100.0)
    ap.add_argument("--gating", choices=("uniform", "sigmoid"), default="uniform",
                    help="uniform (default): every routed expert weighs 1 whatever its score's sign; "
                         "sigmoid: sigmoid(alpha * score), 0 for a negative score (session 18's files)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", default=os.path.expanduser("~/.cache/tessera/moefy"))
    ap.add_argument("-o", "--out")
    a = ap.parse_args()
    from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
    from gen_tiny_models import read_tokenizer_fields
    r = GGUFReader(a.base)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    X, H = collect(a)
    L, n_ff = len(X), H[0].shape[1]
    E, K = a.experts, max(a.k)
    if n_ff % E:
        sys.exit(f"moefy: n_ff {n_ff} is not a multiple of {E} experts")
    FE = n_ff // E
    tens = {t.name: t for t in r.tensors}
    t0 = time.time()
    layers, stats = [], []
    lab_cache = os.path.join(a.work, f"labels-{os.path.getsize(a.base)}-{a.tokens}-e{E}.npy")
    labels = np.load(lab_cache) if os.path.exists(lab_cache) else None
    new_labels = []
    for i in range(L):
        h = H[i].astype(np.float32)
        if labels is None:
            feat = np.abs(h).T  # neurons x tokens
            feat /= np.linalg.norm(feat, axis=1, keepdims=True) + 1e-12
            lab = balanced_kmeans(feat, E, seed=i)
        else:
            lab = labels[i]
        new_labels.append(lab)
        groups = [np.nonzero(lab == e)[0] for e in range(E)]
        down = dequant(tens[f"blk.{i}.ffn_down.weight"])  # [n_embd][n_ff]
        # expert scores: the norm of each expert's output contribution per token
        S = np.stack([np.linalg.norm(h[:, g] @ down[:, g].T, axis=1) for g in groups], 1)  # [N][E]
        x = X[i]
        A = x.T @ x + 1e-3 * np.eye(x.shape[1])
        Wr = np.linalg.solve(A, x.T @ S).T  # [E][n_embd]
        pred = x @ Wr.T
        top_true = np.argsort(-S, 1)[:, :K]
        top_pred = np.argsort(-pred, 1)[:, :K]
        recall = np.mean([len(set(p) & set(t)) / K for p, t in zip(top_pred, top_true)])
        # share of the FFN output's squared norm the chosen experts carry
        cover = np.mean(np.take_along_axis(S ** 2, top_pred, 1).sum(1) / (S ** 2).sum(1))
        positive = float(np.mean(np.take_along_axis(pred, top_pred, 1) > 0.2))
        stats.append(dict(layer=i, recall=round(float(recall), 3), cover=round(float(cover), 3),
                          chosen_score_gt_0_2=round(positive, 3)))
        layers.append((groups, Wr * (a.alpha if a.gating == "sigmoid" else 2.0 ** -16), down))
        print(f"moefy: layer {i}: router recall {recall:.3f}, output share {cover:.3f}, "
              f"chosen scores > 0.2: {positive:.3f}", flush=True)

    os.makedirs(a.work, exist_ok=True)
    np.save(lab_cache, np.stack(new_labels))
    for K in a.k:
        out = a.out or os.path.join(ROOT, "models", "moe", f"smollm2-moefied-e{E}k{K}.gguf")
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        w = GGUFWriter(out, arch)
        for f in r.fields.values():
            if f.name.startswith(arch + "."):
                vt = GGUFValueType(f.types[0])
                if vt == GGUFValueType.ARRAY:
                    continue
                v = bytes(f.parts[f.data[0]]).decode() if vt == GGUFValueType.STRING else f.parts[f.data[0]].tolist()[0]
                w.add_key_value(f.name, v, vt)
        U32 = GGUFValueType.UINT32
        w.add_key_value(f"{arch}.expert_count", E, U32)
        w.add_key_value(f"{arch}.expert_used_count", K, U32)
        w.add_key_value(f"{arch}.expert_feed_forward_length", FE, U32)
        if a.gating == "sigmoid":
            w.add_key_value(f"{arch}.expert_gating_func", 2, U32)
            w.add_key_value(f"{arch}.expert_weights_norm", False, GGUFValueType.BOOL)
        w.add_string("general.name", f"SmolLM2-135M-Instruct MoEfied E{E} k{K}")
        w.add_string("tessera.moefy", json.dumps(dict(experts=E, k=K, tokens=a.tokens, alpha=a.alpha, gating=a.gating,
                                                      recall=[s["recall"] for s in stats])))
        V = int(tens["token_embd.weight"].shape[1])
        for key, val, vt, sub in read_tokenizer_fields(a.base, V):
            w.add_key_value(key, val, vt, sub_type=sub)
        for name, t in tens.items():
            if ".ffn_gate.weight" in name or ".ffn_up.weight" in name or ".ffn_down.weight" in name:
                i = int(name.split(".")[1])
                groups, Wr, down = layers[i]
                if ".ffn_gate." in name:
                    w.add_tensor(f"blk.{i}.ffn_gate_inp.weight", Wr.astype(np.float32))
                if ".ffn_down." in name:
                    # uniform gating: the file's softmax over the k chosen (llama
                    # with experts) of a router scaled by 2^-16 gives each 1/k to
                    # within ~1e-4, so the down columns carry the factor k back
                    scale = 1.0 if a.gating == "sigmoid" else float(K)
                    w.add_tensor(f"blk.{i}.ffn_down_exps.weight",
                                 (scale * np.stack([np.ascontiguousarray(down[:, g]) for g in groups])).astype(np.float32))
                    continue
                raw = np.asarray(t.data)  # [n_ff][row bytes] in the base's type
                nm = name.replace("ffn_gate.", "ffn_gate_exps.").replace("ffn_up.", "ffn_up_exps.")
                w.add_tensor(nm, np.stack([raw[g] for g in groups]), raw_dtype=GGMLQuantizationType(t.tensor_type))
                continue
            if t.tensor_type in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
                w.add_tensor(name, np.asarray(t.data).reshape([int(x) for x in reversed(t.shape.tolist())]))
            else:
                w.add_tensor(name, np.asarray(t.data), raw_dtype=GGMLQuantizationType(t.tensor_type))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        rec = np.mean([s["recall"] for s in stats])
        print(f"moefy: {out}: {E} experts of {FE}, k {K}; mean router recall {rec:.3f} "
              f"({time.time() - t0:.0f} s, {os.path.getsize(out) / 2**20:.0f} MiB)", flush=True)
        with open(out + ".json", "w") as f:
            json.dump(stats, f, indent=1)


if __name__ == "__main__":
    main()
