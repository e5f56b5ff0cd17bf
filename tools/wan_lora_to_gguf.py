#!/usr/bin/env python3
"""wan_lora_to_gguf.py - a Wan2.1 low-rank adapter (e.g. DCM's detail expert)
from safetensors to the GGUF that `tessera video --lora` reads.

Input names, any of:
  diffusers / peft   [transformer.]blocks.N.attn1.to_q.lora_A.weight, attn2.to_out.0.lora_B.weight
  original Wan       [diffusion_model.]blocks.N.self_attn.q.lora_A.weight
  kohya style        ... .lora_down.weight / .lora_up.weight, with per-module .alpha
Output: blocks.N.{self,cross}_attn.{q,k,v,o}.lora_{A,B}.weight and lora.alpha
(one alpha for the whole adapter; per-module alphas must agree). Types: f32,
or f16 with --f16.

usage: wan_lora_to_gguf.py IN.safetensors OUT.gguf [--alpha A] [--f16]
"""
import argparse
import re
import sys

import numpy as np

PREFIXES = ("base_model.model.", "transformer.", "diffusion_model.", "model.diffusion_model.")
RENAME = [(".attn1.", ".self_attn."), (".attn2.", ".cross_attn."), (".to_q.", ".q."), (".to_k.", ".k."),
          (".to_v.", ".v."), (".to_out.0.", ".o."), (".lora_down.", ".lora_A."), (".lora_up.", ".lora_B.")]
NAME = re.compile(r"^blocks\.(\d+)\.(self_attn|cross_attn)\.([qkvo])\.lora_([AB])\.weight$")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--alpha", type=float, help="override the adapter's alpha (default: the file's, else rank)")
    ap.add_argument("--f16", action="store_true")
    a = ap.parse_args()
    from gguf import GGUFWriter
    from safetensors.numpy import load_file

    src = load_file(a.src)
    out, alphas = {}, set()
    for k, v in src.items():
        n = k
        for p in PREFIXES:
            if n.startswith(p):
                n = n[len(p):]
        for x, y in RENAME:
            n = n.replace(x, y)
        if n.endswith(".alpha"):
            alphas.add(float(np.asarray(v, dtype=np.float64).reshape(-1)[0]))
            continue
        if not NAME.match(n):
            sys.exit(f"wan_lora_to_gguf: '{k}' is not an attention projection's lora_A/lora_B (became '{n}')")
        out[n] = np.ascontiguousarray(np.asarray(v, dtype=np.float32))
    if not out:
        sys.exit("wan_lora_to_gguf: no adapter tensors found")
    if len(alphas) > 1:
        sys.exit(f"wan_lora_to_gguf: per-module alphas differ ({sorted(alphas)}); pass one with --alpha")
    alpha = a.alpha if a.alpha else (alphas.pop() if alphas else None)
    w = GGUFWriter(a.dst, "wan-lora")
    if alpha:
        w.add_float32("lora.alpha", alpha)
    for n in sorted(out):
        t = out[n]
        w.add_tensor(n, t.astype(np.float16) if a.f16 else t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wan_lora_to_gguf: {len(out)} tensors, alpha {alpha} -> {a.dst}")


if __name__ == "__main__":
    main()
