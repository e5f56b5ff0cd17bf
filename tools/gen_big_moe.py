#!/usr/bin/env python3
"""gen_big_moe.py - a large random-weight MoE GGUF for streaming speed and
memory (issue #17: "A large generated MoE"; docs/MOE.md), in the shape of
Qwen3-30B-A3B's layers, with fewer of them so the file is 4-8 GB:
qwen3moe, n_embd 2048, 32 query heads and 4 KV heads of 128 (per-head Q/K
norms), 128 experts of width 768, 8 routed per token, --layers (default 16:
about 6 GB), the SmolLM2 tokenizer (49,152 tokens). Matrices are Q4_0 with
random quants (written block by block, never held whole), the token
embeddings Q8_0, the routers, norms F32.

Routing is built, not random, so that prompts route to a realistic
fraction of the experts and similar prompts route alike:
  - the vocabulary is cut into --topics contiguous id ranges (topic t:
    ids [t V / T, (t + 1) V / T)); BPE ids run roughly by frequency, so
    ordinary English text lands mostly in the first ranges, code, digits,
    rare words and other scripts in later ones;
  - each topic t has a unit direction u_t (orthonormal); a token's
    embedding is c u_topic + gaussian noise (the noise makes each token's
    own choice among its topic's experts);
  - the experts are cut into T groups of 128 / T; layer l's router row for
    expert e of group g is a u_g + b n_{l,e} (n random unit vectors);
  - the attention and expert outputs are scaled small (0.2 of a unit-gain
    map), so the embedding's topic direction survives the residual stream
    through every layer.
So a token routes to k of its topic's 128 / T experts (16 with T = 8),
chosen by its noise; a prompt of one topic reaches about those 16 per
layer, a change of topic moves to another group. The weights are random:
the text it writes is noise; speed, memory and bytes read are what it is
for.

usage: gen_big_moe.py [-o models/moe/big-moe.gguf] [--layers 16] [--topics 8] [--seed 1]
"""
import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter  # noqa: E402

E, NH, NKV, HD = 2048, 32, 4, 128
NE, K, FE = 128, 8, 768
Q4_0, Q8_0 = GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q8_0


