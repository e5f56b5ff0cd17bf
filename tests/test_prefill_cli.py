#!/usr/bin/env python3
"""Prefill on a device through the CLI: --prefill-device / --chunk /
--prefill-min-tokens on run, chat, perplexity and bench; the fallback line;
the --stats json keys; OpenCL (PoCL here) against the CPU.

usage: test_prefill_cli.py CASE TESSERA MODELS_DIR
CASE is one of the functions named case_* below (one ctest entry each).
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

SMOL = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA = "gemma-3-270m-q4_k_m.gguf"
GPL = "/usr/share/common-licenses/GPL-3"
DEV_KEYS = ["prefill_dev_tokens", "prefill_dev_nodes", "prefill_cpu_tokens", "dev_upload_mib", "dev_stall_ms",
            "dev_busy_ms", "graph_builds", "crossings", "device"]
# what the OpenCL device's matmul takes (tessera devices): the CPU computing
# with the weights converted to these types is the like-for-like reference
OCL_TYPES = "cpu,wtypes=f32+f16+q4_0+q4_1+q8_0"
PROMPT = ("The history of the printing press begins in the fifteenth century, when Johannes Gutenberg developed "
          "movable type in Mainz. His invention spread quickly across Europe, and within fifty years printers were "
          "active in more than two hundred cities. The cost of books fell")


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def model(name):
    p = os.path.join(MODELS, name)
    if not os.path.exists(p):
        fail(f"model file {p} is missing: run tools/fetch_models.sh")
    return p


def run(args, stdin=None, env=None, timeout=280):
    e = dict(os.environ)
    if env:
        e.update(env)
    p = subprocess.run([TESSERA] + args, input=stdin, capture_output=True, timeout=timeout, env=e)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def expect_rc(rc, want, out, err, what):
    if rc != want:
        fail(f"{what}: exit {rc}, want {want}\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}")


def stats_json(err):
    objs = [json.loads(l[l.index("{"):]) for l in err.splitlines() if "{" in l and l.strip().endswith("}")]
    if not objs:
        fail(f"no --stats json object on stderr:\n{err[-2000:]}")
    return objs


def check_dev_keys(st, what):
    missing = [k for k in DEV_KEYS if k not in st]
    if missing:
        fail(f"{what}: --stats json lacks {missing}: {st}")


def greedy(m, extra, logits=None, n=16, env=None):
    args = ["run", "-m", m, "-p", PROMPT, "-n", str(n), "--temp", "0", "--no-display-prompt", "-t", "2", "-c", "256",
            "--chunk", "32", "--stats", "json"] + extra
    if logits:
        args += ["--logits-out", logits]
    rc, out, err = run(args, env=env)
    expect_rc(rc, 0, out, err, " ".join(extra) or "cpu run")
    return out, err, stats_json(err)[-1]


def ppl(m, extra, c=64, chunks=1, chunk=64):
    rc, out, err = run(["perplexity", "-m", m, "-f", GPL, "-c", str(c), "--chunks", str(chunks), "-t", "2",
                        "--chunk", str(chunk), "--stats", "json"] + extra)
    expect_rc(rc, 0, out, err, "perplexity " + " ".join(extra))
    st = stats_json(err)[-1]
    return st["ppl"], st, err


# ---- fallback -------------------------------------------------------------

def fallback(extra, env, name_in_line):
    m = model(SMOL)
    ref_out, _, _ = greedy(m, [], n=8)
    out, err, st = greedy(m, extra, n=8, env=env)
    lines = [l for l in err.splitlines() if "prefill device" in l]
    if len(lines) != 1:
        fail(f"expected exactly one fallback line, got {len(lines)}:\n{err}")
    line = lines[0]
    if not (line.startswith(f"tessera: prefill device '{name_in_line}' unavailable (") and
            line.endswith("); running on the CPU")):
        fail(f"fallback line malformed: {line!r}")
    others = [l for l in err.splitlines() if l.strip() and l != line and not l.strip().startswith("{")]
    if others:
        fail(f"stderr has more than the one line and the stats: {others}")
    check_dev_keys(st, "fallback")
    if st["device"] is not None or st["prefill_dev_tokens"] != 0 or st["prefill_cpu_tokens"] != st["n_prompt_tokens"]:
        fail(f"fallback run did not stay on the CPU: {st}")
    if out != ref_out:
        fail(f"fallback output differs from the CPU's: {out!r} vs {ref_out!r}")
    print(f"ok: {line}")


def case_fallback_nosuch():
    fallback(["--prefill-device", "nosuch"], None, "nosuch")


def case_fallback_no_icd():
    with tempfile.TemporaryDirectory() as empty:
        fallback(["--prefill-device", "opencl"], {"OCL_ICD_VENDORS": empty}, "opencl")


# ---- flags and counters on every command ------------------------------------

def case_commands_loop():
    m = model(SMOL)
    # run: the device's counters; 46 prompt tokens = one chunk of 32 + a tail of 14
    ref_out, _, ref_st = greedy(m, [], n=6)
    out, err, st = greedy(m, ["--prefill-device", "loop", "--prefill-min-tokens", "16"], n=6)
    check_dev_keys(st, "run")
    n = st["n_prompt_tokens"]
    if out != ref_out:
        fail(f"run on loop differs from the CPU: {out!r} vs {ref_out!r}")
    # loop takes any width: the tail of n % 32 runs there too when >= the minimum
    tail = n % 32
    want_dev = n if tail >= 16 else n - tail
    if st["device"] != "loop" or st["prefill_dev_tokens"] != want_dev or st["prefill_dev_tokens"] + \
            st["prefill_cpu_tokens"] != n or st["graph_builds"] < 1 or st["crossings"] < 1:
        fail(f"run on loop: unexpected counters (want {want_dev} device tokens of {n}): {st}")
    for k in DEV_KEYS:
        if k not in ("device", "prefill_cpu_tokens") and ref_st[k] != 0:
            fail(f"cpu run reports {k}={ref_st[k]}")
    # chat: one turn, the counters per reply
    rc, out, err = run(["chat", "-m", m, "-n", "4", "--temp", "0", "-t", "2", "--chunk", "32", "--prefill-device",
                        "loop", "--stats", "json"], stdin=b"Tell me about the printing press and Gutenberg.\n")
    expect_rc(rc, 0, out, err, "chat")
    cst = stats_json(err)[-1]
    check_dev_keys(cst, "chat")
    if cst["device"] != "loop" or cst["prefill_dev_tokens"] < 32:
        fail(f"chat on loop: {cst}")
    # perplexity: bit-identical logits, so the same printed value
    p_cpu, _, _ = ppl(m, [], c=64, chunks=2, chunk=32)
    p_loop, pst, _ = ppl(m, ["--prefill-device", "loop"], c=64, chunks=2, chunk=32)
    if p_cpu != p_loop or pst["prefill_dev_tokens"] != 128 or pst["device"] != "loop":
        fail(f"perplexity on loop {p_loop} vs cpu {p_cpu}: {pst}")
    # slow=3: the same arithmetic, the device's compute unit held 3x as
    # long (dev_busy_ms, measured on its thread: ~3x, at least 2x)
    p_slow, sst, _ = ppl(m, ["--prefill-device", "loop,slow=3"], c=64, chunks=2, chunk=32)
    if p_slow != p_loop or not pst["dev_busy_ms"] > 0 or not sst["dev_busy_ms"] >= 2 * pst["dev_busy_ms"]:
        fail(f"loop,slow=3: ppl {p_slow} vs {p_loop}, dev_busy_ms {sst['dev_busy_ms']} vs {pst['dev_busy_ms']}")
    print(f"ok: dev_busy_ms {pst['dev_busy_ms']:.1f} on loop, {sst['dev_busy_ms']:.1f} with slow=3")
    # bench: the backend and the device fields of the JSON
    rc, out, err = run(["bench", "-m", m, "-p", "64", "-n", "0", "-r", "1", "-t", "2", "--prefill-device",
                        "loop:npu,delay_us=0", "--chunk", "32", "--json"])
    expect_rc(rc, 0, out, err, "bench")
    rows = json.loads(out)
    if rows[0].get("prefill_device") != "loop:npu" or rows[0].get("prefill_dev_tokens") != 64 or \
            "dev_stall_ms" not in rows[0]:
        fail(f"bench JSON lacks the device fields: {rows[0]}")
    rc, out, err = run(["bench", "-m", m, "-p", "32", "-n", "0", "-r", "1", "-t", "2", "--prefill-device", "nosuch"])
    expect_rc(rc, 0, out, err, "bench fallback")
    if err.count("prefill device 'nosuch' unavailable") != 1 or "| CPU " not in out:
        fail(f"bench fallback: {err!r} {out!r}")
    # bad flag values are usage errors
    for bad in (["--chunk", "0"], ["--prefill-min-tokens", "x"]):
        rc, out, err = run(["run", "-m", m, "-p", "hi", "-n", "1"] + bad)
        if rc != 2:
            fail(f"{bad}: exit {rc}, want 2 ({err.strip()})")
    print(f"ok: run/chat/perplexity/bench with --prefill-device; run {st['prefill_dev_tokens']}+"
          f"{st['prefill_cpu_tokens']} tokens, ppl {p_loop:.4f} == cpu")


# ---- OpenCL on PoCL ---------------------------------------------------------

def opencl(name, big_chunks):
    m = model(name)
    # perplexity: one window of 64 on the device (one chunk of 64) against
    #  - the CPU with the same converted weights (the kernels' own error): < 0.5%
    #  - the CPU with the file's weights, reported; the conversion's own effect
    #    (Q4_1/K-quants -> Q8_0) is bounded on a larger sample on the CPU alone
    p_ocl, st, _ = ppl(m, ["--prefill-device", "opencl"])
    if not str(st["device"]).startswith("opencl") or st["prefill_dev_tokens"] != 64:
        fail(f"opencl did not run the window: {st}")
    p_conv, _, _ = ppl(m, ["--prefill-device", OCL_TYPES])
    p_cpu, _, _ = ppl(m, [])
    rel_kern = abs(p_ocl - p_conv) / p_conv
    big_cpu, _, _ = ppl(m, [], c=256, chunks=big_chunks, chunk=256)
    big_conv, _, _ = ppl(m, ["--prefill-device", OCL_TYPES], c=256, chunks=big_chunks, chunk=256)
    rel_conv = abs(big_conv - big_cpu) / big_cpu
    print(f"{name}: ppl opencl {p_ocl:.4f}, cpu with the same converted weights {p_conv:.4f} "
          f"({100 * rel_kern:.3f}%), cpu {p_cpu:.4f} ({100 * abs(p_ocl - p_cpu) / p_cpu:.2f}% on 31 tokens); "
          f"conversion alone on {127 * big_chunks} tokens: {big_conv:.4f} vs {big_cpu:.4f} ({100 * rel_conv:.3f}%)")
    if rel_kern > 0.005:
        fail(f"opencl perplexity {p_ocl} is {100 * rel_kern:.3f}% from the CPU's with the same weights {p_conv}")
    if rel_conv > 0.005:
        fail(f"the weight conversion alone moves perplexity by {100 * rel_conv:.3f}%")

    # greedy: 16 tokens identical, or the first divergence explained by the
    # margin between the two tokens in the CPU's logits
    with tempfile.TemporaryDirectory() as d:
        fc, fo = os.path.join(d, "cpu.f32"), os.path.join(d, "ocl.f32")
        out_c, _, st_c = greedy(m, [], logits=fc)
        out_o, _, st_o = greedy(m, ["--prefill-device", "opencl"], logits=fo)
        if st_o["prefill_dev_tokens"] < 32:
            fail(f"opencl greedy run did not use the device: {st_o}")
        lc, lo = np.fromfile(fc, dtype=np.float32), np.fromfile(fo, dtype=np.float32)
    n_prompt = st_c["n_prompt_tokens"]
    n_vocab = lc.size // (n_prompt + st_c["n_gen_tokens"] - 1)
    lc, lo = lc.reshape(-1, n_vocab), lo.reshape(-1, n_vocab)
    rows = min(len(lc), len(lo))
    tc = lc[n_prompt - 1:rows].argmax(axis=1)
    to = lo[n_prompt - 1:rows].argmax(axis=1)
    nmse = float(((lc[:n_prompt] - lo[:n_prompt]) ** 2).sum() / (lc[:n_prompt] ** 2).sum())
    same = int(np.argmax(tc != to)) if (tc != to).any() else len(tc)
    msg = f"{name}: greedy {same} of {len(tc)} tokens identical; prompt logits nmse {nmse:.2e}"
    if nmse > 1e-2:
        fail(msg + ": the prompt's logits are far from the CPU's")
    if same < min(16, len(tc)):
        r = n_prompt - 1 + same
        a, b = int(tc[same]), int(to[same])
        margin = float(lc[r, a] - lc[r, b])
        shift = float(max(abs(lc[r, a] - lo[r, a]), abs(lc[r, b] - lo[r, b])))
        msg += (f"; diverges at generated token {same}: cpu {a} vs opencl {b}, cpu margin {margin:.4f}, "
                f"logit shift {shift:.4f}")
        if margin > 2 * shift:
            fail(msg + ": not explained by the margin")
        msg += " (explained: margin <= 2 x shift)"
    elif out_c != out_o:
        fail(msg + f": text differs although the tokens agree: {out_c!r} vs {out_o!r}")
    print("ok:", msg)


def case_opencl_smollm():
    opencl(SMOL, 8)


def case_opencl_gemma():
    opencl(GEMMA, 6)


# ---- calibration (seed 003) -------------------------------------------------

def case_calibrate():
    """`tessera calibrate` writes a sidecar the gguf package reads as we
    document it, its tables cover every layer, and perplexity on
    amx,act=int8,calib= (tile emulator where there is no AMX) runs the
    shadow outliers and prunes with prune=; the refusals say what to do."""
    m = model(SMOL)
    rc, out, err = run(["calibrate", "--help"])
    expect_rc(rc, 0, out, err, "calibrate --help")
    for f in ["-m", "-f", "-o", "-c", "--chunks", "--percentile", "--importance-chunks", "--device", "-t"]:
        if f not in out.split():
            fail(f"calibrate --help lacks {f}")
    rc, out, err = run(["calibrate", "-m", m])
    expect_rc(rc, 2, out, err, "calibrate without -f")
    if "-f" not in err:
        fail(f"calibrate without -f does not name -f: {err}")
    with tempfile.TemporaryDirectory() as d:
        side = os.path.join(d, "smol.calib")
        # windows of 32: 33 forwards on the tile emulator, ~145 s under
        # ASan on an idle 2-core machine (64 took 252 s and ran past 280 s
        # in CI beside other tests), hence its own timeout
        rc, out, err = run(["calibrate", "-m", m, "-f", "/usr/share/common-licenses/GPL-2", "-c", "32", "--chunks",
                            "2", "--importance-chunks", "1", "-o", side, "-t", "2"], timeout=600)
        expect_rc(rc, 0, out, err, "calibrate")
        rows = [l.split() for l in out.splitlines() if l[:1] == " " and len(l.split()) == 8]
        if len(rows) != 30 * 4 or rows[0][1] != "qkv" or rows[-1][1] != "down":
            fail(f"calibrate: {len(rows)} input rows, want 120:\n{out[:1500]}")
        if "p99 of |x|" not in out:
            fail(f"calibrate: the default percentile is not 99:\n{out[:300]}")
        import gguf
        r = gguf.GGUFReader(side)
        f = r.fields["general.type"]
        if bytes(f.parts[f.data[0]]).decode() != "tessera.calib":
            fail("sidecar general.type is not tessera.calib")
        t = {x.name: x for x in r.tensors}
        for name, n in (("calib.clip", 120), ("calib.n_in", 120), ("calib.frac", 120), ("calib.shadow", 30),
                        ("calib.importance", 30), ("blk.0.hot.0", 576), ("blk.29.hot.3", 1536)):
            if name not in t or int(np.prod(t[name].shape)) != n:
                fail(f"sidecar tensor {name}: {t[name].shape if name in t else 'missing'}, want {n} values")
        clips = np.asarray(t["calib.clip"].data, dtype=np.float32)
        if not (clips > 0).all():
            fail(f"sidecar has clips <= 0: {clips}")
        dev = "amx,act=int8,calib=" + side + ("" if "amx" in open("/proc/cpuinfo").read() else ",emulate=1")
        p_all, st, _ = ppl(m, ["--prefill-device", dev, "--prefill-min-tokens", "2"])
        p_half, st2, _ = ppl(m, ["--prefill-device", dev + ",prune=0.5", "--prefill-min-tokens", "2"])
        if st["dev_outliers"] <= 0 or st["dev_outliers_pruned"] != 0:
            fail(f"calib= run: {st}")
        if st2["dev_outliers_pruned"] <= 0 or st2["dev_outliers"] >= st["dev_outliers"]:
            fail(f"prune=0.5 run: {st2}")
        print(f"ok: ppl {p_all:.4f} (outliers {st['dev_outliers']}), prune=0.5 {p_half:.4f} "
              f"(outliers {st2['dev_outliers']}, pruned {st2['dev_outliers_pruned']})")


def case_auto_min():
    """--prefill-min-tokens auto: a chunk goes to the device when the CPU's
    measured time for it exceeds the device's crossings. Crossings that cost
    nothing: every full chunk after the first (which measures the CPU) goes
    there; crossings of 100 ms each: none does. Both give the CPU's text."""
    m = model(SMOL)
    prompt = "hello world " * 150
    texts = {}
    for dev, want_dev in (("loop:npu,delay_us=0", True), ("loop:npu,delay_us=100000", False), (None, False)):
        args = ["run", "-m", m, "-p", prompt, "-n", "8", "--temp", "0", "--no-display-prompt", "-t", "2", "-c", "512",
                "--chunk", "64", "--stats", "json"]
        if dev:
            args += ["--prefill-device", dev, "--prefill-min-tokens", "auto"]
        rc, out, err = run(args)
        expect_rc(rc, 0, out, err, f"auto on {dev}")
        st = stats_json(err)[-1]
        n_dev = st["prefill_dev_tokens"]
        if dev and (n_dev > 0) != want_dev:
            fail(f"--prefill-min-tokens auto on {dev}: {n_dev} device tokens, want {'some' if want_dev else 'none'}")
        if dev and want_dev and st["prefill_cpu_tokens"] < 64:
            fail(f"auto on {dev}: the first chunk should measure the CPU: {st}")
        texts[dev] = out
        print(f"auto on {dev}: {n_dev} device tokens, {st['prefill_cpu_tokens']} CPU tokens, {st['crossings']} crossings")
    if len(set(texts.values())) != 1:
        fail(f"auto placement changed the text: {texts}")
    rc, out, err = run(["run", "-m", m, "-p", "x", "--prefill-min-tokens", "fast"])
    if rc == 0 or "prefill-min-tokens" not in err:
        fail(f"--prefill-min-tokens fast: rc {rc}, {err!r}")


