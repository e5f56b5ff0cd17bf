#!/usr/bin/env python3
"""gen_umt5.py - umT5 text encoders (Wan2.1's text encoder) as GGUF files with
llama.cpp's names and metadata (arch `t5encoder`, as its converter writes T5
and umT5 encoders: `token_embd.weight`, `enc.blk.N.attn_q.weight`, ...,
`enc.blk.N.attn_rel_b.weight` in every layer, `enc.output_norm.weight`), from
a random transformers `UMT5EncoderModel`.

  tiny  a small random configuration (d_model 64, d_ff 96, 2 layers, 4 heads
        of 16, 300 tokens, 32 buckets, max_distance 128, gated-gelu) for the
        oracle tests: NAME.gguf (f32), NAME-q8_0.gguf (2-D matrices with rows
        a multiple of 32 in Q8_0, the rest f32), NAME.pt (the model's state
        dict and config, so the oracle rebuilds the very model that wrote the
        files) and NAME.model (the tokenizer, below).

Tensor names come from the gguf package's own map (gguf.get_tensor_name_map
for MODEL_ARCH.T5ENCODER: llama.cpp's gguf-py), not from a table written
here; the writer refuses a name the map does not know.

Weights are random at a scale that keeps activations O(1): embeddings
N(0, 1), matrices N(0, 1/fan_in), norm weights 1 + N(0, 0.2^2), relative
bias tables N(0, 1) (so every layer's table moves the scores).

The tokenizer metadata is what llama.cpp's converter writes for a
SentencePiece unigram model (tokenizer.ggml.model = "t5", tokens, scores,
token types, add_space_prefix, remove_extra_whitespaces,
precompiled_charsmap, eos/unknown/padding ids, add_eos_token): the model is
a 300-piece unigram vocabulary trained here by sentencepiece (nmt_nfkc
normalisation, as T5's) on a generated corpus, when sentencepiece is
installed (else tokens only: "<pad>", "</s>", "<unk>", then "▁tokN").

usage: gen_umt5.py tiny OUT_DIR [--seed N]
"""
import argparse
import io
import math
import os
import random
import sys

import numpy as np

TINY = dict(vocab_size=300, d_model=64, d_kv=16, d_ff=96, num_layers=2, num_heads=4,
            relative_attention_num_buckets=32, relative_attention_max_distance=128, feed_forward_proj="gated-gelu",
            layer_norm_epsilon=1e-6, dropout_rate=0.0, pad_token_id=0, eos_token_id=1)
N_CTX = 512


def gguf_name(hf_name, n_layer):
    import gguf

    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.T5ENCODER, n_layer)
    name = tmap.get_name(hf_name, try_suffixes=(".weight",))
    if name is None:
        raise KeyError(f"gguf's T5ENCODER map has no name for {hf_name}")
    return name


def hf_tensors(model):
    """name -> f32 array in GGUF names: the encoder's weights (the shared
    embedding once, as llama.cpp's converter keeps it)."""
    n_layer = model.config.num_layers
    out = {}
    for k, v in model.state_dict().items():
        if k == "encoder.embed_tokens.weight":
            continue  # tied to shared.weight
        out[gguf_name(k, n_layer)] = v.detach().float().numpy()
    return out


def randomize(model, seed):
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "relative_attention_bias" in name or name == "shared.weight":
                p.copy_(torch.randn(p.shape, generator=g))
            elif p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))
            else:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))


def corpus(seed, n=3000):
    """Sentences over syllables with accents, ligatures, CJK and full-width
    letters, so the trained pieces and nmt_nfkc's map both matter."""
    rnd = random.Random(seed)
    syl = ["ka", "to", "ri", "mu", "sen", "la", "ve", "do", "qui", "ré", "ñu", "ß", "über", "東京", "ｆｕｌｌ", "x",
           "y", "z", "1", "23", ".", ",", "ﬁ", "é", "the", "and", "wan", "video"]
    return [" ".join("".join(rnd.choice(syl) for _ in range(rnd.randint(1, 4))) for _ in range(rnd.randint(3, 12)))
            for _ in range(n)]


def train_spm(n_vocab, seed):
    """A unigram SentencePiece model proto (bytes), or None without sentencepiece."""
    try:
        import sentencepiece as spm
    except ImportError:
        return None
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus(seed)), model_writer=buf, model_type="unigram",
                                   vocab_size=n_vocab, normalization_rule_name="nmt_nfkc", pad_id=0, eos_id=1,
                                   unk_id=2, bos_id=-1, num_threads=1, minloglevel=2, hard_vocab_limit=False,
                                   seed_sentencepiece_size=100000)
    return buf.getvalue()


