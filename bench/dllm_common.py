"""dllm_common.py - what the dLLM benchmark scripts (dllm_commits,
dllm_ladder, dllm_sweeps) share: the held-out prompts (through
tools/train_tiny_dllm.py), their common arguments, one run of
`tessera diffuse --stats json`, a prompt's token ids, and the trained
model's pseudo-log-likelihood of a generated text (Scorer: the ladder's
quality column)."""
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
    st = json.loads([ln for ln in r.stderr.splitlines() if ln.startswith("{")][-1])
    # the one line a device that did not open prints (the run went on on the CPU)
    fb = [ln for ln in r.stderr.splitlines() if ln.startswith("tessera: prefill device")]
    st["fallback"] = fb[0] if fb else None
    return st


def prompt_ids(a, text):
    """The prompt's token ids as tessera tokenizes it (what `tessera diffuse` decodes from)."""
    r = subprocess.run([a.tessera, "tokenize", "-m", a.model, "-p", text, "--ids"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"tessera tokenize failed: {r.stderr.strip()[-300:]}")
    return json.loads(r.stdout)


class Scorer:
    """The trained model's own judgement of a generated text: its
    pseudo-log-likelihood (mean over chosen positions i of log p(x_i | the
    prompt and every other generated token, x_i masked), read as the model
    reads position i: row i-1, shifted logits; the mask token is never a
    prediction). The forward is tools/train_tiny_dllm.py's PyTorch model of
    the committed delta (the weights the GGUF is built from, in f32), so the
    score does not depend on the engine that generated the text."""

    def __init__(self, threads):
        import argparse
        import tempfile
        import torch
        torch.set_num_threads(threads)
        self.torch = torch
        # a work dir without a training checkpoint: the committed delta is loaded
        ns = argparse.Namespace(work=tempfile.mkdtemp(prefix="dllm_score_"), delta=T.DELTA)
        self.model, _ = T.load_trained(ns, torch.device("cpu"))

    def pll(self, prompt, gen, positions):
        """Mean log-likelihood per token over `positions` (indices into gen)."""
        torch = self.torch
        seq = torch.tensor(list(prompt) + list(gen), dtype=torch.int64)
        np_, k = len(prompt), len(positions)
        x = seq[None].repeat(k, 1)
        cols = torch.tensor([np_ + i for i in positions])
        x[torch.arange(k), cols] = T.MASK_ID
        with torch.no_grad():
            hid = self.model.hidden(x)
            rows = torch.arange(k) * x.shape[1] + (cols - 1)
            lg = self.model.logits_at(hid, rows).float()
            lg[:, T.MASK_ID] = -float("inf")
            lp = lg.log_softmax(-1)[torch.arange(k), seq[cols]]
        return float(lp.mean())
