#!/usr/bin/env python3
"""test_diffusion_hf.py - issue #6's proof for the decoders: tessera's
vanilla decoder (LLaDA's generate()) and its block decoder with --no-cache
reproduce, token for token, the numpy references of tests/diffusion_ref.py
run over the logits of the HF ORACLE (transformers at float32), greedy, on
the tiny random llada and dream models (tools/gen_dllm_models.py).

Both decoders recompute everything at every step: each forward is one
window [0, e) with n_kv = e (vanilla: e = L, the whole canvas; no-cache:
the prompt, the finished blocks and the current block), every position
seeing every other. HF computes exactly that as one forward over the same
tokens with position ids 0..e-1 and an all-visible 4-D additive mask
(eager attention; test_dllm_oracle checks that this mask makes HF
bidirectional). The decoding (schedules, confidence, top-k / threshold
commitment, Dream's shift: position p reads row p-1) is diffusion_ref.py's
numpy code, written from the descriptions; tessera's side is its own
decoder (`diffusion_tool decode`, ts_diffuse over the model's denoiser)
with an f32 KV cache (`--kv-f32`: logits within ~1e-6 of HF's, against
~2e-4 with the f16 cache).

When the committed tokens differ, the test locates the first step where
the two sides decided differently: the numpy decoder is re-run over
tessera's own window forwards (`diffusion_tool serve --kv-f32`), which
must reproduce tessera's decode (else the ALGORITHMS differ: failure);
up to the first differing step both runs saw the same canvas, so that
step's decision is re-evaluated from the HF rows and from tessera's rows,
and its margin is printed from both sides:
  - a position whose argmax differs: (p1 - p2) / p1, the two top
    probabilities of its row;
  - a position committed by one side only: top-k (vanilla) the relative
    gap |c_a - c_b| / max(|c_a|, |c_b|) between the two positions swapped
    at the boundary; threshold (block) |c - thr| / |thr|; the block's
    at-least-one fallback the gap between its two best confidences.
The run passes only if every such margin is below NEAR_TIE = 1e-4 on both
sides: a true near-tie, which float32 forwards computed in a different
order may break either way (the logits differ by ~1e-6 of their scale,
which moves a confidence by a few 1e-6 relative; 1e-4 leaves 10-50x of
room and still rejects any real disagreement).

usage: test_diffusion_hf.py DIFFUSION_TOOL GEN_DLLM_MODELS.py MODELS_DIR WORK_DIR
"""
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import diffusion_ref as dr  # noqa: E402  (same directory)

NEAR_TIE = 1e-4      # relative confidence margin under which a differing decision is a true near-tie
LOGIT_TOL = 1e-5     # max |tessera - HF| / max |HF| per row with the f32 KV cache (test_dllm_oracle's bound)

try:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
except Exception as e:  # noqa: BLE001
    print(f"FAIL: this test needs torch and transformers in {sys.executable} ({e}); "
          "run the oracle setup: .venv/bin/pip install torch transformers accelerate")
    sys.exit(1)


class HFServer:
    """The decoders' forward interface (diffusion_ref.Server's) over the HF
    model; only full-recomputation windows: pos0 = 0, n_kv = the window."""

    def __init__(self, model, n_vocab, mask, shift, eog):
        self.model, self.n_vocab, self.mask, self.shift, self.eog = model, n_vocab, mask, shift, eog
        self.forwards = self.evaluated = 0
        self.log = []  # (window tokens, logits) of every forward

    def forward(self, tokens, pos0, n_kv, want=True):
        n = len(tokens)
        if pos0 != 0 or n_kv != n:
            raise ValueError(f"HFServer computes full windows only (pos0 {pos0}, n {n}, n_kv {n_kv})")
        ids = torch.tensor([[int(t) for t in tokens]])
        mask = torch.zeros((1, 1, n, n), dtype=torch.float32)  # 0 = visible: every position sees every other
        with torch.no_grad():
            out = self.model(input_ids=ids, position_ids=torch.arange(n)[None], attention_mask=mask)
        logits = out.logits[0].float().numpy()
        self.forwards += 1
        self.evaluated += n
        self.log.append((np.array(tokens, dtype=np.int64), logits))
        return logits if want else None

    def set_n_past(self, n):
        raise ValueError("HFServer has no cache")

    def reset(self):
        self.forwards = self.evaluated = 0
        self.log = []