def add_tokenizer(w, spm_model, n_vocab, charsmap_override=None):
    """What llama.cpp's T5EncoderModel.set_vocab writes for a unigram model
    (charsmap_override: other charsmap bytes, the tokenizer tests' broken
    ones)."""
    import gguf

    tokens = [f"[PAD{i}]".encode() for i in range(n_vocab)]
    scores = [-10000.0] * n_vocab
    types = [gguf.TokenType.UNUSED] * n_vocab
    add_prefix, remove_ws, charsmap = True, True, b""
    if spm_model is not None:
        from sentencepiece import sentencepiece_model_pb2 as pb

        proto = pb.ModelProto()
        proto.ParseFromString(spm_model)
        assert proto.trainer_spec.model_type == 1, "not a unigram model"
        add_prefix = proto.normalizer_spec.add_dummy_prefix
        remove_ws = proto.normalizer_spec.remove_extra_whitespaces
        charsmap = proto.normalizer_spec.precompiled_charsmap
        kind = {1: gguf.TokenType.NORMAL, 2: gguf.TokenType.UNKNOWN, 3: gguf.TokenType.CONTROL,
                4: gguf.TokenType.USER_DEFINED, 5: gguf.TokenType.UNUSED, 6: gguf.TokenType.BYTE}
        for i, p in enumerate(proto.pieces[:n_vocab]):
            tokens[i], scores[i], types[i] = p.piece.encode(), p.score, kind[p.type]
    else:
        for i in range(n_vocab):
            tokens[i] = ["<pad>", "</s>", "<unk>"][i].encode() if i < 3 else f"\u2581tok{i}".encode()
            scores[i] = 0.0 if i < 3 else -float(i)
            types[i] = [gguf.TokenType.CONTROL, gguf.TokenType.CONTROL, gguf.TokenType.UNKNOWN][i] if i < 3 \
                else gguf.TokenType.NORMAL
    w.add_tokenizer_model("t5")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_add_space_prefix(add_prefix)
    w.add_remove_extra_whitespaces(remove_ws)
    if charsmap_override is not None:
        charsmap = charsmap_override
    if charsmap:
        w.add_precompiled_charsmap(charsmap)
    w.add_eos_token_id(1)
    w.add_unk_token_id(2)
    w.add_pad_token_id(0)
    w.add_add_eos_token(True)


def write_gguf(path, tensors, cfg, qtype, spm_model, n_ctx=N_CTX, skip=(), charsmap=None):
    """The file as llama.cpp's converter lays it out; qtype "f32" or "q8_0"
    (2-D matrices with rows a multiple of 32 quantized). Tensors named in
    skip are left out; charsmap replaces the tokenizer's (the loader and
    tokenizer tests' broken files)."""
    import gguf
    from gguf.quants import quantize

    w = gguf.GGUFWriter(path, "t5encoder")
    w.add_context_length(n_ctx)
    w.add_embedding_length(cfg["d_model"])
    w.add_feed_forward_length(cfg["d_ff"])
    w.add_block_count(cfg["num_layers"])
    w.add_head_count(cfg["num_heads"])
    w.add_key_length(cfg["d_kv"])
    w.add_value_length(cfg["d_kv"])
    w.add_layer_norm_eps(cfg["layer_norm_epsilon"])
    w.add_relative_attn_buckets_count(cfg["relative_attention_num_buckets"])
    w.add_layer_norm_rms_eps(cfg["layer_norm_epsilon"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if qtype == "q8_0" else gguf.LlamaFileType.ALL_F32)
    add_tokenizer(w, spm_model, cfg["vocab_size"], charsmap)
    for name, arr in tensors.items():
        if name in skip:
            continue
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if qtype == "q8_0" and arr.ndim == 2 and arr.shape[1] % 32 == 0:
            q = quantize(arr, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def tiny(out_dir, seed, name="umt5-tiny"):
    import torch
    from transformers import UMT5Config, UMT5EncoderModel

    torch.manual_seed(seed)
    cfg = UMT5Config(**TINY)
    model = UMT5EncoderModel(cfg).eval()
    randomize(model, seed)
    tensors = hf_tensors(model)
    spm_model = train_spm(TINY["vocab_size"], seed)
    os.makedirs(out_dir, exist_ok=True)
    write_gguf(os.path.join(out_dir, name + ".gguf"), tensors, TINY, "f32", spm_model)
    write_gguf(os.path.join(out_dir, name + "-q8_0.gguf"), tensors, TINY, "q8_0", spm_model)
    if spm_model is not None:
        with open(os.path.join(out_dir, name + ".model"), "wb") as f:
            f.write(spm_model)
    torch.save({"config": dict(TINY), "state_dict": model.state_dict()}, os.path.join(out_dir, name + ".pt"))
    return model, tensors, spm_model


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["tiny"])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    tiny(a.out, a.seed)
    print(f"wrote {a.out}/umt5-tiny.gguf, umt5-tiny-q8_0.gguf")
    return 0


if __name__ == "__main__":
    sys.exit(main())
