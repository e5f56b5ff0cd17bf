#!/usr/bin/env python3
"""Tokenizer oracle: tessera's tokenizer against Hugging Face tokenizers built by
transformers from the same GGUF file, over tests/tokenizer_corpus.json.

  test_tokenizer_oracle.py DUMP_HELPER TESSERA MODELS_DIR CORPUS_JSON [CACHE_DIR]

For both real models it requires, for every corpus string, identical ids
  A: add_special=True,  special-token text parsed   (HF: add_special_tokens=True)
  B: add_special=False, special-token text is plain (HF: encode_special_tokens=True)
and checks detokenization: tessera's decode of B gives back the exact input
bytes, its streaming decode equals its whole decode, and its decode of A equals
HF's decode of the same ids. A few invalid UTF-8 inputs are compared with HF
tokenizing bytes.decode('utf-8', 'replace'). With the SmolLM vocabulary it also
checks every byte-level pre-tokenizer regex (smollm, gpt2, llama-bpe, qwen2,
...) against HF's pre-tokenizer with the same regex (ids and the splits
themselves), and a few CLI outputs. A third, generated vocabulary covers the
generic (non-Gemma) SentencePiece path (make_generic_spm); a prefix-space
vocabulary cannot round-trip leading spaces, so there decode is compared with
HF's decode instead of the input.

One deliberate difference from transformers' GGUF loader: for
tokenizer.ggml.pre == "smollm" transformers falls back to the plain GPT-2
pre-tokenizer, while SmolLM's own tokenizer.json (and llama.cpp) split every
digit first. The oracle uses the model's real pre-tokenizer
(Digits(individual_digits=True) + ByteLevel); see docs/TOKENIZERS.md.

Building Gemma's tokenizer takes transformers 15-30 s (it derives 500k merges
in Python), so with CACHE_DIR the built tokenizer is saved as tokenizer.json,
keyed by the model file's size and mtime and the transformers/tokenizers
versions, and reloaded on later runs. Decoding uses the backend tokenizer's
decode, which is what transformers' decode calls for these files (no
clean_up_tokenization_spaces).
"""
import json
import os
import struct
import subprocess
import sys
import time

MODELS = ["SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"]

INVALID_UTF8 = [
    b"abc\xffdef",
    b"\xc3(",
    b"caf\xe9 au lait",
    b"\xe4\xb8 truncated CJK",
    b"truncated at end \xf0\x9f\x98",
    b"\xed\xa0\x80 surrogate",
    b"\xc0\xaf overlong",
    b"\x80\x80\x80 stray continuations",
    b"\xf5\xf6\xf7\xf8\xf9\xfa\xfb\xfc\xfd\xfe\xff",
    b"ok \xf4\x90\x80\x80 above max",
    b"<|im_start|>\xff<bos>\xfe",
]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def hf_tokenizer(models_dir, name, cache_dir):
    """The backend tokenizer transformers builds from the GGUF file (cached)."""
    import tokenizers
    import transformers
    from tokenizers import Tokenizer

    st = os.stat(os.path.join(models_dir, name))
    key = f"{name}-{st.st_size}-{int(st.st_mtime)}-tf{transformers.__version__}-tk{tokenizers.__version__}.json"
    cached = os.path.join(cache_dir, key) if cache_dir else None
    if cached and os.path.exists(cached):
        return Tokenizer.from_file(cached)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(models_dir, gguf_file=name)
    if getattr(tok, "clean_up_tokenization_spaces", False):
        fail(f"{name}: transformers would clean up tokenization spaces; the oracle's decode assumes not")
    # Always use the serialized form, cached or not, so both runs see the same
    # tokenizer: the live object also treats LlamaTokenizer's default "<s>"/"</s>"
    # as special under encode_special_tokens even when the file makes them
    # ordinary user-defined tokens, a quirk that does not survive serialization.
    bt = Tokenizer.from_str(tok.backend_tokenizer.to_str())
    if cached:
        os.makedirs(cache_dir, exist_ok=True)
        bt.save(cached + ".tmp")
        os.replace(cached + ".tmp", cached)
    return bt


