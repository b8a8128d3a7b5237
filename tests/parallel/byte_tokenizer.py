#!/usr/bin/env python3
"""Writes a Hugging Face tokenizer.json whose tokens are the 256 bytes (GPT-2's byte-level
alphabet, no merges) and <|endoftext|> (id 256): a vocabulary of 257 that the layout matrix
trains with, so that its runs spend their time in the layers and the transfers between ranks
rather than in a 50257-row output layer. Usage: byte_tokenizer.py OUT.json"""
import json
import sys

# GPT-2's byte-to-character map: printable Latin-1 bytes stand for themselves, the others for
# the characters from U+0100 on, in byte order.
keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
chars, extra = {}, 0
for b in range(256):
    if b in keep:
        chars[b] = chr(b)
    else:
        chars[b] = chr(256 + extra)
        extra += 1
vocab = {chars[b]: b for b in range(256)}
vocab["<|endoftext|>"] = 256
tok = {
    "version": "1.0",
    "added_tokens": [{"id": 256, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True}],
    "normalizer": None,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    "post_processor": None,
    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
              "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": []},
}
with open(sys.argv[1], "w", encoding="utf-8") as f:
    json.dump(tok, f, ensure_ascii=False)