def case_vnni():
    """vnni (AVX-512 VNNI on the amx engine's int8 tile layout) against
    amx,act=int8 (the tiles, or their emulator without AMX): the logits of
    every prompt position bit-identical on SmolLM2 and Gemma 3 (Q4_1 and
    Q4_K_M converted once to the int8 layout), and the prompt on the device.
    Skipped (77) where the CPU lacks AVX-512 VNNI."""
    rc, out, err = run(["devices"])
    line = [l for l in out.splitlines() if l.startswith("vnni ")]
    if not line or " ok " not in line[0]:
        print(f"SKIPPED: no vnni engine here: {line}")
        sys.exit(77)
    amx = "amx,act=int8" + ("" if "amx_tile" in open("/proc/cpuinfo").read() else ",emulate=1")
    with tempfile.TemporaryDirectory() as d:
        for name in (SMOL, GEMMA):
            m = model(name)
            got = {}
            for dev in ("vnni", amx):
                f = os.path.join(d, dev.split(",")[0] + ".bin")
                _, _, st = greedy(m, ["--prefill-device", dev], logits=f, n=2)
                check_dev_keys(st, dev)
                if st["prefill_dev_tokens"] <= 0:
                    fail(f"{name} on {dev}: no prompt token on the device: {st}")
                got[dev] = np.fromfile(f, dtype=np.uint8)
            if got["vnni"].size == 0 or not np.array_equal(got["vnni"], got[amx]):
                fail(f"{name}: vnni logits differ from {amx}'s ({got['vnni'].size} vs {got[amx].size} bytes)")
            print(f"ok: {name}: vnni == {amx}, {got['vnni'].size // 4} logits bit for bit")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print(__doc__)
        sys.exit(2)
    CASE, TESSERA, MODELS = sys.argv[1], sys.argv[2], sys.argv[3]
    globals()["case_" + CASE]()
