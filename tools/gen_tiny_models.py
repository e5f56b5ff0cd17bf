#!/usr/bin/env python3
"""gen_tiny_models.py - writes tiny random-weight GGUF models, one per
architecture variant tessera supports, for the oracle test
(tests/test_tiny_oracle.py) to run through both tessera and HF transformers.

Each model is complete enough for `AutoModelForCausalLM.from_pretrained(dir,
gguf_file=...)`: F32 weights named as llama.cpp names them, the `{arch}.*`
hyper-parameters, and the tokenizer metadata copied from a real model
(SmolLM2 for llama/qwen2/qwen3, Gemma 3 for gemma3), so tessera's loader
(which also builds the tokenizer) accepts it too. Next to NAME.gguf goes
NAME.json: the config overrides transformers needs for what its GGUF loader
does not read (rope scaling, Qwen3 head_dim, Gemma's query_pre_attn_scalar and
soft-capping) - each documented below - and the token ids to test.

Weights are scaled so activations stay O(1) (projections ~ 1/sqrt(n_in)):
attention is then peaked rather than uniform and position handling matters.

usage: gen_tiny_models.py OUT_DIR [--models-dir DIR] [--only NAME,...]
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
from gguf import GGUFValueType, GGUFWriter

N_TEST_TOKENS = 40
N_VOCAB = 640  # tokens kept from the source vocabulary

# name -> spec. Shapes: n_embd, n_ff, n_layer, n_head, n_head_kv, head_dim.
SPECS = {
    # GQA (4 q heads share 2 kv heads), normal (adjacent-pair) rope, tied output.
    "llama_gqa": dict(arch="llama", tok="smollm", n_embd=64, n_ff=96, n_layer=2, n_head=4, n_head_kv=2,
                      head_dim=16, rope_base=10000.0, tied=True),
    # MQA, head_dim != n_embd/n_head, separate output, linear rope scaling x2.
    "llama_mqa_linear": dict(arch="llama", tok="smollm", n_embd=64, n_ff=96, n_layer=2, n_head=4, n_head_kv=1,
                             head_dim=32, rope_base=500000.0, tied=False, linear=2.0),
    # llama3 rope scaling through the rope_freqs tensor (as llama.cpp's
    # converter writes it); original context 32 so that short, medium and long
    # wavelengths all occur within head_dim 16.
    "llama3_ropefreqs": dict(arch="llama", tok="smollm", n_embd=64, n_ff=96, n_layer=2, n_head=4, n_head_kv=2,
                             head_dim=16, rope_base=10000.0, tied=True,
                             llama3=dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, orig_ctx=32)),
    # Q/K/V biases, NeoX rope, untied output.
    "qwen2": dict(arch="qwen2", tok="smollm", n_embd=64, n_ff=96, n_layer=2, n_head=4, n_head_kv=2,
                  head_dim=16, rope_base=1000000.0, tied=False, bias=True),
    # per-head Q/K RMSNorm, head_dim 32 (4*32 != 64), NeoX rope.
    "qwen3": dict(arch="qwen3", tok="smollm", n_embd=64, n_ff=96, n_layer=2, n_head=4, n_head_kv=2,
                  head_dim=32, rope_base=1000000.0, tied=True, qk_norm=True),
    # 7 layers: 0-4 and 6 local (window 8), 5 global (every 6th); local rope
    # base 10000, global 1e6; post norms; GeGLU; embedding scale; final logit
    # soft-capping 30 (exercised although real Gemma 3 files do not set it).
    "gemma3": dict(arch="gemma3", tok="gemma", n_embd=64, n_ff=96, n_layer=7, n_head=4, n_head_kv=2,
                   head_dim=16, rope_base=1000000.0, tied=True, qk_norm=True, swa=8, final_softcap=30.0),
}

# Mixture-of-experts models: written from HF-layout weights (NAME.hf.npz)
# into llama.cpp's GGUF layout, because transformers' GGUF loader reads none
# of olmoe or Mixtral-as-llama: the oracle builds the HF model from
# NAME.json's hf_class and hf_config and loads NAME.hf.npz into it.
# Router weights are scaled (x3) so that the top k are decided by clear
# margins and change from token to token.
MOE_SPECS = {
    # qwen3 attention (per-head Q/K norms, head_dim 32 != 64/4, NeoX rope);
    # softmax over 8 experts, top 2 renormalized; the dense width (96) is
    # in the file but unused (every layer is sparse).
    "qwen3moe": dict(arch="qwen3moe", hf_class="Qwen3MoeForCausalLM", n_embd=64, n_ff=96, n_ff_exp=32, n_layer=2,
                     n_head=4, n_head_kv=2, head_dim=32, n_expert=8, n_expert_used=2, rope_base=1000000.0),
    # full-width Q/K norms, NeoX rope; softmax over 8 experts, top 3 as they are
    "olmoe": dict(arch="olmoe", hf_class="OlmoeForCausalLM", n_embd=64, n_ff=48, n_ff_exp=48, n_layer=2,
                  n_head=4, n_head_kv=2, head_dim=16, n_expert=8, n_expert_used=3, rope_base=10000.0),
    # Mixtral: llama with experts (Q/K permuted for adjacent-pair rope as
    # llama.cpp's converter does); softmax over the top 2 of 4
    "mixtral": dict(arch="llama", hf_class="MixtralForCausalLM", n_embd=64, n_ff=40, n_ff_exp=40, n_layer=2,
                    n_head=4, n_head_kv=2, head_dim=16, n_expert=4, n_expert_used=2, rope_base=1000000.0),
}

TOKENIZER_SOURCES = {"smollm": "SmolLM2-135M-Instruct.Q4_1.gguf", "gemma": "gemma-3-270m-q4_k_m.gguf"}


_SCALAR_FMT = {GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H",
               GGUFValueType.INT16: "<h", GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
               GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?", GGUFValueType.UINT64: "<Q",
               GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d"}


def read_kv(path):
    """The metadata of a GGUF file as {key: (value, vtype, subtype)}. A small
    sequential parser: gguf.GGUFReader builds numpy views of every element of
    every array and needs ~10 s for Gemma's 262k-token vocabulary."""
    with open(path, "rb") as f:
        buf = f.read(64 << 20)  # metadata of the source models is well under this
    off = 0

    def take(fmt):
        nonlocal off
        v = struct.unpack_from(fmt, buf, off)[0]
        off += struct.calcsize(fmt)
        return v

    def take_str():
        nonlocal off
        n = take("<Q")
        v = buf[off:off + n].decode("utf-8")
        off += n
        return v

    def take_val(t):
        if t == GGUFValueType.STRING:
            return take_str()
        return take(_SCALAR_FMT[t])

    magic, version = buf[:4], struct.unpack_from("<I", buf, 4)[0]
    assert magic == b"GGUF" and version in (2, 3), f"{path}: not a GGUF v2/v3 file"
    off = 8
    take("<Q")  # tensor count
    n_kv = take("<Q")
    out = {}
    for _ in range(n_kv):
        key = take_str()
        t = GGUFValueType(take("<I"))
        if t == GGUFValueType.ARRAY:
            sub = GGUFValueType(take("<I"))
            n = take("<Q")
            if sub == GGUFValueType.STRING:
                val = [take_str() for _ in range(n)]
            else:
                fmt = _SCALAR_FMT[sub]
                sz = struct.calcsize(fmt)
                val = list(struct.unpack_from("<%d%s" % (n, fmt[1]), buf, off))
                off += n * sz
            out[key] = (val, t, sub)
        else:
            out[key] = (take_val(t), t, None)
    return out


