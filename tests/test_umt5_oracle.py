#!/usr/bin/env python3
"""test_umt5_oracle.py - tessera's umT5 text encoder (src/video/umt5.c)
against transformers' UMT5EncoderModel, an oracle we did not write.

A tiny random configuration (tools/gen_umt5.py tiny: d_model 64, d_ff 96, 2
layers, 4 heads of 16, 300 tokens, 32 buckets, max_distance 128,
gated-gelu) is written to GGUF with the names of llama.cpp's gguf-py map.
Checked:
  - names: every tensor is one of gguf's T5ENCODER names, each layer has its
    own attn_rel_b;
  - buckets: ts_umt5_bucket equals transformers' _relative_position_bucket
    (bidirectional) exactly for offsets -1000 .. 1000, at 32 and 64 buckets;
  - states: max |tessera - transformers| / max |transformers| < 1e-3 for
    23 ids unmasked, 23 ids with attention_mask over the first 17 (every
    row compared, padded queries included), the Wan pipeline's form (the
    17 real rows, zeros to 512) and 300 ids (offsets past max_distance);
    the f32 file against the model, the Q8_0 file against the model holding
    its dequantized weights (the distance to the f32 model printed); the
    masked run on the `loop` engine bit-identical to `cpu`; a T5 file (one
    bias table, in layer 0) against transformers' T5EncoderModel;
  - bad files and input: a missing tensor, a tensor of the wrong shape (a
    transposed attn_rel_b), a token id out of range: errors naming them.

usage: test_umt5_oracle.py UMT5_TOOL OUT_DIR
Exit 77 (skip) when torch or transformers is missing.
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
        from transformers import UMT5Config, UMT5EncoderModel
    except ImportError as e:
        print(f"SKIP: {e} (pip install -r tools/requirements-torch.txt)")
        return 77
    import gguf
    from gguf import GGUFReader
    from gguf.quants import dequantize

    import gen_umt5 as gen

    torch.manual_seed(0)
    model, tensors, spm_model = gen.tiny(out, seed=1234)
    cfg = gen.TINY
    L, D = cfg["num_layers"], cfg["d_model"]
    failures = 0

    def check(ok, what):
        nonlocal failures
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {what}")

    # names: llama.cpp's constants, one bias table per layer
    known = {gguf.TENSOR_NAMES[t].format(bid=b) + ".weight"
             for t in gguf.MODEL_TENSORS[gguf.MODEL_ARCH.T5ENCODER] for b in range(L)}
    names = [t.name for t in GGUFReader(os.path.join(out, "umt5-tiny.gguf")).tensors]
    check(set(names) <= known and all(f"enc.blk.{b}.attn_rel_b.weight" in names for b in range(L)),
          f"names: {len(names)} tensors, all in gguf's T5ENCODER map, attn_rel_b in each of {L} layers")

    # buckets, exactly
    attn = model.encoder.block[0].layer[0].SelfAttention
    rel = torch.arange(-1000, 1001)
    for nb in (32, 64):
        attn.relative_attention_num_buckets = nb
        want = attn._relative_position_bucket(rel).tolist()
        r = subprocess.run([tool, "buckets", str(nb), "128", "-1000", "1000"], capture_output=True, text=True)
        got = [int(x) for x in r.stdout.split()]
        bad = [int(rel[i]) for i in range(len(want)) if i >= len(got) or got[i] != want[i]]
        check(not bad, f"buckets ({nb}, 128): offsets -1000 .. 1000 equal transformers'"
                       + (f"; differ at {bad[:8]}" if bad else ""))
    attn.relative_attention_num_buckets = cfg["relative_attention_num_buckets"]

    # the same model holding the Q8_0 file's weights, dequantized
    inv = {gen.gguf_name(k, L): k for k in model.state_dict() if k != "encoder.embed_tokens.weight"}
    qsd = {k: v.clone() for k, v in model.state_dict().items()}
    for t in GGUFReader(os.path.join(out, "umt5-tiny-q8_0.gguf")).tensors:
        if t.tensor_type.name == "Q8_0":
            k = inv[t.name]
            qsd[k] = torch.from_numpy(dequantize(t.data, t.tensor_type).reshape(qsd[k].shape).copy())
    qsd["encoder.embed_tokens.weight"] = qsd["shared.weight"]
    qmodel = UMT5EncoderModel(UMT5Config(**cfg)).eval()
    qmodel.load_state_dict(qsd)

    ids_path, res_path = os.path.join(out, "ids.i32"), os.path.join(out, "out.f32")

    def ours(path, mode, ids, a, b, engine="cpu"):
        np.asarray(ids, dtype=np.int32).tofile(ids_path)
        r = subprocess.run([tool, mode, path, engine, "2", str(a), str(b), ids_path, res_path], capture_output=True,
                           text=True)
        if r.returncode:
            sys.exit(f"umt5_tool failed: {r.stderr}")
        rows = b if mode == "padded" else a
        return np.fromfile(res_path, dtype=np.float32).reshape(rows, D), r.stdout

    def ref(m, ids, n_real=None):
        mask = None
        if n_real is not None:
            mask = torch.zeros(1, len(ids), dtype=torch.long)
            mask[0, :n_real] = 1
        with torch.no_grad():
            return m(input_ids=torch.tensor([ids]), attention_mask=mask).last_hidden_state[0].numpy()

    def rel_err(got, want):
        return float(np.abs(got - want).max() / np.abs(want).max())

    rng = np.random.default_rng(7)
    ids23 = rng.integers(0, cfg["vocab_size"], 23).tolist()
    ids23[-1] = 1  # </s> as the tokenizer ends a prompt
    ids300 = rng.integers(0, cfg["vocab_size"], 300).tolist()
    f32, q8 = os.path.join(out, "umt5-tiny.gguf"), os.path.join(out, "umt5-tiny-q8_0.gguf")
    log = ""
    for label, path, m in (("f32", f32, model), ("Q8_0", q8, qmodel)):
        cases = [("23 ids", "encode", ids23, 23, 23, ref(m, ids23)),
                 ("23 ids, mask over 17", "encode", ids23, 23, 17, ref(m, ids23, 17)),
                 ("17 real padded to 512 (Wan)", "padded", ids23[:17], 17, 512, None),
                 ("300 ids", "encode", ids300, 300, 300, ref(m, ids300))]
        for what, mode, ids, a, b, want in cases:
            got, log = ours(path, mode, ids, a, b)
            if mode == "padded":
                masked = ref(m, ids23, 17)
                e = rel_err(got[:17], masked[:17])
                zeros = not got[17:].any()
                check(e < BOUND and zeros, f"{label} {what}: real rows max rel {e:.2e} of transformers' masked "
                                           f"run, rows 17..511 {'zero' if zeros else 'NOT ZERO'}")
                continue
            e = rel_err(got, want)
            extra = ""
            if m is qmodel:
                extra = f" (vs the f32 model {rel_err(got, ref(model, ids, None if a == b else b)):.2e})"
            check(e < BOUND, f"{label} {what}: max rel {e:.2e}{extra}")
    # T5 (one bias table, layer 0's, shared by every layer): a file without
    # the later layers' attn_rel_b against transformers' T5EncoderModel
    from transformers import T5Config, T5EncoderModel
    t5 = T5EncoderModel(T5Config(**cfg)).eval()
    t5.load_state_dict({k: v for k, v in model.state_dict().items()
                        if "relative_attention_bias" not in k or k.startswith("encoder.block.0.")})
    t5_path = os.path.join(out, "t5-tiny.gguf")
    gen.write_gguf(t5_path, tensors, cfg, "f32", spm_model,
                   skip=tuple(f"enc.blk.{b}.attn_rel_b.weight" for b in range(1, L)))
    got, t5log = ours(t5_path, "encode", ids23, 23, 17)
    e = rel_err(got, ref(t5, ids23, 17))
    check(e < BOUND and "bias tables 1\n" in t5log,
          f"T5 file (attn_rel_b in layer 0 only) vs T5EncoderModel, mask over 17: max rel {e:.2e}")
    cpu, _ = ours(f32, "encode", ids23, 23, 17, "cpu")
    loop, _ = ours(f32, "encode", ids23, 23, 17, "loop")
    check(np.array_equal(cpu, loop), "masked run on loop bit-identical to cpu")
    print(log.strip())

    # bad files and input
    def refused(path, mode, ids, a, b, needle):
        if path.endswith(".gguf") and mode == "open":
            r = subprocess.run([tool, "open", path], capture_output=True, text=True)
        else:
            np.asarray(ids, dtype=np.int32).tofile(ids_path)
            r = subprocess.run([tool, mode, path, "cpu", "1", str(a), str(b), ids_path, res_path],
                               capture_output=True, text=True)
        msg = r.stderr.strip()
        check(r.returncode == 1 and needle in msg, f"refused: {msg}")

    bad = os.path.join(out, "bad.gguf")
    gen.write_gguf(bad, tensors, cfg, "f32", spm_model, skip=("enc.blk.1.ffn_up.weight",))
    refused(bad, "open", None, 0, 0, "missing tensor 'enc.blk.1.ffn_up.weight'")
    tt = dict(tensors)
    tt["enc.blk.1.attn_rel_b.weight"] = tensors["enc.blk.1.attn_rel_b.weight"].T  # [n_head][n_bucket]: transposed
    gen.write_gguf(bad, tt, cfg, "f32", spm_model)
    refused(bad, "open", None, 0, 0, "'enc.blk.1.attn_rel_b.weight' has shape [32, 4], expected [4, 32]")
    tt = dict(tensors)
    tt["enc.blk.0.attn_o.weight"] = tensors["enc.blk.0.attn_o.weight"][:48]
    gen.write_gguf(bad, tt, cfg, "f32", spm_model)
    refused(bad, "open", None, 0, 0, "'enc.blk.0.attn_o.weight' has shape [64, 48], expected [64, 64]")
    refused(f32, "encode", ids23[:5] + [300], 6, 6, "token 5: id 300 out of range [0, 300)")
    refused(f32, "encode", [-1] + ids23[:5], 6, 6, "token 0: id -1 out of range [0, 300)")
    refused(f32, "encode", ids23, 23, 24, "23 tokens with 24 real")

    if failures:
        print(f"FAIL: {failures} check(s)")
        return 1
    print(f"umt5 encoder: within {BOUND} of transformers at f32 and Q8_0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
