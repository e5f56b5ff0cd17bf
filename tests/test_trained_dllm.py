#!/usr/bin/env python3
"""test_trained_dllm.py - the trained diffusion LLM (tools/train_tiny_dllm.py)
run by tessera against a PyTorch forward of the same weights.

The GGUF is built from the base model and the committed delta
(tools/dllm/smollm2-dllm-delta.npz) when missing or built from another
delta (the file records the delta's sha256). The PyTorch side reads the
built file's own f16 tensors (so both sides use the same weights) and runs
train_tiny_dllm.py's forward, bidirectional, in float32. tessera runs the
same canvas (a held-out 64-token prompt, then a 32-token block of which every
other position is the mask token) as one window (dllm_tool window).

Bounds, max |ours - ref| / max |ref| per row: < 1e-4 with an f32 KV cache
(observed 3.84e-6 with the step-496 distilled delta, 1.56e-5 at step 460,
9.8e-6 at step 160: the forward itself), < 3e-2 with the default f16 cache
(observed 6.22e-4 at step 496, median 3.18e-4; 4.05e-3 on one prompt row at
step 460, median 1.8e-4; 1.84e-2 at step 160 and 1.03e-2 with the
step-20 trial delta: 30 layers of K/V rounded to f16; the 2-layer random
oracle sees ~3e-4). In both, the top-1 token of
every row must agree wherever the reference's top-2 margin exceeds 1e-2 of
the row's range. TTD_BREAK=causal makes the reference causal: must fail.
TTD_BREAK=layout lets every row of the cached layout attend every other:
the decode check must fail.

With TESSERA given, also: `tessera diffuse` (the prefix-cache block
decoder, threshold 0.9) on the prompt generates the same text with the same
commits per forward as train_tiny_dllm.py's generate_cached, the packed
layout the model was trained on (cached_layout): what the training
objective shows the model is what the decoder computes.

usage: test_trained_dllm.py DLLM_TOOL MODELS_DIR WORK_DIR [TESSERA]
"""
import os
import subprocess
import sys

import numpy as np

TOOL, MODELS, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
TESSERA = sys.argv[4] if len(sys.argv) > 4 else None
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import train_tiny_dllm as T  # noqa: E402

os.makedirs(WORK, exist_ok=True)
path = os.path.join(MODELS, "dllm", "smollm2-dllm.gguf")
if not os.path.exists(T.DELTA):
    print(f"SKIP: no committed delta {T.DELTA}")
    sys.exit(77)
if not os.path.exists(T.DATA):
    print(f"SKIP: no training corpus at {T.DATA} (set TS_DATA_DIR)")
    sys.exit(77)
if not os.path.exists(path) or T.built_from(path) != T.delta_sha(T.DELTA):
    subprocess.run([sys.executable, T.__file__, "build", "-o", path], check=True)

import torch  # noqa: E402

torch.set_num_threads(2)
ids = T.tokenize_corpus(os.path.join(WORK, "tokens.npy"))
held = T.held_out(ids)
prompt = held[1000:1064].tolist()
block = held[1064:1096].tolist()
canvas = prompt + [T.MASK_ID if k % 2 == 0 else t for k, t in enumerate(block)]

if os.environ.get("TTD_BREAK") == "causal":  # a check that must fail: the reference made causal
    import torch.nn.functional as F
    _sdpa = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = lambda q, k, v, is_causal=False: _sdpa(q, k, v, is_causal=True)

hp, w = T.load_base(path)
model = T.build_model(hp, w, 1, 1.0, "cpu").eval()
with torch.no_grad():
    hid = model.hidden(torch.tensor([canvas]))
    ref = model.logits_at(hid, torch.arange(len(canvas))).double().numpy()

n = len(canvas)
srt = np.sort(ref, axis=1)
sure = (srt[:, -1] - srt[:, -2]) / (srt[:, -1] - srt[:, 0]) > 1e-2
ok = True
for label, extra, bound in (("f32 KV", ["--kv-f32"], 1e-4), ("f16 KV (default)", [], 3e-2)):
    out = os.path.join(WORK, "trained_logits.f32")
    r = subprocess.run([TOOL, "window", path, out, "--tokens", ",".join(map(str, canvas)), "--window", f"0:{n}:{n}",
                        "-b", str(n), "-c", str(n)] + extra, capture_output=True, text=True)
    if r.returncode != 0:
        print("FAIL: dllm_tool:", r.stderr.strip())
        sys.exit(1)
    got = np.fromfile(out, dtype=np.float32).astype(np.float64).reshape(n, -1)
    err = np.abs(got - ref).max(axis=1) / np.abs(ref).max(axis=1)
    top_ok = (got.argmax(1) == ref.argmax(1)) | ~sure
    good = err.max() < bound and top_ok.all()
    ok &= good
    print(f"{label:17s} rows {n}: max rel err {err.max():.2e} (row {err.argmax()}, bound {bound:.0e}), "
          f"median {np.median(err):.2e}; top-1 agrees on {int(top_ok.sum())}/{n} rows "
          f"({int(sure.sum())} with a clear margin): {'ok' if good else 'FAIL'}")

# The training objective (train_tiny_dllm.py's cached_layout) is what tessera's
# default decoder computes: block decoding with the prefix cache, threshold
# 0.9, on the same prompt. Same generated text, same commits per forward.
if TESSERA:
    import json
    if os.environ.get("TTD_BREAK") == "layout":  # must fail: every row attends every other (no prefix cache)
        _layout = T.cached_layout
        T.cached_layout = lambda np_, blocks: (lambda p, a, n: (p, np.ones_like(a), n))(*_layout(np_, blocks))
    text = T.tokenizer().decode(prompt)
    r = subprocess.run([TESSERA, "tokenize", "-m", path, "-p", text, "--ids"], capture_output=True, text=True)
    pids = json.loads(r.stdout)
    r = subprocess.run([TESSERA, "diffuse", "-m", path, "-p", text, "-n", "64", "--block", "32", "--threshold", "0.9",
                        "--no-early-stop", "--no-display-prompt", "--stats", "json", "-t", "2"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print("FAIL: tessera diffuse:", r.stderr.strip()[-400:])
        sys.exit(1)
    st = json.loads([ln for ln in r.stderr.splitlines() if ln.startswith("{")][-1])
    got_hist = {k: c for k, c in enumerate(st["commit_per_forward_hist"]) if c}
    with torch.no_grad():
        x, counts = T.generate_cached(model, torch.tensor([pids]), 64, 32, 0.9)
    ref_text = T.tokenizer().decode(x[0, len(pids):].tolist())
    ref_hist = T.commit_stats(counts)["histogram"]
    good = r.stdout.rstrip("\n") == ref_text.rstrip("\n") and got_hist == ref_hist
    ok &= good
    print(f"prefix-cache decode at 0.9: tessera {st['denoise_forwards']} forwards {got_hist}, the cached layout "
          f"{len(counts[0])} forwards {ref_hist}; text {'identical' if r.stdout.rstrip(chr(10)) == ref_text.rstrip(chr(10)) else 'DIFFERS'}: "
          f"{'ok' if good else 'FAIL'}")
    if not good:
        print(f"  tessera: {r.stdout[:200]!r}\n  layout:  {ref_text[:200]!r}")
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
