#!/usr/bin/env python3
"""gen_bench_models.py - random-weight GGUF files with the shapes of the models
llama.cpp's reference figures were measured on (docs/PERFORMANCE.md), for
benchmarks only (the weights are noise; the outputs mean nothing).

  SmolLM2-135M shape (llama, 30 layers, n_embd 576, 9/3 heads, n_ff 1536,
  vocab 49152, tied output):          Q4_0, Q4_1, Q8_0
  Llama-3.2-1B shape (llama, 16 layers, n_embd 2048, 32/8 heads, n_ff 8192,
  vocab 128256, tied output, llama3 rope factors): Q4_0, Q4_1
  LLaDA-8B shape (llada diffusion LLM, 32 layers, n_embd 4096, 32 heads, no
  GQA, n_ff 12288, vocab 126464, untied output, theta 500000, non-causal,
  mask 126336, EOS 126081, EoT 126348): Q4_0, about 4.6 GB, only on request
  (--only llada-8b-Q4_0.gguf), for the diffusion decoders' speed figures
  Llama-3.2-1B shape, Q5_K and Q3_K (file types Q5_K_S, Q3_K_S), only on
  request (--only llama3.2-1b-Q5_K.gguf llama3.2-1b-Q3_K.gguf), for those
  panel kernels, and in Q2_K (file type Q2_K: every layer matrix Q2_K; --only
  llama3.2-1b-Q2_K.gguf) for its panel kernel; SmolLM2-135M shape in Q5_1 (file type Q5_1) on request
  (--only smollm2-135m-Q5_1.gguf), for its panel kernel

Tensor types follow llama-quantize for those file types: every layer matrix
in the file type; the tied token embedding (which is also the output
projection) in Q8_0 when n_embd is not a multiple of 256 (135M) or for the
Q8_0 file type, else Q6_K (1B); an untied model (LLaDA) has its token
embedding in the file type and its output projection in Q6_K. Norm weights
are F32 ones. Blocks are written
directly as random bytes with sane f16 scales (no quantization step), so the
1B files take a few seconds each. The tokenizer metadata is the real SmolLM2
one copied from models/SmolLM2-135M-Instruct.Q4_1.gguf, padded to the
shape's vocabulary with [PAD<id>] tokens (as llama.cpp's converter pads ids
missing from a tokenizer; llama.cpp refuses an embedding taller than the
token list); for LLaDA the mask / EOS / EoT tokens are put at LLaDA's ids,
so that every id a decoder may produce detokenizes.

usage: gen_bench_models.py [OUT_DIR (default models/bench)] [--models-dir models] [--only NAME ...]
"""
import argparse
import math
import os
import sys
import time

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType, GGUFWriter

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gen_tiny_models import read_tokenizer_fields  # noqa: E402  (same directory)

SHAPES = {
    "smollm2-135m": dict(n_embd=576, n_layer=30, n_head=9, n_head_kv=3, head_dim=64, n_ff=1536, n_vocab=49152,
                         rope_base=100000.0, ctx=8192, llama3=None),
    "llama3.2-1b": dict(n_embd=2048, n_layer=16, n_head=32, n_head_kv=8, head_dim=64, n_ff=8192, n_vocab=128256,
                        rope_base=500000.0, ctx=131072,
                        llama3=dict(factor=32.0, low=1.0, high=4.0, orig=8192)),
    "llada-8b": dict(arch="llada", n_embd=4096, n_layer=32, n_head=32, n_head_kv=32, head_dim=128, n_ff=12288,
                     n_vocab=126464, rope_base=500000.0, ctx=4096, llama3=None, tied=False,
                     diffusion=dict(mask=(126336, "<|mdm_mask|>"), eos=(126081, "<|endoftext|>"),
                                    eot=(126348, "<|eot_id|>"))),
}
FILES = [("smollm2-135m", "Q4_0"), ("smollm2-135m", "Q4_1"), ("smollm2-135m", "Q8_0"),
         ("llama3.2-1b", "Q4_0"), ("llama3.2-1b", "Q4_1")]
# written only when --only names them: LLaDA (~4.6 GB), and 1Bs of K-quants
# (Q5_K_S / Q3_K_S: every layer matrix Q5_K / Q3_K) for those panel kernels
ON_REQUEST = [("llada-8b", "Q4_0"), ("llama3.2-1b", "Q5_K"), ("llama3.2-1b", "Q3_K"), ("llama3.2-1b", "Q2_K"),
              ("smollm2-135m", "Q5_1")]
FILE_TYPE = {"Q4_0": 2, "Q4_1": 3, "Q5_1": 9, "Q8_0": 7, "Q2_K": 10, "Q3_K": 11, "Q5_K": 16}  # llama_ftype (MOSTLY_Q3_K_S, _Q5_K_S)

# (bytes per block, elements per block)
BLOCK = {QT.Q4_0: (18, 32), QT.Q4_1: (20, 32), QT.Q5_1: (24, 32), QT.Q8_0: (34, 32), QT.Q2_K: (84, 256), QT.Q3_K: (110, 256), QT.Q5_K: (176, 256),
         QT.Q6_K: (210, 256)}


