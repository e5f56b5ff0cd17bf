#!/usr/bin/env python3
"""test_diffusion_cli.py - `tessera diffuse` and ts_context_diffuse end to end
on the tiny random llada / dream models: --help, the --stats json keys, the
counters and tokens equal to those of the library's decoder run directly
(diffusion_tool decode) for every decoder / cache mode and switch (window,
lookahead, skip-logits, sts, scr), --chat, and the
errors (a non-diffusion model, conflicting flags, bad values).

usage: test_diffusion_cli.py TESSERA TESSERA_SHARED DIFFUSION_TOOL GEN_DLLM_MODELS.py MODELS_DIR WORK_DIR
"""
import json
import os
import subprocess
import sys

KEYS = ["forwards", "tokens_evaluated", "tokens_committed", "commit_per_forward_hist", "prefill_ms", "denoise_ms",
        "early_stop_at", "denoise_forwards", "n_prompt_tokens", "n_gen_tokens", "stop_reason", "tokens",
        "window_max", "draft_evals", "draft_accepted", "lookahead_tokens", "logits_skipped", "sts", "visible",
        "stable", "sts_visible", "sts_forced", "sts_stable", "revisions", "unstable_at_block_end", "visible_at_end",
        "scr", "scr_max", "scr_refreshed", "scr_revisions", "scr_stabilized", "scr_merged", "scr_ms", "scr_overlap_ms",
        "dev_upload_mib", "dev_stall_ms", "dev_resident_layers", "dev_streamed_layers"]
STS_KEYS = ["sts_visible", "sts_forced", "sts_stable", "revisions", "unstable_at_block_end", "visible_at_end",
            "scr_refreshed", "scr_revisions", "scr_stabilized", "scr_merged"]
failures = 0


