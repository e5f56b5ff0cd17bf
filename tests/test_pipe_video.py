#!/usr/bin/env python3
"""test_pipe_video.py - `tessera video --pipe` (seed 002's two-engine stream)
on the tiny random Wan DiT of tools/gen_wan_models.py, its DCM-style adapter
(the detail expert from timestep 600 down) and the tiny VAE of
tools/gen_wan_vae.py as the tail:

  1. exact where both engines compute alike: loop (A) + cpu (B), every cut
     k = 0 .. B (B = 4 steps x 2 blocks = 8), three videos each: latents and
     the decoded y4m bit-identical to `--engine cpu` runs of seeds S, S+1,
     S+2 (the cut inside a step hands the hidden state over; at a step
     boundary nothing crosses);
  2. the same on vnni (A) + amx,act=int8,emulate=1 (B), the AMX engine's int8
     tile layout read by AVX-512 VNNI, against `--engine amx,act=int8,
     emulate=1` runs; B maps the weights A packed (shared_bytes > 0, 0 with
     --own-copies). Skipped where the CPU lacks AVX-512 VNNI;
  3. engines whose arithmetic differs, vnni (int8) + cpu (exact): every
     cut within NMSE 1e-2 of the cpu run (printed; measured ~1e-4);
  4. the refusals: guidance (--cfg > 1), single-video options, a cut past B,
     an SLO no cut meets, a bad --cut word; --cut rates and setup.

usage: test_pipe_video.py TESSERA OUT_DIR
Exit 77 (skip) without torch/diffusers (the generators need them).
"""
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
FRAMES, SIZE, STEPS, N_TEXT, SEED, N_VID = 9, "48x64", 4, 20, 7, 3


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def run(tessera, args, want=0):
    p = subprocess.run([tessera, "video"] + args, capture_output=True, text=True, timeout=600)
    if p.returncode != want:
        fail(f"tessera video {' '.join(args)}: exit {p.returncode}, want {want}\n{p.stderr[-3000:]}")
    return p.stderr


def last_json(err):
    objs = [l for l in err.splitlines() if l.startswith("{")]
    if not objs:
        fail(f"no JSON object on stderr:\n{err[-2000:]}")
    return json.loads(objs[-1])


