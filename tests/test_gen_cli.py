#!/usr/bin/env python3
"""Smoke tests of `tessera run`, `chat` and `perplexity` on the real models.

usage: test_gen_cli.py CASE TESSERA MODELS_DIR
CASE is one of the functions named case_* below. Each is a separate ctest
entry so a failure names what broke. Kept small (few tokens) to stay fast.
"""
import json
import math
import os
import re
import struct
import subprocess
import sys
import tempfile

SMOL = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA = "gemma-3-270m-q4_k_m.gguf"
GPL = "/usr/share/common-licenses/GPL-3"


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def model(name):
    p = os.path.join(MODELS, name)
    if not os.path.exists(p):
        fail(f"model file {p} is missing: run tools/fetch_models.sh")
    return p


def run(args, stdin=None, timeout=240):
    p = subprocess.run([TESSERA] + args, input=stdin, capture_output=True, timeout=timeout)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def json_lines(err):
    out = []
    for line in err.splitlines():
        line = line.strip()
        if "{" in line and line.endswith("}"):  # chat: may follow the "> " prompt
            out.append(json.loads(line[line.index("{"):]))
    return out


def expect_rc(rc, want, out, err, what):
    if rc != want:
        fail(f"{what}: exit {rc}, want {want}\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}")


def case_smollm_paris():
    rc, out, err = run(["run", "-m", model(SMOL), "-p", "The capital of France is", "-n", "8", "--temp", "0",
                        "--no-display-prompt", "-t", "2"])
    expect_rc(rc, 0, out, err, "run")
    if "Paris" not in out:
        fail(f"'Paris' not in the greedy continuation: {out!r}")
    if "The capital of France is" in out:
        fail("--no-display-prompt still echoed the prompt")
    print("ok:", repr(out))


def case_gemma_paris():
    # gemma-3-270m here is the pretrained (base) model: its greedy continuation
    # of "The capital of France is" is " the capital of the country of France.",
    # so ask in a question/answer form instead.
    rc, out, err = run(["run", "-m", model(GEMMA), "-p", "Q: What is the capital of France?\nA:", "-n", "8", "--temp", "0",
                        "--no-display-prompt", "-t", "2"])
    expect_rc(rc, 0, out, err, "run")
    if "Paris" not in out:
        fail(f"'Paris' not in the greedy continuation: {out!r}")
    print("ok:", repr(out))


def case_stats_length():
    rc, out, err = run(["run", "-m", model(SMOL), "-p", "Once upon a time", "-n", "5", "--temp", "0",
                        "--stats", "json", "-t", "2", "-c", "256", "-b", "32"])
    expect_rc(rc, 0, out, err, "run")
    js = json_lines(err)
    if len(js) != 1:
        fail(f"want exactly one JSON object on stderr, got {len(js)}: {err!r}")
    j = js[0]
    keys = ["n_prompt_tokens", "n_gen_tokens", "prefill_ms", "decode_ms", "prefill_tps", "decode_tps",
            "peak_rss_mib", "stop_reason", "n_threads", "n_ctx", "n_batch"]
    missing = [k for k in keys if k not in j]
    if missing:
        fail(f"missing keys {missing} in {j}")
    if j["stop_reason"] != "length" or j["n_gen_tokens"] != 5:
        fail(f"want stop_reason length after 5 tokens: {j}")
    if j["n_ctx"] != 256 or j["n_batch"] != 32 or j["n_threads"] != 2 or j["n_prompt_tokens"] < 3:
        fail(f"counters do not reflect the flags: {j}")
    if not out.startswith("Once upon a time"):
        fail(f"the prompt is displayed by default: {out!r}")
    print("ok:", j)


def case_seed_repeatable():
    args = ["run", "-m", model(SMOL), "-p", "My favourite colour is", "-n", "12", "--seed", "7",
            "--no-display-prompt", "-t", "2", "--temp", "1.0"]
    a = run(args)
    b = run(args)
    expect_rc(a[0], 0, a[1], a[2], "run a")
    if a[1] != b[1]:
        fail(f"same seed, different output:\n{a[1]!r}\n{b[1]!r}")
    print("ok:", repr(a[1]))


