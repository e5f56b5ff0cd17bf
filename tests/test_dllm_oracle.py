#!/usr/bin/env python3
"""test_dllm_oracle.py - tessera's bidirectional window forward
(ts_forward_window) on tiny random-weight diffusion LLMs (`llada`, `dream`,
tools/gen_dllm_models.py) against HF transformers at float32.

The reference: LLaDA = LlamaForCausalLM, Dream = Qwen2ForCausalLM, built
from the same random arrays (GGUF Q/K rows permuted for llada as llama.cpp's
converter does), eager attention with an explicit 4-D additive mask
[1, 1, T, T] (0 = visible, finfo.min = hidden), which transformers 5.x passes
through unchanged; an all-zero mask makes the forward bidirectional. The
oracle first checks that it really is: changing the last token must change
position 0's logits (and a plain causal HF run must differ from ours).

A sequence of window calls on one state maps exactly onto ONE HF forward
over "slots": each call appends its n tokens as slots with position ids
pos0 .. pos0+n-1, and its slots see, for every position p < n_kv, the slot
that held p in the cache at that call (its own for p in the window, the
latest earlier write otherwise). Earlier slots never see later ones, so
every slot's hidden states are those tessera computed in its call. Runs:
  full       one window over all 40 tokens (n_kv 40)
  full_kvf32 the same with an f32 KV cache
  full_t1    one thread (must equal `full` to 1e-6)
  split      prefix window [0,16) (n_kv 16), then [16,40) attending to it
  split3     [0,16), [16,28) with n_kv 28, [28,40) with n_kv 40
  dual       the whole canvas, then the block [16,24) re-run with other
             tokens, attending to the cached prefix [0,16) AND the cached
             suffix [24,40) (n_kv 40): the dual cache
  dual_same  the whole canvas, then [16,24) with the same tokens: must equal
             the first call's rows 16..23 to 1e-6 (a row does not depend on
             its window)
Error per row: max_i |ours_i - ref_i| / max_i |ref_i|; bounds: 1e-3 with the
f16 KV cache (f16 rounding of K/V, as test_tiny_oracle), 1e-5 with f32.
Also the refusals: a window wider than n_batch, n_kv < pos0 + n, n_kv > n_ctx;
and load errors naming the key for a mask id outside the vocabulary or of
the wrong type, a causal llada file, a non-causal llama file, a non-bool
shift_logits; and the defaults (llada without shift_logits / causal keys:
0 / 0; dream with shift_logits false: 0; no mask key: -1).

usage: test_dllm_oracle.py DLLM_TOOL MODELS_DIR WORK_DIR
"""
import json
import os
import subprocess
import sys
import time

import numpy as np

TOOL, MODELS, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
HERE = os.path.dirname(os.path.abspath(__file__))
GEN = os.path.join(HERE, "..", "tools", "gen_dllm_models.py")
REL_TOL = 1e-3
REL_TOL_KV_F32 = 1e-5
SAME_TOL = 1e-6

try:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
except Exception as e:  # noqa: BLE001
    print(f"FAIL: the oracle needs torch and transformers in {sys.executable} ({e}); "
          "run the oracle setup: .venv/bin/pip install torch transformers accelerate")
    sys.exit(1)
if not os.path.exists(os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf")):
    print(f"FAIL: missing {os.path.join(MODELS, 'SmolLM2-135M-Instruct.Q4_1.gguf')} (its tokenizer is copied into "
          "the tiny models): run tools/fetch_models.sh")
    sys.exit(1)

torch.set_num_threads(2)
t0 = time.time()
subprocess.run([sys.executable, GEN, WORK, "--models-dir", MODELS], check=True, stdout=subprocess.DEVNULL)
failures = []


def fail(msg):
    failures.append(msg)
    print("  FAIL:", msg)


def hf_model(meta, sd):
    cls, cfg_cls = (LlamaForCausalLM, LlamaConfig) if meta["hf_class"] == "llama" else (Qwen2ForCausalLM, Qwen2Config)
    cfg = cfg_cls(**meta["hf_config"])
    cfg._attn_implementation = "eager"
    model = cls(cfg)
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()}, strict=False)
    # rotary inv_freq buffers are not in the state dict; anything else must match
    missing = [k for k in missing if "rotary" not in k]
    if missing or unexpected:
        raise RuntimeError(f"HF state dict mismatch: missing {missing}, unexpected {unexpected}")
    return model.eval()