def read_tokenizer_fields(path, n_keep):
    """The tokenizer.* fields of a real GGUF file as (key, value, vtype,
    subtype), with the vocabulary cut to its first n_keep tokens (special
    tokens, byte tokens and the first merged pieces come first in both source
    vocabularies) and the BPE merges cut to those whose parts and result all
    remain: a small but self-consistent tokenizer. A full 49k/262k vocabulary
    would make transformers' GGUF parsing take ~4 s/~15 s per load."""
    kv = read_kv(path)
    n_full = len(kv["tokenizer.ggml.tokens"][0])
    vocab = set(kv["tokenizer.ggml.tokens"][0][:n_keep])
    out = []
    for key, (val, vt, sub) in kv.items():
        if not key.startswith("tokenizer."):
            continue
        if vt == GGUFValueType.ARRAY and len(val) == n_full:
            val = val[:n_keep]
        if key == "tokenizer.ggml.merges":
            val = [mg for mg in val if (lambda a, b: a in vocab and b in vocab and a + b in vocab)(*mg.split(" ", 1))]
        out.append((key, val, vt, sub))
    return out


def llama3_rope_factors(base, n_rot, factor, low_freq_factor, high_freq_factor, orig_ctx):
    """rope_freqs as llama.cpp's convert_hf_to_gguf.py computes it for llama3."""
    freqs = 1.0 / (base ** (np.arange(0, n_rot, 2, dtype=np.float64) / n_rot))
    low_wavelen = orig_ctx / low_freq_factor
    high_wavelen = orig_ctx / high_freq_factor
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (orig_ctx / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def write_model(path, spec, tok_fields, seed, n_vocab=None, drop_keys=(), drop_tensors=(), bad_shapes=(),
                set_keys=None):
    """Writes one model. n_vocab defaults to the tokenizer's size. drop_keys,
    drop_tensors, bad_shapes (name, numpy shape) and set_keys ({suffix: (vtype,
    value)} under "{arch}.") produce broken files for the load-error tests."""
    rng = np.random.default_rng(seed)
    arch = spec["arch"]
    E, F, L = spec["n_embd"], spec["n_ff"], spec["n_layer"]
    H, HKV, D = spec["n_head"], spec["n_head_kv"], spec["head_dim"]
    if n_vocab is None:
        n_vocab = next(len(v) for k, v, *_ in tok_fields if k == "tokenizer.ggml.tokens")

    w = GGUFWriter(path, arch)
    kv = {
        "context_length": (GGUFValueType.UINT32, 128),
        "embedding_length": (GGUFValueType.UINT32, E),
        "feed_forward_length": (GGUFValueType.UINT32, F),
        "block_count": (GGUFValueType.UINT32, L),
        "attention.head_count": (GGUFValueType.UINT32, H),
        "attention.head_count_kv": (GGUFValueType.UINT32, HKV),
        "attention.key_length": (GGUFValueType.UINT32, D),
        "attention.value_length": (GGUFValueType.UINT32, D),
        "attention.layer_norm_rms_epsilon": (GGUFValueType.FLOAT32, 1e-6 if arch == "gemma3" else 1e-5),
        "rope.freq_base": (GGUFValueType.FLOAT32, spec["rope_base"]),
        "rope.dimension_count": (GGUFValueType.UINT32, D),
        "vocab_size": (GGUFValueType.UINT32, n_vocab),
    }
    if "linear" in spec:
        kv["rope.scaling.type"] = (GGUFValueType.STRING, "linear")
        kv["rope.scaling.factor"] = (GGUFValueType.FLOAT32, spec["linear"])
    if "swa" in spec:
        kv["attention.sliding_window"] = (GGUFValueType.UINT32, spec["swa"])
    if "final_softcap" in spec:
        kv["final_logit_softcapping"] = (GGUFValueType.FLOAT32, spec["final_softcap"])
    kv.update(set_keys or {})
    for k, (t, v) in kv.items():
        if k not in drop_keys:
            w.add_key_value(f"{arch}.{k}", v, t)
    w.add_string("general.name", f"tiny-{arch}")
    for key, val, vt, sub in tok_fields:
        w.add_key_value(key, val, vt, sub_type=sub)

    def mat(n_out, n_in, scale=None):
        s = scale if scale is not None else 1.0 / math.sqrt(n_in)
        return (rng.standard_normal((n_out, n_in)) * s).astype(np.float32)

    def norm(n):
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    tensors = {}
    tensors["token_embd.weight"] = mat(n_vocab, E, 1.0)
    tensors["output_norm.weight"] = norm(E)
    if not spec["tied"]:
        tensors["output.weight"] = mat(n_vocab, E)
    if "llama3" in spec:
        l3 = spec["llama3"]
        tensors["rope_freqs.weight"] = llama3_rope_factors(spec["rope_base"], D, l3["factor"], l3["low_freq_factor"],
                                                           l3["high_freq_factor"], l3["orig_ctx"])
    for i in range(L):
        p = f"blk.{i}."
        tensors[p + "attn_norm.weight"] = norm(E)
        tensors[p + "attn_q.weight"] = mat(H * D, E)
        tensors[p + "attn_k.weight"] = mat(HKV * D, E)
        tensors[p + "attn_v.weight"] = mat(HKV * D, E)
        tensors[p + "attn_output.weight"] = mat(E, H * D)
        if spec.get("bias"):
            tensors[p + "attn_q.bias"] = (0.3 * rng.standard_normal(H * D)).astype(np.float32)
            tensors[p + "attn_k.bias"] = (0.3 * rng.standard_normal(HKV * D)).astype(np.float32)
            tensors[p + "attn_v.bias"] = (0.3 * rng.standard_normal(HKV * D)).astype(np.float32)
        if spec.get("qk_norm"):
            tensors[p + "attn_q_norm.weight"] = norm(D)
            tensors[p + "attn_k_norm.weight"] = norm(D)
        if arch == "gemma3":
            tensors[p + "post_attention_norm.weight"] = norm(E)
            tensors[p + "post_ffw_norm.weight"] = norm(E)
        tensors[p + "ffn_norm.weight"] = norm(E)
        tensors[p + "ffn_gate.weight"] = mat(F, E)
        tensors[p + "ffn_up.weight"] = mat(F, E)
        tensors[p + "ffn_down.weight"] = mat(E, F)
    for name, shape in bad_shapes:
        tensors[name] = np.zeros(shape, dtype=np.float32)
    for name, t in tensors.items():
        if name not in drop_tensors:
            w.add_tensor(name, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def permute_qk(w, n_head):
    """llama.cpp's converter: HF's split-halves rope rows -> adjacent pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_moe_model(out_dir, name, spec, tok_fields, seed):
    """HF-layout random weights (NAME.hf.npz), the same weights as llama.cpp
    writes them (NAME.gguf: router ffn_gate_inp, expert arrays
    ffn_{gate,up,down}_exps, expert_count / expert_used_count /
    expert_feed_forward_length), and NAME.json's hf_class and hf_config."""
    rng = np.random.default_rng(seed)
    arch = spec["arch"]
    E, FE, L = spec["n_embd"], spec["n_ff_exp"], spec["n_layer"]
    H, HKV, D, NE = spec["n_head"], spec["n_head_kv"], spec["head_dim"], spec["n_expert"]
    V = next(len(v) for k, v, *_ in tok_fields if k == "tokenizer.ggml.tokens")

    def mat(*shape, scale=None):
        return (rng.standard_normal(shape) * (scale if scale is not None else 1.0 / math.sqrt(shape[-1]))).astype(np.float32)

    def norm(n):
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)
    hf = {"model.embed_tokens.weight": mat(V, E, scale=1.0), "model.norm.weight": norm(E), "lm_head.weight": mat(V, E)}
    for i in range(L):
        p = f"model.layers.{i}."
        hf[p + "input_layernorm.weight"] = norm(E)
        hf[p + "post_attention_layernorm.weight"] = norm(E)
        hf[p + "self_attn.q_proj.weight"] = mat(H * D, E)
        hf[p + "self_attn.k_proj.weight"] = mat(HKV * D, E)
        hf[p + "self_attn.v_proj.weight"] = mat(HKV * D, E)
        hf[p + "self_attn.o_proj.weight"] = mat(E, H * D)
        if arch == "qwen3moe":
            hf[p + "self_attn.q_norm.weight"] = norm(D)
            hf[p + "self_attn.k_norm.weight"] = norm(D)
        if arch == "olmoe":
            hf[p + "self_attn.q_norm.weight"] = norm(H * D)
            hf[p + "self_attn.k_norm.weight"] = norm(HKV * D)
        hf[p + "mlp.gate.weight"] = mat(NE, E, scale=3.0 / math.sqrt(E))
        hf[p + "mlp.experts.gate_up_proj"] = mat(NE, 2 * FE, E)  # [gate; up] rows, as transformers chunks them
        hf[p + "mlp.experts.down_proj"] = mat(NE, E, FE)
    np.savez(os.path.join(out_dir, name + ".hf.npz"), **hf)

    g = {"token_embd.weight": hf["model.embed_tokens.weight"], "output_norm.weight": hf["model.norm.weight"],
         "output.weight": hf["lm_head.weight"]}
    for i in range(L):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        q, k = hf[p + "self_attn.q_proj.weight"], hf[p + "self_attn.k_proj.weight"]
        if arch == "llama":  # adjacent-pair rope: the converter permutes Q/K
            q, k = permute_qk(q, H), permute_qk(k, HKV)
        g.update({b + "attn_norm.weight": hf[p + "input_layernorm.weight"],
                  b + "ffn_norm.weight": hf[p + "post_attention_layernorm.weight"],
                  b + "attn_q.weight": q, b + "attn_k.weight": k,
                  b + "attn_v.weight": hf[p + "self_attn.v_proj.weight"],
                  b + "attn_output.weight": hf[p + "self_attn.o_proj.weight"],
                  b + "ffn_gate_inp.weight": hf[p + "mlp.gate.weight"],
                  b + "ffn_gate_exps.weight": np.ascontiguousarray(hf[p + "mlp.experts.gate_up_proj"][:, :FE]),
                  b + "ffn_up_exps.weight": np.ascontiguousarray(hf[p + "mlp.experts.gate_up_proj"][:, FE:]),
                  b + "ffn_down_exps.weight": hf[p + "mlp.experts.down_proj"]})
        if p + "self_attn.q_norm.weight" in hf:
            g[b + "attn_q_norm.weight"] = hf[p + "self_attn.q_norm.weight"]
            g[b + "attn_k_norm.weight"] = hf[p + "self_attn.k_norm.weight"]
    w = GGUFWriter(os.path.join(out_dir, name + ".gguf"), arch)
    U32, F32 = GGUFValueType.UINT32, GGUFValueType.FLOAT32
    kv = {"context_length": (U32, 128), "embedding_length": (U32, E), "feed_forward_length": (U32, spec["n_ff"]),
          "block_count": (U32, L), "attention.head_count": (U32, H), "attention.head_count_kv": (U32, HKV),
          "attention.key_length": (U32, D), "attention.value_length": (U32, D),
          "attention.layer_norm_rms_epsilon": (F32, 1e-5), "rope.freq_base": (F32, spec["rope_base"]),
          "rope.dimension_count": (U32, D), "vocab_size": (U32, V), "expert_count": (U32, NE),
          "expert_used_count": (U32, spec["n_expert_used"])}
    if spec["n_ff_exp"] != spec["n_ff"]:
        kv["expert_feed_forward_length"] = (U32, FE)
    for k_, (t, v) in kv.items():
        w.add_key_value(f"{arch}.{k_}", v, t)
    w.add_string("general.name", f"tiny-{name}")
    for key, val, vt, sub_ in tok_fields:
        w.add_key_value(key, val, vt, sub_type=sub_)
    for n_, t in g.items():
        if spec.get("quant_experts") and n_.endswith("_exps.weight"):
            # Q8_0 experts (the streaming tests want experts in CPU panels)
            from gguf import GGMLQuantizationType, quants
            q = quants.quantize(t.astype(np.float32), GGMLQuantizationType.Q8_0)
            w.add_tensor(n_, q, raw_shape=q.shape, raw_dtype=GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(n_, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    rope = {"rope_type": "default", "rope_theta": spec["rope_base"]}
    cfg = dict(vocab_size=V, hidden_size=E, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=HKV,
               rms_norm_eps=1e-5, max_position_embeddings=128, tie_word_embeddings=False, rope_parameters=rope,
               num_experts_per_tok=spec["n_expert_used"])
    if arch == "qwen3moe":
        cfg.update(intermediate_size=spec["n_ff"], moe_intermediate_size=FE, head_dim=D, num_experts=NE,
                   norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[])
    elif arch == "olmoe":
        cfg.update(intermediate_size=FE, num_experts=NE, norm_topk_prob=False)
    else:
        cfg.update(intermediate_size=FE, num_local_experts=NE, head_dim=D)
    return cfg


def hf_overrides(spec):
    """Config overrides for transformers, for what its GGUF loader does not
    read from the file (checked against transformers 5.x integrations/ggml.py):
      - rope scaling is only read for gpt-oss: pass linear / llama3 here;
      - qwen3's attention.key_length is not mapped: Qwen3Config's default
        head_dim (128) would be used, so pass head_dim;
      - gemma3: query_pre_attn_scalar defaults to 256 while llama.cpp and
        tessera scale by 1/sqrt(head_dim); final_logit_softcapping is not read.
    """
    o = {}
    if "linear" in spec:
        o["rope_parameters"] = {"rope_type": "linear", "factor": spec["linear"], "rope_theta": spec["rope_base"]}
    if "llama3" in spec:
        l3 = spec["llama3"]
        o["rope_parameters"] = {"rope_type": "llama3", "factor": l3["factor"],
                                "low_freq_factor": l3["low_freq_factor"],
                                "high_freq_factor": l3["high_freq_factor"],
                                "original_max_position_embeddings": l3["orig_ctx"],
                                "rope_theta": spec["rope_base"]}
    if spec["arch"] == "qwen3":
        o["head_dim"] = spec["head_dim"]
    if spec["arch"] == "gemma3":
        o["query_pre_attn_scalar"] = spec["head_dim"]
        if "final_softcap" in spec:
            o["final_logit_softcapping"] = spec["final_softcap"]
    return o


def test_tokens(seed, n_vocab, bos):
    rng = np.random.default_rng(seed + 1000)
    ids = rng.integers(0, n_vocab, N_TEST_TOKENS).tolist()
    if bos is not None and bos >= 0:
        ids[0] = bos
    return ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--models-dir", default=os.path.join(os.path.dirname(__file__), "..", "models"))
    ap.add_argument("--only", default="")
    ap.add_argument("--quant-experts", action="store_true",
                    help="MoE models: expert arrays in Q8_0 (every expert width a multiple of 32)")
    ap.add_argument("--n-layer", type=int, default=0,
                    help="override every model's layer count (the streaming tests want more layers than slots)")
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    names = [n for n in SPECS if not a.only or n in a.only.split(",")]
    tok_cache = {}
    for seed, name in enumerate(names):
        spec = dict(SPECS[name], **({"n_layer": a.n_layer} if a.n_layer else {}))
        src = os.path.join(a.models_dir, TOKENIZER_SOURCES[spec["tok"]])
        if not os.path.exists(src):
            sys.exit(f"missing {src}: run tools/fetch_models.sh")
        if spec["tok"] not in tok_cache:
            tok_cache[spec["tok"]] = read_tokenizer_fields(src, N_VOCAB)
        fields = tok_cache[spec["tok"]]
        n_vocab = next(len(v) for k, v, *_ in fields if k == "tokenizer.ggml.tokens")
        bos = next((v for k, v, *_ in fields if k == "tokenizer.ggml.bos_token_id"), None)
        path = os.path.join(a.out_dir, name + ".gguf")
        write_model(path, spec, fields, seed)
        meta = {"arch": spec["arch"], "hf_overrides": hf_overrides(spec), "tokens": test_tokens(seed, n_vocab, bos),
                "n_vocab": n_vocab}
        with open(os.path.join(a.out_dir, name + ".json"), "w") as f:
            json.dump(meta, f, indent=1)
        print("wrote", path)
    for seed, name in enumerate((n for n in MOE_SPECS if not a.only or n in a.only.split(",")), start=len(SPECS)):
        spec = dict(MOE_SPECS[name], **({"n_layer": a.n_layer} if a.n_layer else {}),
                    **({"quant_experts": True} if a.quant_experts else {}))
        if "smollm" not in tok_cache:
            src = os.path.join(a.models_dir, TOKENIZER_SOURCES["smollm"])
            if not os.path.exists(src):
                sys.exit(f"missing {src}: run tools/fetch_models.sh")
            tok_cache["smollm"] = read_tokenizer_fields(src, N_VOCAB)
        fields = tok_cache["smollm"]
        cfg = write_moe_model(a.out_dir, name, spec, fields, seed)
        n_vocab = next(len(v) for k, v, *_ in fields if k == "tokenizer.ggml.tokens")
        bos = next((v for k, v, *_ in fields if k == "tokenizer.ggml.bos_token_id"), None)
        meta = {"arch": spec["arch"], "hf_class": spec["hf_class"], "hf_config": cfg,
                "tokens": test_tokens(seed, n_vocab, bos), "n_vocab": n_vocab}
        with open(os.path.join(a.out_dir, name + ".json"), "w") as f:
            json.dump(meta, f, indent=1)
        print("wrote", os.path.join(a.out_dir, name + ".gguf"))


if __name__ == "__main__":
    main()