def check(cond, msg):
    global failures
    print(("ok   " if cond else "FAIL ") + msg)
    if not cond:
        failures += 1


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def main():
    if len(sys.argv) != 7:
        print(__doc__)
        return 2
    tessera, shared, tool, gen_script, models, work = sys.argv[1:]
    smol = os.path.join(models, "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(smol):
        print("FAIL: %s is missing: run tools/fetch_models.sh" % smol)
        return 1
    os.makedirs(work, exist_ok=True)
    subprocess.run([sys.executable, gen_script, work, "--models-dir", models], check=True, stdout=subprocess.DEVNULL)

    r = run([tessera, "diffuse", "--help"])
    check(r.returncode == 0 and "--dual-cache" in r.stdout and "--decoder" in r.stdout, "diffuse --help")
    r = run([shared, "diffuse", "--help"])
    check(r.returncode == 0, "diffuse --help through the shared library")
    r = run([tessera, "--help"])
    check("diffuse" in r.stdout, "diffuse listed in tessera --help")

    prompt = "The quick brown fox jumps over"
    for name in ("llada", "dream"):
        model = os.path.join(work, name + ".gguf")
        r = run([tessera, "tokenize", "-m", model, "-p", prompt, "--ids"])
        ids = json.loads(r.stdout)
        for label, flags, tflags in [
            ("vanilla", ["--decoder", "vanilla", "--steps", "12"], ["--decoder", "vanilla", "--steps", "12"]),
            ("vanilla eps", ["--decoder", "vanilla", "--steps", "6", "--eps", "0.001", "--alg", "entropy"],
             ["--decoder", "vanilla", "--steps", "6", "--eps", "0.001", "--alg", "entropy"]),
            ("block", [], []),
            ("block low threshold", ["--threshold", "0.01"], ["--threshold", "0.01"]),
            ("block dual", ["--dual-cache"], ["--cache", "dual"]),
            ("block no-cache", ["--no-cache"], ["--cache", "none"]),
            ("block no early stop", ["--no-early-stop", "--threshold", "0.01"], ["--no-early-stop", "--threshold",
                                                                                 "0.01"]),
            ("block window", ["--window", "12"], ["--window", "12"]),
            ("block window lookahead", ["--window", "8", "--lookahead", "4", "--lookahead-trigger", "6"],
             ["--window", "8", "--lookahead", "4", "--lookahead-trigger", "6"]),
            ("block skip-logits", ["--skip-logits"], ["--skip-logits"]),
            ("block sts", ["--sts"], ["--sts"]),
            ("block sts low", ["--visible", "0.01", "--stable", "0.5"], ["--visible", "0.01", "--stable", "0.5"]),
            ("block sts window skip-logits", ["--sts", "--window", "12", "--skip-logits"],
             ["--sts", "--window", "12", "--skip-logits"]),
            ("block sts scr", ["--visible", "0.01", "--stable", "0.5", "--scr"],
             ["--visible", "0.01", "--stable", "0.5", "--scr"]),
        ]:
            cmd = [tessera, "diffuse", "-m", model, "-p", prompt, "--gen", "24", "--block", "8", "-t", "1",
                   "--stats", "json", "--no-display-prompt"] + flags
            r = run(cmd)
            if r.returncode != 0:
                check(False, "%s %s: exit %d: %s" % (name, label, r.returncode, r.stderr.strip()))
                continue
            st = json.loads(r.stderr.strip().splitlines()[-1])
            check(all(k in st for k in KEYS), "%s %s: stats keys" % (name, label))
            t = run([tool, "decode", model, ",".join(map(str, ids)), "--gen", "24", "--block", "8", "-t", "1"] +
                    tflags)
            ref = json.loads(t.stdout)
            same = all(st[k] == ref[k] for k in ["forwards", "tokens_evaluated", "tokens_committed",
                                                 "commit_per_forward_hist", "early_stop_at"] + STS_KEYS)
            # tokens handed out: the decoded canvas up to the first EOS/EoT
            n_out = st["n_gen_tokens"]
            stop = ref["early_stop_at"]
            same = same and st["tokens"] == ref["gen"][:n_out]
            check(same and st["n_prompt_tokens"] == len(ids) and (stop is None or n_out <= stop) and
                  (st["stop_reason"] == "eos") == (stop is not None),
                  "%s %s: CLI = library decoder (tokens, forwards %d, evaluated %d, hist %s, early stop %s, %d tokens out)" %
                  (name, label, st["forwards"], st["tokens_evaluated"], st["commit_per_forward_hist"],
                   st["early_stop_at"], n_out))

        # selective logits skipping changes nothing but the rows computed: the
        # same canvas and counters from the library's decoder, for each decoder
        for flags in ([], ["--cache", "dual"], ["--decoder", "vanilla", "--steps", "12"], ["--window", "12"],
                      ["--window", "8", "--lookahead", "4", "--lookahead-trigger", "6"]):
            base = ["decode", model, ",".join(map(str, ids)), "--gen", "24", "--block", "8", "-t", "1"] + flags
            a = json.loads(run([tool] + base).stdout)
            b = json.loads(run([tool] + base + ["--skip-logits"]).stdout)
            same = all(a[k] == b[k] for k in ("gen", "forwards", "tokens_evaluated", "commit_per_forward_hist"))
            check(same and a["logits_skipped"] == 0 and b["logits_skipped"] > 0,
                  "%s %s: --skip-logits decodes the same canvas (%d of %d rows skipped)" %
                  (name, " ".join(flags) or "block", b["logits_skipped"], b["tokens_evaluated"]))

    llada = os.path.join(work, "llada.gguf")
    # --lookahead auto times the window's device: at widths 8, 16, .. where
    # it takes any width; at the one width it pads every window to where it
    # requires widths (loop:npu: its widths 32/64/128/256 at or below --chunk)
    for dev, chunk, want in (("loop", "32", list(range(8, 40, 8))), ("loop:npu", "64", [64]),
                             ("loop:npu", "48", [32])):
        r = run([tessera, "diffuse", "-m", llada, "-p", prompt, "--gen", "24", "--block", "8", "-t", "1",
                 "--stats", "json", "--no-display-prompt", "--window", "12", "--lookahead", "auto",
                 "--prefill-device", dev, "--chunk", chunk, "--prefill-min-tokens", "2"])
        st = json.loads(r.stderr.strip().splitlines()[-1]) if r.returncode == 0 else {}
        widths = [w for w, _ in st.get("latency_table", [])]
        check(r.returncode == 0 and widths == want and st["dev_forwards"] > 0 and
              (st["dev_pad_tokens"] > 0) == (dev == "loop:npu") and st["n_batch"] >= 8 + 12,
              "--lookahead auto on %s --chunk %s: table widths %s (want %s), %s device forwards, %s padding rows, "
              "n_batch %s: %s" % (dev, chunk, widths, want, st.get("dev_forwards"), st.get("dev_pad_tokens"),
                                  st.get("n_batch"), r.stderr.strip()[-300:] if r.returncode else "ok"))
    r = run([tessera, "diffuse", "-m", llada, "-p", "Hi", "--chat", "--gen", "8", "--block", "8", "-t", "1"])
    check(r.returncode == 0 and "<|im_start|>user" in r.stdout, "--chat renders the template")
    r = run([tessera, "diffuse", "-m", smol, "-p", "Hi", "--gen", "8", "-t", "1"])
    check(r.returncode == 1 and "not a diffusion LLM" in r.stderr, "a causal model is refused: " + r.stderr.strip())
    r = run([tessera, "diffuse", "-m", llada, "-p", "Hi", "--dual-cache", "--no-cache"])
    check(r.returncode == 2 and "exclude" in r.stderr, "--dual-cache with --no-cache")
    r = run([tessera, "diffuse", "-m", llada, "-p", "Hi", "--decoder", "vanilla", "--gen", "32", "--block", "8",
             "--steps", "2", "-t", "1"])
    check(r.returncode == 1 and "steps 2" in r.stderr, "fewer steps than blocks: " + r.stderr.strip())
    r = run([tessera, "diffuse", "-m", llada, "-p", "Hi", "--gen", "200", "-t", "1", "-c", "64"])
    check(r.returncode == 1 and "exceed the context" in r.stderr, "canvas larger than the context: " +
          r.stderr.strip())
    r = run([tessera, "diffuse", "-m", llada, "-p", "Hi", "--window", "4", "--block", "8", "-t", "1"])
    check(r.returncode == 1 and "window 4 is shorter" in r.stderr, "--window shorter than the block: " +
          r.stderr.strip())
    r = run([tessera, "diffuse", "-m", llada, "-p", "Hi", "--lookahead", "4", "-t", "1"])
    check(r.returncode == 1 and "needs a window" in r.stderr, "--lookahead without --window: " + r.stderr.strip())
    r = run([tessera, "diffuse", "-m", llada, "-p", "Hi", "--visible", "0.9", "--stable", "0.5", "-t", "1"])
    check(r.returncode == 1 and "below the visibility" in r.stderr, "--stable below --visible: " + r.stderr.strip())
    r = run([tessera, "diffuse", "-m", llada, "-p", "Hi", "--sts", "--dual-cache", "-t", "1"])
    check(r.returncode == 1 and "stabilization needs" in r.stderr, "--sts with --dual-cache: " + r.stderr.strip())
    r = run([tessera, "diffuse", "-m", llada, "-p", "Hi", "--scr", "-t", "1"])
    check(r.returncode == 1 and "needs staged token stabilization" in r.stderr, "--scr without --sts: " +
          r.stderr.strip())
    r = run([tessera, "diffuse", "-m", llada, "-p", "Hi", "--alg", "nope"])
    check(r.returncode == 2 and "--alg" in r.stderr, "bad --alg")
    if failures:
        print("FAIL: %d check(s)" % failures)
        return 1
    print("all diffuse CLI checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
