#!/usr/bin/env python3
"""gen_wan_vae.py - the Wan2.1 VAE (its decoder) as a GGUF file with the
original tensor names (Wan2.1_VAE.pth: decoder.conv1, decoder.middle.N,
decoder.upsamples.N, decoder.head.N, conv2 = the post-quant conv), from a
random diffusers `AutoencoderKLWan`.

Wan2.1's structure (dim_mult of 4 stages, 2 residual blocks + 1 per stage,
temporal upsampling in the first two) with a small base width (8) for the
oracle tests. Weights of more than 2 dimensions are stored as [out][rest]
with their shape in `comfy.gguf.orig_shape.<name>`; the latents' mean and
std go to `wan_vae.latents_mean` / `wan_vae.latents_std`. The name map is
the inverse of diffusers' convert_wan_vae_to_diffusers, checked by the
oracle through it.

usage: gen_wan_vae.py OUT_DIR [--seed N] [--base-dim 8]
       gen_wan_vae.py OUT.gguf --from-safetensors wan_2.1_vae.safetensors
         (a real Wan2.1 VAE with the original names, e.g. ComfyUI's file: its
         decoder and conv2 written as tessera reads them; f16/bf16 kept as f16)
"""
import argparse
import os

import numpy as np


def tiny_config(base_dim=8):
    return dict(base_dim=base_dim, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2, attn_scales=[],
                temperal_downsample=[False, True, True], dropout=0.0)


def orig_name(k):
    """diffusers decoder / post_quant_conv name -> the original's (None: the encoder's)."""
    if k.startswith("post_quant_conv."):
        return k.replace("post_quant_conv.", "conv2.")
    if not k.startswith("decoder."):
        return None
    res = {"norm1.gamma": "residual.0.gamma", "conv1.weight": "residual.2.weight", "conv1.bias": "residual.2.bias",
           "norm2.gamma": "residual.3.gamma", "conv2.weight": "residual.6.weight", "conv2.bias": "residual.6.bias",
           "conv_shortcut.weight": "shortcut.weight", "conv_shortcut.bias": "shortcut.bias"}
    p = k.split(".")
    if p[1] == "conv_in":
        return "decoder.conv1." + p[2]
    if p[1] == "norm_out":
        return "decoder.head.0." + p[2]
    if p[1] == "conv_out":
        return "decoder.head.2." + p[2]
    if p[1] == "mid_block":
        if p[2] == "resnets":
            return f"decoder.middle.{2 * int(p[3])}." + res[".".join(p[4:])]
        return "decoder.middle.1." + ".".join(p[4:])
    if p[1] == "up_blocks":
        b = int(p[2])
        if p[3] == "resnets":
            return f"decoder.upsamples.{4 * b + int(p[4])}." + res[".".join(p[5:])]
        return f"decoder.upsamples.{4 * b + 3}." + ".".join(p[5:])
    raise KeyError(k)


def write_gguf(path, tensors, mean, std):
    from gguf import GGUFWriter

    w = GGUFWriter(path, "wan_vae")
    w.add_array("wan_vae.latents_mean", [float(x) for x in mean])
    w.add_array("wan_vae.latents_std", [float(x) for x in std])
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if arr.ndim > 2:
            w.add_array("comfy.gguf.orig_shape." + name, [int(d) for d in arr.shape])
            arr = arr.reshape(arr.shape[0], -1)
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def tiny(out_dir, seed, name="wan-vae-tiny", base_dim=8):
    import torch
    from diffusers import AutoencoderKLWan

    torch.manual_seed(seed)
    vae = AutoencoderKLWan(**tiny_config(base_dim)).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in vae.named_parameters():
            if n.endswith("gamma"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=g) / np.sqrt(np.prod(p.shape[1:])))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
    sd = {k: v.detach().float().numpy() for k, v in vae.state_dict().items()}
    tensors = {}
    for k, v in sd.items():
        o = orig_name(k)
        if o is not None:
            tensors[o] = v
    os.makedirs(out_dir, exist_ok=True)
    write_gguf(os.path.join(out_dir, name + ".gguf"), tensors, vae.config.latents_mean, vae.config.latents_std)
    return vae, tensors


def from_safetensors(src, dst):
    from gguf import GGUFWriter
    from safetensors.numpy import load_file

    sd = load_file(src)
    w = GGUFWriter(dst, "wan_vae")
    n = 0
    for k in sorted(sd):
        if not (k.startswith("decoder.") or k.startswith("conv2.")):
            continue
        a = np.asarray(sd[k])
        if a.ndim > 2:
            w.add_array("comfy.gguf.orig_shape." + k, [int(d) for d in a.shape])
            a = a.reshape(a.shape[0], -1)
        w.add_tensor(k, np.ascontiguousarray(a.astype(np.float32 if a.ndim == 1 else np.float16)))
        n += 1
    if not n:
        raise SystemExit(f"gen_wan_vae: no decoder.* / conv2.* tensors in {src}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--base-dim", type=int, default=8)
    ap.add_argument("--from-safetensors")
    a = ap.parse_args()
    if a.from_safetensors:
        from_safetensors(a.from_safetensors, a.out)
    else:
        tiny(a.out, a.seed, base_dim=a.base_dim)
    print("gen_wan_vae: wrote", a.out)


if __name__ == "__main__":
    main()
