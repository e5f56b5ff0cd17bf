#!/usr/bin/env python3
"""test_quant_oracle.py - checks tessera's reference quant kernels against the
`gguf` Python package (gguf.quants), through the ts_quant_tool helper.

  (a) every tensor of the real models: our dequantization == gguf.quants.dequantize
  (b) generated blocks of every supported type (random bytes, sane random f16
      scales; F32/F16/BF16 with arbitrary bit patterns incl. inf/NaN):
      our dequantization == gguf.quants.dequantize
  (c) our Q4_0/Q4_1/Q8_0/F16/BF16 quantization bytes == gguf.quants.quantize

Bound asserted: bit-for-bit equality of the f32 results (compared as uint32,
so -0.0 vs 0.0 and NaN payloads count). Why this holds: a dequantized value is
f16 scale (11 significant bits) times a small integer (<= 6 bits), possibly
times a second small integer (K-quant sub-scales, <= 6 bits): every product
has <= 23 significant bits, so it is exact in f32 whatever the order; the only
rounding step is the final `+ m` / `- m`, which both sides do as one separate
f32 operation on the same operands (numpy evaluates `d * q - m` as two array
ops; the C code stores the product before subtracting so no fma contraction
can happen). Quantization follows ggml's *_ref code op for op in f32, as does
gguf-py, so equal bytes are expected too.

usage: test_quant_oracle.py TS_QUANT_TOOL MODELS_DIR WORK_DIR
"""
import os
import subprocess
import sys

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import GGUFReader
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize, quantize

TOOL, MODELS, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(WORK, exist_ok=True)
MODEL_FILES = ["SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"]

failures = []


def fail(msg):
    print("FAIL:", msg)
    failures.append(msg)


def compare_f32(what, ours, ref):
    """Bitwise equality; on mismatch report count, first positions and max ULP."""
    ours = np.ascontiguousarray(ours, dtype=np.float32).ravel()
    ref = np.ascontiguousarray(ref, dtype=np.float32).ravel()
    if ours.shape != ref.shape:
        fail(f"{what}: {ours.size} values, gguf-py gives {ref.size}")
        return False
    bad = np.nonzero(ours.view(np.uint32) != ref.view(np.uint32))[0]
    if bad.size:
        ulp = np.abs(ours.view(np.int32)[bad].astype(np.int64) - ref.view(np.int32)[bad].astype(np.int64))
        ex = ", ".join(f"[{i}] ours {ours[i]!r} gguf {ref[i]!r}" for i in bad[:5])
        fail(f"{what}: {bad.size}/{ours.size} values differ (max {ulp.max()} ULP): {ex}")
        return False
    return True