def hf_slots(model, ids, pos, visible):
    """One HF forward over slots (ids, position ids) where slot i sees the
    slots with visible[i, j] True. Returns [n_slots, n_vocab] float64."""
    n = len(ids)
    mask = torch.full((1, 1, n, n), torch.finfo(torch.float32).min)
    mask[0, 0][torch.from_numpy(visible)] = 0.0
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), position_ids=torch.tensor([pos]), attention_mask=mask)
    return out.logits[0].double().numpy()


def simulate(tokens, windows):
    """Slots of a window sequence (see the module docstring): windows are
    (pos0, n, n_kv, ids or None)."""
    ids, pos, rows = [], [], []
    holder = {}  # cache position -> slot holding it
    for pos0, n, n_kv, wids in windows:
        wids = wids if wids is not None else tokens[pos0:pos0 + n]
        first = len(ids)
        for k in range(n):
            ids.append(int(wids[k]))
            pos.append(pos0 + k)
            holder[pos0 + k] = first + k
        seen = [holder[p] for p in range(n_kv)]
        rows.append([(first + k, seen) for k in range(n)])
    vis = np.zeros((len(ids), len(ids)), dtype=bool)
    for call in rows:
        for slot, seen in call:
            vis[slot, seen] = True
    return ids, pos, vis


def ours(path, tokens, windows, args=()):
    out = os.path.join(WORK, "logits.f32")
    cmd = [TOOL, "window", path, out, "--tokens", ",".join(map(str, tokens))] + list(args)
    for pos0, n, n_kv, wids in windows:
        spec = f"{pos0}:{n}:{n_kv}" + ("@" + ",".join(map(str, wids)) if wids is not None else "")
        cmd += ["--window", spec]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"dllm_tool {' '.join(args)} failed: {r.stderr.strip()}")
    return np.fromfile(out, dtype=np.float32).astype(np.float64)


def rel_err(got, ref):
    return np.abs(got - ref).max(axis=1) / np.abs(ref).max(axis=1)


print(f"{'model':7s} {'run':11s} {'rows':>4s} {'max rel err':>12s} {'worst row':>9s}")
for name in ("llada", "dream"):
    meta = json.load(open(os.path.join(WORK, name + ".json")))
    path = os.path.join(WORK, name + ".gguf")
    sd = dict(np.load(os.path.join(WORK, name + ".npz")))
    V, tokens, ids = meta["n_vocab"], meta["tokens"], meta["ids"]
    T = len(tokens)
    hf = hf_model(meta, sd)

    # metadata as the decoders will read it
    info = dict(line.split("=", 1) for line in subprocess.run([TOOL, "info", path], capture_output=True, text=True,
                                                               check=True).stdout.split())
    want = {"arch": meta["arch"], "causal": "0", "mask_token_id": str(ids["mask"]),
            "shift_logits": "1" if meta["shift_logits"] else "0", "eos": str(ids["eos"]), "eot": str(ids["eot"]),
            "n_vocab": str(V), "rope_type": "norm" if name == "llada" else "neox"}
    for k, v in want.items():
        if info.get(k) != v:
            fail(f"{name}: info {k} = {info.get(k)}, expected {v}")

    # the reference is bidirectional: the last token reaches position 0
    full_vis = np.ones((T, T), dtype=bool)
    ref_full = hf_slots(hf, tokens, list(range(T)), full_vis)
    alt = list(tokens)
    alt[-1] = (alt[-1] + 1) % V
    ref_alt = hf_slots(hf, alt, list(range(T)), full_vis)
    if np.abs(ref_alt[0] - ref_full[0]).max() < 1e-3 * np.abs(ref_full[0]).max():
        fail(f"{name}: HF reference with the all-visible mask is not bidirectional")
    with torch.no_grad():
        ref_causal = hf(input_ids=torch.tensor([tokens])).logits[0].double().numpy()

    W = lambda *w: [tuple(x) + (None,) * (4 - len(x)) for x in w]  # noqa: E731
    rng = np.random.default_rng(7)
    new_block = rng.integers(0, V, 8).tolist()
    runs = {
        "full": (W((0, T, T)), ["-b", "64"], REL_TOL),
        "full_kvf32": (W((0, T, T)), ["-b", "64", "--kv-f32"], REL_TOL_KV_F32),
        "full_t1": (W((0, T, T)), ["-b", "64", "-t", "1"], REL_TOL),
        "split": (W((0, 16, 16), (16, 24, T)), ["-b", "24"], REL_TOL),
        "split3": (W((0, 16, 16), (16, 12, 28), (28, 12, T)), ["-b", "16"], REL_TOL),
        "dual": (W((0, T, T), (16, 8, T, new_block)), ["-b", "64"], REL_TOL),
        "dual_kvf32": (W((0, T, T), (16, 8, T, new_block)), ["-b", "64", "--kv-f32"], REL_TOL_KV_F32),
        "dual_same": (W((0, T, T), (16, 8, T)), ["-b", "64"], REL_TOL),
    }
    got_runs = {}
    for run, (windows, args, tol) in runs.items():
        sids, spos, vis = simulate(tokens, windows)
        ref = hf_slots(hf, sids, spos, vis)
        try:
            got = ours(path, tokens, windows, args).reshape(len(sids), V)
        except RuntimeError as e:
            fail(f"{name}/{run}: {e}")
            continue
        got_runs[run] = got
        rel = rel_err(got, ref)
        print(f"{name:7s} {run:11s} {len(sids):4d} {rel.max():12.3e} {int(rel.argmax()):9d}")
        if not rel.max() < tol:
            fail(f"{name}/{run}: max rel err {rel.max():.3e} at row {int(rel.argmax())} (bound {tol})")
    if "full" in got_runs:
        full = got_runs["full"]
        if (rel_err(full, ref_causal)).max() < 1e-2:
            fail(f"{name}: ours matches a causal HF forward: the window forward is not bidirectional")
        if "full_t1" in got_runs and not np.abs(got_runs["full_t1"] - full).max() <= SAME_TOL * np.abs(full).max():
            fail(f"{name}: one thread differs from two")
        if "dual_same" in got_runs:
            d = np.abs(got_runs["dual_same"][T:] - full[16:24]).max() / np.abs(full).max()
            print(f"{name:7s} {'dual_same':11s} vs full rows 16..23: {d:.2e}")
            if not d <= SAME_TOL:
                fail(f"{name}/dual_same: re-running [16,24) differs from the full window's rows by {d:.3e}")

    # refusals, each with a message naming the problem
    for args, windows, word in ((["-b", "16"], W((0, T, T)), "n_batch"), ([], W((0, 8, 4)), "n_kv"),
                                (["-c", "32"], W((0, 8, T)), "n_ctx")):
        try:
            ours(path, tokens, windows, args)
            fail(f"{name}: {args} {windows} was accepted (expected an error naming {word})")
        except RuntimeError as e:
            if word not in str(e):
                fail(f"{name}: error for {args} {windows} does not name {word}: {e}")

