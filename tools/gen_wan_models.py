#!/usr/bin/env python3
"""gen_wan_models.py - Wan2.1 video diffusion transformers as GGUF files with
the original tensor names (city96's conversions: `general.architecture =
"wan"`, `blocks.N.self_attn.q.weight`, `blocks.N.ffn.0.weight`, F32
`modulation`), from a random diffusers `WanTransformer3DModel`.

  tiny   a small random configuration (d 64, 2 heads of 32, FFN 96, 2
         blocks, 16 latent channels, text_dim 48, freq_dim 32) for the oracle
         tests: NAME.gguf (f32) plus NAME-q8_0.gguf, and NAME.pt (the
         diffusers model's state dict and config) so the oracle rebuilds the
         very model that wrote the file.
  shaped Wan2.1-T2V-1.3B's shapes (d 1536, FFN 8960, 12 heads of 128, 30
         blocks) with random weights, for speed measurements only (never
         committed): --type q8_0 | q4_0 | f16.

The inverse of diffusers' convert_wan_transformer_to_diffusers maps each
diffusers name to the original one; the oracle checks the map by running
diffusers' own converter on the written names (round trip).

GGUF keeps at most 4 dimensions: patch_embedding.weight [d, C, pt, ph, pw]
is stored as [d][C*pt*ph*pw] with its shape in the int32 array
`comfy.gguf.orig_shape.patch_embedding.weight` (ComfyUI-GGUF's key). The
tiny file also carries `wan.attention.head_count` (city96's files have no
hyper-parameters; tessera then takes heads of 128, as every Wan2.1 model has).

usage: gen_wan_models.py tiny OUT_DIR [--seed N]
       gen_wan_models.py shaped OUT.gguf [--type q8_0] [--layers N]
"""
import argparse
import math
import os
import sys

import numpy as np

TINY = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=32, in_channels=16, out_channels=16,
            text_dim=48, freq_dim=32, ffn_dim=96, num_layers=2, cross_attn_norm=True,
            qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=1024)
SHAPED = dict(TINY, num_attention_heads=12, attention_head_dim=128, text_dim=4096, freq_dim=256, ffn_dim=8960,
              num_layers=30)

# diffusers name fragment -> original, applied in this order (the inverse of
# diffusers' TRANSFORMER_KEYS_RENAME_DICT for the text-to-video model)
TO_ORIG = [
    ("condition_embedder.time_embedder.linear_1", "time_embedding.0"),
    ("condition_embedder.time_embedder.linear_2", "time_embedding.2"),
    ("condition_embedder.text_embedder.linear_1", "text_embedding.0"),
    ("condition_embedder.text_embedder.linear_2", "text_embedding.2"),
    ("condition_embedder.time_proj", "time_projection.1"),
    ("attn2", "cross_attn"),
    ("attn1", "self_attn"),
    (".to_out.0.", ".o."),
    (".to_q.", ".q."),
    (".to_k.", ".k."),
    (".to_v.", ".v."),
    ("ffn.net.0.proj", "ffn.0"),
    ("ffn.net.2", "ffn.2"),
    ("proj_out", "head.head"),
    # diffusers' norm2 is the cross-attention's affine LayerNorm, the
    # original's norm3 (the two are swapped)
    (".norm2.", ".norm3."),
]


def orig_name(name):
    if name == "scale_shift_table":
        return "head.modulation"
    if name.endswith(".scale_shift_table"):
        return name[: -len("scale_shift_table")] + "modulation"
    for a, b in TO_ORIG:
        name = name.replace(a, b)
    return name


def randomize(model, seed):
    """Every parameter random at a scale that keeps activations O(1): norm
    weights near 1, biases and modulation tables O(0.1-0.3), matrices
    1/sqrt(fan_in), so each term of the block matters in the comparison."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "scale_shift_table" in name:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            elif p.ndim >= 2:
                fan_in = int(np.prod(p.shape[1:]))
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(fan_in))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))


def quant_ok(name, arr, qtype):
    """Which tensors a quantized file stores quantized: the 2-D matrices of
    the blocks and the text embedding, rows a multiple of 32 (as city96's
    converter, which keeps 1-D tensors, small ones and the time embedding in
    F32)."""
    if qtype == "f32" or arr.ndim != 2 or arr.shape[1] % 32:
        return False
    return name.startswith("blocks.") or name.startswith("text_embedding.")


def write_gguf(path, tensors, qtype, n_head):
    from gguf import GGMLQuantizationType, GGUFWriter
    from gguf.quants import quantize

    qt = {"q8_0": GGMLQuantizationType.Q8_0, "q4_0": GGMLQuantizationType.Q4_0,
          "f16": GGMLQuantizationType.F16}.get(qtype)
    w = GGUFWriter(path, "wan")
    if n_head is not None:
        w.add_uint32("wan.attention.head_count", n_head)
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if name == "patch_embedding.weight":
            w.add_array("comfy.gguf.orig_shape." + name, [int(d) for d in arr.shape])
            arr = arr.reshape(arr.shape[0], -1)
        if qt is not None and quant_ok(name, arr, qtype):
            if qt == GGMLQuantizationType.F16:
                w.add_tensor(name, arr.astype(np.float16))
            else:
                q = quantize(arr, qt)
                w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qt)
        else:
            w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def tiny(out_dir, seed, name="wan-tiny", **overrides):
    import torch
    from diffusers import WanTransformer3DModel

    cfg = dict(TINY, **overrides)
    torch.manual_seed(seed)
    model = WanTransformer3DModel(**cfg).eval()
    randomize(model, seed)
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    tensors = {orig_name(k): v for k, v in sd.items()}
    assert len(tensors) == len(sd), "two diffusers names map to one original name"
    os.makedirs(out_dir, exist_ok=True)
    write_gguf(os.path.join(out_dir, name + ".gguf"), tensors, "f32", cfg["num_attention_heads"])
    write_gguf(os.path.join(out_dir, name + "-q8_0.gguf"), tensors, "q8_0", cfg["num_attention_heads"])
    torch.save({"config": cfg, "state_dict": model.state_dict(), "names": {orig_name(k): k for k in sd}},
               os.path.join(out_dir, name + ".pt"))
    return model


LORA_TARGETS = ["self_attn.q", "self_attn.k", "self_attn.v", "self_attn.o",
                "cross_attn.q", "cross_attn.k", "cross_attn.v", "cross_attn.o"]


def lora(path, n_layer, dim, rank, alpha, seed, targets=LORA_TARGETS):
    """A random low-rank adapter (DCM's detail expert's form) as tessera reads
    it: blocks.N.<target>.lora_A.weight [rank][dim], lora_B.weight
    [dim][rank], lora.alpha. Returns {original weight name: delta W =
    alpha / rank * B A} for the oracle's merged model."""
    from gguf import GGUFWriter

    rng = np.random.default_rng(seed)
    w = GGUFWriter(path, "wan-lora")
    w.add_float32("lora.alpha", float(alpha))
    deltas = {}
    for b in range(n_layer):
        for t in targets:
            a = (rng.standard_normal((rank, dim)) / math.sqrt(dim)).astype(np.float32)
            bm = (rng.standard_normal((dim, rank)) * 0.5 / math.sqrt(rank)).astype(np.float32)
            w.add_tensor(f"blocks.{b}.{t}.lora_A.weight", a)
            w.add_tensor(f"blocks.{b}.{t}.lora_B.weight", bm)
            deltas[f"blocks.{b}.{t}.weight"] = (alpha / rank) * (bm.astype(np.float64) @ a.astype(np.float64))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return deltas


