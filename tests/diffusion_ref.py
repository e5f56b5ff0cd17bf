#!/usr/bin/env python3
"""diffusion_ref.py - numpy references of the diffusion decoders, and the
test that tessera's decoders (src/diffusion, run by tests/diffusion_tool
decode) reproduce them token for token on the tiny random llada / dream
models (tools/gen_dllm_models.py).

The references are written from the algorithms' descriptions, not from the C:
  - llada_generate: LLaDA's published generate() (semi-autoregressive blocks,
    steps spread evenly over blocks, get_num_transfer_tokens, low-confidence
    remasking by top-k over the block's masked positions; greedy), with
    Dream's timestep schedule and confidence variants as options.
  - block_generate: block-wise threshold decoding (prefix cache, dual cache,
    or no cache), as docs/DIFFUSION.md describes it.
Logits come from tessera's bidirectional window forward (diffusion_tool
serve), which test_dllm_oracle checks against HF transformers; the point
here is that the decoding ALGORITHM is re-implemented independently. The
cache modes are references too: they issue the same window forwards, so
the prefix / dual decoders are checked exactly, and their agreement with
--no-cache (an approximation) is measured and printed.

Conventions shared with the C decoder (docs/DIFFUSION.md): the mask token is
never a candidate (its logit is -inf); ties in confidence go to the lower
position; with shift_logits (Dream) position p reads the row of p-1.

usage: diffusion_ref.py TOOL GEN_DLLM_MODELS.py MODELS_DIR WORK_DIR
"""
import json
import math
import os
import subprocess
import sys

import numpy as np


class Server:
    """A diffusion_tool serve process: window forwards on one KV cache."""

    def __init__(self, tool, model, threads=1, extra=()):
        self.p = subprocess.Popen([tool, "serve", model, "-t", str(threads)] + list(extra), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE)
        self._send("I")
        f = self._line().split()
        self.n_vocab, self.mask, self.shift = int(f[0]), int(f[1]), int(f[2]) != 0
        self.eog = set(int(x) for x in f[4:4 + int(f[3])])
        self.forwards = 0
        self.evaluated = 0

    def _send(self, s):
        self.p.stdin.write((s + "\n").encode())
        self.p.stdin.flush()

    def _line(self):
        return self.p.stdout.readline().decode().strip()

    def _ok(self):
        r = self._line()
        if r != "OK":
            raise RuntimeError("diffusion_tool: " + r)

    def forward(self, tokens, pos0, n_kv, want=True):
        tokens = [int(t) for t in tokens]
        self._send("F %d %d %d %d %s" % (pos0, len(tokens), n_kv, 1 if want else 0, " ".join(map(str, tokens))))
        self._ok()
        self.forwards += 1
        self.evaluated += len(tokens)
        if not want:
            return None
        n = len(tokens) * self.n_vocab * 4
        buf = self.p.stdout.read(n)
        return np.frombuffer(buf, dtype=np.float32).reshape(len(tokens), self.n_vocab)

    def set_n_past(self, n):
        self._send("P %d" % n)
        self._ok()

    def reset(self):
        self._send("R")
        self._ok()
        self.forwards = self.evaluated = 0

    def close(self):
        self._send("Q")
        self.p.wait()


# ---- confidence --------------------------------------------------------------

def confidence(rows, mask, alg, temp=0.0):
    """Candidate token x0 and confidence of each logits row (greedy)."""
    l = rows.astype(np.float64)
    l[:, mask] = -np.inf                      # [MASK] is never a prediction
    x0 = np.argmax(l, axis=1)                 # the first of equal maxima
    t = temp if (alg != "low_confidence" and temp > 0) else 1.0
    z = l / t
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    if alg in ("low_confidence", "maskgit_plus"):
        c = p[np.arange(len(x0)), x0]
    elif alg == "topk_margin":
        s = np.sort(p, axis=1)
        c = s[:, -1] - s[:, -2]
    elif alg == "entropy":
        c = np.sum(p * np.log(p + 1e-10), axis=1)
    else:
        raise ValueError(alg)
    return x0, c


def rank(conf, positions):
    """Indices into conf, most confident first, ties to the lower position."""
    return sorted(range(len(conf)), key=lambda i: (-conf[i], positions[i]))


# ---- LLaDA generate() --------------------------------------------------------

def num_transfer_tokens(mask_num, steps):
    """LLaDA's get_num_transfer_tokens: an even split, the remainder first."""
    base, rem = divmod(mask_num, steps)
    return [base + (1 if i < rem else 0) for i in range(steps)]


def dream_transfer(n_left, steps, i, eps):
    """Dream's schedule: timesteps linspace(1, eps, steps+1); the fraction
    1 - s/t of the still-masked positions, all of them at the last step."""
    if i == steps - 1:
        return n_left
    e = float(np.float32(eps))
    step = (e - 1.0) / steps
    t = 1.0 + i * step
    s = e if i + 1 == steps else 1.0 + (i + 1) * step
    return min(int(math.floor(n_left * (1.0 - s / t))), n_left)


