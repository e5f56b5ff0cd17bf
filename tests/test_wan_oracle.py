#!/usr/bin/env python3
"""test_wan_oracle.py - tessera's Wan2.1 DiT against diffusers'
WanTransformer3DModel, an oracle we did not write.

A tiny random configuration (tools/gen_wan_models.py tiny: d 64, 2 heads of
32, FFN 96, 2 blocks, 16 channels, text_dim 48) is written to GGUF with the
original Wan tensor names; the name map is checked by running diffusers' own
converter (convert_wan_transformer_to_diffusers) on the written names. Then
one forward at three timesteps on a 3x6x8 latent grid (36 tokens, 3-D RoPE
over 3 frames, 3 rows, 4 columns) and 20 text tokens:
  - f32 file: max |tessera - diffusers| / max |diffusers| < 1e-3 (the
    issue's bound; the matmuls run at 16-bit activations);
  - Q8_0 file: against diffusers holding the same dequantized Q8_0 weights,
    within the same 1e-3 (the weights are then the same numbers; what is
    left is the activations' precision); the distance of the Q8_0 output to
    the f32 model's is printed.

usage: test_wan_oracle.py WAN_TOOL OUT_DIR
Exit 77 (skip) when torch or diffusers is missing.
"""
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))

BOUND = 1e-3


