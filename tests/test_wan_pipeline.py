#!/usr/bin/env python3
"""test_wan_pipeline.py - `tessera video` against diffusers' WanPipeline, step
for step: the tiny random DiT of tools/gen_wan_models.py (f32), the same
initial noise and text states, output_type="latent", the latents after every
step compared (callback_on_step_end on the diffusers side, --trajectory-out
on ours):
  1. UniPC (the pipeline's scheduler: flow_prediction, use_flow_sigmas,
     flow_shift 3), 8 steps, no guidance;
  2. flow-match Euler (shift 5), 6 steps, classifier-free guidance 4.0
     with negative text states;
  3. DCM's two experts: the adapter of tools/gen_wan_models.py lora from
     timestep 600 down, against the pipeline's transformer_2 with the merged
     weights (boundary_ratio 0.6);
  4. DCM's fixed timesteps 1000,992,982,949,905,810 with Euler, shift 1
  6. through the VAE (tools/gen_wan_vae.py): the pipeline's np frames against
     --video-out, the y4m and PNG files, the refusals of a missing or wrong VAE;
  5. from a prompt: the tiny umT5 encoder and its tokenizer (tools/gen_umt5.py)
     against the pipeline with transformers' UMT5EncoderModel and T5
     tokenizer: the prompt's states, then 5 steps with cfg 3 and a negative
     prompt; a mismatched encoder is refused
     (a loop over scheduler.step, as the pipeline's, since WanPipeline does
     not take custom timesteps).
Bound: every step's max |tessera - diffusers| / max |diffusers| < 1e-3.
Also checks the CLI's refusals (bad frames, size, missing text) and that
--seed gives the same latents twice.

usage: test_wan_pipeline.py TESSERA OUT_DIR
Exit 77 (skip) without torch/diffusers.
"""
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
BOUND = 1e-3
FRAMES, HEIGHT, WIDTH, N_TEXT = 9, 48, 64, 20


