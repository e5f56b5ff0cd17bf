#!/usr/bin/env python3
"""oracle_real.py - compares tessera's forward pass with HF transformers on the
real models (SmolLM2-135M-Instruct Q4_1, Gemma 3 270M Q4_K_M; and, where
tools/fetch_models.sh --qwen05 --qwen15 fetched them, Qwen2.5-Coder-0.5B-
Instruct (mostly Q5_0) and Qwen2.5-Coder-1.5B-Instruct Q4_K_M), both reading
the same GGUF file (transformers dequantizes it to float32; tessera keeps the
stored types and uses an f16 KV cache).

For each model and prompt (prompt ids from transformers' tokenizer, the same
ids fed to both):
  - logits at every prompt position: max |diff| / max |ref| per row, and
    whether the argmax (top-1) agrees, with the oracle's top-1/top-2 margin;
  - greedy continuation of 32 tokens (no early stop at end-of-generation):
    ours (ts_model_tool greedy) vs transformers (argmax loop with its cache),
    the first divergence, and the oracle's margin there.
Writes a report to OUT_MD (docs/FIDELITY.md) and the facts to pin to
tests/real_pinned.json (read by tests/test_real_pinned.py).

Not part of CTest (loads both models in float32 with transformers, ~2 min on
2 cores). Run: `ninja -C build oracle`, or
  .venv/bin/python tools/oracle_real.py build/tests/ts_model_tool models docs/FIDELITY.md
"""
import datetime
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

TOOL, MODELS, OUT_MD = sys.argv[1], sys.argv[2], sys.argv[3]
HERE = os.path.dirname(os.path.abspath(__file__))
PINNED = os.path.join(HERE, "..", "tests", "real_pinned.json")
N_GEN = 32
NEAR_TIE = 0.05  # oracle top-1/top-2 logit margin below which either id is accepted by the pinned test

COMMON_PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):\n",
    "The three primary colors are",
]
MODELS_SPEC = {
    "SmolLM2-135M-Instruct.Q4_1.gguf":
        COMMON_PROMPTS + ["<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"],
    "gemma-3-270m-q4_k_m.gguf":
        COMMON_PROMPTS + ["<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n"],
}
# optional (fetched only on request): compared when present, pinned as optional
QWEN_PROMPTS = COMMON_PROMPTS + ["<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"]
OPTIONAL = {"qwen2.5-coder-0.5b-instruct.gguf": QWEN_PROMPTS,
            "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf": QWEN_PROMPTS}
for _f, _p in OPTIONAL.items():
    if os.path.exists(os.path.join(MODELS, _f)):
        MODELS_SPEC[_f] = _p

torch.set_num_threads(2)


def tool(*args, env=None):
    """ts_model_tool with extra environment variables (TS_KERNELS=ref: the
    scalar reference path; TS_ACT=q8: 8-bit activations)."""
    r = subprocess.run([TOOL, *args], capture_output=True, text=True, env=dict(os.environ, **(env or {})))
    if r.returncode != 0:
        raise RuntimeError(f"ts_model_tool {args[0]} failed: {r.stderr.strip()}")
    return r.stdout


def ours_tokenize(path, text):
    try:
        return [int(x) for x in tool("tokenize", path, text).strip().split(",") if x]
    except RuntimeError as e:
        return str(e)


def margin(row):
    top2 = np.sort(row)[-2:]
    return float(top2[1] - top2[0])


def hf_greedy(model, ids, n):
    out, gen, margins = None, [], []
    with torch.no_grad():
        out = model(torch.tensor([ids]), use_cache=True)
        for _ in range(n):
            row = out.logits[0, -1].double().numpy()
            nxt = int(row.argmax())
            gen.append(nxt)
            margins.append(margin(row))
            out = model(torch.tensor([[nxt]]), past_key_values=out.past_key_values, use_cache=True)
    return gen, margins


report, pinned = [], {"n_gen": N_GEN, "near_tie": NEAR_TIE, "models": {},
                     "optional": [f for f in OPTIONAL if f in MODELS_SPEC]}