def main():
    tool, out = sys.argv[1], sys.argv[2]
    try:
        import torch
        import diffusers  # noqa: F401
        from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers
    except ImportError as e:
        print(f"SKIP: {e} (pip install -r tools/requirements-torch.txt)")
        return 77
    import gen_wan_models as gen
    from gguf import GGUFReader
    from gguf.quants import dequantize

    torch.manual_seed(0)
    model = gen.tiny(out, seed=1234)
    sd = model.state_dict()
    orig = {gen.orig_name(k): v.clone() for k, v in sd.items()}
    back = convert_wan_transformer_to_diffusers(dict(orig))
    assert set(back) == set(sd), f"name map: {sorted(set(back) ^ set(sd))[:6]}"
    for k in sd:
        assert torch.equal(back[k], sd[k]), k
    print(f"name map: {len(sd)} tensors round-trip through diffusers' converter")

    F, H, W, N = 3, 6, 8, 20
    rng = np.random.default_rng(7)
    lat = rng.standard_normal((16, F, H, W)).astype(np.float32)
    txt = rng.standard_normal((N, gen.TINY["text_dim"])).astype(np.float32)
    lat_path, txt_path, res_path = (os.path.join(out, n) for n in ("lat.f32", "txt.f32", "out.f32"))
    lat.tofile(lat_path)
    txt.tofile(txt_path)

    def ref(m, t):
        with torch.no_grad():
            return m(torch.from_numpy(lat)[None], timestep=torch.tensor([t]),
                     encoder_hidden_states=torch.from_numpy(txt)[None]).sample[0].numpy()

    def ours(path, t, engine="cpu"):
        r = subprocess.run([tool, "forward", path, engine, "2", str(F), str(H), str(W), str(N), repr(t), lat_path,
                            txt_path, res_path], capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"wan_tool failed: {r.stderr}")
        return np.fromfile(res_path, dtype=np.float32).reshape(16, F, H, W), r.stdout

    # the same model with the Q8_0 file's weights, dequantized
    from diffusers import WanTransformer3DModel
    qmodel = WanTransformer3DModel(**gen.TINY).eval()
    qsd = {k: v.clone() for k, v in sd.items()}
    names = {gen.orig_name(k): k for k in sd}
    for t in GGUFReader(os.path.join(out, "wan-tiny-q8_0.gguf")).tensors:
        if t.tensor_type.name == "Q8_0":
            k = names[t.name]
            qsd[k] = torch.from_numpy(dequantize(t.data, t.tensor_type).reshape(sd[k].shape).copy())
    qmodel.load_state_dict(qsd)

    failures = 0
    for t in (999.0, 500.0, 37.25):
        want = ref(model, t)
        got, log = ours(os.path.join(out, "wan-tiny.gguf"), t)
        rel = float(np.abs(got - want).max() / np.abs(want).max())
        nmse = float(((got - want) ** 2).sum() / (want ** 2).sum())
        qwant = ref(qmodel, t)
        qgot, _ = ours(os.path.join(out, "wan-tiny-q8_0.gguf"), t)
        qrel = float(np.abs(qgot - qwant).max() / np.abs(qwant).max())
        qdist = float(np.abs(qgot - want).max() / np.abs(want).max())
        ok = rel < BOUND and qrel < BOUND
        failures += not ok
        print(f"t {t:7.2f}: f32 max rel {rel:.2e} (nmse {nmse:.1e}); Q8_0 vs dequantized diffusers {qrel:.2e}, "
              f"vs f32 {qdist:.2e}  {'ok' if ok else 'FAIL'}")
    print(log.strip())
    # the same graphs on other engines: loop (the CPU's kernels behind a
    # device queue) bit-identical; amx on its tile emulator (the matmuls in
    # its tile layout and arithmetic) within the bound; amx's INT8 mode printed
    want = ref(model, 999.0)
    cpu, _ = ours(os.path.join(out, "wan-tiny.gguf"), 999.0)
    for eng, exact in (("loop", True), ("amx,emulate=1", False), ("amx,emulate=1,act=int8", None)):
        got, _ = ours(os.path.join(out, "wan-tiny.gguf"), 999.0, eng)
        rel = float(np.abs(got - want).max() / np.abs(want).max())
        ok = np.array_equal(got, cpu) if exact else (rel < BOUND if exact is False else True)
        failures += not ok
        print(f"engine {eng}: max rel {rel:.2e} vs diffusers{', bit-identical to cpu' if exact and ok else ''}"
              f"{' (INT8 activations: reported, not bounded)' if exact is None else ''}  {'ok' if ok else 'FAIL'}")
    # row chunks (a grid of more tokens than the engine's widest graph: amx
    # takes 2048, a 480x832 video 7800): graphs of <= 16 tokens over M = 36
    # (chunks 16, 16, 4; the block in two parts around its self-attention)
    # give outputs bit-identical to the unsplit run (with the adapter below)
    def split_vs_whole(eng, lora=None):
        extra = [os.path.join(out, lora)] if lora else []
        res = []
        for rows in (None, "16"):
            env = dict(os.environ, TS_WAN_ROWS=rows) if rows else None
            r = subprocess.run([tool, "forward", os.path.join(out, "wan-tiny.gguf"), eng, "2", str(F), str(H), str(W),
                                str(N), "999.0", lat_path, txt_path, res_path] + extra, capture_output=True, text=True,
                               env=env)
            if r.returncode:
                sys.exit(f"wan_tool (rows {rows}) failed: {r.stderr}")
            res.append(np.fromfile(res_path, dtype=np.float32))
        return np.array_equal(res[0], res[1]), float(np.abs(res[0] - res[1]).max())

    for eng, lora in (("cpu", None), ("amx,emulate=1,act=int8", None)):
        same, diff = split_vs_whole(eng, lora)
        failures += not same
        print(f"row chunks of 16 on {eng}{' with the adapter' if lora else ''}: "
              f"{'bit-identical to one graph of 36' if same else f'FAIL (max diff {diff:.3e})'}")
    # DCM's detail expert: a rank-4 adapter on all 8 attention projections
    # against diffusers holding the merged weights W + alpha/r B A
    deltas = gen.lora(os.path.join(out, "lora.gguf"), gen.TINY["num_layers"], 64, 4, 8.0, seed=5)
    lmodel = gen.merged(model, deltas)
    for t in (999.0, 300.0):
        want = ref(lmodel, t)
        r = subprocess.run([tool, "forward", os.path.join(out, "wan-tiny.gguf"), "cpu", "2", str(F), str(H), str(W),
                            str(N), repr(t), lat_path, txt_path, res_path, os.path.join(out, "lora.gguf")],
                           capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"wan_tool with the adapter failed: {r.stderr}")
        got = np.fromfile(res_path, dtype=np.float32).reshape(16, F, H, W)
        rel = float(np.abs(got - want).max() / np.abs(want).max())
        base = float(np.abs(ref(model, t) - want).max() / np.abs(want).max())
        ok = rel < BOUND
        failures += not ok
        print(f"detail expert t {t:5.1f}: max rel {rel:.2e} vs merged diffusers (the adapter moves it {base:.2e})  "
              f"{'ok' if ok else 'FAIL'}")
    same, diff = split_vs_whole("cpu", "lora.gguf")
    failures += not same
    print(f"row chunks of 16 on cpu with the adapter: "
          f"{'bit-identical to one graph of 36' if same else f'FAIL (max diff {diff:.3e})'}")
    # the same adapter as a diffusers/peft safetensors file (attn1.to_q, ...,
    # kohya's per-module alpha), through tools/wan_lora_to_gguf.py: the same bits
    from gguf import GGUFReader
    from safetensors.numpy import save_file
    back = {"to_q": "q", "to_k": "k", "to_v": "v", "to_out.0": "o"}
    st = {}
    for t in GGUFReader(os.path.join(out, "lora.gguf")).tensors:
        n = t.name.replace("self_attn", "attn1").replace("cross_attn", "attn2")
        for d, o in back.items():
            n = n.replace(f".{o}.lora_", f".{d}.lora_")
        st["transformer." + n] = np.array(t.data).reshape([int(x) for x in reversed(t.shape)])
        if n.endswith("lora_A.weight"):
            st["transformer." + n.replace("lora_A.weight", "alpha")] = np.array(8.0, dtype=np.float32)
    save_file(st, os.path.join(out, "lora.safetensors"))
    conv = subprocess.run([sys.executable, os.path.join(HERE, "..", "tools", "wan_lora_to_gguf.py"),
                           os.path.join(out, "lora.safetensors"), os.path.join(out, "lora2.gguf")],
                          capture_output=True, text=True)
    outs = []
    for lf in ("lora.gguf", "lora2.gguf"):
        r = subprocess.run([tool, "forward", os.path.join(out, "wan-tiny.gguf"), "cpu", "2", str(F), str(H), str(W),
                            str(N), "300.0", lat_path, txt_path, res_path, os.path.join(out, lf)],
                           capture_output=True, text=True)
        outs.append(np.fromfile(res_path, dtype=np.float32) if r.returncode == 0 else None)
    same = conv.returncode == 0 and outs[1] is not None and np.array_equal(outs[0], outs[1])
    failures += not same
    print(f"safetensors adapter (diffusers names, kohya alphas) via wan_lora_to_gguf.py: "
          f"{'same output' if same else 'FAIL ' + conv.stderr}")
    if failures:
        print(f"FAIL: {failures} timestep(s) beyond {BOUND}")
        return 1
    print(f"wan DiT: within {BOUND} of diffusers at f32 and Q8_0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
