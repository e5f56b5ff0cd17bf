#!/usr/bin/env python3
"""test_quantize_cli.py - `tessera quantize` on SmolLM2 to Q8_0 and Q4_0,
checked with the gguf Python package.

For each output:
  - it opens with gguf.GGUFReader; tensor names, order and shapes equal the
    input's; metadata equals the input's except general.file_type (llama.cpp
    LLAMA_FTYPE: Q8_0 = 7, Q4_0 = 2) and general.quantization_version (2);
  - every 2-D ".weight" tensor is in the new type (or was already, and is then
    byte-identical); every other tensor (1-D norms) is byte-identical;
  - each rewritten tensor dequantizes within the stated bound of the input's
    dequantized values x, per 32-element block with d the f32 scale the
    reference quantizer derives from x and dh the f16 scale stored in the file:
        Q8_0: d = amax/127:   |x - y| <= d/2 + 127*|d - dh| + 3e-5*d
        Q4_0: d = max/-8:     |x - y| <= |d|/2 + 8*|d - dh| + 3e-5*|d|,
              or |d| + ... where x/d > 7.5 (q = 16 clamped to 15)
    (round-to-nearest error of the integer grid, plus the f16 storage of the
    scale; the slack covers the f32 rounding of t = x * (1/d), at most
    |x/d| * 2^-23 <= 127 * 2^-23 = 1.5e-5 in units of d);
  - and its bytes equal gguf.quants.quantize of x (ggml's reference quantizer).
  - bad invocations fail with a clear message.

usage: test_quantize_cli.py TESSERA MODELS_DIR WORK_DIR
"""
import os
import subprocess
import sys

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import GGUFReader
from gguf.quants import dequantize, quantize

TESSERA, MODELS, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(WORK, exist_ok=True)
SRC = os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf")
FTYPE = {QT.Q8_0: 7, QT.Q4_0: 2}

failures = []


def fail(msg):
    print("FAIL:", msg)
    failures.append(msg)


def field_value(f):
    """A comparable form of a GGUFReader field: its type list and raw parts."""
    return (tuple(f.types), tuple(bytes(f.parts[i].tobytes()) for i in f.data))


def block_bound(qt, x, q_bytes):
    """Per-element bound for the input blocks x (n, 32) and output blocks q_bytes."""
    dh = q_bytes[:, :2].copy().view(np.float16).astype(np.float64).reshape(-1, 1)
    if qt == QT.Q8_0:
        d = (np.abs(x).max(axis=1, keepdims=True) / np.float32(127)).astype(np.float64)
        return np.broadcast_to(0.5 * d + 127 * np.abs(d - dh) + 3e-5 * d, x.shape)
    imax = np.abs(x).argmax(axis=1)[:, None]
    mx = np.take_along_axis(x, imax, axis=1)
    d = (mx / np.float32(-8)).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(d != 0, x / d, 0)
    ad = np.abs(d)
    return np.where(r > 7.5, ad, 0.5 * ad) + 8 * np.abs(d - dh) + 3e-5 * ad