def case_logits_out():
    with tempfile.TemporaryDirectory() as td:
        path = os.path.join(td, "logits.f32")
        n_gen = 3
        rc, out, err = run(["run", "-m", model(SMOL), "-p", "Hello, my name is", "-n", str(n_gen), "--temp", "0",
                            "--logits-out", path, "--stats", "json", "-t", "2", "-b", "2"])
        expect_rc(rc, 0, out, err, "run")
        j = json_lines(err)[0]
        size = os.path.getsize(path)
        rows = j["n_prompt_tokens"] + j["n_gen_tokens"] - 1
        if size == 0 or size % (4 * rows) != 0:
            fail(f"logits file of {size} bytes is not {rows} rows of f32")
        n_vocab = size // (4 * rows)
        if n_vocab != 49152:
            fail(f"row length {n_vocab}, want SmolLM2's 49152")
        with open(path, "rb") as f:
            data = f.read()
        vals = struct.unpack(f"<{size // 4}f", data)
        if not all(math.isfinite(v) for v in vals):
            fail("non-finite logits")
        # greedy: each generated token is the argmax of the row before it, so
        # the row for a fed-back token must differ from the prompt's last row
        last_prompt = vals[(j["n_prompt_tokens"] - 1) * n_vocab:j["n_prompt_tokens"] * n_vocab]
        nxt = vals[j["n_prompt_tokens"] * n_vocab:(j["n_prompt_tokens"] + 1) * n_vocab]
        if last_prompt == nxt:
            fail("consecutive rows are identical")
    print("ok: rows", rows)


def case_chat_two_turns():
    stdin = b"What is the capital of France?\nAnd of Germany?\n"
    rc, out, err = run(["chat", "-m", model(SMOL), "--temp", "0", "-n", "24", "--stats", "json", "-t", "2",
                        "-c", "1024"], stdin=stdin)
    expect_rc(rc, 0, out, err, "chat")
    js = json_lines(err)
    if len(js) != 2:
        fail(f"want two replies (two JSON stats objects), got {len(js)}:\nstdout {out!r}\nstderr {err!r}")
    if any(j["n_gen_tokens"] == 0 for j in js):
        fail(f"an empty reply: {js}")
    if err.count("> ") != 3:
        fail(f"want 3 prompts (two turns, then EOF): {err!r}")
    # the second turn must reuse the cache: it evaluates only the new turn
    second = js[1]
    cached_before = second["n_past"] - second["n_prompt_tokens"] - second["n_gen_tokens"]
    if cached_before <= js[0]["n_prompt_tokens"]:
        fail(f"second turn re-evaluated the conversation: {js}")
    if "Paris" not in out:
        fail(f"first reply lacks 'Paris': {out!r}")
    print("ok:", repr(out))


def case_chat_reset_and_gemma():
    stdin = b"Say hello.\n/reset\nSay hello.\n"
    rc, out, err = run(["chat", "-m", model(GEMMA), "--temp", "0", "-n", "8", "--stats", "json", "-t", "2",
                        "-c", "512", "--system", "Be brief.", "--chat-template", "gemma"], stdin=stdin)
    expect_rc(rc, 0, out, err, "chat")
    js = json_lines(err)
    if len(js) != 2 or "cleared" not in err:
        fail(f"want two replies around a /reset: {js} {err!r}")
    if js[0]["n_prompt_tokens"] != js[1]["n_prompt_tokens"] or js[0]["n_past"] != js[1]["n_past"]:
        fail(f"after /reset the same turn must be evaluated from scratch: {js}")
    half = len(out) // 2
    if len(out) < 4 or out[:half] != out[half:]:
        fail(f"greedy replies to the same turn after /reset differ: {out!r}")
    print("ok:", repr(out))


def case_perplexity():
    rc, out, err = run(["perplexity", "-m", model(SMOL), "-f", GPL, "-c", "128", "--chunks", "2", "-t", "2"])
    expect_rc(rc, 0, out, err, "perplexity")
    m = re.search(r"PPL = (\d+\.\d{4}) \+/- (\d+\.\d{5})", out)
    if not m:
        fail(f"no PPL line: {out!r}")
    if not re.search(r"\[1\]\d+\.\d{4},\[2\]\d+\.\d{4},", err):
        fail(f"no per-chunk progress: {err!r}")
    ppl, unc = float(m.group(1)), float(m.group(2))
    # A working 135M model on licence text sits around 10; a broken forward
    # gives hundreds to tens of thousands (uniform over the vocab: 49152).
    if not (1.0 < ppl < 60.0) or not (0.0 < unc < ppl):
        fail(f"implausible PPL {ppl} +/- {unc}")
    print("ok:", out.strip())