class LoggingServer:
    """diffusion_ref.Server (tessera's window forward) recording its forwards."""

    def __init__(self, srv):
        self.srv, self.log = srv, []
        self.n_vocab, self.mask, self.shift, self.eog = srv.n_vocab, srv.mask, srv.shift, srv.eog

    def forward(self, tokens, pos0, n_kv, want=True):
        logits = self.srv.forward(tokens, pos0, n_kv, True)
        self.log.append((np.array(tokens, dtype=np.int64), logits))
        return logits if want else None

    def set_n_past(self, n):
        self.srv.set_n_past(n)

    def reset(self):
        self.srv.reset()
        self.log = []


def hf_model(meta, sd):
    cls, cfg_cls = (LlamaForCausalLM, LlamaConfig) if meta["hf_class"] == "llama" else (Qwen2ForCausalLM, Qwen2Config)
    cfg = cfg_cls(**meta["hf_config"])
    cfg._attn_implementation = "eager"
    model = cls(cfg)
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()}, strict=False)
    missing = [k for k in missing if "rotary" not in k]
    if missing or unexpected:
        raise RuntimeError(f"HF state dict mismatch: missing {missing}, unexpected {unexpected}")
    return model.float().eval()


def decide(rows, cand, alg, k=None, thr=None):
    """The step's decision from logits rows of the candidate positions:
    (x0 per position, confidence per position, committed positions)."""
    x0, conf = dr.confidence(rows, MASK, alg)
    order = dr.rank(list(conf), cand)
    if k is not None:
        picks = order[:k]
    else:
        picks = [j for j in range(len(cand)) if conf[j] >= thr] or order[:1]
    return x0, conf, set(cand[j] for j in picks)


def top2_gap(row):
    l = row.astype(np.float64).copy()
    l[MASK] = -np.inf
    p = np.exp(l - l.max())
    p /= p.sum()
    s = np.sort(p)
    return (s[-1] - s[-2]) / s[-1]


def diagnose(ref_log, ts_log, shift, block_of, step_k, thr, alg):
    """First step whose decision differs between the HF rows (ref_log) and
    tessera's rows (ts_log), both over the same canvas; returns (margins,
    text). block_of(i, canvas) -> (s, e) of forward i; step_k(i, n_cand) ->
    the top-k count (vanilla) or None (threshold)."""
    sh = 1 if shift else 0
    for i in range(min(len(ref_log), len(ts_log))):
        (tok_a, la), (tok_b, lb) = ref_log[i], ts_log[i]
        if len(tok_a) != len(tok_b) or (tok_a != tok_b).any():
            return None, "forward %d: the canvases differ although every earlier decision agreed" % i
        s, e = block_of(i, tok_a)
        cand = [p for p in range(s, e) if tok_a[p] == MASK]
        if not cand:
            continue
        k = step_k(i, len(cand))
        rows_a, rows_b = la[[p - sh for p in cand]], lb[[p - sh for p in cand]]
        xa, ca, pa = decide(rows_a, cand, alg, k, thr)
        xb, cb, pb = decide(rows_b, cand, alg, k, thr)
        idx = {p: j for j, p in enumerate(cand)}
        x_diff = [p for p in pa | pb if xa[idx[p]] != xb[idx[p]]]
        if pa == pb and not x_diff:
            continue
        margins, lines = [], []
        for p in x_diff:
            ga, gb = top2_gap(rows_a[idx[p]]), top2_gap(rows_b[idx[p]])
            margins += [ga, gb]
            lines.append("argmax of position %d: HF %d, tessera %d; (p1-p2)/p1 HF %.3g, tessera %.3g"
                         % (p, xa[idx[p]], xb[idx[p]], ga, gb))
        only_a, only_b = sorted(pa - pb), sorted(pb - pa)
        if only_a or only_b:
            if k is not None:
                for a, b in zip(only_a, only_b):
                    m = [abs(c[idx[a]] - c[idx[b]]) / max(abs(c[idx[a]]), abs(c[idx[b]]), 1e-300) for c in (ca, cb)]
                    margins += m
                    lines.append("top-%d boundary: HF commits %d (conf %.9g vs %.9g), tessera %d (%.9g vs %.9g); "
                                 "relative gap HF %.3g, tessera %.3g"
                                 % (k, a, ca[idx[a]], ca[idx[b]], b, cb[idx[b]], cb[idx[a]], m[0], m[1]))
            else:
                fallback = len(pa) == 1 and ca.max() < thr or len(pb) == 1 and cb.max() < thr
                for p in only_a + only_b:
                    if fallback:
                        m = [(lambda s: (s[-1] - s[-2]) / max(abs(s[-1]), 1e-300))(np.sort(c)) if len(c) > 1
                             else 1.0 for c in (ca, cb)]
                        what = "at-least-one fallback, gap of the two best"
                    else:
                        m = [abs(c[idx[p]] - thr) / abs(thr) for c in (ca, cb)]
                        what = "|conf - thr| / thr"
                    margins += m
                    lines.append("position %d committed by %s only: conf HF %.9g, tessera %.9g; %s HF %.3g, "
                                 "tessera %.3g" % (p, "HF" if p in pa else "tessera", ca[idx[p]], cb[idx[p]], what,
                                                   m[0], m[1]))
        return margins, "forward %d (block [%d, %d)):\n      %s" % (i, s, e, "\n      ".join(lines))
    return None, "no step decided differently on the same canvas"


