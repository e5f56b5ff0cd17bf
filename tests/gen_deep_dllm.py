#!/usr/bin/env python3
"""gen_deep_dllm.py - a deeper, wider variant of the tiny random llada model
of tools/gen_dllm_models.py (same writer, same tokenizer): 6 layers of
n_embd 256 (about 3 MiB of f32 weights a layer), written as llada_deep.gguf.

Why: the ordering check of tests/test_diffusion_device.c (`loop,nowait=1`
streaming weights through two slots) needs a layer slot to hold a different
layer than the one about to run (>= 3 layers) and uploads long enough for a
graph that skips its wait to read a slot before its upload finished.

usage: gen_deep_dllm.py OUT_DIR MODELS_DIR
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import gen_dllm_models as g  # noqa: E402


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    out_dir, models = sys.argv[1:]
    src = os.path.join(models, "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(src):
        print(f"FAIL: missing {src} (its tokenizer is copied): run tools/fetch_models.sh")
        return 1
    os.makedirs(out_dir, exist_ok=True)
    spec = dict(g.SPECS["llada"], n_embd=256, n_ff=768, n_layer=6)
    path = g.write_model(out_dir, "llada", spec, src, 700)
    deep = os.path.join(out_dir, "llada_deep.gguf")
    os.replace(path, deep)
    print("wrote", deep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