def main():
    tessera, out = sys.argv[1], sys.argv[2]
    try:
        import torch  # noqa: F401  (the generators build the models with diffusers)
        import diffusers  # noqa: F401
    except ImportError as e:
        print(f"SKIP: {e} (pip install -r tools/requirements-torch.txt)")
        return 77
    import gen_wan_models as gen
    import gen_wan_vae

    os.makedirs(out, exist_ok=True)
    gen.tiny(out, seed=5, name="wan-pipe")
    gen.lora(os.path.join(out, "lora.gguf"), gen.TINY["num_layers"], 64, 4, 8.0, seed=6)
    vae_dir = os.path.join(out, "vae")
    if not os.path.exists(os.path.join(vae_dir, "wan-vae-tiny.gguf")):
        subprocess.run([sys.executable, os.path.join(HERE, "..", "tools", "gen_wan_vae.py"), vae_dir], check=True,
                       capture_output=True)
    vae = os.path.join(vae_dir, "wan-vae-tiny.gguf")
    txt = os.path.join(out, "txt.npy")
    np.save(txt, np.random.default_rng(3).standard_normal((N_TEXT, gen.TINY["text_dim"])).astype(np.float32))
    B = STEPS * gen.TINY["num_layers"]

    def common(model):
        return ["-m", os.path.join(out, model), "--text-embeddings", txt, "--frames", str(FRAMES), "--size", SIZE,
                "--steps", str(STEPS), "--sampler", "euler", "--shift", "5", "--lora", os.path.join(out, "lora.gguf"),
                "--detail-below", "600", "--vae", vae, "-q"]

    def single(model, engine, tag):
        ref = []
        for i in range(N_VID):
            lat, y4m = (os.path.join(out, f"{tag}_{i}.{e}") for e in ("npy", "y4m"))
            run(tessera, common(model) + ["--engine", engine, "--seed", str(SEED + i), "--latents-out", lat, "-o", y4m])
            ref.append((np.load(lat), open(y4m, "rb").read()))
        return ref

    def stream(model, a, b, k, tag, extra=()):
        lat, y4m = (os.path.join(out, f"{tag}.{e}") for e in ("npy", "y4m"))
        run(tessera, common(model) + ["--pipe", a, "--engine", b, "--cut", str(k), "--videos", str(N_VID), "--seed",
                                      str(SEED), "--latents-out", lat, "-o", y4m] + list(extra))
        return [(np.load(os.path.join(out, f"{tag}_{i}.npy")), open(os.path.join(out, f"{tag}_{i}.y4m"), "rb").read())
                for i in range(N_VID)]

    def exact(model, a, b, tag):
        ref = single(model, b, tag + "_ref")
        for k in range(B + 1):
            got = stream(model, a, b, k, f"{tag}_k{k}")
            for i in range(N_VID):
                if not np.array_equal(got[i][0], ref[i][0]) or got[i][1] != ref[i][1]:
                    d = np.abs(got[i][0] - ref[i][0]).max()
                    fail(f"{a} + {b}, cut {k}, video {i}: differs from the one-engine run (max |d| {d:.3g}, "
                         f"y4m {'same' if got[i][1] == ref[i][1] else 'differs'})")
        print(f"ok: {a} + {b}: every cut 0..{B}, {N_VID} videos each: latents and y4m bit-identical to {b} alone")

    # 1. loop + cpu
    exact("wan-pipe.gguf", "loop", "cpu", "lc")
    setup = last_json(run(tessera, common("wan-pipe.gguf") + ["--pipe", "loop", "--engine", "cpu", "--cut", "setup",
                                                              "--stats", "json"]))
    print(f"loop + cpu: {setup['shared_bytes']} bytes of CPU panels shared")

    # 2. vnni + amx (emulated): one weight copy
    devs = subprocess.run([tessera, "devices"], capture_output=True, text=True).stdout
    vnni_ok = any(l.startswith("vnni ") and " ok " in l for l in devs.splitlines())
    amx = "amx,act=int8" + ("" if "amx_tile" in open("/proc/cpuinfo").read() else ",emulate=1")
    if vnni_ok:
        exact("wan-pipe-q8_0.gguf", "vnni", amx, "va")
        sh = last_json(run(tessera, common("wan-pipe-q8_0.gguf") + ["--pipe", "vnni", "--engine", amx, "--cut", "setup",
                                                                    "--stats", "json"]))
        own = last_json(run(tessera, common("wan-pipe-q8_0.gguf") + ["--pipe", "vnni", "--engine", amx, "--cut",
                                                                     "setup", "--own-copies", "--stats", "json"]))
        if sh["shared_bytes"] <= 0 or own["shared_bytes"] != 0:
            fail(f"vnni + {amx}: shared {sh['shared_bytes']} bytes (want > 0), with --own-copies "
                 f"{own['shared_bytes']} (want 0)")
        print(f"ok: vnni + {amx}: {sh['shared_bytes']} bytes of int8 tiles packed once, mapped by both")
        # 3. differing arithmetic: int8 (vnni) + exact (cpu)
        ref = single("wan-pipe-q8_0.gguf", "cpu", "c_ref")
        worst = 0.0
        for k in (0, 1, 3, 4, B):
            got = stream("wan-pipe-q8_0.gguf", "vnni", "cpu", k, f"vc_k{k}")
            for i in range(N_VID):
                r = ref[i][0].astype(np.float64)
                nmse = float(((got[i][0] - r) ** 2).sum() / (r ** 2).sum())
                worst = max(worst, nmse)
                if nmse > 1e-2:
                    fail(f"vnni + cpu cut {k} video {i}: NMSE {nmse:.3g} vs cpu alone (bound 1e-2)")
        print(f"ok: vnni (int8) + cpu (exact): worst NMSE {worst:.3g} of the latents vs cpu alone (bound 1e-2)")
    else:
        print("vnni: not on this CPU; the vnni pairs were not run")

    # 4. refusals and the measuring modes
    base = common("wan-pipe.gguf") + ["--pipe", "loop", "--engine", "cpu"]
    for args, text in ((["--cfg", "3"], "guidance"), (["--trajectory-out", os.path.join(out, "t.npy")], "single-video"),
                       (["--cut", str(B + 1)], "block indices"), (["--cut", "middle"], "block indices"),
                       (["--slo", "0.000001"], "no cut")):
        err = run(tessera, base + args, want=1 if text in ("guidance", "block indices", "no cut") else 2)
        if text not in err:
            fail(f"{args}: the message lacks '{text}':\n{err}")
    r = last_json(run(tessera, base + ["--cut", "rates", "--stats", "json"]))
    if not (r["corun"]["block_a_s"] > 0 and r["corun"]["block_b_s"] > 0 and r["runs"] == [] and
            0 <= r["cut_auto"] <= B and r["cut_step"] % gen.TINY["num_layers"] == 0):
        fail(f"--cut rates: {r}")
    print("ok: refusals; --cut rates measures without streaming")
    return 0


if __name__ == "__main__":
    sys.exit(main())
