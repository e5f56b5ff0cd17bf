#!/usr/bin/env python3
"""test_wan_vae_oracle.py - tessera's Wan VAE decoder against diffusers'
AutoencoderKLWan.decode, an oracle we did not write.

A tiny random VAE with Wan2.1's structure (tools/gen_wan_vae.py: base width
8, dim_mult 1,2,4,4, two residual blocks + one per stage, temporal
upsampling in the first two stages) is written to GGUF with the original
tensor names; the name map is checked through diffusers' own
convert_wan_vae_to_diffusers. Then 4 latent frames of 4x6 (-> 13 frames of
32x48: the first chunk's single frame, the "Rep" chunk, then chunks whose
temporal upsamplers see one and two real frames of history) and 1 frame of
6x4 are decoded by both; bound: max |tessera - diffusers| / max
|diffusers| < 1e-3. Bad files (a missing tensor, a wrong shape) are refused
with the tensor's name.

usage: test_wan_vae_oracle.py WAN_VAE_TOOL OUT_DIR
Exit 77 (skip) without torch/diffusers.
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
        from diffusers.loaders.single_file_utils import convert_wan_vae_to_diffusers
    except ImportError as e:
        print(f"SKIP: {e} (pip install -r tools/requirements-torch.txt)")
        return 77
    import gen_wan_vae as gen

    vae, tensors = gen.tiny(out, seed=7)
    sd = vae.state_dict()
    back = convert_wan_vae_to_diffusers({k: torch.from_numpy(v) for k, v in tensors.items()})
    dec = {k for k in sd if k.startswith("decoder.") or k.startswith("post_quant_conv.")}
    assert set(back) == dec, sorted(set(back) ^ dec)[:6]
    for k in dec:
        assert torch.equal(back[k], sd[k]), k
    print(f"name map: {len(dec)} decoder tensors round-trip through diffusers' converter")
    path = os.path.join(out, "wan-vae-tiny.gguf")
    failures = 0
    for T, h, w in ((4, 4, 6), (1, 6, 4)):
        rng = np.random.default_rng(T)
        lat = rng.standard_normal((16, T, h, w)).astype(np.float32)
        lp, fp = os.path.join(out, "lat.f32"), os.path.join(out, "frames.f32")
        lat.tofile(lp)
        r = subprocess.run([tool, path, "cpu", "2", str(T), str(h), str(w), lp, fp], capture_output=True, text=True)
        if r.returncode:
            print(f"FAIL: wan_vae_tool: {r.stderr}")
            return 1
        n = 1 + 4 * (T - 1)
        got = np.fromfile(fp, dtype=np.float32).reshape(3, n, 8 * h, 8 * w)
        with torch.no_grad():
            want = vae.decode(torch.from_numpy(lat)[None]).sample[0].numpy()
        rel = float(np.abs(got - want).max() / np.abs(want).max())
        per = [float(np.abs(got[:, t] - want[:, t]).max()) for t in range(n)]
        ok = want.shape == got.shape and rel < BOUND
        failures += not ok
        print(f"{T} latent frames of {h}x{w} -> {n} frames of {8 * h}x{8 * w}: max rel {rel:.2e} "
              f"(worst frame {int(np.argmax(per))})  {'ok' if ok else 'FAIL'}")
        print("  " + r.stdout.strip())
    # bad files
    from gguf import GGUFReader, GGUFWriter
    rd = GGUFReader(path)
    for what, drop, bad in (("missing", "decoder.middle.1.proj.weight", None),
                            ("wrong shape", None, "decoder.upsamples.4.shortcut.weight")):
        bp = os.path.join(out, "bad.gguf")
        wr = GGUFWriter(bp, "wan_vae")
        for t in rd.tensors:
            if t.name == drop:
                continue
            a = np.array(t.data).astype(np.float32)
            if t.name == bad:
                a = a[:, :-1]
            wr.add_tensor(t.name, np.ascontiguousarray(a))
        wr.write_header_to_file()
        wr.write_kv_data_to_file()
        wr.write_tensors_to_file()
        wr.close()
        r = subprocess.run([tool, bp, "cpu", "1", "1", "2", "2", lp, fp], capture_output=True, text=True)
        name = drop or bad
        ok = r.returncode != 0 and name.rsplit(".", 1)[0] in r.stderr
        failures += not ok
        print(f"{what} tensor refused: {r.stderr.strip()}  {'ok' if ok else 'FAIL'}")
    if failures:
        print(f"FAIL: {failures} check(s)")
        return 1
    print(f"wan VAE decoder: within {BOUND} of diffusers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
