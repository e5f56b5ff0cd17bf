#!/usr/bin/env python3
"""test_gguf_oracle.py - `tessera inspect` checked against the gguf Python package.

usage: test_gguf_oracle.py TESSERA_BINARY MODELS_DIR

1. Writes a file with gguf.GGUFWriter holding every metadata type (all scalars,
   strings with non-ASCII text, arrays of every fixed type, array of strings,
   nested arrays, custom alignment) and tensors of several types (F32, F16, I8,
   I32, Q8_0, Q4_K, Q6_K), then compares `tessera inspect --json` with what
   gguf.GGUFReader reads from the same file: version, alignment, data offset,
   every key, type and value (arrays: count, element type, first 8 elements),
   every tensor's name, type, shape, element count, offset and size.
2. The same comparison on both real models (they must exist: run
   tools/fetch_models.sh).
3. The text output, --no-tensors, --help and the error path (exit 1, message on
   stderr) of the CLI.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import gguf
from gguf import GGUFValueType as VT
from gguf import GGMLQuantizationType as QT

HEAD = 8  # array elements tessera prints
MODELS = ["SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"]

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg, file=sys.stderr)


def check(cond, msg):
    if not cond:
        fail(msg)
    return cond


def run_inspect(tessera, *args):
    return subprocess.run([tessera, "inspect", *args], capture_output=True, timeout=120)


def inspect_json(tessera, path, *extra):
    p = run_inspect(tessera, path, "--json", *extra)
    if p.returncode != 0:
        raise SystemExit(f"tessera inspect --json {path} failed ({p.returncode}): {p.stderr.decode(errors='replace')}")
    try:
        return json.loads(p.stdout.decode("utf-8"))  # strict: must be valid UTF-8 and JSON
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SystemExit(f"tessera inspect --json {path}: output is not valid JSON: {e}")


# ----------------------------------------------------------------- compare

def same_number(vtype, got, want):
    """JSON number from tessera vs a value GGUFReader decoded."""
    if vtype == VT.BOOL:
        return got is bool(want)
    if vtype in (VT.FLOAT32, VT.FLOAT64):
        w = float(want)
        if not math.isfinite(w):
            return got is None  # tessera writes non-finite floats as null
        if got is None:
            return False
        if vtype == VT.FLOAT32:
            return np.float32(got) == np.float32(w)  # %.9g round-trips a float32
        return float(got) == w
    return isinstance(got, int) and not isinstance(got, bool) and got == int(want)


def same_scalar(vtype, got, want):
    if vtype == VT.STRING:
        return got == want
    return same_number(vtype, got, want)


def compare_field(key, field, got):
    """got: {"key","type","value"} from tessera; field: a gguf ReaderField."""
    types = field.types
    if not check(got["type"] == types[0].name, f"{key}: type {got['type']} != {types[0].name}"):
        return
    val = got["value"]
    if types[0] != VT.ARRAY:
        check(same_scalar(types[0], val, field.contents()), f"{key}: value {val!r} != {field.contents()!r}")
        return
    check(isinstance(val, dict) and val.get("type") == "ARRAY", f"{key}: array not an ARRAY object: {val!r}")
    if len(types) > 1:
        check(val["elem_type"] == types[1].name, f"{key}: elem_type {val['elem_type']} != {types[1].name}")
    if len(types) > 2:
        return  # nested arrays: GGUFReader flattens them; checked against the written values instead
    n = len(field.data)
    check(val["n"] == n, f"{key}: n {val['n']} != {n}")
    want_head = [field.contents(i) for i in range(min(n, HEAD))]
    check(len(val["head"]) == len(want_head), f"{key}: head has {len(val['head'])} elements, want {len(want_head)}")
    for i, (g, w) in enumerate(zip(val["head"], want_head)):
        check(same_scalar(types[1], g, w), f"{key}[{i}]: {g!r} != {w!r}")


def compare_file(tessera, path, check_tensor_data=False):
    """Full comparison of `tessera inspect --json` with GGUFReader; returns the JSON."""
    j = inspect_json(tessera, path)
    r = gguf.GGUFReader(path)
    fields = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
    name = os.path.basename(path)

    check(j["version"] == int(r.fields["GGUF.version"].contents()), f"{name}: version")
    check(j["alignment"] == r.alignment, f"{name}: alignment {j['alignment']} != {r.alignment}")
    check(j["data_offset"] == r.data_offset, f"{name}: data_offset {j['data_offset']} != {r.data_offset}")
    check(j["file_size"] == os.path.getsize(path), f"{name}: file_size")
    check(j["n_kv"] == len(fields) == len(j["metadata"]), f"{name}: n_kv {j['n_kv']} / {len(j['metadata'])} != {len(fields)}")
    check([m["key"] for m in j["metadata"]] == list(fields), f"{name}: keys or their order differ")
    for m in j["metadata"]:
        if m["key"] in fields:
            compare_field(f"{name}: {m['key']}", fields[m["key"]], m)

    check(j["n_tensors"] == len(r.tensors) == len(j["tensors"]), f"{name}: n_tensors {j['n_tensors']} != {len(r.tensors)}")
    total = 0
    for tj, tr in zip(j["tensors"], r.tensors):
        tn = f"{name}: tensor {tr.name}"
        check(tj["name"] == tr.name, f"{tn}: name {tj['name']!r}")
        check(tj["type"] == QT(tr.tensor_type).name and tj["type_id"] == int(tr.tensor_type), f"{tn}: type {tj['type']}")
        check(tj["shape"] == [int(d) for d in tr.shape], f"{tn}: shape {tj['shape']} != {list(tr.shape)}")
        check(tj["n_elements"] == int(tr.n_elements), f"{tn}: n_elements")
        check(tj["nbytes"] == int(tr.n_bytes), f"{tn}: nbytes {tj['nbytes']} != {tr.n_bytes}")
        check(j["data_offset"] + tj["offset"] == int(tr.data_offset), f"{tn}: offset {tj['offset']} (+{j['data_offset']}) != {tr.data_offset}")
        total += int(tr.n_bytes)
    check(j["total_bytes"] == total, f"{name}: total_bytes {j['total_bytes']} != {total}")
    return j


# --------------------------------------------------------------- synthetic

ODD = 'héllo ☃ "quoted"\n\ttab \\ back \x01 ctl \U0001F600'
NESTED = [[1, 2], [3, 4, 5]]
NESTED_STR = [["a", "bé"], ["c"]]


def write_synthetic(path):
    w = gguf.GGUFWriter(path, arch="testarch")
    w.add_custom_alignment(64)
    w.add_uint8("t.u8", 250)
    w.add_int8("t.i8", -128)
    w.add_uint16("t.u16", 65535)
    w.add_int16("t.i16", -32768)
    w.add_uint32("t.u32", 4294967295)
    w.add_int32("t.i32", -2147483648)
    w.add_float32("t.f32", 0.1)
    w.add_float32("t.f32_inf", float("inf"))
    w.add_uint64("t.u64", 2**64 - 1)
    w.add_int64("t.i64", -(2**63))
    w.add_float64("t.f64", -1.2345678901234567e-300)
    w.add_bool("t.bool", True)
    w.add_bool("t.bool_f", False)
    w.add_string("t.str", ODD)
    arr = lambda k, v, t: w.add_key_value(k, v, VT.ARRAY, sub_type=t)  # noqa: E731
    arr("a.u8", [0, 1, 255], VT.UINT8)
    arr("a.i8", [-128, 0, 127], VT.INT8)
    arr("a.u16", [0, 65535], VT.UINT16)
    arr("a.i16", [-32768, 32767], VT.INT16)
    arr("a.u32", list(range(20)), VT.UINT32)  # longer than HEAD
    arr("a.i32", [-5, 5], VT.INT32)
    arr("a.f32", [0.5, -1e-38, 3.4e38, float("nan")], VT.FLOAT32)
    arr("a.bool", [True, False, True], VT.BOOL)
    arr("a.u64", [2**64 - 1, 0], VT.UINT64)
    arr("a.i64", [-(2**63), 2**63 - 1], VT.INT64)
    arr("a.f64", [0.1, 1e300], VT.FLOAT64)
    arr("a.str", ["x", "", ODD] + [f"tok{i}" for i in range(10)], VT.STRING)
    arr("a.nested", NESTED, VT.ARRAY)
    arr("a.nested_str", NESTED_STR, VT.ARRAY)
    rng = np.random.default_rng(0)
    w.add_tensor("t.f32", np.arange(12, dtype=np.float32).reshape(3, 4))
    w.add_tensor("t.f16", np.ones((2, 5), dtype=np.float16))
    w.add_tensor("t.i8", np.arange(7, dtype=np.int8))
    w.add_tensor("t.i32", np.arange(6, dtype=np.int32).reshape(1, 2, 3))
    # quantized tensors as raw bytes: byte shape (rows, bytes per row)
    w.add_tensor("t.q8_0", rng.integers(0, 256, (3, 2 * 34), dtype=np.uint8), raw_dtype=QT.Q8_0)
    w.add_tensor("t.q4_k", rng.integers(0, 256, (2, 144), dtype=np.uint8), raw_dtype=QT.Q4_K)
    w.add_tensor("t.q6_k", rng.integers(0, 256, (1, 2, 2 * 210), dtype=np.uint8), raw_dtype=QT.Q6_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def flat(x):
    return [z for y in x for z in flat(y)] if isinstance(x, list) else [x]


def check_synthetic(tessera, tmp):
    before = len(failures)
    path = os.path.join(tmp, "synthetic.gguf")
    write_synthetic(path)
    j = compare_file(tessera, path)
    meta = {m["key"]: m for m in j["metadata"]}
    # the values as written (guards against the oracle and tessera agreeing on nonsense)
    check(meta["t.str"]["value"] == ODD, "t.str value")
    check(meta["t.u64"]["value"] == 2**64 - 1 and meta["t.i64"]["value"] == -(2**63), "64-bit extremes")
    check(meta["t.f32_inf"]["value"] is None, "inf written as null")
    check(j["alignment"] == 64 and j["data_offset"] % 64 == 0, "custom alignment")
    a = meta["a.u32"]["value"]
    check(a["n"] == 20 and a["head"] == list(range(8)), f"a.u32 abbreviated: {a}")
    check(meta["a.f32"]["value"]["head"][3] is None, "NaN element written as null")
    # nested arrays: [[1, 2], [3, 4, 5]] as arrays of arrays
    nv = meta["a.nested"]["value"]
    check(nv["elem_type"] == "ARRAY" and nv["n"] == 2, f"a.nested outer: {nv}")
    heads = [h["head"] for h in nv["head"]]
    check(heads == NESTED and all(h["elem_type"] == "INT32" and h["type"] == "ARRAY" for h in nv["head"]), f"a.nested inner: {nv}")
    r = gguf.GGUFReader(path)
    check(flat(heads) == r.fields["a.nested"].contents(), "a.nested vs GGUFReader (flattened)")
    nv = meta["a.nested_str"]["value"]
    check([h["head"] for h in nv["head"]] == NESTED_STR, f"a.nested_str: {nv}")
    check(flat(NESTED_STR) == r.fields["a.nested_str"].contents(), "a.nested_str vs GGUFReader (flattened)")
    names = {t["name"]: t for t in j["tensors"]}
    check(names["t.q8_0"]["shape"] == [64, 3] and names["t.q8_0"]["nbytes"] == 3 * 68, f"q8_0: {names['t.q8_0']}")
    check(names["t.q6_k"]["shape"] == [512, 2, 1] and names["t.q6_k"]["type"] == "Q6_K", f"q6_k: {names['t.q6_k']}")
    check(names["t.i32"]["shape"] == [3, 2, 1], f"i32: {names['t.i32']}")
    if len(failures) == before:
        print(f"ok   synthetic GGUFWriter file: {len(j['metadata'])} keys, {len(j['tensors'])} tensors")
    return path


def check_cli(tessera, path, tmp):
    p = run_inspect(tessera, path)
    out = p.stdout.decode("utf-8", errors="replace")
    check(p.returncode == 0, f"text inspect exit {p.returncode}: {p.stderr!r}")
    for needle in ["version:     3", "alignment:   64", "t.u32", "UINT32  = 4294967295", "[array of 20 UINT32: 0, 1, 2, 3, 4, 5, 6, 7, ... ]",
                   "[array of 2 ARRAY: [array of 2 INT32: 1, 2], [array of 3 INT32: 3, 4, 5]]", "tensors (7):", "t.q4_k", "Q4_K",
                   "[256, 2]", "total: 7 tensors"]:
        check(needle in out, f"text output lacks {needle!r}")
    # one line per key
    check(sum(1 for line in out.splitlines() if line.startswith("  t.") or line.startswith("  a.")) >= 14 + 14, "text: a line per key")
    j = inspect_json(tessera, path, "--no-tensors")
    check("tensors" not in j and j["n_tensors"] == 7, "--no-tensors JSON")
    p = run_inspect(tessera, path, "--no-tensors")
    check(p.returncode == 0 and b"tensors (" not in p.stdout and b"total: 7 tensors" in p.stdout, "--no-tensors text")
    p = run_inspect(tessera, "--help")
    check(p.returncode == 0 and b"usage: tessera inspect" in p.stdout, "--help")
    p = run_inspect(tessera)
    check(p.returncode != 0 and b"usage" in p.stderr, "no FILE: usage on stderr")
    p = run_inspect(tessera, path, "--bogus")
    check(p.returncode != 0 and b"unknown option" in p.stderr, "unknown option")
    # errors: message from the reader on stderr, exit 1, nothing on stdout
    bad = os.path.join(tmp, "truncated.gguf")
    with open(path, "rb") as f:
        data = f.read()
    with open(bad, "wb") as f:
        f.write(data[: len(data) - 100])
    p = run_inspect(tessera, bad, "--json")
    check(p.returncode == 1 and b"gguf:" in p.stderr and b"runs past the end of the file" in p.stderr and p.stdout == b"",
          f"truncated file: exit {p.returncode}, stderr {p.stderr!r}")
    p = run_inspect(tessera, os.path.join(tmp, "missing.gguf"))
    check(p.returncode == 1 and b"cannot open" in p.stderr, f"missing file: {p.stderr!r}")
    if not failures:
        print("ok   CLI text / --no-tensors / --help / errors")


def check_models(tessera, models_dir):
    for m in MODELS:
        path = os.path.join(models_dir, m)
        if not os.path.exists(path):
            fail(f"model {path} is missing: run tools/fetch_models.sh")
            continue
        before = len(failures)
        j = compare_file(tessera, path)
        p = run_inspect(tessera, path)
        check(p.returncode == 0 and f"tensors ({j['n_tensors']}):".encode() in p.stdout, f"{m}: text inspect")
        if len(failures) == before:
            print(f"ok   {m}: {j['n_kv']} keys, {j['n_tensors']} tensors agree with GGUFReader")


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    tessera, models_dir = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        path = check_synthetic(tessera, tmp)
        check_cli(tessera, path, tmp)
    check_models(tessera, models_dir)
    if failures:
        print(f"{len(failures)} failure(s)", file=sys.stderr)
        sys.exit(1)
    print("all gguf oracle checks passed")


if __name__ == "__main__":
    main()
