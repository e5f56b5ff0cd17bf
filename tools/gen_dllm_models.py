#!/usr/bin/env python3
"""gen_dllm_models.py - tiny random-weight diffusion-LLM GGUF files (`llada`,
`dream`) as llama.cpp's converter writes them, plus the same weights in
HF transformers naming, for the float-precision oracle
(tests/test_dllm_oracle.py).

transformers' GGUF loader does not know these architectures, so the oracle
builds the HF model from the arrays written here:
  - LLaDA is a Llama forward with bidirectional attention: HF
    LlamaForCausalLM. The converter (LLaDAModel, undo_permute) permutes the
    rows of Q and K from HF's split-halves rotary layout to GGUF's
    adjacent-pair layout, exactly as for llama; the GGUF file gets the
    permuted rows, the .npz the HF ones.
  - Dream is a Qwen2 forward (Q/K/V biases, NeoX rotary, no permutation)
    with bidirectional attention: HF Qwen2ForCausalLM.

For each NAME: NAME.gguf, NAME.npz (HF state dict, float32) and NAME.json
(HF class and config, the special ids, and token ids to test).

Metadata as the converter writes it: `{arch}.attention.causal = false`,
`tokenizer.ggml.mask_token_id`, `diffusion.shift_logits = false` for llada
(the dream converter writes none: absent means true for dream), no
key_length (head_dim = n_embd / n_head), rope.dimension_count for llada only.

Tokenizer: SmolLM2's (gpt2 BPE), cut to its first 640 tokens as in
gen_tiny_models.py, with the diffusion specials appended as CONTROL tokens:
  llada: <|mdm_mask|> (mask), <|eot_id|> (EoT); EOS <|endoftext|> (id 0),
         add_bos true (the converter sets it), BOS <|im_start|> (1);
  dream: <|mask|> (mask); EOS <|endoftext|> (0), EoT <|im_end|> (2).
The chat template stays SmolLM2's ChatML (the real LLaDA's is Llama-3 style).

usage: gen_dllm_models.py OUT_DIR [--models-dir DIR] [--only NAME,...]
"""
import argparse
import json
import math
import os
import sys

import numpy as np
from gguf import GGUFValueType, GGUFWriter

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gen_tiny_models import N_VOCAB, read_tokenizer_fields  # noqa: E402  (same directory)

N_TEST_TOKENS = 40
N_PROMPT = 16  # test canvas: 16 random prompt tokens, then 24 of which ~half are masks

SPECS = {
    # LLaDA-8B's structure scaled down: no GQA, SwiGLU, normal rope, theta
    # 500000, untied output, no biases.
    "llada": dict(arch="llada", n_embd=64, n_ff=96, n_layer=2, n_head=4, n_head_kv=4, rope_base=500000.0,
                  eps=1e-5, bias=False, specials=["<|mdm_mask|>", "<|eot_id|>"]),
    # Dream-7B's: GQA (4 q heads / 2 kv heads), Q/K/V biases, NeoX rope,
    # theta 1e6, untied output.
    "dream": dict(arch="dream", n_embd=64, n_ff=96, n_layer=2, n_head=4, n_head_kv=2, rope_base=1000000.0,
                  eps=1e-6, bias=True, specials=["<|mask|>"]),
}
TOKEN_TYPE_CONTROL = 3