def case_mem_budget():
    """--mem-budget: perplexity and a greedy run identical to the model in
    memory, the streaming counters in --stats json, clear errors."""
    smol = model(SMOL)
    ppl = ["perplexity", "-m", smol, "-f", GPL, "-c", "128", "--chunks", "2", "-t", "2"]
    rc, out0, err = run(ppl)
    expect_rc(rc, 0, out0, err, "perplexity in memory")
    rc, out1, err = run(ppl + ["--mem-budget", "40M", "--loaders", "1"])
    expect_rc(rc, 0, out1, err, "perplexity under --mem-budget 40M")
    if out0 != out1:
        fail(f"perplexity differs under the budget: {out0!r} vs {out1!r}")
    gen = ["run", "-m", smol, "-p", "The capital of France is", "-n", "12", "--temp", "0", "-c", "128",
           "--stats", "json", "-t", "2"]
    rc, g0, err0 = run(gen)
    expect_rc(rc, 0, g0, err0, "run in memory")
    rc, g1, err1 = run(gen + ["--mem-budget", "40M", "--stream-opts", "loader_delay_us=200,direct=0",
                              "--no-prefill-routed", "--cache-mb", "8", "--prefill-routed-full", "0.5"])
    expect_rc(rc, 0, g1, err1, "run under --mem-budget 40M")
    if g0 != g1:
        fail(f"greedy text differs under the budget: {g0!r} vs {g1!r}")
    j = json_lines(err1)
    if not j or j[0].get("stream_layers", 0) < 1 or j[0].get("stream_read_mib", 0) <= 0:
        fail(f"no streaming counters in --stats json: {err1!r}")
    if "stream_layers" in json_lines(err0)[0]:
        fail("streaming counters without a budget")
    # prefill on loop from the streamed file: the same text
    long = ["run", "-m", smol, "-p", "one two three four five " * 12, "-n", "6", "--temp", "0", "-c", "256",
            "--stats", "json", "-t", "2"]
    rc, l0, err = run(long)
    expect_rc(rc, 0, l0, err, "long prompt in memory")
    rc, l1, err = run(long + ["--mem-budget", "40M", "--prefill-device", "loop", "--chunk", "32"])
    expect_rc(rc, 0, l1, err, "long prompt, loop, --mem-budget 40M")
    j = json_lines(err)
    if l0 != l1 or not j or j[0]["device"] != "loop" or j[0]["prefill_dev_tokens"] < 32:
        fail(f"loop under the budget: text {l1!r} vs {l0!r}, stats {err[-600:]!r}")
    # loop:npu converts the Q4_1 weights: each streamed layer's form is
    # made as it is uploaded; the same text, no fallback line
    rc, l2, err = run(long + ["--mem-budget", "40M", "--prefill-device", "loop:npu", "--chunk", "32"])
    expect_rc(rc, 0, l2, err, "loop:npu, --mem-budget 40M")
    j = json_lines(err)
    if l2 != l0 or "unavailable" in err or not j or j[0]["device"] != "loop:npu" or j[0]["prefill_dev_tokens"] < 32:
        fail(f"loop:npu under the budget: text {l2!r} vs {l0!r}, stats {err[-600:]!r}")
    for args, want in ((["--mem-budget", "5M"], "below what always stays in memory"),
                       (["--mem-budget", "lots"], "is not a size"),
                       (["--mem-budget", "40M", "--stream-opts", "bogus=1"], "loader_delay_us"),
                       (["--stream-opts", "direct=0"], "without a memory budget"),
                       (["--mem-budget", "40M", "--prefill-routed-full", "2"], "--prefill-routed-full"),
                       (["--mem-budget", "40M", "--cache-mb", "-3"], "--cache-mb")):
        rc, out, err = run(["run", "-m", smol, "-p", "x", "-n", "1"] + args)
        if rc == 0 or want not in err:
            fail(f"{args}: want a failure saying {want!r}, got rc {rc}: {err!r}")
    print("ok: perplexity and greedy text identical under --mem-budget 40M;", out1.strip())


