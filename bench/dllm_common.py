"""dllm_common.py - what the dLLM benchmark scripts (dllm_commits,
dllm_ladder, dllm_sweeps) share: the held-out prompts (through
tools/train_tiny_dllm.py), their common arguments, and one run of
`tessera diffuse --stats json`."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import train_tiny_dllm as T  # noqa: E402,F401  (re-exported: T.held_out_prompts)


def add_args(ap, prompts):
    """TESSERA MODEL, --prompts (default `prompts`), --gen, --block, -t, --json."""
    ap.add_argument("tessera")
    ap.add_argument("model")
    ap.add_argument("--prompts", type=int, default=prompts)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--block", type=int, default=32)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--json")


def diffuse(a, prompt, threshold, flags, who):
    """The --stats json object of one `tessera diffuse` of `prompt` (gen,
    block, threads from a; no early stop); exits naming `who` on failure."""
    cmd = [a.tessera, "diffuse", "-m", a.model, "-p", prompt, "-n", str(a.gen), "--block", str(a.block),
           "--threshold", str(threshold), "--no-early-stop", "--no-display-prompt", "--stats", "json",
           "-t", str(a.threads)] + flags
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{who}: tessera diffuse {' '.join(flags)} failed: {r.stderr.strip()[-600:]}")
    return json.loads([ln for ln in r.stderr.splitlines() if ln.startswith("{")][-1])