def check_output(qt, out_path, src):
    out = GGUFReader(out_path)
    # metadata
    sf, of = src.fields, out.fields
    for k in sf:
        if k in ("general.file_type", "general.quantization_version"):
            continue
        if k not in of:
            fail(f"{qt.name}: key {k} missing in output")
        elif field_value(sf[k]) != field_value(of[k]):
            fail(f"{qt.name}: key {k} differs")
    extra = set(of) - set(sf) - {"general.file_type", "general.quantization_version"}
    if extra:
        fail(f"{qt.name}: unexpected keys {sorted(extra)}")
    ft = int(of["general.file_type"].parts[-1][0]) if "general.file_type" in of else None
    if ft != FTYPE[qt]:
        fail(f"{qt.name}: general.file_type = {ft}, want {FTYPE[qt]}")
    qv = int(of["general.quantization_version"].parts[-1][0])
    if qv != 2:
        fail(f"{qt.name}: general.quantization_version = {qv}")

    # tensors
    if [t.name for t in src.tensors] != [t.name for t in out.tensors]:
        fail(f"{qt.name}: tensor names/order differ")
        return
    n_conv = n_same = 0
    worst = 0.0
    for a, b in zip(src.tensors, out.tensors):
        if list(a.shape) != list(b.shape):
            fail(f"{qt.name}: {a.name} shape {list(a.shape)} -> {list(b.shape)}")
            continue
        rewrite = a.name.endswith(".weight") and len(a.shape) == 2
        if not rewrite or a.tensor_type == qt:
            if b.tensor_type != a.tensor_type or a.data.tobytes() != b.data.tobytes():
                fail(f"{qt.name}: {a.name} ({a.tensor_type.name}) should be copied byte for byte")
            n_same += 1
            continue
        if b.tensor_type != qt:
            fail(f"{qt.name}: {a.name} has type {b.tensor_type.name}")
            continue
        x = dequantize(a.data, a.tensor_type).reshape(-1, 32)
        y = dequantize(b.data, b.tensor_type).reshape(-1, 32).astype(np.float64)
        qb = b.data.reshape(-1, b.data.shape[-1]).reshape(-1, 34 if qt == QT.Q8_0 else 18)
        bound = block_bound(qt, x, qb)
        err = np.abs(x.astype(np.float64) - y)
        over = np.nonzero(err > bound)
        if over[0].size:
            i, j = over[0][0], over[1][0]
            fail(f"{qt.name}: {a.name}: {over[0].size} values over the bound, e.g. block {i} elem {j}: "
                 f"x={x[i, j]} y={y[i, j]} err={err[i, j]} bound={bound[i, j]}")
        worst = max(worst, float((err / np.maximum(bound, 1e-30)).max()))
        ref = np.ascontiguousarray(quantize(x.reshape(a.data.shape[0], -1), qt)).view(np.uint8).ravel()
        if ref.tobytes() != b.data.tobytes():
            fail(f"{qt.name}: {a.name}: bytes differ from gguf.quants.quantize of the dequantized input")
        n_conv += 1
    print(f"{qt.name}: {n_conv} tensors rewritten within bound (worst err/bound {worst:.6f}) and equal to "
          f"gguf.quants.quantize; {n_same} copied byte for byte")


def run(*args):
    return subprocess.run([TESSERA, *args], capture_output=True, text=True)


def main():
    if not os.path.exists(SRC):
        fail(f"{SRC} not found: run tools/fetch_models.sh")
        return 1
    src = GGUFReader(SRC)
    for qt in (QT.Q8_0, QT.Q4_0):
        out_path = os.path.join(WORK, f"smollm2.{qt.name}.gguf")
        if os.path.exists(out_path):
            os.remove(out_path)
        r = run("quantize", SRC, out_path, qt.name, "-t", "2")
        if r.returncode != 0:
            fail(f"tessera quantize {qt.name} exited {r.returncode}: {r.stderr[-2000:]}")
            continue
        lines = r.stderr.strip().splitlines()
        print(lines[-1])
        if len([ln for ln in lines if ln.startswith("[")]) != len(src.tensors):
            fail(f"{qt.name}: expected one progress line per tensor")
        check_output(qt, out_path, src)
        os.remove(out_path)

    # bad invocations: non-zero exit and a message that says what is wrong
    bad = [
        (["quantize", SRC, os.path.join(WORK, "x.gguf"), "Q5_K"], "accepted: Q4_0, Q4_1, Q8_0, F16, BF16, F32"),
        (["quantize", os.path.join(WORK, "missing.gguf"), os.path.join(WORK, "x.gguf"), "Q8_0"], "missing.gguf"),
        (["quantize", SRC], "expected IN.gguf OUT.gguf TYPE"),
        (["quantize", SRC, os.path.join(WORK, "x.gguf"), "Q8_0", "-t", "zero"], "bad thread count"),
        (["quantize", SRC, SRC, "Q8_0"], "is the input file"),
    ]
    for args, want in bad:
        r = run(*args)
        if r.returncode == 0 or want not in r.stderr:
            fail(f"tessera {' '.join(args[:1] + args[3:])}: exit {r.returncode}, stderr {r.stderr.strip()!r}, "
                 f"expected a message containing {want!r}")
    r = run("quantize", "--help")
    if r.returncode != 0 or "usage: tessera quantize" not in r.stdout:
        fail("tessera quantize --help")
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("all quantize checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