def gguf_kv(path, wanted):
    """The metadata values named in `wanted` (strings, scalars, arrays), read with
    a minimal walk of the header: gguf.GGUFReader takes seconds on a 262k-token
    vocabulary."""
    import numpy as np

    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    dtypes = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "<u1", 10: "<u8",
              11: "<i8", 12: "<f8"}
    out = {}
    with open(path, "rb") as f:
        magic, _version, _n_tensors, n_kv = struct.unpack("<4sIQQ", f.read(24))
        if magic != b"GGUF":
            fail(f"{path} is not a GGUF file")

        def string():
            (n,) = struct.unpack("<Q", f.read(8))
            return f.read(n)

        def value(vt, keep):
            if vt == 8:
                return string()
            if vt == 9:
                et, n = struct.unpack("<IQ", f.read(12))
                if et in sizes:
                    if not keep:
                        f.seek(sizes[et] * n, 1)
                        return None
                    return np.frombuffer(f.read(sizes[et] * n), dtype=dtypes[et])
                return [value(et, keep) for _ in range(n)]
            raw = f.read(sizes[vt])
            return np.frombuffer(raw, dtype=dtypes[vt])[0].item() if keep else None

        for _ in range(n_kv):
            key = string().decode()
            (vt,) = struct.unpack("<I", f.read(4))
            v = value(vt, key in wanted)
            if key in wanted:
                out[key] = v
                if len(out) == len(wanted):
                    break
    return out


def gguf_pre(path):
    v = gguf_kv(path, {"tokenizer.ggml.pre"}).get("tokenizer.ggml.pre")
    return v.decode() if v is not None else None