# metadata checks on variants of the files: refusals naming the key, and the
# shift_logits defaults / overrides
sys.path.insert(0, os.path.dirname(GEN))
import gen_dllm_models as gd  # noqa: E402

SRC = os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf")
U32, BOOL, STR = gd.GGUFValueType.UINT32, gd.GGUFValueType.BOOL, gd.GGUFValueType.STRING
variants = [
    ("bad_mask", "llada", {"tokenizer.ggml.mask_token_id": (U32, 9999)}, "mask_token_id = 9999"),
    ("bad_mask_type", "llada", {"tokenizer.ggml.mask_token_id": (STR, "x")}, "mask_token_id"),
    ("causal_llada", "llada", {"llada.attention.causal": (BOOL, True)}, "llada.attention.causal"),
    ("noncausal_llama", "llama", {"llama.attention.causal": (BOOL, False)}, "llama.attention.causal"),
    ("bad_shift_type", "dream", {"diffusion.shift_logits": (STR, "yes")}, "diffusion.shift_logits"),
    ("llada_noshift", "llada", {"diffusion.shift_logits": None, "llada.attention.causal": None}, None),
    ("dream_noshift", "dream", {"diffusion.shift_logits": (BOOL, False), "tokenizer.ggml.mask_token_id": None}, None),
]
for vname, arch, over, word in variants:
    spec = dict(gd.SPECS["llada" if arch == "llama" else arch], arch=arch)
    vpath = gd.write_model(WORK, vname, spec, SRC, 5, overrides=over)
    r = subprocess.run([TOOL, "info", vpath], capture_output=True, text=True)
    if word is not None:
        if r.returncode == 0 or word not in r.stderr:
            fail(f"{vname}: expected a load error naming '{word}', got rc {r.returncode}: {r.stderr.strip()}")
        continue
    got = dict(line.split("=", 1) for line in r.stdout.split()) if r.returncode == 0 else {}
    want = {"llada_noshift": {"shift_logits": "0", "causal": "0"},
            "dream_noshift": {"shift_logits": "0", "mask_token_id": "-1"}}[vname]
    for k, v in want.items():
        if got.get(k) != v:
            fail(f"{vname}: {k} = {got.get(k)} (expected {v}; rc {r.returncode} {r.stderr.strip()})")

print(f"({time.time() - t0:.1f} s)")
if failures:
    for f in failures:
        print("FAIL:", f)
    sys.exit(1)
print("test_dllm_oracle: all rows within bounds")
