"""test_bench_cli.py - `tessera bench` and `tessera devices` smoke tests.

usage: test_bench_cli.py CASE TESSERA MODELS_DIR
  json     bench --json parses, carries llama-bench's fields, avg_ts > 0
  table    table mode prints llama-bench's header and one row per test
  devices  devices exits 0 and lists cpu and loop
  devices_profile  devices --profile: a width -> ms row per width (text and --json), on cpu,
           amx,emulate=1 and a model's shape; amx (the real unit) profiles or says why not
  errors   bad arguments exit 2 with a message naming the option/value
"""
import json
import os
import subprocess
import sys

FIELDS = ["model_filename", "model_type", "model_size", "model_n_params", "n_threads", "n_prompt", "n_gen",
          "avg_ts", "stddev_ts", "samples_ts", "test_time", "n_batch", "n_ubatch", "avg_ns", "samples_ns"]


def run(exe, *args):
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=240)


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def model_path(models):
    p = os.path.join(models, "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(p):
        fail(f"{p} is missing: run tools/fetch_models.sh")
    return p


def case_json(exe, models):
    p = model_path(models)
    r = run(exe, "bench", "-m", p, "-p", "16", "-n", "4", "-r", "1", "--json")
    if r.returncode != 0:
        fail(f"rc {r.returncode}: {r.stderr}")
    rows = json.loads(r.stdout)
    if not isinstance(rows, list) or len(rows) != 2:
        fail(f"expected 2 objects, got {r.stdout}")
    for row, (npr, ngen) in zip(rows, [(16, 0), (0, 4)]):
        missing = [f for f in FIELDS if f not in row]
        if missing:
            fail(f"missing fields {missing} in {row}")
        if (row["n_prompt"], row["n_gen"]) != (npr, ngen):
            fail(f"test order/shape: {row}")
        if not row["avg_ts"] > 0 or len(row["samples_ts"]) != 1 or row["samples_ts"][0] <= 0:
            fail(f"throughput not positive: {row}")
        if row["model_filename"] != p or not row["model_type"].startswith("llama ") or not row["model_type"].endswith("Q4_1"):
            fail(f"model fields: {row}")
        if not (row["model_size"] > 50e6 and 130e6 < row["model_n_params"] < 140e6):
            fail(f"size/params: {row}")
    print("ok:", [(r_["n_prompt"], r_["n_gen"], round(r_["avg_ts"], 1)) for r_ in rows])


def case_table(exe, models):
    p = model_path(models)
    r = run(exe, "bench", "-m", p, "-p", "8", "-n", "2", "-r", "2", "-t", "1")
    if r.returncode != 0:
        fail(f"rc {r.returncode}: {r.stderr}")
    lines = r.stdout.splitlines()
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    if head != ["model", "size", "params", "backend", "threads", "test", "t/s"]:
        fail(f"header: {lines[0]!r}")
    if len(lines) != 4:
        fail(f"expected header, rule and 2 rows: {r.stdout}")
    for line, test in zip(lines[2:], ["pp8", "tg2"]):
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[4] != "1" or cells[5] != test or " ± " not in cells[6] or float(cells[6].split()[0]) <= 0:
            fail(f"row: {line!r}")
    print(r.stdout)


def case_devices(exe, models):
    r = run(exe, "devices")
    if r.returncode != 0:
        fail(f"rc {r.returncode}: {r.stderr}")
    names = [ln.split()[0] for ln in r.stdout.splitlines() if ln.strip()]
    for want in ("cpu", "loop", "loop:npu"):
        if want not in names:
            fail(f"{want} not listed: {r.stdout}")
    for ln in r.stdout.splitlines():
        if not (" ok " in ln or "unavailable:" in ln):
            fail(f"line is neither ok nor unavailable: {ln!r}")
    if not any(ln.startswith("cpu") and " ok " in ln for ln in r.stdout.splitlines()):
        fail("cpu did not open")
    r = run(exe, "devices", "--bogus")
    if r.returncode != 2 or "--bogus" not in r.stderr:
        fail(f"devices --bogus: rc {r.returncode}, {r.stderr!r}")
    print(r.stdout)


def case_devices_json(exe, models):
    """`tessera devices --json` (ts_devices): the text listing's devices, as records."""
    r = run(exe, "devices", "--json")
    if r.returncode != 0:
        fail(f"rc {r.returncode}: {r.stderr}")
    try:
        devs = json.loads(r.stdout)
    except ValueError as e:
        fail(f"not JSON ({e}): {r.stdout!r}")
    text = run(exe, "devices").stdout.splitlines()
    names = [d["name"] for d in devs]
    if names != [ln.split()[0] for ln in text if ln.strip()]:
        fail(f"--json names {names} differ from the text listing {text}")
    by = {d["name"]: d for d in devs}
    for want in ("cpu", "loop", "loop:npu"):
        if not by.get(want, {}).get("ok"):
            fail(f"{want} not ok: {by.get(want)}")
    npu = by["loop:npu"]
    if npu["kind"] != "npu" or npu["widths"] != [32, 64, 128, 256] or not npu["widths_required"] \
            or npu["ops"] != "matmul" or npu["window_bytes"] != 256 << 20 or "q8_0" not in npu["weight_types"].lower():
        fail(f"loop:npu profile: {npu}")
    if by["cpu"]["kind"] != "cpu" or "attention" not in by["cpu"]["ops"]:
        fail(f"cpu profile: {by['cpu']}")
    for d in devs:
        if not d["ok"] and not d.get("reason"):
            fail(f"{d['name']}: not ok without a reason")
    print(f"{len(devs)} devices: " + ", ".join(f"{d['name']} ({d.get('kind', 'unavailable')})" for d in devs))


def case_devices_profile(exe, models):
    """`tessera devices --profile DEV` (ts_device_profile): one row per width, positive times."""
    r = run(exe, "devices", "--profile", "cpu", "--widths", "8:32:8", "-t", "2", "--reps", "2")
    rows = [l.split() for l in r.stdout.splitlines()[1:]]
    if r.returncode != 0 or [int(x[0]) for x in rows] != [8, 16, 24, 32] or not all(float(x[1]) > 0 for x in rows):
        fail(f"devices --profile cpu: rc {r.returncode}, {r.stdout!r} {r.stderr!r}")
    r = run(exe, "devices", "--profile", "amx,emulate=1", "-m", model_path(models), "--widths", "16:32:16", "--reps",
            "1", "--json")
    if r.returncode != 0:
        fail(f"devices --profile amx,emulate=1 --json: rc {r.returncode}, {r.stderr!r}")
    d = json.loads(r.stdout)
    if d["device"] != "amx,emulate=1" or d["n_embd"] != 576 or [p["width"] for p in d["points"]] != [16, 32] \
            or not all(p["ms"] > 0 for p in d["points"]):
        fail(f"devices --profile --json: {d}")
    r = run(exe, "devices", "--profile", "amx", "--widths", "16:16:1", "--reps", "1")
    if r.returncode != 0 and "amx:" not in r.stderr:
        fail(f"devices --profile amx: rc {r.returncode} without the reason: {r.stderr!r}")
    print("real amx:", "profiled" if r.returncode == 0 else r.stderr.strip())
    for bad, want in ((["--profile", "cpu", "--widths", "9"], "FIRST:LAST:STEP"), (["--widths", "1:2:1"], "--profile"),
                      (["--profile", "cpu", "--shape", "7b"], "unknown --shape"),
                      (["--profile", "cpu", "--type", "Q6_K"], "cannot be made here")):
        r = run(exe, "devices", *bad)
        if r.returncode == 0 or want not in r.stderr:
            fail(f"devices {' '.join(bad)}: rc {r.returncode}, {r.stderr!r} (expected '{want}')")
    print("devices --profile ok")


def case_errors(exe, models):
    p = model_path(models)
    cases = [
        (["bench"], "no model"),
        (["bench", "-m", p, "-p", "abc"], "-p 'abc'"),
        (["bench", "-m", p, "-p", "16,"], "-p '16,'"),
        (["bench", "-m", p, "-n", "-3"], "-n '-3'"),
        (["bench", "-m", p, "-r", "0"], "-r '0'"),
        (["bench", "-m", p, "-t", "0"], "-t '0'"),
        (["bench", "-m", p, "-b", "x"], "-b 'x'"),
        (["bench", "-m", p, "-p", "0", "-n", "0"], "nothing to run"),
        (["bench", "-m", p, "--frobnicate"], "unknown option '--frobnicate'"),
        (["bench", "-m"], "-m needs a value"),
    ]
    for args, want in cases:
        r = run(exe, *args)
        if r.returncode != 2 or want not in r.stderr:
            fail(f"{args}: rc {r.returncode}, stderr {r.stderr!r} (wanted rc 2 and {want!r})")
    r = run(exe, "bench", "-m", "/nonexistent/model.gguf", "-p", "4", "-n", "0", "-r", "1")
    if r.returncode != 1 or "/nonexistent/model.gguf" not in r.stderr or r.stdout.count("|") == 0:
        fail(f"missing model: rc {r.returncode}, {r.stderr!r}")
    r = run(exe, "bench", "--help")
    if r.returncode != 0 or "usage: tessera bench" not in r.stdout:
        fail("bench --help")
    print("ok")


def main():
    case, exe, models = sys.argv[1], sys.argv[2], sys.argv[3]
    {"json": case_json, "table": case_table, "devices": case_devices, "devices_json": case_devices_json,
     "devices_profile": case_devices_profile,
     "errors": case_errors}[case](exe, models)


if __name__ == "__main__":
    main()