def make_generic_spm(models_dir, cache_dir):
    """A generic SentencePiece ("llama" architecture) vocabulary to exercise the
    non-Gemma path: Gemma 3's first 40000 tokens, every single-character token
    and "▁", with Gemma's scores and types, add_space_prefix = true. transformers
    builds it with LlamaTokenizer: Metaspace prefix, merges ordered by score, a
    Strip decoder, and the space-run tokens as plain user-defined tokens."""
    import gguf

    out_dir = os.path.join(cache_dir or "/tmp", "generic_spm")
    path = os.path.join(out_dir, "generic-spm.gguf")
    if os.path.exists(path):
        return out_dir, "generic-spm.gguf"
    src = os.path.join(models_dir, MODELS[1])
    kv = gguf_kv(src, {"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"})
    toks = kv["tokenizer.ggml.tokens"]
    keep = [i for i, t in enumerate(toks) if i < 40000 or len(t.decode("utf-8", "replace")) == 1]
    os.makedirs(out_dir, exist_ok=True)
    w = gguf.GGUFWriter(path + ".tmp", "llama")
    w.add_context_length(128)
    w.add_embedding_length(64)
    w.add_block_count(1)
    w.add_feed_forward_length(128)
    w.add_head_count(1)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list([toks[i] for i in keep])
    w.add_token_scores([float(kv["tokenizer.ggml.scores"][i]) for i in keep])
    w.add_token_types([int(kv["tokenizer.ggml.token_type"][i]) for i in keep])
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_space_prefix(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(path + ".tmp", path)
    return out_dir, "generic-spm.gguf"


def run_dump(helper, model_path, texts_bytes, pre=None):
    data = b"".join(struct.pack("<I", len(b)) + b for b in texts_bytes)
    cmd = [helper, model_path] + (["--pre", pre] if pre else [])
    p = subprocess.run(cmd, input=data, capture_output=True, timeout=600)
    if p.returncode != 0:
        fail(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.decode(errors='replace')}")
    lines = p.stdout.decode().split("\n")[:-1]
    if len(lines) != len(texts_bytes):
        fail(f"helper printed {len(lines)} lines for {len(texts_bytes)} texts")
    out = []
    for ln in lines:
        a, b, d, e, s = ln.split("|")
        ids = lambda f: [int(x) for x in f.split()] if f else []
        out.append((ids(a), ids(b), bytes.fromhex(d), bytes.fromhex(e), bytes.fromhex(s)))
    return out


def encode(bt, texts, add, parse):
    bt.encode_special_tokens = not parse
    try:
        return [e.ids for e in bt.encode_batch(texts, add_special_tokens=add)]
    finally:
        bt.encode_special_tokens = False


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def show(s, n=80):
    r = repr(s)
    return r if len(r) <= n else r[:n] + f"...({len(s)} chars)"


def main():
    if len(sys.argv) not in (5, 6):
        fail("usage: test_tokenizer_oracle.py DUMP_HELPER TESSERA MODELS_DIR CORPUS_JSON [CACHE_DIR]")
    helper, tessera, models_dir, corpus_path = sys.argv[1:5]
    cache_dir = sys.argv[5] if len(sys.argv) == 6 else None
    for m in MODELS:
        if not os.path.exists(os.path.join(models_dir, m)):
            fail(f"model {m} not found in {models_dir}: run tools/fetch_models.sh")
    with open(corpus_path, encoding="utf-8") as f:
        corpus = json.load(f)
    if len(corpus) < 300:
        fail(f"corpus has only {len(corpus)} strings (want >= 300)")

    errors = []
    def err(msg):
        errors.append(msg)
        if len(errors) <= 25:
            print("  MISMATCH " + msg)

    from tokenizers import pre_tokenizers, Regex
    runs = [(models_dir, m, True) for m in MODELS]
    runs.append(make_generic_spm(models_dir, cache_dir) + (False,))
    for mdir, name, exact in runs:
        t0 = time.time()
        path = os.path.join(mdir, name)
        bt = hf_tokenizer(mdir, name, cache_dir)
        pre = gguf_pre(path)
        if pre == "smollm":
            before = encode(bt, corpus, False, False)
            bt.pre_tokenizer = pre_tokenizers.Sequence(
                [pre_tokenizers.Digits(individual_digits=True),
                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
            after = encode(bt, corpus, False, False)
            ndiff = sum(x != y for x, y in zip(before, after))
            print(f"{name}: smollm digit split changes {ndiff}/{len(corpus)} corpus strings vs transformers' GGUF default")
        hf_a = encode(bt, corpus, True, True)
        hf_b = encode(bt, corpus, False, False)
        hf_dec_a = bt.decode_batch(hf_a, skip_special_tokens=False)
        hf_dec_b = bt.decode_batch(hf_b, skip_special_tokens=False)
        ours = run_dump(helper, path, [s.encode("utf-8") for s in corpus])
        n_hf_rt = 0
        for i, s in enumerate(corpus):
            a, b, d, e, st = ours[i]
            if a != hf_a[i]:
                k = first_diff(a, hf_a[i])
                err(f"{name} A #{i} {show(s)}: at {k} ours {a[k:k+6]} hf {hf_a[i][k:k+6]}")
            if b != hf_b[i]:
                k = first_diff(b, hf_b[i])
                err(f"{name} B #{i} {show(s)}: at {k} ours {b[k:k+6]} hf {hf_b[i][k:k+6]}")
            # A prefix-space vocabulary cannot round-trip a leading space (HF's neither).
            want_d = s.encode("utf-8") if exact else hf_dec_b[i].encode("utf-8")
            if d != want_d:
                err(f"{name} decode(B) #{i} {show(s)} gives {show(d)} want {show(want_d)}")
            if st != d:
                err(f"{name} stream decode #{i} {show(s)} gives {show(st)} vs {show(d)}")
            hd = hf_dec_a[i]
            if e != hd.encode("utf-8"):
                err(f"{name} decode(A) #{i} {show(s)}: ours {show(e)} hf {show(hd)}")
            n_hf_rt += hf_dec_b[i] == s
        print(f"{name}: {len(corpus)} strings compared in {time.time() - t0:.1f}s "
              f"(HF's own decode round-trips {n_hf_rt}/{len(corpus)})")

        # Invalid UTF-8: HF sees the text after Python's 'replace' decoding.
        texts = [b.decode("utf-8", "replace") for b in INVALID_UTF8]
        ours = run_dump(helper, path, INVALID_UTF8)
        ha, hb = encode(bt, texts, True, True), encode(bt, texts, False, False)
        for i, raw in enumerate(INVALID_UTF8):
            if ours[i][0] != ha[i] or ours[i][1] != hb[i]:
                err(f"{name} invalid UTF-8 {raw!r}: ours {ours[i][0]} / {ours[i][1]} hf {ha[i]} / {hb[i]}")
            if exact and ours[i][2] != texts[i].encode("utf-8"):
                err(f"{name} invalid UTF-8 {raw!r} decodes to {ours[i][2]!r}")

        if not exact:
            continue
        # CLI: --ids in Python list format, and the default per-token listing.
        for s in ["Hello world", "<|im_start|>user\nhi 😀<end_of_turn>"]:
            p = subprocess.run([tessera, "tokenize", "-m", path, "-p", s, "--ids"], capture_output=True, text=True)
            want = str(encode(bt, [s], True, True)[0])
            if p.returncode != 0 or p.stdout.strip() != want:
                err(f"{name} CLI --ids {s!r}: got {p.stdout.strip()!r} rc {p.returncode}, want {want}")
            p = subprocess.run([tessera, "tokenize", "-m", path, "-p", s, "--ids", "--no-bos", "--no-special"],
                               capture_output=True, text=True)
            want = str(encode(bt, [s], False, False)[0])
            if p.returncode != 0 or p.stdout.strip() != want:
                err(f"{name} CLI --ids --no-bos --no-special {s!r}: got {p.stdout.strip()!r}, want {want}")
        p = subprocess.run([tessera, "tokenize", "-m", path, "-p", "-", "--no-bos"], input="a\n",
                           capture_output=True, text=True)
        ids = encode(bt, ["a\n"], False, True)[0]
        want = "".join(f"{i}\t{bt.decode([i], skip_special_tokens=False)!r}\n" for i in ids)
        if p.returncode != 0 or p.stdout != want:
            err(f"{name} CLI listing of 'a\\n' from stdin: got {p.stdout!r}, want {want!r}")

        if pre == "smollm":
            # Every regex pre-tokenizer (smollm's own too), on this byte-level vocabulary.
            from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_PRE_TOKENIZER_SPLITS as SPLITS
            from tokenizers import Tokenizer
            variants = [("smollm", "digits"), ("gpt2", None), ("llama-bpe", SPLITS["llama-bpe"]), ("qwen2", SPLITS["qwen2"]),
                        ("qwen35", SPLITS["qwen35"]), ("tekken", SPLITS["tekken"]), ("gpt-4o", SPLITS["gpt-4o"])]
            extra = ["'ſ 'St 'ſ", "Don'T WE'LL", "x\r\n\r\ny  \n z", "a/b//c\n/", "ÀbcDéf ǅungla ʰʲ", "12345 678"]
            texts = corpus + extra
            for pname, rx in variants:
                hb2 = Tokenizer.from_str(bt.to_str())
                if rx is None:
                    hb2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
                elif rx == "digits":
                    hb2.pre_tokenizer = pre_tokenizers.Sequence(
                        [pre_tokenizers.Digits(individual_digits=True),
                         pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
                else:
                    hb2.pre_tokenizer = pre_tokenizers.Sequence(
                        [pre_tokenizers.Split(Regex(rx), behavior="isolated"),
                         pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
                want = encode(hb2, texts, False, False)
                got = run_dump(helper, path, [s.encode("utf-8") for s in texts], pre=pname)
                bad = [i for i in range(len(texts)) if got[i][1] != want[i]]
                for i in bad[:5]:
                    k = first_diff(got[i][1], want[i])
                    err(f"pre={pname} #{i} {show(texts[i])}: at {k} ours {got[i][1][k:k+6]} hf {want[i][k:k+6]}")
                # The splits themselves (ids hide split differences merges never cross).
                cmd = [helper, path, "--pre", pname, "--splits"]
                data = b"".join(struct.pack("<I", len(x.encode())) + x.encode() for x in texts)
                p = subprocess.run(cmd, input=data, capture_output=True, timeout=600)
                lines = p.stdout.decode().split("\n")[:-1]
                if p.returncode != 0 or len(lines) != len(texts):
                    fail(f"{' '.join(cmd)} failed: {p.stderr.decode(errors='replace')}")
                nsplit = 0
                for i, x in enumerate(texts):
                    raw = x.encode()
                    ours_sp = [raw[int(a):int(b)].decode() for a, b in (r.split("-") for r in lines[i].split())]
                    hf_sp = [x[a:b] for _, (a, b) in hb2.pre_tokenizer.pre_tokenize_str(x)]
                    if ours_sp != hf_sp:
                        nsplit += 1
                        if nsplit <= 3:
                            k = first_diff(ours_sp, hf_sp)
                            err(f"pre={pname} split #{i} {show(x)}: at {k} ours {ours_sp[k:k+3]} hf {hf_sp[k:k+3]}")
                print(f"pre-tokenizer {pname}: ids {len(texts) - len(bad)}/{len(texts)}, "
                      f"splits {len(texts) - nsplit}/{len(texts)} identical")
                if bad or nsplit:
                    errors.append(f"pre={pname}: {len(bad)} id and {nsplit} split mismatches")

    if errors:
        fail(f"{len(errors)} mismatches")
    print("OK")


if __name__ == "__main__":
    main()