def q4_0_random(rng, n_rows, n_in, gain):
    """Q4_0 rows of random quants whose rows map unit-rms inputs to outputs of
    rms ~gain: scale d = gain / sqrt(21.25 n_in) (the variance of q - 8 for q
    uniform in 0..15 is 21.25)."""
    nb = n_rows * (n_in // 32)
    blk = rng.integers(0, 256, size=(nb, 18), dtype=np.uint8)
    d = np.float16(gain / np.sqrt(21.25 * n_in))
    blk[:, 0:2] = np.frombuffer(d.tobytes(), dtype=np.uint8)
    return blk.reshape(n_rows, (n_in // 32) * 18)


def q8_0_rows(x):
    """Q8_0 quantization of float rows [n, m] (m a multiple of 32)."""
    n, m = x.shape
    b = x.reshape(n, m // 32, 32)
    amax = np.abs(b).max(axis=2, keepdims=True)
    d = (amax / 127.0).astype(np.float32)
    q = np.where(d > 0, np.round(b / np.where(d > 0, d, 1)), 0).astype(np.int8)
    out = np.empty((n, m // 32, 34), dtype=np.uint8)
    out[:, :, 0:2] = d.astype(np.float16).view(np.uint8).reshape(n, m // 32, 2)
    out[:, :, 2:] = q.view(np.uint8)
    return out.reshape(n, (m // 32) * 34)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--out", default=os.path.join(ROOT, "models", "moe", "big-moe.gguf"))
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--topics", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    a = ap.parse_args()
    if NE % a.topics:
        sys.exit("gen_big_moe: --topics must divide 128")
    from gen_tiny_models import read_tokenizer_fields
    tok = read_tokenizer_fields(a.tokenizer, 1 << 30)
    V = next(len(v) for k, v, *_ in tok if k == "tokenizer.ggml.tokens")
    rng = np.random.default_rng(a.seed)
    L, T = a.layers, a.topics
    G = NE // T
    u = np.linalg.qr(rng.standard_normal((E, T)))[0].T.astype(np.float32)  # [T, E] orthonormal
    topic = (np.arange(V) * T) // V

    # tensor list (name, kind, shape): kind q4 = random Q4_0 rows [rows, n_in]
    # (with a 3-D expert array as n_expert * rows), or one of the special ones
    tensors = [("token_embd.weight", "embd", (V, E), Q8_0)]
    for l in range(L):
        b = f"blk.{l}."
        tensors += [(b + "attn_norm.weight", "ones", (E,), None), (b + "ffn_norm.weight", "ones", (E,), None),
                    (b + "attn_q.weight", ("q4", 1.0), (NH * HD, E), Q4_0),
                    (b + "attn_k.weight", ("q4", 1.0), (NKV * HD, E), Q4_0),
                    (b + "attn_v.weight", ("q4", 1.0), (NKV * HD, E), Q4_0),
                    (b + "attn_output.weight", ("q4", 0.2), (E, NH * HD), Q4_0),
                    (b + "attn_q_norm.weight", "ones", (HD,), None), (b + "attn_k_norm.weight", "ones", (HD,), None),
                    (b + "ffn_gate_inp.weight", ("router", l), (NE, E), None),
                    (b + "ffn_gate_exps.weight", ("q4", 1.0), (NE, FE, E), Q4_0),
                    (b + "ffn_up_exps.weight", ("q4", 1.0), (NE, FE, E), Q4_0),
                    (b + "ffn_down_exps.weight", ("q4", 0.2), (NE, E, FE), Q4_0)]
    tensors += [("output_norm.weight", "ones", (E,), None), ("output.weight", ("q4", 1.0), (V, E), Q4_0)]

    def nbytes(shape, qt):
        n = int(np.prod(shape))
        return n * 4 if qt is None else n // 32 * (18 if qt == Q4_0 else 34)

    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    w = GGUFWriter(a.out, "qwen3moe")
    U32, F32 = GGUFValueType.UINT32, GGUFValueType.FLOAT32
    kv = {"context_length": (U32, 4096), "embedding_length": (U32, E), "feed_forward_length": (U32, 6144),
          "block_count": (U32, L), "attention.head_count": (U32, NH), "attention.head_count_kv": (U32, NKV),
          "attention.key_length": (U32, HD), "attention.value_length": (U32, HD),
          "attention.layer_norm_rms_epsilon": (F32, 1e-6), "rope.freq_base": (F32, 1000000.0),
          "expert_count": (U32, NE), "expert_used_count": (U32, K), "expert_feed_forward_length": (U32, FE)}
    for k_, (t, v) in kv.items():
        w.add_key_value(f"qwen3moe.{k_}", v, t)
    w.add_string("general.name", f"big-moe-{L}l (random weights, built routing: tools/gen_big_moe.py)")
    for key, val, vt, sub_ in tok:
        w.add_key_value(key, val, vt, sub_type=sub_)
    for name, kind, shape, qt in tensors:
        # the shape the writer wants: GGUF dims reversed, bytes for quantized rows
        if qt is None:
            w.add_tensor_info(name, shape, np.dtype(np.float32), nbytes(shape, qt))
        else:
            byte_shape = shape[:-1] + (shape[-1] // 32 * (18 if qt == Q4_0 else 34),)
            w.add_tensor_info(name, byte_shape, np.dtype(np.uint8), nbytes(shape, qt), raw_dtype=qt)
    total = sum(nbytes(s, q) for _, _, s, q in tensors)
    print(f"gen_big_moe: {a.out}: {L} layers, {total / 2**30:.2f} GiB of tensors", file=sys.stderr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    t0 = time.time()
    done = 0
    for name, kind, shape, qt in tensors:
        if kind == "ones":
            arr = np.ones(shape, dtype=np.float32)
        elif kind == "embd":
            arr = np.empty((V, (E // 32) * 34), dtype=np.uint8)
            for r0 in range(0, V, 4096):
                r1 = min(V, r0 + 4096)
                x = rng.standard_normal((r1 - r0, E)).astype(np.float32) + 12.0 * u[topic[r0:r1]]
                arr[r0:r1] = q8_0_rows(x)
        elif kind[0] == "router":
            g = np.arange(NE) // G
            noise = rng.standard_normal((NE, E)).astype(np.float32)
            noise /= np.linalg.norm(noise, axis=1, keepdims=True)
            arr = (8.0 * u[g] + 2.0 * noise).astype(np.float32)
        else:
            gain = kind[1]
            if len(shape) == 3:
                arr = np.concatenate([q4_0_random(rng, shape[1], shape[2], gain) for _ in range(shape[0])])
                arr = arr.reshape(shape[0], shape[1], -1)
            else:
                arr = q4_0_random(rng, shape[0], shape[1], gain)
        w.write_tensor_data(arr)
        done += arr.nbytes
        print(f"\rgen_big_moe: {done / 2**30:.2f} / {total / 2**30:.2f} GiB ({time.time() - t0:.0f} s)", end="",
              file=sys.stderr, flush=True)
    w.close()
    print(file=sys.stderr)


if __name__ == "__main__":
    main()
