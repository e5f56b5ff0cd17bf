#!/usr/bin/env python3
"""train_tiny_dllm.py - a small trained diffusion LLM: SmolLM2-135M's real
weights adapted to LLaDA's masked-diffusion objective with bidirectional
attention and Dream's shifted logits (docs/DIFFUSION.md, "The trained model").

Why this route: a from-scratch char-level model never commits in parallel
(a character depends on its masked neighbours), and a few CPU-minutes of
full fine-tuning at lr 5e-5 collapsed SmolLM2 into newlines. Here the base
weights stay frozen (dequantized from the Q4_1 GGUF) and only low-rank
adapters on every linear layer plus the mask token's embedding row train,
so the AR model's knowledge cannot be overwritten wholesale, the committed
result is small (the adapters, fp16), and the backward pass skips the base
weights' gradients.

Objective (LLaDA): per sequence t ~ U(0,1), each position masked with
probability p = (1-eps) t + eps, cross-entropy on masked positions weighted
by 1/p, summed and divided by the number of positions. Position 0 is never
masked (with shifted logits, position i is predicted from row i-1). Half of
the sequences keep a clean prefix of random length (LLaDA's SFT form: the
prompt is never masked), which is how the model is used: a clean prompt, a
masked block after it.

Data: ../shared/data/tinyshakespeare.txt, tokenized with SmolLM2's own
tokenizer; the first 90% of tokens train, the last 10% are held out.

Budget: resumable (a checkpoint every --ckpt-every steps and at exit, in
--work); CPU seconds are accumulated across runs in the checkpoint and the
run stops at --cpu-hours (default 3, the issue's limit). On a lent GPU
(--device cuda) the same script runs unchanged.

usage:
  train_tiny_dllm.py train  [--work DIR] [--threads N] [--cpu-hours H] [--steps S]
  train_tiny_dllm.py eval   [--work DIR] [--prompts N]      # accuracy, ELBO, commit histogram
  train_tiny_dllm.py export [--work DIR] [--delta FILE]     # adapters -> committed .npz
  train_tiny_dllm.py distill [--distill-n N]               # the base's greedy continuations (--objective distill)
  train_tiny_dllm.py build  [--delta FILE] [-o OUT.gguf] [--qtype f16|q8_0]   # base GGUF + delta -> llada GGUF
  train_tiny_dllm.py gpu --device cuda [--base-file F] [--out-dir D] [--train-s S] ...
                                       # a lent GPU: continuations, the cached objective, the commit check
  train_tiny_dllm.py import-gpu --parts A.npz B.npz   # the gpu run's adapters -> the committed delta

The committed delta is the `gpu` route's (docs/DIFFUSION.md, "The GPU
route"): fresh adapters trained on an H200 with the cached objective
(`cached_batch`: exactly the rows tessera's prefix-cache decoder computes,
`cached_layout`) on 29,696 greedy continuations of the base.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BASE = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
def _data_path():
    # ../shared/data beside the checkout; a clone elsewhere (CI) finds it via
    # TS_DATA_DIR or the workplace's /work/shared/data
    for d in (os.environ.get("TS_DATA_DIR"), os.path.join(ROOT, "..", "shared", "data"), "/work/shared/data"):
        if d and os.path.exists(os.path.join(d, "tinyshakespeare.txt")):
            return os.path.join(d, "tinyshakespeare.txt")
    return os.path.join(ROOT, "..", "shared", "data", "tinyshakespeare.txt")


DATA = _data_path()
DELTA = os.path.join(ROOT, "tools", "dllm", "smollm2-dllm-delta.npz")
OUT = os.path.join(ROOT, "models", "dllm", "smollm2-dllm.gguf")
WORK = os.path.expanduser("~/.cache/tessera/dllm")
MASK_ID = 16  # <empty_output>: a special token SmolLM2's tokenizer never produces from text
EPS = 1e-3
SEED = 1234
DISTILL_PROMPT, DISTILL_GEN = 64, 64


def load_base(path=BASE):
    """Dequantized base weights (GGUF layout: Q/K rows permuted for adjacent-pair rope) and hparams."""
    from gguf import GGUFReader
    from gguf.quants import dequantize
    r = GGUFReader(path)

    def kv(name):
        f = r.fields[name]
        v = f.parts[f.data[0]]
        return v.tolist()[0] if len(v) == 1 else bytes(v).decode()
    ar = kv("general.architecture")  # llama (the base) or llada (a built file)
    hp = dict(n_embd=kv(ar + ".embedding_length"), n_layer=kv(ar + ".block_count"),
              n_head=kv(ar + ".attention.head_count"), n_head_kv=kv(ar + ".attention.head_count_kv"),
              n_ff=kv(ar + ".feed_forward_length"), eps=kv(ar + ".attention.layer_norm_rms_epsilon"),
              rope_base=kv(ar + ".rope.freq_base"))
    w = {}
    for t in r.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float32)
        w[t.name] = a.reshape([int(x) for x in reversed(t.shape.tolist())])
    return hp, w


def held_out(ids):
    """The last 10% of the corpus' tokens (the first 90% train)."""
    return ids[int(len(ids) * 0.9):]


def prompt_starts(held, n):
    """Where the n evaluation prompts start: spread evenly over the held-out tokens."""
    return [int(j * (len(held) - 200) / n) for j in range(n)]


def held_out_prompts(n, length=64):
    """The text of n held-out prompts of `length` tokens (the benchmarks' and tests' prompts)."""
    held = held_out(tokenize_corpus(os.path.join(WORK, "tokens.npy")))
    tok = tokenizer()
    return [tok.decode(held[s:s + length].tolist()) for s in prompt_starts(held, n)]


def tokenizer():
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(os.path.dirname(BASE), gguf_file=os.path.basename(BASE))


def tokenize_corpus(cache):
    if os.path.exists(cache):
        return np.load(cache)
    tok = tokenizer()
    with open(DATA, encoding="utf-8") as f:
        text = f.read()
    ids = np.array(tok(text, add_special_tokens=False)["input_ids"], dtype=np.int32)
    os.makedirs(os.path.dirname(cache), exist_ok=True)
    np.save(cache, ids)
    return ids


