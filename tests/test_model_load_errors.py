#!/usr/bin/env python3
"""test_model_load_errors.py - broken tiny model files must be refused by
ts_mdl_load with a message naming the bad field (and a good one loaded),
through `ts_model_tool info`. Each case writes a tiny model
(tools/gen_tiny_models.py) with one thing wrong: a missing or out-of-range
hyper-parameter, a missing tensor, a tensor whose shape does not match the
hyper-parameters, an unsupported architecture or rope scaling.

usage: test_model_load_errors.py TS_MODEL_TOOL MODELS_DIR WORK_DIR
"""
import copy
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import gen_tiny_models as gen  # noqa: E402
from gguf import GGUFValueType as VT  # noqa: E402

TOOL, MODELS, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(WORK, exist_ok=True)
src = os.path.join(MODELS, gen.TOKENIZER_SOURCES["smollm"])
if not os.path.exists(src):
    print(f"FAIL: missing {src}: run tools/fetch_models.sh")
    sys.exit(1)
tok = gen.read_tokenizer_fields(src, gen.N_VOCAB)

LLAMA = gen.SPECS["llama_gqa"]
QWEN3 = gen.SPECS["qwen3"]

# (name, spec, write_model kwargs, expected substrings of the error; None = must load)
CASES = [
    ("good_llama", LLAMA, {}, None),
    ("good_qwen3", QWEN3, {}, None),
    ("no_block_count", LLAMA, dict(drop_keys=["block_count"]), ["llama.block_count"]),
    ("no_eps", LLAMA, dict(drop_keys=["attention.layer_norm_rms_epsilon"]),
     ["llama.attention.layer_norm_rms_epsilon"]),
    ("zero_heads", LLAMA, dict(set_keys={"attention.head_count": (VT.UINT32, 0)}),
     ["llama.attention.head_count", "0"]),
    ("kv_not_dividing", LLAMA, dict(set_keys={"attention.head_count_kv": (VT.UINT32, 3)}),
     ["head_count_kv", "3"]),
    ("eps_string", LLAMA, dict(set_keys={"attention.layer_norm_rms_epsilon": (VT.STRING, "tiny")}),
     ["llama.attention.layer_norm_rms_epsilon"]),
    ("odd_rope_dims", LLAMA, dict(set_keys={"rope.dimension_count": (VT.UINT32, 7)}),
     ["rope.dimension_count", "7"]),
    ("rope_yarn", LLAMA, dict(set_keys={"rope.scaling.type": (VT.STRING, "yarn")}), ["rope.scaling.type", "yarn"]),
    ("vocab_size_mismatch", LLAMA, dict(set_keys={"vocab_size": (VT.UINT32, 641)}), ["vocab_size", "641", "640"]),
    ("missing_ffn_up", LLAMA, dict(drop_tensors=["blk.1.ffn_up.weight"]), ["blk.1.ffn_up.weight", "missing"]),
    ("missing_output_norm", LLAMA, dict(drop_tensors=["output_norm.weight"]), ["output_norm.weight"]),
    ("bad_k_shape", LLAMA, dict(bad_shapes=[("blk.0.attn_k.weight", (48, 64))]),
     ["blk.0.attn_k.weight", "[64, 48]", "[64, 32]"]),
    ("bad_norm_shape", LLAMA, dict(bad_shapes=[("blk.1.attn_norm.weight", (63,))]), ["blk.1.attn_norm.weight", "63"]),
    ("key_length_vs_q", LLAMA, dict(set_keys={"attention.key_length": (VT.UINT32, 8),
                                              "attention.value_length": (VT.UINT32, 8),
                                              "rope.dimension_count": (VT.UINT32, 8)}),
     ["blk.0.attn_q.weight", "shape"]),
    ("value_length", LLAMA, dict(set_keys={"attention.value_length": (VT.UINT32, 8)}),
     ["value_length", "8"]),
    ("qwen3_no_q_norm", QWEN3, dict(drop_tensors=["blk.0.attn_q_norm.weight"]), ["blk.0.attn_q_norm.weight"]),
    ("unknown_arch", dict(LLAMA, arch="mamba"), {}, ["general.architecture", "mamba"]),
]

failures = []
for i, (name, spec, kw, expect) in enumerate(CASES):
    path = os.path.join(WORK, name + ".gguf")
    gen.write_model(path, copy.deepcopy(spec), tok, seed=i, **kw)
    r = subprocess.run([TOOL, "info", path], capture_output=True, text=True)
    msg = r.stderr.strip()
    if expect is None:
        ok = r.returncode == 0
    else:
        ok = r.returncode == 1 and all(s in msg for s in expect)
    print(f"{'ok  ' if ok else 'FAIL'} {name:20s} rc={r.returncode} {msg}")
    if not ok:
        failures.append(name)

if failures:
    print("FAIL:", ", ".join(failures))
    sys.exit(1)
print(f"test_model_load_errors: {len(CASES)} cases passed")