def main():
    tessera, out = sys.argv[1], sys.argv[2]
    try:
        import torch
        from diffusers import FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler, WanPipeline
    except ImportError as e:
        print(f"SKIP: {e} (pip install -r tools/requirements-torch.txt)")
        return 77
    import gen_wan_models as gen

    model = gen.tiny(out, seed=99, name="wan-pipe")
    gguf = os.path.join(out, "wan-pipe.gguf")
    T, h, w = (FRAMES - 1) // 4 + 1, HEIGHT // 8, WIDTH // 8
    rng = np.random.default_rng(3)
    noise = rng.standard_normal((16, T, h, w)).astype(np.float32)
    txt = rng.standard_normal((N_TEXT, gen.TINY["text_dim"])).astype(np.float32)
    neg = rng.standard_normal((N_TEXT, gen.TINY["text_dim"])).astype(np.float32)
    paths = {k: os.path.join(out, k + ".npy") for k in ("noise", "txt", "neg", "traj", "lat")}
    np.save(paths["noise"], noise)
    np.save(paths["txt"], txt)
    np.save(paths["neg"], neg)

    def ours(*args):
        cmd = [tessera, "video", "-m", gguf, "--text-embeddings", paths["txt"], "--frames", str(FRAMES), "--size",
               f"{HEIGHT}x{WIDTH}", "--latents-in", paths["noise"], "--trajectory-out", paths["traj"], "-t", "2",
               "-q", *args]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"tessera video failed ({' '.join(cmd)}):\n{r.stderr}")
        return np.load(paths["traj"])

    def pipeline(sched, steps, cfg, expert=None, boundary=None):
        pipe = WanPipeline(tokenizer=None, text_encoder=None, vae=None, scheduler=sched, transformer=model,
                           transformer_2=expert, boundary_ratio=boundary)
        traj = []

        def keep(p, i, t, kw):
            traj.append(kw["latents"][0].numpy().copy())
            return {}

        with torch.no_grad():
            pipe(prompt_embeds=torch.from_numpy(txt)[None], negative_prompt_embeds=torch.from_numpy(neg)[None],
                 height=HEIGHT, width=WIDTH, num_frames=FRAMES, num_inference_steps=steps, guidance_scale=cfg,
                 latents=torch.from_numpy(noise)[None], output_type="latent", callback_on_step_end=keep)
        return np.stack(traj)

    def dcm(ts):
        sched = FlowMatchEulerDiscreteScheduler(shift=1.0)
        sched.set_timesteps(timesteps=ts)
        x = torch.from_numpy(noise)[None]
        traj = []
        with torch.no_grad():
            for t in sched.timesteps:
                v = model(x, timestep=t.expand(1), encoder_hidden_states=torch.from_numpy(txt)[None]).sample
                x = sched.step(v, t, x, return_dict=False)[0]
                traj.append(x[0].numpy().copy())
        return np.stack(traj)

    def compare(name, want, got):
        if want.shape != got.shape:
            print(f"{name}: shapes differ: diffusers {want.shape}, tessera {got.shape}")
            return 1
        worst = 0.0
        for i in range(len(want)):
            rel = float(np.abs(got[i] - want[i]).max() / np.abs(want[i]).max())
            worst = max(worst, rel)
        ok = worst < BOUND
        print(f"{name}: {len(want)} steps, worst step max rel {worst:.2e} (last {rel:.2e})  {'ok' if ok else 'FAIL'}")
        return 0 if ok else 1

    failures = 0
    unipc = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, num_train_timesteps=1000,
                                    flow_shift=3.0)
    failures += compare("unipc shift 3, 8 steps", pipeline(unipc, 8, 1.0),
                        ours("--steps", "8", "--sampler", "unipc", "--shift", "3"))
    euler = FlowMatchEulerDiscreteScheduler(shift=5.0)
    failures += compare("euler shift 5, 6 steps, cfg 4", pipeline(euler, 6, 4.0),
                        ours("--steps", "6", "--sampler", "euler", "--shift", "5", "--cfg", "4",
                             "--negative-embeddings", paths["neg"]))
    # DCM's two experts: the detail expert (the base + a low-rank adapter)
    # from timestep 600 down; diffusers' two-transformer pipeline (Wan2.2's
    # boundary_ratio) with the merged weights as transformer_2
    deltas = gen.lora(os.path.join(out, "lora.gguf"), gen.TINY["num_layers"], 64, 4, 8.0, seed=6)
    unipc = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, num_train_timesteps=1000,
                                    flow_shift=3.0)
    failures += compare("two experts, switch at t 600", pipeline(unipc, 8, 1.0, gen.merged(model, deltas), 0.6),
                        ours("--steps", "8", "--lora", os.path.join(out, "lora.gguf"), "--detail-below", "600"))
    ts = [1000, 992, 982, 949, 905, 810]
    failures += compare("DCM timesteps", dcm(ts), ours("--timesteps", ",".join(map(str, ts))))

    # same seed, same latents; the CLI's refusals name the problem
    base = [tessera, "video", "-m", gguf, "--text-embeddings", paths["txt"], "--frames", "5", "--size", "32x32",
            "--steps", "2", "-q", "--latents-out"]
    a = subprocess.run(base + [paths["lat"], "--seed", "5"], capture_output=True, text=True)
    la = np.load(paths["lat"]) if a.returncode == 0 else None
    b = subprocess.run(base + [paths["lat"], "--seed", "5"], capture_output=True, text=True)
    lb = np.load(paths["lat"]) if b.returncode == 0 else None
    if la is None or lb is None or not np.array_equal(la, lb) or la.shape != (16, 2, 4, 4):
        print(f"FAIL: --seed 5 twice: {a.stderr}{b.stderr}")
        failures += 1
    for args, want in ((["--frames", "8"], "4k + 1"), (["--size", "40x64"], "multiples of 16"),
                       (["--size", "big"], "HEIGHTxWIDTH"), (["--timesteps", "900,950"], "decrease"),
                       (["--detail-below", "500"], "needs the detail expert"),
                       (["--lora", gguf], "is not blocks.N.{self,cross}_attn")):
        r = subprocess.run([tessera, "video", "-m", gguf, "--text-embeddings", paths["txt"], "-q", *args],
                           capture_output=True, text=True)
        if r.returncode == 0 or want not in r.stderr:
            print(f"FAIL: {args}: rc {r.returncode}, expected '{want}' in: {r.stderr.strip()}")
            failures += 1
        else:
            print(f"refused {args}: {r.stderr.strip().splitlines()[-1]}")
    r = subprocess.run([tessera, "video", "-m", gguf], capture_output=True, text=True)
    if r.returncode == 0 or "--text-embeddings" not in r.stderr:
        print(f"FAIL: no text: {r.stderr}")
        failures += 1
    failures += prompt_pipeline(tessera, out)
    failures += video_pipeline(tessera, out, model, noise, txt)
    if failures:
        print(f"FAIL: {failures} check(s)")
        return 1
    print(f"tessera video: every step within {BOUND} of diffusers' WanPipeline / schedulers")
    return 0