t_start = time.time()
for fname, prompts in MODELS_SPEC.items():
    path = os.path.join(MODELS, fname)
    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(MODELS, gguf_file=fname)
    model = AutoModelForCausalLM.from_pretrained(MODELS, gguf_file=fname, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    print(f"{fname}: transformers loaded in {time.time() - t0:.0f} s", flush=True)
    mrep = {"file": fname, "prompts": []}
    pins = []
    for text in prompts:
        ids = tok(text)["input_ids"]
        ids_ours = ours_tokenize(path, text)
        with torch.no_grad():
            ref = model(torch.tensor([ids])).logits[0].double().numpy()
        out = os.path.join("/tmp", f"oracle_real_{os.getpid()}.f32")
        tool("logits", path, out, "--tokens", ",".join(map(str, ids)))
        got = np.fromfile(out, dtype=np.float32).reshape(len(ids), -1).astype(np.float64)
        rel = np.abs(got - ref).max(axis=1) / np.abs(ref).max(axis=1)
        tool("logits", path, out, "--tokens", ",".join(map(str, ids)), "--kv-f32")
        got32 = np.fromfile(out, dtype=np.float32).reshape(len(ids), -1).astype(np.float64)
        rel32 = np.abs(got32 - ref).max(axis=1) / np.abs(ref).max(axis=1)
        variants = {}
        for name, env in (("ref", {"TS_KERNELS": "ref"}), ("q8", {"TS_ACT": "q8"})):
            tool("logits", path, out, "--tokens", ",".join(map(str, ids)), env=env)
            gv = np.fromfile(out, dtype=np.float32).reshape(len(ids), -1).astype(np.float64)
            gg = tool("greedy", path, "--tokens", ",".join(map(str, ids)), "-n", str(N_GEN), env=env).splitlines()
            variants[name] = (float((np.abs(gv - ref).max(axis=1) / np.abs(ref).max(axis=1)).max()),
                              int((gv.argmax(axis=1) == ref.argmax(axis=1)).sum()),
                              [int(x) for x in gg[1].split(":")[1].split()])
        os.unlink(out)
        mean_abs = float(np.abs(got - ref).mean())
        top_ref, top_ours = ref.argmax(axis=1), got.argmax(axis=1)
        margins = [margin(r) for r in ref]
        top1_alt = {}
        for p in range(len(ids)):
            if margins[p] < NEAR_TIE:
                top1_alt[str(p)] = [int(x) for x in np.argsort(ref[p])[-2:]]

        g = tool("greedy", path, "--tokens", ",".join(map(str, ids)), "-n", str(N_GEN)).splitlines()
        our_top1 = [int(x) for x in g[0].split(":")[1].split()]
        our_gen = [int(x) for x in g[1].split(":")[1].split()]
        hf_gen, hf_margins = hf_greedy(model, ids, N_GEN)
        div = next((i for i in range(N_GEN) if our_gen[i] != hf_gen[i]), None)
        var_div = {k: next((i for i in range(N_GEN) if v[2][i] != hf_gen[i]), None) for k, v in variants.items()}
        first_tie = next((i for i in range(N_GEN) if hf_margins[i] < NEAR_TIE), N_GEN)
        pr = {
            "text": text, "ids": ids, "ids_ours_tokenizer_agree": ids_ours == ids,
            "max_rel_err": float(rel.max()), "max_rel_err_kv_f32": float(rel32.max()), "mean_abs_err": mean_abs,
            "top1_match": int((top_ref == top_ours).sum()), "n_pos": len(ids),
            "top1_mismatch_margins": [round(margins[p], 4) for p in range(len(ids)) if top_ref[p] != top_ours[p]],
            "greedy_match": div is None, "greedy_first_divergence": div,
            "divergence_margin": None if div is None else round(hf_margins[div], 4),
            "min_oracle_margin": round(min(hf_margins), 4),
            "variants": {k: {"max_rel_err": v[0], "top1_match": v[1], "greedy_first_divergence": var_div[k],
                             "divergence_margin": None if var_div[k] is None else round(hf_margins[var_div[k]], 4)}
                         for k, v in variants.items()},
            "hf_text": tok.decode(hf_gen), "our_text": tok.decode(our_gen),
        }
        mrep["prompts"].append(pr)
        print(json.dumps({k: v for k, v in pr.items() if k not in ("ids",)}, ensure_ascii=False), flush=True)
        pins.append({"text": text, "ids": ids, "top1": our_top1, "top1_alt": top1_alt, "greedy": our_gen,
                     "greedy_check_len": first_tie if div is None else min(div, first_tie),
                     "oracle_agrees": bool(div is None and (top_ref == top_ours).all())})
    pinned["models"][fname] = pins
    report.append(mrep)
    del model

with open(PINNED, "w") as f:
    json.dump(pinned, f, indent=1)

# ---- report ---------------------------------------------------------------
L = []
L.append("# Fidelity of the CPU forward pass\n")
L.append("tessera's CPU forward pass compared with HF transformers on the real models.\n")
L.append(f"Generated by `tools/oracle_real.py` ({datetime.date.today().isoformat()}):\n")
L.append("```\n.venv/bin/python tools/oracle_real.py build/tests/ts_model_tool models docs/FIDELITY.md\n"
         "# or: ninja -C build oracle\n```\n")
L.append(f"transformers {transformers.__version__}, torch {torch.__version__}, {platform.machine()}; "
         f"total {time.time() - t_start:.0f} s.\n")
L.append("Both sides read the same GGUF file: transformers dequantizes every tensor to float32 and runs in "
         "float32 (eager attention); tessera keeps the stored quantized types and stores K/V as f16. tessera's "
         "default path (the one measured in the main columns and pinned) is the fast one: weights repacked "
         "into 16-row panels, each matmul input quantized once per 32-value block to 16-bit integers (two int8 "
         "planes, scale amax/32512) and multiplied exactly in integers (VNNI), f32 scale accumulation, tiled "
         "attention with a polynomial exp (src/kernels/repack.h, linear.h, fastops.h). Two other paths are "
         "measured too: `TS_KERNELS=ref` (the scalar reference: each weight row dequantized to f32 and dotted "
         "with f32 activations) and `TS_ACT=q8` (8-bit activations, amax/127 per block: the precision of "
         "ggml's Q8_0 activations, about 1.6x the prefill speed). Prompt ids come from transformers' "
         "tokenizer and are fed to both; `tok` says whether tessera's tokenizer gave the same ids.\n")
L.append("Columns: `rel err` = max over prompt positions of max|ours - ref| / max|ref| for that position; "
         "`rel err (f32 KV)` = the same with tessera's KV cache in f32 (`--kv-f32`), which isolates the f16 cache's "
         "share; `top-1` = positions whose argmax agrees; `greedy` = the 32 greedy tokens agree (else the first "
         "divergent step and the oracle's top-1/top-2 margin there); `min margin` = smallest oracle "
         "top-1/top-2 margin over the 32 greedy steps; `ref` and `q8` columns: `rel err` and greedy of the "
         "two other paths.\n")
for mrep in report:
    L.append(f"\n## {mrep['file']}\n")
    L.append("| prompt | tok | tokens | rel err | rel err (f32 KV) | mean abs err | top-1 | greedy 32 | min margin "
             "| ref: rel err | ref: greedy | q8: rel err | q8: top-1 | q8: greedy |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")

    def gtxt(div, marg):
        return "match" if div is None else f"diverges at {div} (margin {marg})"

    for p in mrep["prompts"]:
        g = gtxt(p["greedy_first_divergence"], p["divergence_margin"])
        vr, vq = p["variants"]["ref"], p["variants"]["q8"]
        L.append(f"| `{json.dumps(p['text'])[1:-1]}` | {'=' if p['ids_ours_tokenizer_agree'] else 'differs'} | "
                 f"{p['n_pos']} | {p['max_rel_err']:.2e} | {p['max_rel_err_kv_f32']:.2e} | {p['mean_abs_err']:.2e} | "
                 f"{p['top1_match']}/{p['n_pos']} | {g} | {p['min_oracle_margin']} | {vr['max_rel_err']:.2e} | "
                 f"{gtxt(vr['greedy_first_divergence'], vr['divergence_margin'])} | {vq['max_rel_err']:.2e} | "
                 f"{vq['top1_match']}/{p['n_pos']} | {gtxt(vq['greedy_first_divergence'], vq['divergence_margin'])} |")
    L.append("")
    for p in mrep["prompts"]:
        L.append(f"- `{json.dumps(p['text'])[1:-1]}` -> tessera: `{json.dumps(p['our_text'], ensure_ascii=False)[1:-1]}`")
        if not p["greedy_match"]:
            L.append(f"  transformers: `{json.dumps(p['hf_text'], ensure_ascii=False)[1:-1]}`")
L.append("\n## Rounding of the fast path, and its bounds\n")
L.append("The fast path rounds differently from the reference in four places: (1) each 32-value block of a "
         "matmul input becomes 16-bit integers (relative step 1/32512 of the block's max |x|; the products "
         "and their block sums are exact), (2) f32 sums run in another order (per-block scale products, 16 "
         "lanes), (3) softmax uses a polynomial exp (relative error < 2e-7), (4) SwiGLU and GeGLU use the "
         "same exp (GeGLU as g sigmoid(2z), which equals 0.5 g (1 + tanh z); within 1e-6 of |gate x up| of "
         "the double-precision formula). Bounds held in CTest: "
         "`test_perf_model` requires the fast logits of SmolLM2 within 3e-3 (max |diff| / max |ref| per "
         "position) of `TS_KERNELS=ref` (observed ~7e-4), decode bit-identical to prefill and in-place "
         "repacking bit-identical to the separate buffer; `test_tiny_oracle` keeps its bounds unchanged "
         "(1e-3, and 1e-5 with an f32 KV cache: the tiny models are F32, whose matmuls keep f32 activations, "
         "so only the order of f32 sums changes there); `test_perf_kernels` bounds each kernel against its "
         "scalar reference (bit-identical) and against double sums (1e-5 relative to the sum of |products|; "
         "1e-4 for the 16-bit activations, 4e-3 for 8-bit ones).\n")
L.append("Why 16 and not 8 bits: with 8-bit activations (`TS_ACT=q8`, ggml's precision) the logits move by up "
         "to ~7% of their range (several tenths of a logit; the blocks holding the models' few huge activation "
         "channels quantize everything else in them coarsely), which flips greedy tokens where the oracle's "
         "margin is up to 0.22, far from a near-tie (see the `q8` columns). 16-bit activations cost twice the "
         "integer work: prefill runs at 0.6-0.7x the speed of 8-bit activations and decode, mostly bound by "
         "memory bandwidth, at 0.83-0.92x (docs/PERFORMANCE.md). Outlier blocks are not the whole story: a "
         "trial (2026-11-29: a patch to the AVX-512 activation quantizer, not kept, and this script with its q8 column run under TS_MIXK=K) that kept 16 bits only in blocks "
         "whose max |x| exceeds K times the row's rms and used 8 bits elsewhere measured max rel err "
         "9.7e-3 - 2.3e-2 at K = 3, 1.0e-2 - 2.9e-2 at K = 4 and 1.1e-2 - 3.0e-2 at K = 6 over these ten "
         "prompts (all blocks 8-bit: 3.2e-2 - 6.9e-2), 3-10x the 3e-3 bound: the 8-bit rounding of the "
         "ordinary blocks alone is worth ~1e-2.\n")
# diffusion LLMs: a fixed paragraph (their oracle is the tiny-model CTest test_dllm_oracle)
L.append('\n## Diffusion LLMs (tiny oracle)\n\n`test_dllm_oracle` (CTest, docs/DIFFUSION.md) compares `ts_forward_window` on tiny random-weight `llada` and `dream` files with HF transformers (LlamaForCausalLM / Qwen2ForCausalLM, float32, eager attention, an explicit 4-D mask making it bidirectional), for a whole window, prefix + block windows and the dual cache: max |ours - ref| / max |ref| per row < 1e-3 with the f16 KV cache (observed 2-3e-4), < 1e-5 with an f32 cache (observed < 1e-6). No real LLaDA / Dream file has been compared yet.\n')
L.append("\n## Pinned facts\n")
L.append("`tests/real_pinned.json` holds, per prompt, the ids, tessera's top-1 at every prompt position and its 32 "
         "greedy tokens, from this run. `tests/test_real_pinned.py` (CTest) re-runs only tessera and requires "
         f"the same top-1 ids (either of the oracle's two best ids where their margin is below {NEAR_TIE}) and "
         "the same greedy tokens for the first `greedy_check_len` steps: the steps before the oracle's first "
         f"near-tie step (top-1/top-2 margin below {NEAR_TIE}), where a legitimate change of rounding (f16 KV "
         "cache, another summation order) could flip the choice.\n")
# sections written by hand after the generated ones (from "## Perplexity" on) are kept
TAIL_MARK = "\n## Perplexity on GPL-3"
tail = ""
if os.path.exists(OUT_MD):
    old = open(OUT_MD).read()
    if TAIL_MARK in old:
        tail = old[old.index(TAIL_MARK):]
with open(OUT_MD, "w") as f:
    f.write("\n".join(L) + "\n" + tail)
print(f"wrote {OUT_MD} and {PINNED} ({time.time() - t_start:.0f} s)")