def llada_generate(srv, prompt, gen_length, block_length, steps, alg="low_confidence", eps=0.0, eog=(),
                   early_stop=True):
    mask = srv.mask
    P = len(prompt)
    x = np.full(P + gen_length, mask, dtype=np.int64)
    x[:P] = prompt
    num_blocks = -(-gen_length // block_length)
    base, rem = divmod(steps, num_blocks)    # steps spread evenly over the blocks
    for b in range(num_blocks):
        s = P + b * block_length
        e = min(s + block_length, P + gen_length)
        steps_b = base + (1 if b < rem else 0)
        block_mask_num = int((x[s:e] == mask).sum())
        schedule = num_transfer_tokens(block_mask_num, steps_b)
        for i in range(steps_b):
            mask_index = x == mask
            logits = srv.forward(x, 0, len(x))
            if srv.shift:                      # row p-1 predicts position p
                logits = np.concatenate([logits[:1], logits[:-1]], axis=0)
            x0, conf = confidence(logits, mask, alg)
            cand = [p for p in range(s, e) if mask_index[p]]
            k = schedule[i] if eps == 0 else dream_transfer(len(cand), steps_b, i, eps)
            order = rank([conf[p] for p in cand], cand)
            for j in order[:k]:
                x[cand[j]] = x0[cand[j]]
        if early_stop and any(int(t) in eog for t in x[s:e]):
            break
    return x[P:]


# ---- block-wise threshold decoding --------------------------------------------

def block_generate(srv, prompt, gen_length, block_length, threshold, cache="prefix", alg="low_confidence",
                   eog=(), early_stop=True, probe=None):
    """probe(canvas, cand, rows, s, e): called at each step with the masked
    positions of block [s, e) and the logits rows read for them (to measure
    how the cached logits differ from the exact ones)."""
    mask = srv.mask
    sh = 1 if srv.shift else 0
    P = len(prompt)
    L = P + gen_length
    x = np.full(L, mask, dtype=np.int64)
    x[:P] = prompt
    if cache != "none":
        srv.forward(x[:P], 0, P, want=False)   # the prompt's K/V, once
        srv.set_n_past(P)
    num_blocks = -(-gen_length // block_length)
    for b in range(num_blocks):
        s = P + b * block_length
        e = min(s + block_length, L)
        pos0 = s - sh if cache != "none" else 0
        step = 0
        while (x[s:e] == mask).any():
            end, n_kv = e, e
            if cache == "dual":
                n_kv = L
                if step == 0:
                    end = L                     # the masked suffix's K/V, kept for the block's later steps
            logits = srv.forward(x[pos0:end], pos0, n_kv)
            cand = [p for p in range(s, e) if x[p] == mask]
            rows = logits[[p - pos0 - sh for p in cand]]
            if probe:
                probe(x.copy(), cand, rows, s, e)
            x0, conf = confidence(rows, mask, alg)
            picks = [j for j in range(len(cand)) if conf[j] >= threshold]
            if not picks:
                picks = [rank(list(conf), cand)[0]]  # at least the most confident one
            for j in picks:
                x[cand[j]] = x0[j]
            step += 1
        if early_stop and any(int(t) in eog for t in x[s:e]):
            break
        if cache != "none" and b + 1 < num_blocks:
            srv.forward(x[pos0:e], pos0, e, want=False)  # the finished block joins the prefix
            srv.set_n_past(e)
    return x[P:]


# ---- the test -----------------------------------------------------------------

def run_tool(tool, model, prompt, args):
    cmd = [tool, "decode", model, ",".join(map(str, prompt)), "-t", "1"] + args
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s failed: %s" % (" ".join(cmd), r.stderr.strip()))
    return json.loads(r.stdout)


def main():
    if len(sys.argv) != 5:
        print(__doc__)
        return 2
    tool, gen_script, models_dir, work = sys.argv[1:]
    os.makedirs(work, exist_ok=True)
    if not os.path.exists(os.path.join(models_dir, "SmolLM2-135M-Instruct.Q4_1.gguf")):
        print("FAIL: %s/SmolLM2-135M-Instruct.Q4_1.gguf is missing (the tiny models borrow its tokenizer): "
              "run tools/fetch_models.sh" % models_dir)
        return 1
    subprocess.run([sys.executable, gen_script, work, "--models-dir", models_dir], check=True,
                   stdout=subprocess.DEVNULL)
    failures = 0
    rng = np.random.default_rng(6)
    for name in ("llada", "dream"):
        model = os.path.join(work, name + ".gguf")
        meta = json.load(open(os.path.join(work, name + ".json")))
        srv = Server(tool, model)
        assert srv.mask == meta["ids"]["mask"], (srv.mask, meta["ids"])
        eog = srv.eog
        print("%s: n_vocab %d, mask %d, shift %s, eog %s" % (name, srv.n_vocab, srv.mask, srv.shift, sorted(eog)))
        prompts = [list(rng.integers(2, 600, size=n)) for n in (7, 12)]

        def check(label, ref, got, stats=None):
            nonlocal failures
            ref = [int(t) for t in ref]
            ok = ref == got["gen"]
            extra = ""
            if stats is not None:
                ok = ok and stats == (got["forwards"], got["tokens_evaluated"])
                extra = " forwards %d/%d evaluated %d/%d" % (got["forwards"], stats[0], got["tokens_evaluated"],
                                                             stats[1])
            if got["early_stop_at"] is not None:
                extra += " (early stop at %d)" % got["early_stop_at"]
            print("  %-58s %s%s" % (label, "ok" if ok else "MISMATCH", extra))
            if not ok:
                failures += 1
                print("    ref  %s\n    ours %s" % (ref, got["gen"]))

        # vanilla: LLaDA's generate(), and Dream's schedule / confidences
        vanilla = [(24, 8, 24, "low_confidence", 0.0), (24, 8, 12, "low_confidence", 0.0),
                   (20, 8, 6, "low_confidence", 0.0), (24, 8, 9, "low_confidence", 0.0),
                   (24, 24, 6, "low_confidence", 1e-3),
                   (24, 8, 12, "maskgit_plus", 1e-3), (24, 8, 12, "topk_margin", 0.0), (24, 8, 12, "entropy", 0.0)]
        for pi, prompt in enumerate(prompts):
            for gen, block, steps, alg, eps in vanilla:
                for es in (True,) if pi else (True, False):
                    srv.reset()
                    ref = llada_generate(srv, prompt, gen, block, steps, alg, eps, eog, es)
                    args = ["--decoder", "vanilla", "--gen", str(gen), "--block", str(block), "--steps", str(steps),
                            "--alg", alg, "--eps", repr(eps)] + ([] if es else ["--no-early-stop"])
                    got = run_tool(tool, model, prompt, args)
                    check("vanilla p%d gen %d block %d steps %d %s eps %g%s" %
                          (len(prompt), gen, block, steps, alg, eps, "" if es else " no-stop"), ref, got)

        # block decoder: no cache (exact), prefix, dual, at several thresholds
        results = {}
        for prompt in prompts:
            for thr in (0.9, 0.02, 0.005):
                for block in (8, 5):
                    for cache in ("none", "prefix", "dual"):
                        srv.reset()
                        ref = block_generate(srv, prompt, 24, block, thr, cache, "low_confidence", eog)
                        got = run_tool(tool, model, prompt, ["--gen", "24", "--block", str(block), "--threshold",
                                                             repr(thr), "--cache", cache])
                        check("block p%d thr %g block %d cache %s" % (len(prompt), thr, block, cache), ref, got,
                              (srv.forwards, srv.evaluated))
                        results[(len(prompt), thr, block, cache)] = (got["gen"], got["commit_per_forward_hist"])

        # how far the cached decoders are from --no-cache: committed tokens ...
        print("  agreement of committed tokens with --no-cache (positions decoded by both):")
        for cache in ("prefix", "dual"):
            same = total = 0
            for key, (gen, _) in results.items():
                if key[3] != cache:
                    continue
                ref = results[key[:3] + ("none",)][0]
                for a, b in zip(gen, ref):
                    if a != srv.mask and b != srv.mask:
                        total += 1
                        same += a == b
            print("    %-6s %d / %d = %.1f%%" % (cache, same, total, 100.0 * same / max(total, 1)))
        # ... and the logits: at each step of the cached decoder, the rows it
        # read against the no-cache rows for the same canvas
        # (dual is also compared with a forward over the whole canvas: the
        # exact version of what it approximates, the suffix included)
        for cache, whole in (("prefix", False), ("dual", False), ("dual", True)):
            exact = Server(tool, model)
            diffs, argmax_same, n_rows = [], 0, 0

            def probe(x, cand, rows, s, e):
                nonlocal argmax_same, n_rows
                if whole:
                    e = len(x)
                full = exact.forward(x[:e], 0, e)
                ref_rows = full[[p - (1 if exact.shift else 0) for p in cand]]
                d = np.abs(rows.astype(np.float64) - ref_rows).max(axis=1) / np.abs(ref_rows).max(axis=1)
                diffs.extend(d.tolist())
                r1 = rows.copy()
                r2 = ref_rows.copy()
                r1[:, srv.mask] = -np.inf
                r2[:, srv.mask] = -np.inf
                argmax_same += int((r1.argmax(axis=1) == r2.argmax(axis=1)).sum())
                n_rows += len(cand)

            srv.reset()
            block_generate(srv, prompts[0], 24, 8, 0.9, cache, "low_confidence", eog, early_stop=False, probe=probe)
            exact.close()
            d = np.array(diffs)
            print("  logits of %-6s vs %s (p%d, block 8, %d rows): max|diff|/max|ref| median %.3g, max %.3g; "
                  "argmax agrees on %d/%d rows" % (cache, "whole canvas" if whole else "no-cache", len(prompts[0]),
                                                   n_rows, np.median(d), d.max(), argmax_same, n_rows))
        srv.close()
    if failures:
        print("FAIL: %d mismatch(es) with the numpy references" % failures)
        return 1
    print("all decoders match their numpy references")
    return 0


if __name__ == "__main__":
    sys.exit(main())