def video_pipeline(tessera, out, model, noise, txt):
    """Latents to frames: the tiny Wan2.1-structured VAE (tools/gen_wan_vae.py)
    in the pipeline (output_type "np": the decoded video in [0, 1]) and in
    tessera (--vae; --video-out in [-1, 1], -o y4m, --png-dir). 0, or the
    number of failures."""
    import torch
    from diffusers import UniPCMultistepScheduler, WanPipeline

    import gen_wan_vae

    vae, _ = gen_wan_vae.tiny(out, seed=9)
    vae_path = os.path.join(out, "wan-vae-tiny.gguf")
    sched = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, num_train_timesteps=1000,
                                    flow_shift=3.0)
    pipe = WanPipeline(tokenizer=None, text_encoder=None, vae=vae, scheduler=sched, transformer=model)
    with torch.no_grad():
        want = pipe(prompt_embeds=torch.from_numpy(txt)[None], height=HEIGHT, width=WIDTH, num_frames=FRAMES,
                    num_inference_steps=4, guidance_scale=1.0, latents=torch.from_numpy(noise)[None],
                    output_type="np").frames[0]  # [F][H][W][3] in [0, 1]
    vid, y4m, pngs = (os.path.join(out, n) for n in ("video.npy", "video.y4m", "png"))
    r = subprocess.run([tessera, "video", "-m", os.path.join(out, "wan-pipe.gguf"), "--vae", vae_path,
                        "--text-embeddings", os.path.join(out, "txt.npy"), "--frames", str(FRAMES), "--size",
                        f"{HEIGHT}x{WIDTH}", "--latents-in", os.path.join(out, "noise.npy"), "--steps", "4",
                        "--video-out", vid, "-o", y4m, "--png-dir", pngs, "-t", "2", "-q", "--stats", "json"],
                       capture_output=True, text=True)
    if r.returncode:
        print(f"FAIL: tessera video --vae: {r.stderr}")
        return 1
    got = np.clip(np.load(vid) / 2 + 0.5, 0, 1).transpose(1, 2, 3, 0)
    fails = 0
    rel = float(np.abs(got - want).max())
    ok = got.shape == want.shape and rel < BOUND
    fails += not ok
    print(f"latents -> {FRAMES} frames of {HEIGHT}x{WIDTH} through the VAE: max |error| {rel:.2e} in [0, 1] "
          f"against WanPipeline(output_type='np')  {'ok' if ok else 'FAIL'}")
    data = open(y4m, "rb").read()
    head = f"YUV4MPEG2 W{WIDTH} H{HEIGHT} F16:1 Ip A1:1 C444\n".encode()
    ok = data.startswith(head) and len(data) == len(head) + FRAMES * (6 + 3 * HEIGHT * WIDTH)
    fails += not ok
    from PIL import Image
    png0 = np.asarray(Image.open(os.path.join(pngs, "frame_0000.png"))).astype(np.float32) / 255
    pok = len(os.listdir(pngs)) == FRAMES and float(np.abs(png0 - got[0]).max()) <= 0.5 / 255 + 1e-6
    fails += not pok
    print(f"y4m: header and {FRAMES} frames {'ok' if ok else 'FAIL'}; PNG frames: {len(os.listdir(pngs))}, "
          f"frame 0 within half a level {'ok' if pok else 'FAIL'}")
    stats = [l for l in r.stderr.splitlines() if l.startswith("{")]
    print("  " + (stats[-1][:200] if stats else "(no stats)"))
    r = subprocess.run([tessera, "video", "-m", os.path.join(out, "wan-pipe.gguf"), "--text-embeddings",
                        os.path.join(out, "txt.npy"), "-o", y4m], capture_output=True, text=True)
    ok = r.returncode != 0 and "--vae" in r.stderr
    fails += not ok
    print(f"-o without --vae refused: {r.stderr.strip()}  {'ok' if ok else 'FAIL'}")
    r = subprocess.run([tessera, "video", "-m", os.path.join(out, "wan-pipe.gguf"), "--vae",
                        os.path.join(out, "wan-pipe.gguf"), "--text-embeddings", os.path.join(out, "txt.npy")],
                       capture_output=True, text=True)
    ok = r.returncode != 0 and "VAE" in r.stderr and "conv2" in r.stderr
    fails += not ok
    print(f"a DiT file as the VAE refused: {r.stderr.strip()}  {'ok' if ok else 'FAIL'}")
    return fails


