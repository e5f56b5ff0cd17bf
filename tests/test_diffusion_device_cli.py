#!/usr/bin/env python3
"""test_diffusion_device_cli.py - `tessera diffuse --prefill-device`: the
flags in --help, the same text and counters as the CPU run with `loop`
(every block / vanilla mode), the device keys of --stats json
(dev_forwards, dev_tokens > 0, device "loop"; 0, 0, null without a device),
the one fallback line for a device that does not open, and the staging keys
of the deep model (deep/llada_deep.gguf) in a 12 MiB window: place=somr
keeps some layers resident and stages less than place=peruse, same text.

usage: test_diffusion_device_cli.py TESSERA MODELS_DIR (the tiny llada.gguf, dream.gguf)
"""
import json
import os
import subprocess
import sys

failures = 0
# (n_ctx too: with --prefill-device the default context is one chunk larger,
# room for a padded window on a device that requires widths)
DEV_KEYS = ("dev_forwards", "dev_tokens", "dev_pad_tokens", "device", "prefill_ms", "denoise_ms", "peak_rss_mib",
            "n_batch", "n_ctx", "dev_upload_mib", "dev_stall_ms", "dev_resident_layers", "dev_streamed_layers")


def check(cond, msg):
    global failures
    print(("ok   " if cond else "FAIL ") + msg)
    if not cond:
        failures += 1


def diffuse(tessera, model, flags):
    cmd = [tessera, "diffuse", "-m", model, "-p", "The quick brown fox jumps over", "--gen", "24", "--block", "8",
           "-t", "1", "--stats", "json", "--no-display-prompt", "--threshold", "0.2"] + flags
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stdout, r.stderr
    return json.loads(r.stderr.strip().splitlines()[-1]), r.stdout, r.stderr


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    tessera, models = sys.argv[1:]
    r = subprocess.run([tessera, "diffuse", "--help"], capture_output=True, text=True)
    check(r.returncode == 0 and all(f in r.stdout for f in ("--prefill-device", "--chunk", "--prefill-min-tokens")),
          "diffuse --help names the device flags")
    dev = ["--prefill-device", "loop", "--prefill-min-tokens", "4", "--chunk", "64"]
    for name in ("llada", "dream"):
        model = os.path.join(models, name + ".gguf")
        for label, flags in [("block", []), ("block dual", ["--dual-cache"]), ("block none", ["--no-cache"]),
                             ("vanilla", ["--decoder", "vanilla", "--steps", "12"])]:
            ref, ref_out, ref_err = diffuse(tessera, model, flags)
            got, got_out, got_err = diffuse(tessera, model, flags + dev)
            if ref is None or got is None:
                check(False, "%s %s: a run failed: %s %s" % (name, label, ref_err.strip(), got_err.strip()))
                continue
            check(ref["dev_forwards"] == 0 and ref["dev_tokens"] == 0 and ref["device"] is None,
                  "%s %s: CPU run: no device keys set" % (name, label))
            check(got["device"] == "loop" and got["dev_tokens"] > 0 and got["dev_forwards"] > 0,
                  "%s %s: loop ran %s forwards, %s positions" % (name, label, got["dev_forwards"], got["dev_tokens"]))
            same = {k: v for k, v in ref.items() if k not in DEV_KEYS} == \
                   {k: v for k, v in got.items() if k not in DEV_KEYS}
            check(same and ref_out == got_out, "%s %s: same text and counters as the CPU" % (name, label))
    model = os.path.join(models, "llada.gguf")
    ref, ref_out, _ = diffuse(tessera, model, [])
    got, got_out, err = diffuse(tessera, model, ["--prefill-device", "bogus"])
    lines = [ln for ln in err.splitlines() if "prefill device" in ln]
    check(got is not None and got["device"] is None and got_out == ref_out and len(lines) == 1 and
          "unavailable" in lines[0] and "running on the CPU" in lines[0],
          "unknown device: one fallback line, the CPU's text: %r" % lines)
    deep = os.path.join(models, "deep", "llada_deep.gguf")
    ref, ref_out, _ = diffuse(tessera, deep, [])
    runs = {}
    for place in ("peruse", "somr"):
        got, got_out, err = diffuse(tessera, deep, ["--prefill-device", "loop,window=12M,place=" + place,
                                                    "--prefill-min-tokens", "4", "--chunk", "64"])
        runs[place] = got
        check(got is not None and got_out == ref_out and got["dev_forwards"] > 0 and got["dev_upload_mib"] > 0,
              "deep, place=%s: the CPU's text, %s device forwards, %.2f MiB staged, stall %.2f ms, %s resident / %s "
              "streamed" % (place, got and got["dev_forwards"], got and got["dev_upload_mib"],
                            got and got["dev_stall_ms"], got and got["dev_resident_layers"],
                            got and got["dev_streamed_layers"]))
    if runs["peruse"] and runs["somr"]:
        p, s = runs["peruse"], runs["somr"]
        check(p["dev_resident_layers"] == 0 and s["dev_resident_layers"] > 0 and s["dev_streamed_layers"] > 0 and
              s["dev_upload_mib"] < p["dev_upload_mib"],
              "deep: somr keeps %d layers resident and stages %.2f MiB, per-use staging %.2f MiB" %
              (s["dev_resident_layers"], s["dev_upload_mib"], p["dev_upload_mib"]))
    print("%d failure(s)" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