def tool(*args):
    r = subprocess.run([TOOL, *map(str, args)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"ts_quant_tool {' '.join(map(str, args))} failed: {r.stderr.strip()}")


def tool_dequant(qtype, raw):
    src, dst = os.path.join(WORK, "dq_in.bin"), os.path.join(WORK, "dq_out.f32")
    raw.tofile(src)
    tool("dequant", qtype.name, src, dst)
    return np.fromfile(dst, dtype=np.float32)


def tool_quant(qtype, x):
    src, dst = os.path.join(WORK, "q_in.f32"), os.path.join(WORK, "q_out.bin")
    np.ascontiguousarray(x, dtype=np.float32).tofile(src)
    tool("quant", qtype.name, src, dst)
    return np.fromfile(dst, dtype=np.uint8)


# ---- (a) real models ---------------------------------------------------------

CHUNK = 1 << 22  # elements per comparison chunk (keeps memory flat)


def check_model(path):
    r = GGUFReader(path)
    proc = subprocess.Popen([TOOL, "dump", path, "-"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    n_ok = 0
    counts = {}
    try:
        for t in r.tensors:
            ne0 = int(t.shape[0])
            # raw rows as stored: (rows, bytes per row) or (rows, ne0) for plain types
            data = t.data.reshape(-1, t.data.shape[-1])
            rows_per_chunk = max(1, CHUNK // ne0)
            ok = True
            for r0 in range(0, data.shape[0], rows_per_chunk):
                part = data[r0:r0 + rows_per_chunk]
                ref = dequantize(part, t.tensor_type)
                got = proc.stdout.read(ref.size * 4)
                if len(got) != ref.size * 4:
                    raise RuntimeError(f"dump ended early at tensor {t.name}: {proc.stderr.read().decode()}")
                if not compare_f32(f"{os.path.basename(path)} {t.name} ({t.tensor_type.name}) rows {r0}+",
                                   np.frombuffer(got, dtype=np.float32), ref):
                    ok = False
                    break
            if not ok:
                return
            n_ok += 1
            counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
        if proc.stdout.read(1):
            fail(f"{path}: dump wrote more values than the tensors hold")
    finally:
        proc.stdout.close()
        proc.wait()
        err = proc.stderr.read().decode()
        proc.stderr.close()
    if proc.returncode != 0:
        fail(f"ts_quant_tool dump {path}: exit {proc.returncode}: {err.strip()}")
    print(f"(a) {os.path.basename(path)}: {n_ok}/{len(r.tensors)} tensors bit-identical {counts}")


# ---- (b) generated blocks ----------------------------------------------------

# byte offsets of the f16 scale fields inside each block
SCALE_FIELDS = {
    QT.Q4_0: [0], QT.Q4_1: [0, 2], QT.Q5_0: [0], QT.Q5_1: [0, 2], QT.Q8_0: [0],
    QT.Q2_K: [80, 82], QT.Q3_K: [108], QT.Q4_K: [0, 2], QT.Q5_K: [0, 2], QT.Q6_K: [208],
}


def check_generated(rng):
    n_blocks = 4096
    for qt, offs in SCALE_FIELDS.items():
        bs, ts = GGML_QUANT_SIZES[qt]
        raw = rng.integers(0, 256, size=(n_blocks, ts), dtype=np.uint8)
        for off in offs:
            # sane f16 scales: random sign, magnitude in [2^-14, 2^4)
            mag = np.exp2(rng.uniform(-14, 4, size=n_blocks)).astype(np.float16)
            sgn = np.where(rng.random(n_blocks) < 0.5, -1, 1).astype(np.float16)
            raw[:, off:off + 2] = (mag * sgn).view(np.uint8).reshape(n_blocks, 2)
        raw[0, :] = 0  # an all-zero block
        ours = tool_dequant(qt, raw)
        if compare_f32(f"(b) {qt.name} random blocks", ours, dequantize(raw, qt)):
            print(f"(b) {qt.name}: {n_blocks * bs} values from random blocks bit-identical")
    # plain types: every bit pattern (F16/BF16 exhaustively, F32 random)
    all16 = np.arange(65536, dtype=np.uint16).view(np.uint8)
    for qt in (QT.F16, QT.BF16):
        if compare_f32(f"(b) {qt.name} all 65536 patterns", tool_dequant(qt, all16), dequantize(all16, qt)):
            print(f"(b) {qt.name}: all 65536 bit patterns (incl. subnormal/inf/NaN) bit-identical")
    raw = rng.integers(0, 2**32, size=65536, dtype=np.uint32).view(np.uint8)
    if compare_f32("(b) F32 random patterns", tool_dequant(QT.F32, raw), raw.view(np.float32)):
        print("(b) F32: 65536 random bit patterns identical")


# ---- (c) quantization ----------------------------------------------------------


def test_rows(rng):
    """Rows of 256 values with different statistics, flattened."""
    rows = [
        rng.standard_normal((512, 256)) * 0.02,  # weight-like
        rng.standard_normal((128, 256)) * 1e3,
        rng.uniform(-1, 1, (128, 256)) * 1e-3,
        rng.standard_t(2, (128, 256)),  # heavy tails / outliers
        np.zeros((4, 256)),
        np.full((4, 256), 0.37), np.full((4, 256), -5.5),
        # exact ties: multiples of 1/16 etc. give x/d with .5 fractions
        rng.integers(-16, 17, (64, 256)) / 16.0,
        rng.integers(-254, 255, (64, 256)) / 2.0,
        # values whose f16/bf16 rounding is a tie or near one
        (1 + rng.integers(0, 2**10, (32, 256)) * 2.0**-10 + 2.0**-11),
        (1 + rng.integers(0, 2**7, (32, 256)) * 2.0**-7 + 2.0**-8),
        np.exp2(rng.uniform(-30, -12, (32, 256))) * np.sign(rng.standard_normal((32, 256))),  # f16 subnormals
    ]
    return np.concatenate([r.astype(np.float32).ravel() for r in rows])


def check_quant(rng):
    x = test_rows(rng)
    for qt in (QT.Q4_0, QT.Q4_1, QT.Q8_0, QT.F16, QT.BF16):
        ours = tool_quant(qt, x)
        ref = np.ascontiguousarray(quantize(x.reshape(-1, 256), qt)).view(np.uint8).ravel()
        if ours.shape != ref.shape:
            fail(f"(c) {qt.name}: {ours.size} bytes, gguf-py {ref.size}")
            continue
        bad = np.nonzero(ours != ref)[0]
        if bad.size:
            ex = ", ".join(f"byte {i}: ours {ours[i]:#04x} gguf {ref[i]:#04x}" for i in bad[:5])
            fail(f"(c) {qt.name}: {bad.size}/{ours.size} bytes differ: {ex}")
        else:
            print(f"(c) {qt.name}: quantized {x.size} values, {ours.size} bytes bit-identical")
    # specials for the plain types: inf and overflow must agree; NaN stays NaN
    sp = np.array([np.inf, -np.inf, 65504, 65520, 1e10, -1e-8, 2.0**-25, 3 * 2.0**-25, 0.0, -0.0,
                   3.4e38, 1e-45], dtype=np.float32)
    sp = np.resize(sp, 256)
    np.seterr(over="ignore")  # gguf-py casts 1e10 to f16 (-> inf) and warns
    for qt in (QT.F16, QT.BF16):
        ours = tool_quant(qt, sp)
        ref = np.ascontiguousarray(quantize(sp.reshape(1, -1), qt)).view(np.uint8).ravel()
        if not np.array_equal(ours, ref):
            fail(f"(c) {qt.name} specials differ: ours {ours[:24].tobytes().hex()} gguf {ref[:24].tobytes().hex()}")
        else:
            print(f"(c) {qt.name}: inf/overflow/subnormal/signed-zero specials bit-identical")


def main():
    rng = np.random.default_rng(1234)
    missing = [m for m in MODEL_FILES if not os.path.exists(os.path.join(MODELS, m))]
    if missing:
        fail(f"model file(s) {missing} not found in {MODELS}: run tools/fetch_models.sh")
    check_generated(rng)
    check_quant(rng)
    for m in MODEL_FILES:
        if m not in missing:
            check_model(os.path.join(MODELS, m))
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("all oracle checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