def permute_rows(w, n_head):
    """llama.cpp's converter permutation of Q/K rows (LlamaModel.permute /
    LLaDAModel.permute): per head, HF's rotary halves [x0..x_{d/2-1} |
    x_{d/2}..] become interleaved pairs (x0, x_{d/2}), (x1, x_{d/2+1}), ..."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def tokenizer_fields(src, spec):
    """SmolLM2's tokenizer cut to N_VOCAB tokens, plus the specials; returns
    (fields, ids) with ids = {mask, eos, eot, bos, n_vocab}."""
    fields = read_tokenizer_fields(src, N_VOCAB)
    out, ids = [], {}
    for key, val, vt, sub in fields:
        if key == "tokenizer.ggml.tokens":
            base = len(val)
            val = val + spec["specials"]
        elif key == "tokenizer.ggml.token_type":
            val = val + [TOKEN_TYPE_CONTROL] * len(spec["specials"])
        elif key == "tokenizer.ggml.scores":
            val = val + [0.0] * len(spec["specials"])
        elif key in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.add_bos_token", "tokenizer.ggml.eot_token_id",
                     "tokenizer.ggml.padding_token_id"):
            continue  # set below
        out.append((key, val, vt, sub))
    ids["mask"] = base
    ids["eos"] = 0  # <|endoftext|>
    ids["bos"] = 1  # <|im_start|>
    if spec["arch"] == "llada":
        ids["eot"] = base + 1  # <|eot_id|>
        add_bos = True
    else:
        ids["eot"] = 2  # <|im_end|>
        add_bos = False
    ids["n_vocab"] = base + len(spec["specials"])
    out += [("tokenizer.ggml.eos_token_id", ids["eos"], GGUFValueType.UINT32, None),
            ("tokenizer.ggml.eot_token_id", ids["eot"], GGUFValueType.UINT32, None),
            ("tokenizer.ggml.padding_token_id", ids["eos"], GGUFValueType.UINT32, None),
            ("tokenizer.ggml.mask_token_id", ids["mask"], GGUFValueType.UINT32, None),
            ("tokenizer.ggml.add_bos_token", add_bos, GGUFValueType.BOOL, None)]
    return out, ids


def hf_weights(spec, n_vocab, rng):
    """Random weights in HF naming (float32), scaled so activations stay O(1)."""
    E, F, L = spec["n_embd"], spec["n_ff"], spec["n_layer"]
    H, HKV = spec["n_head"], spec["n_head_kv"]
    D = E // H

    def mat(n_out, n_in, scale=None):
        s = scale if scale is not None else 1.0 / math.sqrt(n_in)
        return (rng.standard_normal((n_out, n_in)) * s).astype(np.float32)

    def norm(n):
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    def bias(n):
        return (0.3 * rng.standard_normal(n)).astype(np.float32)

    sd = {"model.embed_tokens.weight": mat(n_vocab, E, 1.0), "model.norm.weight": norm(E),
          "lm_head.weight": mat(n_vocab, E)}
    for i in range(L):
        p = f"model.layers.{i}."
        sd[p + "input_layernorm.weight"] = norm(E)
        sd[p + "self_attn.q_proj.weight"] = mat(H * D, E)
        sd[p + "self_attn.k_proj.weight"] = mat(HKV * D, E)
        sd[p + "self_attn.v_proj.weight"] = mat(HKV * D, E)
        if spec["bias"]:
            sd[p + "self_attn.q_proj.bias"] = bias(H * D)
            sd[p + "self_attn.k_proj.bias"] = bias(HKV * D)
            sd[p + "self_attn.v_proj.bias"] = bias(HKV * D)
        sd[p + "self_attn.o_proj.weight"] = mat(E, H * D)
        sd[p + "post_attention_layernorm.weight"] = norm(E)
        sd[p + "mlp.gate_proj.weight"] = mat(F, E)
        sd[p + "mlp.up_proj.weight"] = mat(F, E)
        sd[p + "mlp.down_proj.weight"] = mat(E, F)
    return sd


def gguf_tensors(spec, sd):
    """The HF arrays under llama.cpp's names, Q/K permuted for llada."""
    H, HKV = spec["n_head"], spec["n_head_kv"]
    llada = spec["arch"] == "llada"
    t = {"token_embd.weight": sd["model.embed_tokens.weight"], "output_norm.weight": sd["model.norm.weight"],
         "output.weight": sd["lm_head.weight"]}
    names = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
             "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
             "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
             "self_attn.v_proj.bias": "attn_v.bias", "self_attn.o_proj.weight": "attn_output.weight",
             "post_attention_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
             "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}
    for i in range(spec["n_layer"]):
        for hf, gg in names.items():
            k = f"model.layers.{i}.{hf}"
            if k not in sd:
                continue
            a = sd[k]
            if llada and hf.startswith("self_attn.q_proj"):
                a = permute_rows(a, H)
            elif llada and hf.startswith("self_attn.k_proj"):
                a = permute_rows(a, HKV)
            t[f"blk.{i}.{gg}"] = np.ascontiguousarray(a)
    return t