def build_model(hp, w, rank, alpha, device):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class LoRALinear(nn.Module):
        # y = x W^T + (alpha/r) (x A^T) B^T; W frozen, A small random, B zero
        def __init__(self, W):
            super().__init__()
            self.register_buffer("W", torch.from_numpy(W))
            out_f, in_f = W.shape
            g = torch.Generator().manual_seed(hash(W.shape) & 0xffff)
            self.A = nn.Parameter(torch.randn(rank, in_f, generator=g) / math.sqrt(in_f))
            self.B = nn.Parameter(torch.zeros(out_f, rank))
            self.s = alpha / rank

        def forward(self, x):
            return F.linear(x, self.W) + self.s * F.linear(F.linear(x, self.A), self.B)

    E, H, HKV = hp["n_embd"], hp["n_head"], hp["n_head_kv"]
    D = E // H

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("emb", torch.from_numpy(w["token_embd.weight"]))
            self.mask_row = nn.Parameter(torch.from_numpy(w["token_embd.weight"][MASK_ID].copy()))
            self.layers = nn.ModuleList()
            for i in range(hp["n_layer"]):
                m = nn.Module()
                p = f"blk.{i}."
                for nm, gn in (("q", "attn_q"), ("k", "attn_k"), ("v", "attn_v"), ("o", "attn_output"),
                               ("g", "ffn_gate"), ("u", "ffn_up"), ("d", "ffn_down")):
                    setattr(m, nm, LoRALinear(w[p + gn + ".weight"]))
                m.register_buffer("n1", torch.from_numpy(w[p + "attn_norm.weight"]))
                m.register_buffer("n2", torch.from_numpy(w[p + "ffn_norm.weight"]))
                self.layers.append(m)
            self.register_buffer("nf", torch.from_numpy(w["output_norm.weight"]))
            inv = 1.0 / (hp["rope_base"] ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
            self.register_buffer("inv", inv)

        def table(self):
            # the embedding with the mask row replaced by the trained one (tied: also the output head)
            e = self.emb.clone()
            e[MASK_ID] = self.mask_row
            return e

        def hidden(self, ids, key_len=None, attn=None, pos=None, cache=None, causal=False):
            # key_len: (B,) keys past it are not attended (the block objective's end of sequence)
            # attn: (B, 1, L, L) or (L, L) bool, which keys each row attends (the packed
            # cached layout, `cached_layout`); pos: (L,) each row's position (default 0..L-1)
            B, L = ids.shape
            am = attn
            if key_len is not None:
                am = (torch.arange(L, device=ids.device)[None, :] < key_len[:, None])[:, None, None, :]
            x = F.embedding(ids, self.table())
            if pos is None:
                pos = torch.arange(L, device=ids.device)
            ang = pos.to(torch.float32)[..., None] * self.inv
            # (L, 1, D/2) or, per sequence, (B, L, 1, D/2) against (B, L, H, D/2)
            cos, sin = ang.cos().unsqueeze(-2), ang.sin().unsqueeze(-2)

            def rope(t):  # adjacent pairs (GGUF layout)
                t0, t1 = t[..., 0::2], t[..., 1::2]
                return torch.stack((t0 * cos - t1 * sin, t0 * sin + t1 * cos), -1).flatten(-2)

            def rms(t, g):
                return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + hp["eps"]) * g
            for i, m in enumerate(self.layers):
                h = rms(x, m.n1)
                q = rope(m.q(h).view(B, L, H, D)).transpose(1, 2)
                k = rope(m.k(h).view(B, L, HKV, D)).transpose(1, 2)
                v = m.v(h).view(B, L, HKV, D).transpose(1, 2)
                if cache is not None:  # causal decoding (greedy_continue): earlier rows' K/V first
                    if len(cache) > i:
                        k, v = torch.cat((cache[i][0], k), 2), torch.cat((cache[i][1], v), 2)
                        cache[i] = (k, v)
                    else:
                        cache.append((k, v))
                k = k.repeat_interleave(H // HKV, 1)
                v = v.repeat_interleave(H // HKV, 1)
                # bidirectional, except the AR base's own decoding (a square causal pass, then
                # single rows that attend every cached key)
                a = F.scaled_dot_product_attention(q, k, v, attn_mask=am, is_causal=causal and k.shape[2] == L)
                x = x + m.o(a.transpose(1, 2).reshape(B, L, E))
                h = rms(x, m.n2)
                x = x + m.d(F.silu(m.g(h)) * m.u(h))
            return rms(x, self.nf)

        def logits_at(self, hid, rows):
            # rows: (N,) flat indices into B*L of the rows whose logits are needed
            return F.linear(hid.reshape(-1, E)[rows], self.table())

    return Model().to(device)


def masked_batch(rng, data, B, L, clean_frac=0.5):
    starts = rng.integers(0, len(data) - L, size=B)
    x = np.stack([data[s:s + L] for s in starts]).astype(np.int64)
    t = rng.random(B)
    p = (1 - EPS) * t + EPS
    m = rng.random((B, L)) < p[:, None]
    m[:, 0] = False
    for b in range(B):
        if rng.random() < clean_frac:
            m[b, :rng.integers(1, L // 2)] = False
    return x, m, p


def block_batch(rng, data, B, L, blk=32, rate=None):
    """The objective matched to block decoding: a clean prefix of P in
    [L/4, L - blk] tokens, then one block of blk positions masked at the
    sequence's rate (LLaDA's, or `rate` for all), and nothing after it (keys
    past the block are not attended): what a block decoder with a prefix
    cache shows the model."""
    starts = rng.integers(0, len(data) - L, size=B)
    x = np.stack([data[s:s + L] for s in starts]).astype(np.int64)
    p = (1 - EPS) * rng.random(B) + EPS if rate is None else np.full(B, rate)
    m = np.zeros((B, L), dtype=bool)
    key_len = np.zeros(B, dtype=np.int64)
    for b in range(B):
        P = int(rng.integers(L // 4, L - blk + 1))
        m[b, P:P + blk] = rng.random(blk) < p[b]
        key_len[b] = P + blk
    return x, m, p, key_len


def distill_batch(rng, rows, B, blk=32, rate=None):
    """The block objective on the base's own greedy continuations: each row is
    a 64-token training-split prompt and the base AR model's 64 greedy tokens
    after it; the block of blk starts at P in [64, 96] (the first or second
    block after a 64-token prompt, as evaluation decodes, or between them)."""
    x = rows[rng.integers(0, len(rows), size=B)].astype(np.int64)
    L = x.shape[1]
    p = (1 - EPS) * rng.random(B) + EPS if rate is None else np.full(B, rate)
    m = np.zeros((B, L), dtype=bool)
    key_len = np.zeros(B, dtype=np.int64)
    for b in range(B):
        P = int(rng.integers(DISTILL_PROMPT, L - blk + 1))
        m[b, P:P + blk] = rng.random(blk) < p[b]
        key_len[b] = P + blk
    return x, m, p, key_len


def cached_layout(np_, blocks):
    """What a block decoder with the prefix cache has evaluated when it
    decodes the last of `blocks` ([(s, e), ...] in order), packed into one
    forward: the prompt pass [0, np_) (n_kv = np_), each finished block's
    refresh window [s-1, e) (n_kv = e), and the current block's window
    [s-1, e) (shifted logits: position s reads row s-1). A row attends its
    own segment and, of each earlier segment, the rows no later window
    rewrote (a window rewrites the K/V of every row it holds, so of segment k
    only the positions before segment k+1's first are still in the cache).
    This is `tessera diffuse`'s default decoder (src/diffusion/decode.c:
    the prompt once, then per block its steps and its refresh).
    Returns pos (Lp,) each row's position, allowed (Lp, Lp) which keys each
    row attends, and n_cur, the current window's rows (the last n_cur)."""
    segs = [(0, np_)] + [(s - 1, e) for s, e in blocks]
    pos = np.concatenate([np.arange(a, b) for a, b in segs])
    seg = np.concatenate([np.full(b - a, k) for k, (a, b) in enumerate(segs)])
    limit = np.array([segs[k + 1][0] if k + 1 < len(segs) else 1 << 30 for k in range(len(segs))])
    qs, ks = seg[:, None], seg[None, :]
    allowed = (qs == ks) | ((ks < qs) & (pos[None, :] < limit[seg][None, :]))
    return pos, allowed, segs[-1][1] - segs[-1][0]


def cached_batch(rng, rows, B, blk=32, rate=None, full_frac=0.25):
    """The cached objective: what block decoding with the prefix cache shows
    the model, exactly (`cached_layout`), on the base's greedy continuations
    (each row a 64-token prompt and 64 greedy tokens). Half the sequences
    decode the first block (64..95: the prompt pass, then its window), half
    the second (96..127: the prompt pass, the first block's refresh with its
    final tokens, then the window); the block's positions are masked at the
    sequence's rate. A `full_frac` of the sequences show instead what
    `--no-cache` shows (one bidirectional window over everything up to the
    block's end), so that decoder is not out of distribution. Returns ids,
    pos, allowed (B, Lp[, Lp], padded rows
    attend only themselves), the flat indices of the rows whose logits are
    scored, their targets and weights 1/p."""
    L = rows.shape[1]
    lays = [cached_layout(DISTILL_PROMPT, [(s, s + blk) for s in range(DISTILL_PROMPT, e, blk)])
            for e in range(DISTILL_PROMPT + blk, L + 1, blk)]
    full = [(np.arange(e), np.ones((e, e), dtype=bool), blk + 1)
            for e in range(DISTILL_PROMPT + blk, L + 1, blk)]
    Lp = max(len(p_) for p_, _, _ in lays + full)
    x = rows[rng.integers(0, len(rows), size=B)].astype(np.int64)
    p = (1 - EPS) * rng.random(B) + EPS if rate is None else np.full(B, rate)
    ids = np.full((B, Lp), MASK_ID, dtype=np.int64)
    pos = np.zeros((B, Lp), dtype=np.int64)
    allowed = np.broadcast_to(np.eye(Lp, dtype=bool), (B, Lp, Lp)).copy()
    r_idx, tgt, wgt = [], [], []
    for b in range(B):
        pb, ab, nc = (full if rng.random() < full_frac else lays)[int(rng.integers(0, len(lays)))]
        n = len(pb)
        ids[b, :n], pos[b, :n], allowed[b, :n, :n] = x[b, pb], pb, ab
        # the window's rows: position s-1 (clean) then the block s..e-1
        w0 = n - nc
        s = int(pb[w0]) + 1
        m = rng.random(nc - 1) < p[b]
        ids[b, w0 + 1:n][m] = MASK_ID
        for j in np.nonzero(m)[0]:
            r_idx.append(b * Lp + w0 + j)  # row of position s+j-1 predicts s+j
            tgt.append(x[b, s + j])
            wgt.append(1.0 / p[b])
    return (ids, pos, allowed[:, None], np.array(r_idx, dtype=np.int64), np.array(tgt, dtype=np.int64),
            np.array(wgt, dtype=np.float32))


def loss_cached(model, ids, pos, allowed, r_idx, tgt, wgt, norm=32):
    import torch.nn.functional as F
    hid = model.hidden(ids, attn=allowed, pos=pos)
    lg = model.logits_at(hid, r_idx)
    ce = F.cross_entropy(lg.float(), tgt, reduction="none")
    return (ce * wgt).sum() / (ids.shape[0] * norm), lg


def greedy_continue(model, x, n_gen):
    """The base AR model's greedy continuation of the prompts x (B, P): causal,
    with a K/V cache; special tokens (ids 0-2, the mask) are never chosen, as
    `distill` ran transformers' generate with min_new_tokens (no end of text)."""
    import torch
    cache = []
    hid = model.hidden(x, cache=cache, causal=True)
    out = [x]
    P = x.shape[1]
    for j in range(n_gen):
        lg = model.logits_at(hid[:, -1:], torch.arange(x.shape[0], device=x.device)).float()
        lg[:, [0, 1, 2, MASK_ID]] = -float("inf")
        nxt = lg.argmax(-1)[:, None]
        out.append(nxt)
        if j + 1 < n_gen:
            hid = model.hidden(nxt, pos=torch.tensor([P + j], device=x.device), cache=cache, causal=True)
    return torch.cat(out, 1)


def generate_cached(model, prompts, n_gen, block, thr):
    """Block decoding with the prefix cache and threshold commit, as `tessera
    diffuse` runs it (every masked position of the current block whose top-1
    probability >= thr commits; at least the most confident one), on a batch
    of prompts of one length in lock step (`cached_layout`: one forward per
    step for all of them; a prompt whose block is full waits). Returns the
    canvases (N, P + n_gen) and each prompt's per-forward commit counts."""
    import torch
    import torch.nn.functional as F
    dev = model.inv.device
    N, P = prompts.shape
    L = P + n_gen
    x = torch.full((N, L), MASK_ID, dtype=torch.int64, device=dev)
    x[:, :P] = prompts
    counts = [[] for _ in range(N)]
    blocks = []
    for s in range(P, L, block):
        e = min(s + block, L)
        blocks.append((s, e))
        pos, allowed, nc = cached_layout(P, blocks)
        pos_t, al_t = torch.from_numpy(pos).to(dev), torch.from_numpy(allowed).to(dev)
        while True:
            masked = x[:, s:e] == MASK_ID
            active = masked.any(1)
            if not active.any():
                break
            hid = model.hidden(x[:, pos_t], attn=al_t, pos=pos_t)
            lg = F.linear(hid[:, -nc:-1], model.table()).float()  # rows s-1..e-2 predict s..e-1
            lg[..., MASK_ID] = -float("inf")
            conf, tok = lg.softmax(-1).max(-1)
            conf = torch.where(masked, conf, torch.full_like(conf, -1.0))
            sel = (conf >= thr) & masked
            none = active & ~sel.any(1)
            sel[none, conf[none].argmax(1)] = True
            x[:, s:e] = torch.where(sel, tok, x[:, s:e])
            k = sel.sum(1).tolist()
            for n in range(N):
                if active[n]:
                    counts[n].append(k[n])
    return x, counts


def commit_stats(counts):
    h, c, f = {}, 0, 0
    for cs in counts:
        for k in cs:
            h[k] = h.get(k, 0) + 1
        c, f = c + sum(cs), f + len(cs)
    return dict(tokens_per_forward=round(c / f, 3), forwards=f, histogram=dict(sorted(h.items())))


def cmd_distill(a):
    """The base AR model's greedy continuations (causal, KV cache, transformers'
    generate on the dequantized base) of --distill-n prompts of 64 tokens drawn
    from the training split: the distilled objective's data. Its CPU time is
    recorded and counted in the training budget."""
    import torch
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(a.threads)
    os.makedirs(a.work, exist_ok=True)
    ids = tokenize_corpus(os.path.join(a.work, "tokens.npy"))
    train = ids[:len(ids) - len(held_out(ids))]
    rng = np.random.default_rng(SEED + 1)
    starts = rng.integers(0, len(train) - DISTILL_PROMPT, size=a.distill_n)
    c0 = time.process_time()
    ar = AutoModelForCausalLM.from_pretrained(os.path.dirname(BASE), gguf_file=os.path.basename(BASE),
                                              dtype=torch.float32).eval()
    rows = []
    with torch.no_grad():
        for i in range(0, a.distill_n, 64):
            x = torch.from_numpy(np.stack([train[s:s + DISTILL_PROMPT] for s in starts[i:i + 64]]).astype(np.int64))
            out = ar.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=DISTILL_GEN,
                              min_new_tokens=DISTILL_GEN, pad_token_id=0)
            rows.append(out.numpy().astype(np.int32))
            print(f"distill: {i + len(x)}/{a.distill_n} rows, {time.process_time() - c0:.0f} CPU-s", flush=True)
    rows = np.concatenate(rows)
    cpu_s = time.process_time() - c0
    np.savez(os.path.join(a.work, "distill.npz"), rows=rows, cpu_s=np.float64(cpu_s))
    print(f"distill: {rows.shape} in {cpu_s / 3600:.3f} CPU-h", flush=True)


def loss_fn(model, x, m, p, key_len=None, norm=None):
    import torch
    import torch.nn.functional as F
    B, L = x.shape
    inp = x.clone()
    inp[m] = MASK_ID
    hid = model.hidden(inp, key_len)
    bi, li = m.nonzero(as_tuple=True)
    rows = bi * L + (li - 1)  # shifted: position i from row i-1
    lg = model.logits_at(hid, rows)
    ce = F.cross_entropy(lg, x[bi, li], reduction="none")
    return (ce / p[bi]).sum() / (B * (norm or L)), lg, bi, li


def state_paths(work):
    return os.path.join(work, "ckpt.pt"), os.path.join(work, "log.jsonl")


def cmd_train(a):
    import torch
    torch.set_num_threads(a.threads)
    torch.manual_seed(SEED)
    dev = torch.device(a.device)
    os.makedirs(a.work, exist_ok=True)
    ckpt, logf = state_paths(a.work)
    ids = tokenize_corpus(os.path.join(a.work, "tokens.npy"))
    train = ids[:len(ids) - len(held_out(ids))]
    hp, w = load_base()
    model = build_model(hp, w, a.rank, a.alpha, dev)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.0, betas=(0.9, 0.98))
    st = dict(step=0, cpu_s=0.0, rng=None)
    if os.path.exists(ckpt):
        c = torch.load(ckpt, weights_only=False)
        model.load_state_dict(c["model"], strict=False)
        opt.load_state_dict(c["opt"])
        st = c["st"]
        print(f"resumed at step {st['step']}, {st['cpu_s'] / 3600:.2f} CPU-h used", flush=True)
    elif a.fresh:
        # zero adapters, but the CPU time already spent on earlier routes
        # (the committed delta's record, --extra-cpu-h untracked) and on the
        # distilled data still counts against the budget
        prior = read_delta(a.delta)[0]["cpu_s"] if os.path.exists(a.delta) else 0.0
        st["cpu_s"] = prior + a.extra_cpu_h * 3600
        print(f"fresh adapters; {st['cpu_s'] / 3600:.2f} CPU-h already used", flush=True)
    elif os.path.exists(a.delta):
        # a fresh machine: the committed fp16 adapters, without the optimizer's moments
        meta, d = read_delta(a.delta)
        model.load_state_dict({k: torch.from_numpy(v) for k, v in d.items()}, strict=False)
        st.update(step=meta["step"], cpu_s=meta["cpu_s"])
        print(f"resumed from {a.delta} at step {st['step']}, {st['cpu_s'] / 3600:.2f} CPU-h used", flush=True)
    rows = None
    if a.objective == "distill":
        dz = np.load(os.path.join(a.work, "distill.npz"))
        rows = dz["rows"]
        if st["step"] == 0 and "distill_cpu_s" not in st:
            st["distill_cpu_s"] = float(dz["cpu_s"])
            st["cpu_s"] += st["distill_cpu_s"]
    rng = np.random.default_rng(SEED)
    if st["rng"] is not None:
        rng.bit_generator.state = st["rng"]
    budget = a.cpu_hours * 3600

    def save():
        st["rng"] = rng.bit_generator.state
        sd = {k: v for k, v in model.state_dict().items() if k.endswith((".A", ".B")) or k == "mask_row"}
        torch.save(dict(model=sd, opt=opt.state_dict(), st=st, args=vars(a)), ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)
    t_cpu = time.process_time()
    n_tok, t_wall = 0, time.time()
    while st["step"] < a.steps:
        used = st["cpu_s"] + (time.process_time() - t_cpu)
        if used >= budget:
            print(f"CPU budget reached: {used / 3600:.2f} h", flush=True)
            break
        lr = a.lr * min(1.0, (st["step"] + 1) / 50) * (0.5 + 0.5 * math.cos(math.pi * min(1.0, st["step"] / a.steps)))
        for g in opt.param_groups:
            g["lr"] = lr
        kl, norm = None, None
        if a.objective in ("block", "distill"):
            if a.objective == "block":
                x, m, p, kl = block_batch(rng, train, a.batch, a.seq)
            else:
                x, m, p, kl = distill_batch(rng, rows, a.batch)
            kl, norm = torch.from_numpy(kl).to(dev), 32
        else:
            x, m, p = masked_batch(rng, train, a.batch, a.seq)
        x, m, p = torch.from_numpy(x).to(dev), torch.from_numpy(m).to(dev), torch.from_numpy(p).float().to(dev)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.autocast == "bf16"):
            loss, _, _, _ = loss_fn(model, x, m, p, kl, norm)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        st["step"] += 1
        n_tok += a.batch * a.seq
        if st["step"] % 10 == 0:
            el = time.time() - t_wall
            rec = dict(step=st["step"], objective=a.objective, loss=round(loss.item(), 4), lr=lr, tok_s=round(n_tok / el, 1),
                       cpu_h=round((st["cpu_s"] + time.process_time() - t_cpu) / 3600, 3))
            print(json.dumps(rec), flush=True)
            with open(logf, "a") as f:
                f.write(json.dumps(rec) + "\n")
        if st["step"] % a.ckpt_every == 0:
            st["cpu_s"] += time.process_time() - t_cpu
            t_cpu = time.process_time()
            save()
    st["cpu_s"] += time.process_time() - t_cpu
    save()
    print(f"saved step {st['step']}, {st['cpu_s'] / 3600:.2f} CPU-h in total", flush=True)


def load_trained(a, dev):
    import torch
    hp, w = load_base()
    ckpt = state_paths(a.work)[0]
    if os.path.exists(ckpt):
        c = torch.load(ckpt, weights_only=False)
    else:  # the committed delta
        meta, d = read_delta(a.delta)
        c = dict(model={k: torch.from_numpy(v) for k, v in d.items()}, st=meta, args=meta)
    args = c["args"]
    model = build_model(hp, w, args["rank"], args["alpha"], dev)
    model.load_state_dict(c["model"], strict=False)
    model.eval()
    return model, c


def cmd_export(a):
    """The trained adapters and mask row (fp16), with the step and CPU time used: the committed delta."""
    import torch
    c = torch.load(state_paths(a.work)[0], weights_only=False)
    out = {k: v.half().numpy() for k, v in c["model"].items()}
    meta = dict(step=c["st"]["step"], cpu_s=c["st"]["cpu_s"], rank=c["args"]["rank"], alpha=c["args"]["alpha"],
                lr=c["args"]["lr"], steps=c["args"]["steps"], batch=c["args"]["batch"], seq=c["args"]["seq"],
                objective=c["args"]["objective"], fresh=c["args"].get("fresh", False), mask_id=MASK_ID, seed=SEED)
    os.makedirs(os.path.dirname(a.delta), exist_ok=True)
    np.savez_compressed(a.delta, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **out)
    print(f"{a.delta}: step {meta['step']}, {meta['cpu_s'] / 3600:.2f} CPU-h, "
          f"{os.path.getsize(a.delta) / 2**20:.1f} MiB", flush=True)


def delta_sha(path):
    import hashlib
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def built_from(gguf_path):
    """The delta sha256 a built file records (None when absent or unreadable)."""
    try:
        from gguf import GGUFReader
        f = GGUFReader(gguf_path).fields.get("tessera.dllm.delta_sha256")
        return bytes(f.parts[f.data[0]]).decode() if f else None
    except Exception:  # noqa: BLE001  (a truncated or foreign file: rebuild it)
        return None


def read_delta(path):
    d = np.load(path)
    meta = json.loads(bytes(d["meta"]).decode())
    return meta, {k: d[k].astype(np.float32) for k in d.files if k != "meta"}


def cmd_build(a):
    """base GGUF (dequantized) + delta -> a `llada` GGUF as llama.cpp's converter writes one:
    causal false, the mask token id, shifted logits, Q/K rows in the adjacent-pair layout
    (the base file already holds them permuted), tied output, f16 matrices."""
    from gguf import GGUFValueType, GGUFWriter
    sys.path.insert(0, HERE)
    from gen_tiny_models import read_tokenizer_fields
    meta, d = read_delta(a.delta)
    hp, w = load_base()
    s = meta["alpha"] / meta["rank"]
    names = dict(q="attn_q", k="attn_k", v="attn_v", o="attn_output", g="ffn_gate", u="ffn_up", d="ffn_down")
    for i in range(hp["n_layer"]):
        for nm, gn in names.items():
            A, B = d[f"layers.{i}.{nm}.A"], d[f"layers.{i}.{nm}.B"]
            w[f"blk.{i}.{gn}.weight"] = w[f"blk.{i}.{gn}.weight"] + s * (B @ A)
    w["token_embd.weight"][MASK_ID] = d["mask_row"]
    U32, F32, BOOL = GGUFValueType.UINT32, GGUFValueType.FLOAT32, GGUFValueType.BOOL
    arch = "llada"
    E, H = hp["n_embd"], hp["n_head"]
    V = w["token_embd.weight"].shape[0]
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    g = GGUFWriter(a.out, arch)
    kv = {"general.name": (GGUFValueType.STRING, "smollm2-135m-dllm"),
          f"{arch}.context_length": (U32, 2048), f"{arch}.embedding_length": (U32, E),
          f"{arch}.feed_forward_length": (U32, hp["n_ff"]), f"{arch}.block_count": (U32, hp["n_layer"]),
          f"{arch}.attention.head_count": (U32, H), f"{arch}.attention.head_count_kv": (U32, hp["n_head_kv"]),
          f"{arch}.rope.freq_base": (F32, hp["rope_base"]), f"{arch}.vocab_size": (U32, V),
          f"{arch}.rope.dimension_count": (U32, E // H),
          f"{arch}.attention.layer_norm_rms_epsilon": (F32, hp["eps"]),
          f"{arch}.attention.causal": (BOOL, False), "diffusion.shift_logits": (BOOL, True)}
    for key, val, vt, sub in read_tokenizer_fields(BASE, V):
        kv[key] = (vt, val, sub)
    kv["tokenizer.ggml.mask_token_id"] = (U32, MASK_ID, None)
    kv["tessera.dllm.delta_sha256"] = (GGUFValueType.STRING, delta_sha(a.delta), None)
    for key, tv in kv.items():
        g.add_key_value(key, tv[1], tv[0], sub_type=tv[2] if len(tv) > 2 else None)
    for name, t in w.items():
        if a.qtype == "q8_0" and t.ndim == 2 and t.shape[1] % 32 == 0:
            # benchmarks: the matrices as Q8_0 (quantized from the merged f32 weights)
            from gguf import GGMLQuantizationType
            from gguf.quants import quantize
            g.add_tensor(name, quantize(t, GGMLQuantizationType.Q8_0), raw_dtype=GGMLQuantizationType.Q8_0)
        else:
            g.add_tensor(name, t.astype(np.float16 if t.ndim == 2 else np.float32))
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()
    print(f"{a.out}: step {meta['step']} ({os.path.getsize(a.out) / 2**20:.0f} MiB)", flush=True)


def generate_threshold(model, prompt, n_gen, block, thr):
    """Block decoding with threshold commit (every masked position of the current
    block whose top-1 probability >= thr commits; at least the most confident
    one), each forward over the prompt and the blocks up to the current one
    (tessera's --no-cache, the exact form of its prefix cache), shifted logits. Returns (tokens, per-forward commit counts)."""
    import torch
    x = torch.tensor(list(prompt) + [MASK_ID] * n_gen)[None]
    P = len(prompt)
    counts = []
    for b0 in range(P, P + n_gen, block):
        b1 = min(b0 + block, P + n_gen)
        while (x[0, b0:b1] == MASK_ID).any():
            hid = model.hidden(x[:, :b1])  # what a block decoder sees: nothing past the block
            pos = torch.arange(b0, b1)
            lg = model.logits_at(hid, pos - 1).float()
            lg[:, MASK_ID] = -float("inf")
            pr = lg.softmax(-1)
            conf, tokv = pr.max(-1)
            masked = x[0, b0:b1] == MASK_ID
            conf = torch.where(masked, conf, torch.full_like(conf, -1.0))
            sel = (conf >= thr) & masked
            if not sel.any():
                sel[conf.argmax()] = True
            x[0, b0:b1] = torch.where(sel, tokv, x[0, b0:b1])
            counts.append(int(sel.sum()))
    return x[0].tolist(), counts


def cmd_eval(a):
    import torch
    torch.set_num_threads(a.threads)
    dev = torch.device("cpu")
    ids = tokenize_corpus(os.path.join(a.work, "tokens.npy"))
    held = held_out(ids)
    if a.base:
        hp, w = load_base()
        model = build_model(hp, w, 1, 1.0, dev).eval()
        step = 0
    else:
        model, c = load_trained(a, dev)
        step = c["st"]["step"]
    res = dict(step=step, objective=a.objective)
    rng = np.random.default_rng(99)
    with torch.no_grad():
        for rate in (0.15, 0.5, 0.9):
            ok, n, elbo = 0, 0, 0.0
            for _ in range(a.batches):
                kl, norm = None, None
                if a.objective in ("block", "distill"):
                    # the block objective's windows, the block masked at this rate
                    xn, mn, _, kln = block_batch(rng, held, 8, a.seq, rate=rate)
                    x, m, kl, norm = torch.from_numpy(xn), torch.from_numpy(mn), torch.from_numpy(kln), 32
                else:
                    s = rng.integers(0, len(held) - a.seq, size=8)
                    x = torch.from_numpy(np.stack([held[i:i + a.seq] for i in s]).astype(np.int64))
                    m = torch.from_numpy(rng.random(x.shape) < rate)
                    m[:, 0] = False
                loss, lg, bi, li = loss_fn(model, x, m, torch.full((8,), rate), kl, norm)
                ok += int((lg.argmax(-1) == x[bi, li]).sum())
                n += int(m.sum())
                elbo += loss.item()
            res[f"acc@{rate}"] = round(ok / n, 4)
            res[f"nll_per_tok@{rate}(weighted)"] = round(elbo / a.batches, 4)
        # what the first step of block decoding sees on the first prompt: a
        # 64-token prompt, then 32 masked positions and nothing after them
        tok = tokenizer()
        s0 = prompt_starts(held, a.prompts)[0]
        xs = torch.tensor(held[s0:s0 + 64].tolist() + [MASK_ID] * 32)[None]
        lg = model.logits_at(model.hidden(xs), torch.arange(63, 95)).float()
        lg[:, MASK_ID] = -float("inf")
        pv, pt = lg.softmax(-1).max(-1)
        res["first_step_top1"] = {str(i): [tok.decode([int(pt[i])]), round(float(pv[i]), 4)] for i in (0, 1, 2, 8, 16, 24, 31)}
        hist = {}
        for thr in a.thresholds:
            tot_c, tot_f, h = 0, 0, {}
            for s in prompt_starts(held, a.prompts):
                _, counts = generate_threshold(model, held[s:s + 64].tolist(), a.gen, 32, thr)
                tot_c += sum(counts)
                tot_f += len(counts)
                for c_ in counts:
                    h[c_] = h.get(c_, 0) + 1
            hist[str(thr)] = dict(tokens_per_forward=round(tot_c / tot_f, 3), forwards=tot_f,
                                  histogram=dict(sorted(h.items())))
        res["commit"] = hist
    print(json.dumps(res, indent=1), flush=True)
    with open(os.path.join(a.work, "eval.jsonl"), "a") as f:
        f.write(json.dumps(res) + "\n")


def adapter_state(model):
    return {k: v.detach().float().cpu() for k, v in model.state_dict().items()
            if k.endswith((".A", ".B")) or k == "mask_row"}


def save_parts(out, name, sd, meta):
    """The adapters (fp16) in two files (layers below half, then the rest and
    the mask row): the device tool brings back files of at most 16 MiB."""
    half = max(int(k.split(".")[1]) for k in sd if k.startswith("layers.")) // 2
    for part in (0, 1):
        keep = {k: v.half().numpy() for k, v in sd.items()
                if (k.startswith("layers.") and (int(k.split(".")[1]) > half) == bool(part)) or
                (k == "mask_row" and part == 1)}
        path = os.path.join(out, f"{name}.part{part}.npz")
        np.savez_compressed(path + ".tmp.npz", meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **keep)
        os.replace(path + ".tmp.npz", path)


def cmd_gpu(a):
    """The whole route in one bounded run on a lent GPU: the base's greedy
    continuations (--distill-n, at most --distill-s seconds), fresh adapters
    trained on the cached objective (`cached_batch`) for --train-s seconds
    (the step count fixed after 30 timed steps, cosine over it), then the
    commit histogram (`generate_cached`) of the held-out prompts. Writes the
    adapters (`save_parts`), the continuations and a log to --out-dir;
    `import-gpu` turns the parts into the committed delta."""
    import torch
    t0 = time.time()
    dev = torch.device(a.device)
    torch.manual_seed(SEED)
    os.makedirs(a.out_dir, exist_ok=True)
    logf = open(os.path.join(a.out_dir, "gpu_log.jsonl"), "a")

    def note(**k):
        k["t"] = round(time.time() - t0, 1)
        print(json.dumps(k), flush=True)
        logf.write(json.dumps(k) + "\n")
        logf.flush()
    ids = tokenize_corpus(os.path.join(a.work, "tokens.npy"))
    held = held_out(ids)
    train = ids[:len(ids) - len(held)]
    hp, w = load_base(a.base_file)
    model = build_model(hp, w, a.rank, a.alpha, dev)
    del w
    name = torch.cuda.get_device_name() if dev.type == "cuda" else "cpu"
    note(stage="loaded", device=name, torch=torch.__version__)
    ac = dict(device_type=dev.type, dtype=torch.bfloat16, enabled=a.autocast == "bf16")

    # 1. the base's greedy continuations (adapters are zero: the base itself)
    rng = np.random.default_rng(SEED + 1)
    starts = rng.integers(0, len(train) - DISTILL_PROMPT, size=a.distill_n)
    rows = []
    with torch.no_grad(), torch.autocast(**ac):
        for i in range(0, a.distill_n, a.gen_batch):
            if time.time() - t0 > a.distill_s:
                break
            x = torch.from_numpy(np.stack([train[s_:s_ + DISTILL_PROMPT] for s_ in starts[i:i + a.gen_batch]])
                                 .astype(np.int64)).to(dev)
            rows.append(greedy_continue(model, x, DISTILL_GEN).cpu().numpy().astype(np.int32))
    rows = np.concatenate(rows)
    np.save(os.path.join(a.out_dir, "distill_rows.npy"), rows.astype(np.uint16))  # ids < 65536; half the bytes
    note(stage="distilled", rows=int(rows.shape[0]), sample=rows[0, DISTILL_PROMPT:DISTILL_PROMPT + 16].tolist())

    # 2. fresh adapters on the cached objective
    params = [p_ for p_ in model.parameters() if p_.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.0, betas=(0.9, 0.98))
    rng = np.random.default_rng(SEED)
    prompts = torch.from_numpy(np.stack([held[s_:s_ + 64] for s_ in prompt_starts(held, a.prompts)])
                               .astype(np.int64)).to(dev)
    meta = dict(objective="cached", rank=a.rank, alpha=a.alpha, lr=a.lr, batch=a.batch, distill_rows=int(rows.shape[0]),
                device=name, fresh=True, mask_id=MASK_ID, seed=SEED)

    def quick_eval(n, thrs):
        model.eval()
        res = {}
        with torch.no_grad():
            for thr in thrs:
                _, counts = generate_cached(model, prompts[:n], a.gen, 32, thr)
                res[str(thr)] = commit_stats(counts)
        model.train()
        return res
    step, total, t1, last_eval = 0, None, time.time(), time.time()
    while total is None or step < total:
        if total is None and step == 30:
            per = (time.time() - t1) / 30
            total = max(31, 30 + int((a.train_s - (time.time() - t1)) / per))
            note(stage="schedule", per_step_s=round(per, 4), steps=total)
        if time.time() - t0 > a.hard_s:
            note(stage="hard stop", step=step)
            break
        tot = total or 10 ** 6
        lr = a.lr * min(1.0, (step + 1) / a.warmup) * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, step / tot))))
        for g in opt.param_groups:
            g["lr"] = lr
        bt = cached_batch(rng, rows, a.batch)
        if len(bt[3]) == 0:  # nothing masked in the whole batch (tiny batches only)
            continue
        ids_, pos_, al_, ri, tg, wg = (torch.from_numpy(v).to(dev) for v in bt)
        with torch.autocast(**ac):
            loss, _ = loss_cached(model, ids_, pos_, al_, ri, tg, wg)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        if step % 50 == 0:
            note(step=step, loss=round(loss.item(), 4), lr=round(lr, 7))
        if time.time() - last_eval > a.eval_every_s:
            meta.update(step=step, steps=total, train_s=round(time.time() - t1, 1))
            save_parts(a.out_dir, "latest", adapter_state(model), meta)
            note(stage="eval", step=step, commit=quick_eval(8, [0.9]))
            last_eval = time.time()
    meta.update(step=step, steps=total, train_s=round(time.time() - t1, 1))
    save_parts(a.out_dir, "final", adapter_state(model), meta)
    note(stage="trained", step=step)
    torch.backends.cuda.matmul.allow_tf32 = False
    res = quick_eval(a.prompts, a.thresholds)
    note(stage="final eval", prompts=a.prompts, commit=res)
    x, _ = generate_cached(model.eval(), prompts[:2], a.gen, 32, 0.9)
    note(stage="sample", tokens=x[:, 64:].tolist())