def merged(model, deltas, cfg=TINY):
    """A copy of the diffusers model with W + delta W in the adapted projections."""
    import copy

    import torch

    m = copy.deepcopy(model)
    sd = m.state_dict()
    names = {orig_name(k): k for k in sd}
    with torch.no_grad():
        for n, d in deltas.items():
            sd[names[n]] += torch.from_numpy(d.astype(np.float32))
    m.load_state_dict(sd)
    return m


def shaped(path, qtype, n_layer, seed):
    """Random weights of Wan2.1-T2V-1.3B's shapes, written tensor by tensor
    (no torch model: 1.4 G parameters in f32 would not fit comfortably)."""
    cfg = dict(SHAPED, num_layers=n_layer)
    d = cfg["num_attention_heads"] * cfg["attention_head_dim"]
    f, td, fd, c = cfg["ffn_dim"], cfg["text_dim"], cfg["freq_dim"], cfg["in_channels"]
    rng = np.random.default_rng(seed)

    def mat(o, i):
        return (rng.standard_normal((o, i), dtype=np.float32) / math.sqrt(i)).astype(np.float32)

    def vec(n, s=0.1, base=0.0):
        return (base + s * rng.standard_normal(n, dtype=np.float32)).astype(np.float32)

    t = {"patch_embedding.weight": mat(d, c * 4).reshape(d, c, 1, 2, 2), "patch_embedding.bias": vec(d),
         "text_embedding.0.weight": mat(d, td), "text_embedding.0.bias": vec(d),
         "text_embedding.2.weight": mat(d, d), "text_embedding.2.bias": vec(d),
         "time_embedding.0.weight": mat(d, fd), "time_embedding.0.bias": vec(d),
         "time_embedding.2.weight": mat(d, d), "time_embedding.2.bias": vec(d),
         "time_projection.1.weight": mat(6 * d, d), "time_projection.1.bias": vec(6 * d)}
    for b in range(n_layer):
        p = f"blocks.{b}."
        t[p + "modulation"] = (0.3 * rng.standard_normal((1, 6, d))).astype(np.float32)
        for a in ("self_attn", "cross_attn"):
            for m in "qkvo":
                t[f"{p}{a}.{m}.weight"] = mat(d, d)
                t[f"{p}{a}.{m}.bias"] = vec(d)
            t[f"{p}{a}.norm_q.weight"] = vec(d, 0.2, 1.0)
            t[f"{p}{a}.norm_k.weight"] = vec(d, 0.2, 1.0)
        t[p + "norm3.weight"] = vec(d, 0.2, 1.0)
        t[p + "norm3.bias"] = vec(d)
        t[p + "ffn.0.weight"] = mat(f, d)
        t[p + "ffn.0.bias"] = vec(f)
        t[p + "ffn.2.weight"] = mat(d, f)
        t[p + "ffn.2.bias"] = vec(d)
    t["head.head.weight"] = mat(c * 4, d)
    t["head.head.bias"] = vec(c * 4)
    t["head.modulation"] = (0.3 * rng.standard_normal((1, 2, d))).astype(np.float32)
    write_gguf(path, t, qtype, None)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["tiny", "shaped"])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--type", default="q8_0", choices=["f32", "f16", "q8_0", "q4_0"])
    ap.add_argument("--layers", type=int, default=30)
    a = ap.parse_args()
    if a.what == "tiny":
        tiny(a.out, a.seed)
    else:
        shaped(a.out, a.type, a.layers, a.seed)
    print("gen_wan_models: wrote", a.out)


if __name__ == "__main__":
    main()