def run_tool(tool, model, prompt, args):
    return dr.run_tool(tool, model, prompt, args + ["--kv-f32"])


def main():
    global MASK
    if len(sys.argv) != 5:
        print(__doc__)
        return 2
    tool, gen_script, models_dir, work = sys.argv[1:]
    if not os.path.exists(os.path.join(models_dir, "SmolLM2-135M-Instruct.Q4_1.gguf")):
        print("FAIL: %s/SmolLM2-135M-Instruct.Q4_1.gguf is missing (the tiny models borrow its tokenizer): "
              "run tools/fetch_models.sh" % models_dir)
        return 1
    t0 = time.time()
    torch.set_num_threads(1)
    os.makedirs(work, exist_ok=True)
    subprocess.run([sys.executable, gen_script, work, "--models-dir", models_dir], check=True,
                   stdout=subprocess.DEVNULL)
    failures, near_ties, runs = 0, 0, 0
    rng = np.random.default_rng(66)
    for name in ("llada", "dream"):
        path = os.path.join(work, name + ".gguf")
        meta = json.load(open(os.path.join(work, name + ".json")))
        sd = dict(np.load(os.path.join(work, name + ".npz")))
        hf = hf_model(meta, sd)
        ts = LoggingServer(dr.Server(tool, path, extra=["--kv-f32"]))
        MASK = ts.mask
        if MASK != meta["ids"]["mask"] or ts.shift != meta["shift_logits"]:
            print("FAIL: %s: tessera reads mask %d shift %s, the file says %d %s"
                  % (name, MASK, ts.shift, meta["ids"]["mask"], meta["shift_logits"]))
            return 1
        ref_srv = HFServer(hf, meta["n_vocab"], MASK, meta["shift_logits"], ts.eog)
        print("%s: n_vocab %d, mask %d, shift %s, eog %s" % (name, ts.n_vocab, MASK, ts.shift, sorted(ts.eog)))
        prompts = [list(rng.integers(2, 600, size=n)) for n in (7, 12)]
        max_logit_err = 0.0

        def one(label, reference, tool_args, block_of, step_k, thr, alg):
            nonlocal failures, near_ties, runs, max_logit_err
            runs += 1
            ref_srv.reset()
            ref = [int(t) for t in reference(ref_srv)]
            res = run_tool(tool, path, prompt, tool_args)
            got = res["gen"]
            # tessera's rows over the HF run's own windows: the logits gap on the canvases HF saw
            for tok, l_hf in ref_srv.log:
                l_ts = ts.srv.forward(tok, 0, len(tok))
                err = (np.abs(l_ts.astype(np.float64) - l_hf).max(axis=1) / np.abs(l_hf).max(axis=1)).max()
                max_logit_err = max(max_logit_err, err)
            ts.reset()
            if ref == got:
                print("  %-52s ok (%d forwards%s)" % (label, ref_srv.forwards, "" if res["early_stop_at"] is None
                                                      else ", early stop at %d" % res["early_stop_at"]))
                return
            mirror = [int(t) for t in reference(ts)]
            if mirror != got:
                failures += 1
                print("  %-52s MISMATCH: the numpy decoder over tessera's own logits differs from tessera's decode "
                      "(an algorithm difference, not a near-tie)\n    HF ref  %s\n    ts ref  %s\n    tessera %s"
                      % (label, ref, mirror, got))
                return
            margins, text = diagnose(ref_srv.log, ts.log, ts.shift, block_of, step_k, thr, alg)
            if margins is None:
                failures += 1
                print("  %-52s MISMATCH, not traced to a decision on the same logits (%s)\n    HF ref  %s\n"
                      "    tessera %s" % (label, text, ref, got))
                return
            worst = max(margins)
            tie = worst < NEAR_TIE
            near_ties += tie
            failures += not tie
            print("  %-52s %s: first different decision at %s\n    largest margin %.3g %s %g\n    HF ref  %s\n"
                  "    tessera %s" % (label, "near-tie" if tie else "MISMATCH", text, worst, "<" if tie else ">=",
                                      NEAR_TIE, ref, got))

        for prompt in prompts:
            P = len(prompt)
            # vanilla: LLaDA's generate() (its schedule, or Dream's with eps), blocks and steps
            for gen, block, steps, alg, eps in ((24, 8, 24, "low_confidence", 0.0), (24, 8, 12, "low_confidence", 0.0),
                                                (20, 8, 6, "low_confidence", 0.0), (24, 24, 8, "maskgit_plus", 1e-3),
                                                (24, 6, 12, "topk_margin", 0.0)):
                nb = -(-gen // block)
                base, rem = divmod(steps, nb)
                sched = []  # per forward: (s, e, step index in block, steps of the block)
                for b in range(nb):
                    sb = base + (1 if b < rem else 0)
                    sched += [(P + b * block, min(P + (b + 1) * block, P + gen), i, sb) for i in range(sb)]

                def step_k(i, n_cand, sched=sched, eps=eps):
                    s, e, j, sb = sched[i]
                    if eps:
                        return dr.dream_transfer(n_cand, sb, j, eps)
                    # LLaDA's schedule is fixed at the block's start: recompute it from the block's mask count
                    first = i - j
                    n0 = int((ref_srv.log[first][0][s:e] == MASK).sum()) if first < len(ref_srv.log) else n_cand
                    return dr.num_transfer_tokens(n0, sb)[j]

                one("vanilla p%d gen %d block %d steps %d %s%s" % (P, gen, block, steps, alg,
                                                                  " eps %g" % eps if eps else ""),
                    lambda srv, g=gen, b=block, st=steps, a=alg, ep=eps: dr.llada_generate(
                        srv, prompt, g, b, st, a, ep, ts.eog),
                    ["--decoder", "vanilla", "--gen", str(gen), "--block", str(block), "--steps", str(steps),
                     "--alg", alg, "--eps", repr(eps)],
                    lambda i, canvas, sched=sched: sched[i][:2], step_k, None, alg)
            # block decoder, no cache: threshold commitment over [0, e)
            for block, thr in ((8, 0.9), (5, 0.02), (8, 0.005)):
                def block_of(i, canvas, block=block):
                    e = len(canvas)
                    return e - ((e - P - 1) % block + 1), e

                one("block no-cache p%d gen 24 block %d thr %g" % (P, block, thr),
                    lambda srv, b=block, t=thr: dr.block_generate(srv, prompt, 24, b, t, "none", "low_confidence",
                                                                  ts.eog),
                    ["--gen", "24", "--block", str(block), "--threshold", repr(thr), "--cache", "none"],
                    block_of, lambda i, n: None, thr, "low_confidence")
        print("  max |tessera - HF| / max |HF| per row over the HF runs' windows (f32 KV): %.3g (bound %g)"
              % (max_logit_err, LOGIT_TOL))
        if not max_logit_err < LOGIT_TOL:
            failures += 1
            print("  FAIL: logits further from HF than %g" % LOGIT_TOL)
        ts.srv.close()
    print("%d runs, %d near-ties (%.1f s)" % (runs, near_ties, time.time() - t0))
    if failures:
        print("FAIL: %d run(s) differ from the numpy references over the HF oracle's logits" % failures)
        return 1
    print("tessera's vanilla and no-cache block decoders reproduce the numpy references over HF's logits")
    return 0


MASK = -1

if __name__ == "__main__":
    sys.exit(main())
