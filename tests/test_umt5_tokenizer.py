#!/usr/bin/env python3
"""test_umt5_tokenizer.py - tessera's SentencePiece unigram tokenizer
(src/text/ugm.c, tokenizer.ggml.model = "t5": T5, umT5, Wan2.1's text
encoder) against HF tokenizers, an oracle we did not write.

The vocabulary is tools/gen_umt5.py's: 300 unigram pieces trained by
sentencepiece with nmt_nfkc normalisation (its precompiled charsmap, 240 kB,
as T5's), written to GGUF as llama.cpp's converter writes it. The oracle is
transformers' T5Tokenizer built from the file's tokens, scores and charsmap
(HF tokenizers: Precompiled normalizer, WhitespaceSplit + Metaspace, Unigram,
"$A </s>") - what a T5/umT5 model's own tokenizer is. (transformers' GGUF
loader builds the same tokenizer without the charsmap: that loader is not
followed, docs/TOKENIZERS.md.)

For every string of tests/tokenizer_corpus.json, of generated sentences and
of hand-picked cases (combining marks, a 6-byte halfwidth cluster, regional
indicators, ZWJ emoji, CR LF, White_Space that the charsmap keeps (U+0085),
"▁" in the text, special-token text, unknown characters in runs), identical:
  A ids with add_special and parse_special (HF: add_special_tokens=True)
  B ids without (HF: add_special_tokens=False, encode_special_tokens=True)
  N the normalized text (HF's normalizer.normalize_str)
  D the decoding of A, specials rendered (HF: decode, skip_special_tokens=False)
and the same for the vocabulary without its charsmap (no normalizer).
sentencepiece's own encoding of the same model is compared for information
(it differs from HF by design on a few inputs: it matches the charsmap
longest-first over the text, HF grapheme by grapheme; it does not split at
U+0085; it does not parse special-token text).
Broken charsmaps: a blob shorter than its trie, replacement strings that are
not UTF-8 (load errors naming the key), and a trie of random units (loads;
every index is checked, so tokenizing the whole corpus stays in bounds).

usage: test_umt5_tokenizer.py UMT5_TOOL OUT_DIR CORPUS_JSON
Exit 77 (skip) when transformers, tokenizers or sentencepiece is missing.
"""
import json
import os
import random
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))

CASES = [
    "", " ", "   ", "a", "hello world", "  lead  trail  ", "tab\there", "new\nline", "cr\r\nlf", "x\u0085y",
    "ideo\u3000space", "nb\u00a0sp", "\u2581", "\u2581\u2581x", "a\u2581b", "\u2581 \u2581", "e\u0301", "e\u0301\u0301",
    "\ufb01\u0301", "a\u0308o\u0308u\u0308", "\uff76\uff9e", "\uff76\uff9e\uff76", "\u1100\u1161\u11a8", "\U0001F1EF\U0001F1F5\U0001F1FA",
    "\U0001F469\u200d\U0001F4BB ok", "\u0915\u094d\u0937", "\x01ctl\x7f", "</s>", "a</s>b", "<pad> <unk> </s>",
    "\U0001F600\U0001F600 x \U0001F600", "\u03b1\u03b2\u03b3 \u0627\u0644", "\u2163 \u2460 \u33a1 \ufb00 \u00bd",
    "\uff21\uff22\uff23 \uff41\uff42\uff43 \uff11\uff12", "Ｔｈｅ ｗａｎ ｖｉｄｅｏ", "kato ri mu sen la", "the wan video and",
    "über ßñu ré", "東京東京 東京", "1 23 123 1.23,4", "...,,,", "x" * 700, ("ka to " * 300).strip(),
]


def records(texts):
    return b"".join(struct.pack("<I", len(t.encode())) + t.encode() for t in texts)