def random_blocks(rng, qt, n_out, n_in):
    """n_out rows of n_in values of type qt as raw bytes [n_out, row_bytes]:
    random quants, f16 scales chosen so that a weight's std is ~1/sqrt(n_in)."""
    bs, be = BLOCK[qt]
    nb = n_out * (n_in // be)
    raw = np.frombuffer(rng.bytes(nb * bs), dtype=np.uint8).reshape(nb, bs).copy()
    target = 1.0 / math.sqrt(n_in)
    # Q5_K: 5-bit q (std 9.2) times a 6-bit sub-block scale (~32)
    # Q3_K: (u - 4) in -4..3 (std 2.3) times a signed 6-bit group scale (std 18.5)
    # Q2_K: 2-bit q (std 1.1) times a 4-bit group scale (~8.7 rms)
    quant_std = {QT.Q4_0: 4.6, QT.Q4_1: 4.6, QT.Q5_1: 9.2, QT.Q8_0: 74.0, QT.Q2_K: 1.1 * 8.7, QT.Q3_K: 2.3 * 18.5, QT.Q5_K: 9.2 * 32.0,
                 QT.Q6_K: 18.5 * 74.0}[qt]
    d = (target / quant_std * (1.0 + 0.1 * rng.standard_normal(nb))).astype(np.float16)
    if qt == QT.Q6_K:
        raw[:, 208:210] = d.view(np.uint8).reshape(nb, 2)
    elif qt == QT.Q3_K:
        raw[:, 108:110] = d.view(np.uint8).reshape(nb, 2)
    elif qt == QT.Q2_K:  # d, and dmin: the group mins (4-bit, ~7.5) take off about d * 7.5 * 1.5
        raw[:, 80:82] = d.view(np.uint8).reshape(nb, 2)
        raw[:, 82:84] = (1.5 * d.astype(np.float32)).astype(np.float16).view(np.uint8).reshape(nb, 2)
    else:
        raw[:, 0:2] = d.view(np.uint8).reshape(nb, 2)
    if qt == QT.Q5_K:  # dmin: the sub-block mins (6-bit, ~32) take off about d * 32 * 15.5
        raw[:, 2:4] = (15.5 * d.astype(np.float32)).astype(np.float16).view(np.uint8).reshape(nb, 2)
    if qt in (QT.Q4_1, QT.Q5_1):  # m centres the unsigned quants: w = d q + m, q in 0..15 (0..31)
        half = 7.5 if qt == QT.Q4_1 else 15.5
        raw[:, 2:4] = (-half * d.astype(np.float32)).astype(np.float16).view(np.uint8).reshape(nb, 2)
    return raw.reshape(n_out, (n_in // be) * bs)


def llama3_factors(base, n_rot, l3):
    """rope_freqs.weight as llama.cpp's converter writes it for llama3 scaling."""
    out = []
    for i in range(0, n_rot, 2):
        freq = 1.0 / (base ** (i / n_rot))
        wavelen = 2 * math.pi / freq
        if wavelen < l3["orig"] / l3["high"]:
            out.append(1.0)
        elif wavelen > l3["orig"] / l3["low"]:
            out.append(l3["factor"])
        else:
            smooth = (l3["orig"] / wavelen - l3["low"]) / (l3["high"] - l3["low"])
            out.append(1.0 / ((1 - smooth) / l3["factor"] + smooth))
    return np.array(out, dtype=np.float32)


def padded_tok_fields(tok_fields, n_vocab):
    """The tokenizer padded to n_vocab with [PAD<id>] (UNUSED) tokens, as
    llama.cpp's converter pads ids a tokenizer lacks: llama.cpp takes the
    vocabulary size from the token list and refuses a token_embd of another
    height, so the 1B shape needs it to load there too."""
    out = []
    for key, val, vt, sub in tok_fields:
        if key == "tokenizer.ggml.tokens":
            val = val + [f"[PAD{i}]" for i in range(len(val), n_vocab)]
        elif key == "tokenizer.ggml.token_type":
            val = val + [5] * (n_vocab - len(val))  # UNUSED
        out.append((key, val, vt, sub))
    return out


def diffusion_tok_fields(tok_fields, n_vocab, dif):
    """The tokenizer padded to n_vocab with [PAD<id>] (UNUSED) tokens and
    the diffusion specials (CONTROL) at their ids; EOS / EoT / mask ids set."""
    out = []
    for key, val, vt, sub in tok_fields:
        if key == "tokenizer.ggml.tokens":
            val = val + [f"[PAD{i}]" for i in range(len(val), n_vocab)]
            for tid, text in dif.values():
                val[tid] = text
        elif key == "tokenizer.ggml.token_type":
            val = val + [5] * (n_vocab - len(val))  # UNUSED
            for tid, _ in dif.values():
                val[tid] = 3  # CONTROL
        elif key in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id", "tokenizer.ggml.eot_token_id",
                     "tokenizer.ggml.add_bos_token"):
            continue
        out.append((key, val, vt, sub))
    out += [("tokenizer.ggml.eos_token_id", dif["eos"][0], GGUFValueType.UINT32, None),
            ("tokenizer.ggml.padding_token_id", dif["eos"][0], GGUFValueType.UINT32, None),
            ("tokenizer.ggml.eot_token_id", dif["eot"][0], GGUFValueType.UINT32, None),
            ("tokenizer.ggml.mask_token_id", dif["mask"][0], GGUFValueType.UINT32, None),
            ("tokenizer.ggml.add_bos_token", True, GGUFValueType.BOOL, None)]
    return out


def write(path, shape_name, ftype, tok_fields, seed):
    sp = SHAPES[shape_name]
    rng = np.random.default_rng(seed)
    qt = getattr(QT, ftype)
    E, F, L, V = sp["n_embd"], sp["n_ff"], sp["n_layer"], sp["n_vocab"]
    H, HKV, D = sp["n_head"], sp["n_head_kv"], sp["head_dim"]
    arch, tied = sp.get("arch", "llama"), sp.get("tied", True)
    # the tied embedding is also the output projection: typed as an output
    out_qt = QT.Q8_0 if (E % 256 or qt == QT.Q8_0) else QT.Q6_K
    emb_qt = out_qt if tied else qt

    w = GGUFWriter(path, arch)
    w.add_string("general.name", f"bench {shape_name} {ftype} (random weights)")
    w.add_uint32("general.file_type", FILE_TYPE[ftype])
    w.add_uint32(f"{arch}.context_length", sp["ctx"])
    w.add_uint32(f"{arch}.embedding_length", E)
    w.add_uint32(f"{arch}.feed_forward_length", F)
    w.add_uint32(f"{arch}.block_count", L)
    w.add_uint32(f"{arch}.attention.head_count", H)
    w.add_uint32(f"{arch}.attention.head_count_kv", HKV)
    w.add_uint32(f"{arch}.attention.key_length", D)
    w.add_uint32(f"{arch}.attention.value_length", D)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_float32(f"{arch}.rope.freq_base", sp["rope_base"])
    w.add_uint32(f"{arch}.rope.dimension_count", D)
    w.add_uint32(f"{arch}.vocab_size", V)
    if "diffusion" in sp:  # as llama.cpp's LLaDA converter writes them
        w.add_bool(f"{arch}.attention.causal", False)
        w.add_bool("diffusion.shift_logits", False)
        tok_fields = diffusion_tok_fields(tok_fields, V, sp["diffusion"])
    else:
        tok_fields = padded_tok_fields(tok_fields, V)
    for key, val, vt, sub in tok_fields:
        w.add_key_value(key, val, vt, sub_type=sub)

    def qmat(name, n_out, n_in, t=qt):
        w.add_tensor(name, random_blocks(rng, t, n_out, n_in), raw_dtype=t)  # byte shape -> [n_out, n_in]

    ones = np.ones(E, dtype=np.float32)
    qmat("token_embd.weight", V, E, emb_qt)
    w.add_tensor("output_norm.weight", ones)
    if not tied:
        qmat("output.weight", V, E, out_qt)
    if sp["llama3"]:
        w.add_tensor("rope_freqs.weight", llama3_factors(sp["rope_base"], D, sp["llama3"]))
    for il in range(L):
        p = f"blk.{il}."
        w.add_tensor(p + "attn_norm.weight", ones)
        qmat(p + "attn_q.weight", H * D, E)
        qmat(p + "attn_k.weight", HKV * D, E)
        qmat(p + "attn_v.weight", HKV * D, E)
        qmat(p + "attn_output.weight", E, H * D)
        w.add_tensor(p + "ffn_norm.weight", ones)
        qmat(p + "ffn_gate.weight", F, E)
        qmat(p + "ffn_up.weight", F, E)
        qmat(p + "ffn_down.weight", E, F)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir", nargs="?", default=os.path.join(HERE, "..", "models", "bench"))
    ap.add_argument("--models-dir", default=os.path.join(HERE, "..", "models"))
    ap.add_argument("--only", nargs="*", help="file names (e.g. smollm2-135m-Q4_0.gguf) to (re)generate")
    a = ap.parse_args()
    src = os.path.join(a.models_dir, "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(src):
        sys.exit(f"missing {src} (its tokenizer is copied): run tools/fetch_models.sh")
    tok = read_tokenizer_fields(src, 1 << 30)
    os.makedirs(a.out_dir, exist_ok=True)
    for i, (shape, ft) in enumerate(FILES + ON_REQUEST):
        name = f"{shape}-{ft}.gguf"
        if (a.only and name not in a.only) or (not a.only and (shape, ft) in ON_REQUEST):
            continue
        t0 = time.time()
        path = os.path.join(a.out_dir, name)
        write(path, shape, ft, tok, seed=1234 + i)
        print(f"{path}: {os.path.getsize(path) / 2**20:.1f} MiB in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