def case_errors():
    smol = model(SMOL)
    # prompt longer than the context
    rc, out, err = run(["run", "-m", smol, "-c", "8", "-p", "one two three four five six seven eight nine ten"])
    expect_rc(rc, 1, out, err, "long prompt")
    if "context" not in err:
        fail(f"long prompt: message should mention the context: {err!r}")
    # context fills during generation: clean stop, exit 0
    rc, out, err = run(["run", "-m", smol, "-c", "12", "-n", "-1", "--temp", "0", "-p", "Count: 1, 2, 3,",
                        "--stats", "json", "-t", "2"])
    expect_rc(rc, 0, out, err, "context full")
    j = json_lines(err)
    if not j or j[0]["stop_reason"] != "context_full" or "context full" not in err:
        fail(f"want stop_reason context_full and a message: {err!r}")
    # missing model file
    rc, out, err = run(["run", "-m", "/nonexistent.gguf", "-p", "x"])
    expect_rc(rc, 1, out, err, "missing model")
    if "/nonexistent.gguf" not in err:
        fail(f"missing model: message should name the file: {err!r}")
    # usage errors
    for args in (["run", "-m", smol], ["run", "-m", smol, "-p", "x", "--top-p", "2"],
                 ["run", "-m", smol, "-p", "x", "--bogus"], ["run", "-m", smol, "-p", "x", "-n"],
                 ["run", "-m", smol, "-p", "x", "--chat", "--chat-template", "vicuna"],
                 ["perplexity", "-m", smol]):
        rc, out, err = run(args)
        expect_rc(rc, 2, out, err, " ".join(args[2:]))
    # too short a file for perplexity
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write("Too short.")
        f.flush()
        rc, out, err = run(["perplexity", "-m", smol, "-f", f.name, "-c", "128"])
        expect_rc(rc, 1, out, err, "short perplexity file")
        if "at least 256" not in err:
            fail(f"short file: message should give the needed count: {err!r}")
    # gemma's GGUF has no chat template: clear error suggesting the flag, then the flag works
    rc, out, err = run(["run", "-m", model(GEMMA), "--chat", "-p", "Hi", "-n", "1"])
    expect_rc(rc, 1, out, err, "gemma without template")
    if "--chat-template" not in err:
        fail(f"should suggest --chat-template: {err!r}")
    rc, out, err = run(["run", "-m", model(GEMMA), "--chat", "--chat-template", "gemma", "-p",
                        "What is the capital of France?", "-n", "12", "--temp", "0", "-t", "2"])
    expect_rc(rc, 0, out, err, "gemma --chat-template gemma")
    if "<start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n" not in out:
        fail(f"displayed prompt is not the rendered Gemma turn: {out!r}")
    if "<bos>" in out:
        fail(f"the tokenizer adds BOS for gemma; the template text must not: {out!r}")
    print("ok")


def case_help():
    for cmd, flags in (("run", ["-m", "-p", "-f", "-n", "-t", "-c", "-b", "--temp", "--top-k", "--top-p", "--min-p",
                                "--repeat-penalty", "--repeat-last-n", "--presence-penalty", "--seed", "--chat",
                                "--system", "--chat-template", "--stats", "--logits-out", "--no-display-prompt"]),
                       ("chat", ["-m", "--system", "--chat-template", "/reset", "-n", "--temp"]),
                       ("perplexity", ["-m", "-f", "-c", "--chunks", "-b", "-t"])):
        rc, out, err = run([cmd, "--help"])
        expect_rc(rc, 0, out, err, cmd + " --help")
        missing = [f for f in flags if not re.search(r"(^|[\s,])" + re.escape(f) + r"\b", out)]
        if missing:
            fail(f"{cmd} --help lacks {missing}")
    print("ok")


if __name__ == "__main__":
    case, TESSERA, MODELS = sys.argv[1], sys.argv[2], sys.argv[3]
    fn = globals().get("case_" + case)
    if fn is None:
        fail(f"unknown case {case}")
    fn()