def main():
    tool, out, corpus_path = sys.argv[1], sys.argv[2], sys.argv[3]
    try:
        import sentencepiece  # noqa: F401
        import tokenizers  # noqa: F401
        from transformers import T5Tokenizer
    except ImportError as e:
        print(f"SKIP: {e} (pip install -r tools/requirements-torch.txt)")
        return 77
    import sentencepiece as spm
    from gguf import GGUFReader

    import gen_umt5 as gen

    # the tokenizer of gen_umt5's tiny model, in a file without tensors
    os.makedirs(out, exist_ok=True)
    path, model_path = os.path.join(out, "umt5-tok.gguf"), os.path.join(out, "umt5-tok.model")
    spm_model = gen.train_spm(gen.TINY["vocab_size"], 1234)
    with open(model_path, "wb") as fh:
        fh.write(spm_model)
    gen.write_gguf(path, {}, gen.TINY, "f32", spm_model)
    f = GGUFReader(path).fields
    arr = lambda k: [f[k].parts[i] for i in f[k].data]  # noqa: E731
    tokens = [bytes(p).decode() for p in arr("tokenizer.ggml.tokens")]
    scores = [float(p[0]) for p in arr("tokenizer.ggml.scores")]
    charsmap = bytes(int(p[0]) for p in arr("tokenizer.ggml.precompiled_charsmap"))
    sp = spm.SentencePieceProcessor(model_file=model_path)

    rnd = random.Random(5)
    words = gen.corpus(11, 400)
    spaces = [" ", "  ", "\t", "\n", " \u3000", "\u00a0"]
    generated = [rnd.choice(spaces).join(w.split(" ")) + rnd.choice(["", " ", "."]) for w in words]
    corpus = json.load(open(corpus_path, encoding="utf-8"))
    texts = CASES + generated + corpus
    ids = lambda s: [int(x) for x in s.split()]  # noqa: E731

    def compare(gguf_path, cmap):
        """A, B, N, D of every text against T5Tokenizer with charsmap cmap
        (None: no normalizer); the count that differ, and how many A equal
        sentencepiece's."""
        kw = {"_spm_precompiled_charsmap": cmap} if cmap else {}
        bt = T5Tokenizer(vocab=list(zip(tokens, scores)), extra_ids=0, **kw).backend_tokenizer
        r = subprocess.run([tool, "tokens", gguf_path], input=records(texts), capture_output=True)
        lines = r.stdout.decode().split("\n")[:-1]
        if r.returncode or len(lines) != len(texts):
            sys.exit(f"FAIL: umt5_tool tokens: {len(lines)} lines for {len(texts)} texts: "
                     f"{r.stderr.decode(errors='replace')}")
        bad = {"A": 0, "B": 0, "N": 0, "D": 0}
        shown = spm_same = 0
        hf_a = [e.ids for e in bt.encode_batch(texts, add_special_tokens=True)]
        bt.encode_special_tokens = True
        hf_b = [e.ids for e in bt.encode_batch(texts, add_special_tokens=False)]
        bt.encode_special_tokens = False
        for i, (t, line) in enumerate(zip(texts, lines)):
            a, n, d, b = line.split("|")
            got = {"A": ids(a), "B": ids(b), "N": bytes.fromhex(n).decode(), "D": bytes.fromhex(d).decode()}
            want = {"A": hf_a[i], "B": hf_b[i], "N": bt.normalizer.normalize_str(t) if bt.normalizer else t,
                    "D": bt.decode(hf_a[i], skip_special_tokens=False)}
            for k in bad:
                if got[k] != want[k]:
                    bad[k] += 1
                    if shown < 12:
                        shown += 1
                        print(f"differs {k} #{i} {t[:60]!r}: tessera {str(got[k])[:120]} HF {str(want[k])[:120]}")
            spm_same += sp.encode(t) + [1] == got["A"]
        return bad, spm_same

    bad, spm_same = compare(path, charsmap)
    plain = os.path.join(out, "umt5-tok-plain.gguf")
    gen.write_gguf(plain, {}, gen.TINY, "f32", spm_model, charsmap=b"")
    bad_plain, _ = compare(plain, None)
    total = sum(bad.values()) + sum(bad_plain.values())
    print(f"{len(texts)} texts ({len(CASES)} cases, {len(generated)} generated, {len(corpus)} corpus): "
          f"A, B, N, D differing from HF: {bad['A']}, {bad['B']}, {bad['N']}, {bad['D']}; without a charsmap: "
          f"{bad_plain['A']}, {bad_plain['B']}, {bad_plain['N']}, {bad_plain['D']}; sentencepiece gives A on "
          f"{spm_same} (information)")

    # broken charsmaps
    import numpy as np
    trie = int.from_bytes(charsmap[:4], "little")
    rng = np.random.default_rng(3)
    noise = rng.integers(0, 2**32, trie // 4, dtype=np.uint32).tobytes()
    broken = [("short", charsmap[:1000], "does not fit"),
              ("pool", charsmap[:4 + trie] + b"a\xffb\x00", "not valid UTF-8"),
              ("random trie", charsmap[:4] + noise + charsmap[4 + trie:], None)]
    bad_path = os.path.join(out, "bad-charsmap.gguf")
    for what, blob, needle in broken:
        gen.write_gguf(bad_path, {}, gen.TINY, "f32", None, charsmap=blob)
        r = subprocess.run([tool, "tokens", bad_path], input=records(texts), capture_output=True)
        msg = r.stderr.decode(errors="replace").strip()
        ok = (r.returncode == 1 and needle in msg) if needle else (r.returncode == 0 and msg == "")
        total += not ok
        print(f"{'ok  ' if ok else 'FAIL'} charsmap {what}: " + (msg if needle else f"rc {r.returncode} {msg[:200]}"))
    if total:
        print("FAIL")
        return 1
    print("unigram tokenizer: identical to HF tokenizers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
