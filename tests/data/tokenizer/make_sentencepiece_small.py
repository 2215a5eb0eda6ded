#!/usr/bin/env python3
"""Writes sentencepiece-small.json: a hand-made tokenizer.json in Llama 2's layout (BPE over
characters with byte_fallback, the Prepend + Replace normalizer, the Replace / ByteFallback / Fuse /
Strip decoder, <s> before a sequence) with a few words and merges, for the tokenizer fuzz target.
Run from this folder: python3 make_sentencepiece_small.py"""
import json

SP = "\u2581"
WORDS = [SP, "H", "e", "l", "o", "w", "r", "d", "lo", SP + "H", "el", "ello", SP + "Hello",
         SP + "w", "or", SP + "wor", "ld", SP + "world", "a", "t", "h", "th", SP + "t", SP + "th",
         "he", SP + "the", "\u00e9", "\u4e2d"]
MERGES = [("l", "o"), (SP, "H"), ("e", "l"), ("el", "lo"), (SP + "H", "ello"), (SP, "w"),
          ("o", "r"), (SP + "w", "or"), ("l", "d"), (SP + "wor", "ld"), ("t", "h"), (SP, "t"),
          (SP + "t", "h"), ("h", "e"), (SP + "th", "e")]

vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
for i, w in enumerate(WORDS):
    vocab[w] = i + 3
for b in range(256):
    vocab["<0x%02X>" % b] = 3 + len(WORDS) + b
for left, right in MERGES:
    assert left in vocab and right in vocab and left + right in vocab, (left, right)
added = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
          "normalized": False, "special": True}
         for i, c in enumerate(["<unk>", "<s>", "</s>"])]
doc = {
    "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
    "normalizer": {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": SP},
        {"type": "Replace", "pattern": {"String": " "}, "content": SP}]},
    "pre_tokenizer": None,
    "post_processor": {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    "decoder": {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": SP}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
              "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": True,
              "byte_fallback": True, "vocab": vocab,
              "merges": [left + " " + right for left, right in MERGES]},
}
with open("sentencepiece-small.json", "w", encoding="utf-8") as f:
    json.dump(doc, f, ensure_ascii=False, indent=1)