def cmd_import_gpu(a):
    """The GPU run's two adapter parts -> the committed delta (the CPU time of
    the earlier routes stays recorded: the CPU budget is not reset)."""
    out, meta = {}, None
    for part in a.parts:
        d = np.load(part)
        meta = json.loads(bytes(d["meta"]).decode())
        out.update({k: d[k] for k in d.files if k != "meta"})
    prior = read_delta(a.delta)[0] if os.path.exists(a.delta) else {}
    meta["cpu_s"] = prior.get("cpu_s", 0.0)
    np.savez_compressed(a.delta, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **out)
    print(f"{a.delta}: step {meta['step']} ({meta['device']}, {meta['train_s']} s), "
          f"{os.path.getsize(a.delta) / 2**20:.1f} MiB", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["distill", "train", "eval", "export", "build", "gpu", "import-gpu"])
    ap.add_argument("--work", default=WORK)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--objective", choices=["llada", "block", "distill"], default="llada",
                    help="train: llada = LLaDA's (masks anywhere in the sequence; half keep a clean prefix); block "
                         "= a clean prefix then one masked block of 32 at the end (what block decoding shows); "
                         "distill = the block objective on the base's greedy continuations (run `distill` first)")
    ap.add_argument("--fresh", action="store_true",
                    help="train: start from zero adapters (not the committed delta); its CPU time still counts")
    ap.add_argument("--extra-cpu-h", type=float, default=0.0,
                    help="train --fresh: CPU-hours spent earlier that no record holds (counted in the budget)")
    ap.add_argument("--distill-n", type=int, default=1024, help="distill: how many continuations")
    ap.add_argument("--autocast", choices=["off", "bf16"], default="off",
                    help="train: matmuls in bf16 (1.38x on a 2-core AMX Xeon; see docs/DIFFUSION.md)")
    ap.add_argument("--cpu-hours", type=float, default=3.0)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--rank", type=int, default=32)
    ap.add_argument("--alpha", type=float, default=32.0)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--ckpt-every", type=int, default=20)
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--thresholds", type=float, nargs="+", default=[0.9])
    ap.add_argument("--base", action="store_true", help="eval: the untrained base (adapters zero)")
    ap.add_argument("--delta", default=DELTA)
    ap.add_argument("-o", "--out", default=OUT)
    ap.add_argument("--qtype", choices=["f16", "q8_0"], default="f16",
                    help="build: the matrices' type (f16, the tests' file; q8_0 for benchmarks: faster on the CPU)")
    ap.add_argument("--base-file", default=BASE, help="the base GGUF (SmolLM2-135M-Instruct Q4_1)")
    ap.add_argument("--out-dir", default=os.path.join(WORK, "gpu"), help="gpu: where adapters and the log go")
    ap.add_argument("--distill-s", type=float, default=90, help="gpu: at most this many seconds of continuations")
    ap.add_argument("--gen-batch", type=int, default=512, help="gpu: continuations per batch")
    ap.add_argument("--train-s", type=float, default=300, help="gpu: training seconds")
    ap.add_argument("--hard-s", type=float, default=520, help="gpu: stop training past this many seconds of the run")
    ap.add_argument("--eval-every-s", type=float, default=60, help="gpu: a quick commit check and adapter dump")
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--parts", nargs="+", help="import-gpu: the adapter parts")
    a = ap.parse_args()
    {"distill": cmd_distill, "train": cmd_train, "eval": cmd_eval, "export": cmd_export, "build": cmd_build,
     "gpu": cmd_gpu, "import-gpu": cmd_import_gpu}[a.cmd](a)


if __name__ == "__main__":
    main()