def prompt_pipeline(tessera, out):
    """The whole text-to-latents path from a prompt: the tiny umT5 encoder
    and its unigram tokenizer (tools/gen_umt5.py) in front of a tiny DiT with
    text_dim 64, against WanPipeline with transformers' UMT5EncoderModel and
    the T5 tokenizer built from the same vocabulary and charsmap: the prompt
    states, then every step with classifier-free guidance and a negative
    prompt. 0, or the number of failures."""
    import torch
    from diffusers import UniPCMultistepScheduler, WanPipeline
    from gguf import GGUFReader
    from transformers import T5Tokenizer

    import gen_umt5
    import gen_wan_models as gen

    t5, _, spm_model = gen_umt5.tiny(out, seed=21)
    if spm_model is None:
        print("prompt pipeline: skipped (no sentencepiece to train the tiny tokenizer)")
        return 0
    t5_path = os.path.join(out, "umt5-tiny.gguf")
    f = GGUFReader(t5_path).fields
    arr = lambda k: [f[k].parts[i] for i in f[k].data]  # noqa: E731
    tok = T5Tokenizer(vocab=list(zip([bytes(p).decode() for p in arr("tokenizer.ggml.tokens")],
                                     [float(p[0]) for p in arr("tokenizer.ggml.scores")])), extra_ids=0,
                      _spm_precompiled_charsmap=bytes(int(p[0]) for p in arr("tokenizer.ggml.precompiled_charsmap")))
    dit = gen.tiny(out, seed=22, name="wan-t64", text_dim=64)
    prompt, negative = "A red fox  runs through\tthe snowy forest, 4k", "blurry, low quality"
    noise = np.random.default_rng(8).standard_normal((16, 3, 6, 8)).astype(np.float32)
    np.save(os.path.join(out, "noise-p.npy"), noise)
    sched = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, num_train_timesteps=1000,
                                    flow_shift=3.0)
    pipe = WanPipeline(tokenizer=tok, text_encoder=t5, vae=None, scheduler=sched, transformer=dit)
    traj = []

    def keep(p, i, t, kw):
        traj.append(kw["latents"][0].numpy().copy())
        return {}

    with torch.no_grad():
        want_emb, _ = pipe.encode_prompt(prompt, do_classifier_free_guidance=False, max_sequence_length=512)
        pipe(prompt=prompt, negative_prompt=negative, height=HEIGHT, width=WIDTH, num_frames=FRAMES,
             num_inference_steps=5, guidance_scale=3.0, latents=torch.from_numpy(noise)[None], output_type="latent",
             callback_on_step_end=keep)
    emb_path, traj_path = os.path.join(out, "emb-p.npy"), os.path.join(out, "traj-p.npy")
    r = subprocess.run([tessera, "video", "-m", os.path.join(out, "wan-t64.gguf"), "--t5", t5_path, "-p", prompt,
                        "--negative-prompt", negative, "--cfg", "3", "--steps", "5", "--frames", str(FRAMES),
                        "--size", f"{HEIGHT}x{WIDTH}", "--latents-in", os.path.join(out, "noise-p.npy"),
                        "--text-embeddings-out", emb_path, "--trajectory-out", traj_path, "-t", "2", "-q"],
                       capture_output=True, text=True)
    if r.returncode:
        print(f"FAIL: tessera video -p: {r.stderr}")
        return 1
    emb, got = np.load(emb_path), np.load(traj_path)
    want_emb = want_emb[0].numpy()
    fails = 0
    rel = float(np.abs(emb - want_emb).max() / np.abs(want_emb).max())
    ok = emb.shape == want_emb.shape and rel < BOUND
    fails += not ok
    print(f"prompt states [512][64]: max rel {rel:.2e} vs the pipeline's encode_prompt  {'ok' if ok else 'FAIL'}")
    worst = max(float(np.abs(got[i] - traj[i]).max() / np.abs(traj[i]).max()) for i in range(len(traj)))
    ok = got.shape == np.stack(traj).shape and worst < BOUND
    fails += not ok
    print(f"prompt -> latents, cfg 3 with a negative prompt, 5 UniPC steps: worst step max rel {worst:.2e}  "
          f"{'ok' if ok else 'FAIL'}")
    # a prompt longer than 512 tokens: truncated as the pipeline's tokenizer does
    long_prompt = " ".join(["the quick brown fox jumps over a lazy dog"] * 90)
    with torch.no_grad():
        want_long, _ = pipe.encode_prompt(long_prompt, do_classifier_free_guidance=False, max_sequence_length=512)
    r = subprocess.run([tessera, "video", "-m", os.path.join(out, "wan-t64.gguf"), "--t5", t5_path, "-p", long_prompt,
                        "--steps", "1", "--frames", "1", "--size", "16x16", "--text-embeddings-out", emb_path, "-q"],
                       capture_output=True, text=True)
    want_long = want_long[0].numpy()
    rel = float(np.abs(np.load(emb_path) - want_long).max() / np.abs(want_long).max()) if r.returncode == 0 else 1.0
    ok = rel < BOUND
    fails += not ok
    print(f"a prompt past 512 tokens, truncated: max rel {rel:.2e}  {'ok' if ok else 'FAIL ' + r.stderr}")
    r = subprocess.run([tessera, "video", "-m", os.path.join(out, "wan-tiny.gguf") if os.path.exists(
        os.path.join(out, "wan-tiny.gguf")) else os.path.join(out, "wan-pipe.gguf"), "--t5", t5_path, "-p", "x"],
                       capture_output=True, text=True)
    ok = r.returncode != 0 and "not this model's encoder" in r.stderr
    fails += not ok
    print(f"mismatched encoder refused: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}  "
          f"{'ok' if ok else 'FAIL'}")
    return fails


if __name__ == "__main__":
    sys.exit(main())