def hf_config(spec, n_vocab, ids):
    """Keyword arguments of LlamaConfig / Qwen2Config (transformers 5.x)."""
    E, H = spec["n_embd"], spec["n_head"]
    c = dict(vocab_size=n_vocab, hidden_size=E, intermediate_size=spec["n_ff"],
             num_hidden_layers=spec["n_layer"], num_attention_heads=H, num_key_value_heads=spec["n_head_kv"],
             rms_norm_eps=spec["eps"], max_position_embeddings=128, tie_word_embeddings=False,
             rope_parameters={"rope_type": "default", "rope_theta": spec["rope_base"]},
             bos_token_id=ids["bos"], eos_token_id=ids["eos"], pad_token_id=ids["eos"])
    if spec["arch"] == "llada":
        c.update(head_dim=E // H, attention_bias=False, mlp_bias=False)
    return c


def write_model(out_dir, name, spec, src, seed, overrides=None):
    """Writes NAME.gguf/.npz/.json; overrides {key: (vtype, value) or None}
    replaces, adds or (None) drops metadata keys: broken files for the
    load-error checks. "general.architecture" is set through spec["arch"]."""
    rng = np.random.default_rng(seed)
    fields, ids = tokenizer_fields(src, spec)
    V = ids["n_vocab"]
    arch = spec["arch"]
    E, H = spec["n_embd"], spec["n_head"]
    sd = hf_weights(spec, V, rng)

    U32, F32, BOOL = GGUFValueType.UINT32, GGUFValueType.FLOAT32, GGUFValueType.BOOL
    kv = {"general.name": (GGUFValueType.STRING, f"tiny-{arch}"),
          f"{arch}.context_length": (U32, 128), f"{arch}.embedding_length": (U32, E),
          f"{arch}.feed_forward_length": (U32, spec["n_ff"]), f"{arch}.block_count": (U32, spec["n_layer"]),
          f"{arch}.attention.head_count": (U32, H), f"{arch}.attention.head_count_kv": (U32, spec["n_head_kv"]),
          f"{arch}.rope.freq_base": (F32, spec["rope_base"]),
          f"{arch}.attention.layer_norm_rms_epsilon": (F32, spec["eps"]),
          f"{arch}.attention.causal": (BOOL, False)}
    if arch == "llada":
        kv.update({f"{arch}.vocab_size": (U32, V), f"{arch}.rope.dimension_count": (U32, E // H),
                   "diffusion.shift_logits": (BOOL, False)})
    for key, val, vt, sub in fields:
        kv[key] = (vt, val, sub)
    kv.update(overrides or {})
    w = GGUFWriter(os.path.join(out_dir, name + ".gguf"), arch)
    for key, tv in kv.items():
        if tv is not None:
            w.add_key_value(key, tv[1], tv[0], sub_type=tv[2] if len(tv) > 2 else None)
    for tname, t in gguf_tensors(spec, sd).items():
        w.add_tensor(tname, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    np.savez(os.path.join(out_dir, name + ".npz"), **sd)
    trng = np.random.default_rng(seed + 1000)
    tokens = trng.integers(0, ids["n_vocab"], N_TEST_TOKENS)
    tokens[N_PROMPT:][trng.random(N_TEST_TOKENS - N_PROMPT) < 0.5] = ids["mask"]
    meta = {"arch": arch, "hf_class": "llama" if arch == "llada" else "qwen2",
            "hf_config": hf_config(spec, V, ids), "n_vocab": V, "ids": ids, "tokens": tokens.tolist(),
            "shift_logits": arch == "dream"}
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        json.dump(meta, f, indent=1)
    return os.path.join(out_dir, name + ".gguf")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--models-dir", default=os.path.join(HERE, "..", "models"))
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    src = os.path.join(a.models_dir, "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(src):
        sys.exit(f"missing {src} (its tokenizer is copied): run tools/fetch_models.sh")
    os.makedirs(a.out_dir, exist_ok=True)
    for seed, name in enumerate(SPECS):
        if a.only and name not in a.only.split(","):
            continue
        print("wrote", write_model(a.out_dir, name, SPECS[name], src, 600 + seed))


if __name__ == "__main__":
    main()
