#!/usr/bin/env python3
"""The cross-entropy (nats per token) that token frequencies alone reach on an indexed dataset:
what a trained model must beat before its loss says it learned more than counting.

  ngram_loss.py PREFIX SPLIT VOCAB gpt   unigram and bigram loss of the validation split's tokens,
                                         estimated on the training split's
  ngram_loss.py PREFIX SPLIT VOCAB bert  unigram entropy of the training and of the validation
                                         split's tokens, and the share of each one's most frequent
                                         token

PREFIX.idx/.bin is read as the MMIDIDX v1 format (docs/indexed-dataset.md) and the documents
split as Megatron splits them: SPLIT's weights normalised, split j = documents
[b_j, b_j + round(w_j n)) (Python's round), the ends moved back by any excess over n.

gpt: a GPT sample's targets are consecutive tokens of the split's stream (documents back to
back, each with its end-of-document token), each predicted after the token before it, so every
target has a predecessor. Unigram: add-k smoothing over the VOCAB real ids,
p(t) = (c(t) + k) / (N + k VOCAB), with k the best of 1, 0.5, 0.2, 0.1, 0.05, 0.02, 0.01 on the
validation tokens themselves (add-one is k = 1): the best a model of token frequencies does.
Bigram: interpolated with that unigram, p(t | u) = l c(u, t) / c(u) + (1 - l) p(t) (p(t) where
c(u) = 0), with l the best of 0.05, 0.10, ..., 0.95 on the validation tokens: its best case too.

bert: the masked-LM targets are the sentence tokens ([CLS] and [SEP] are added to samples later
and never masked), drawn about uniformly among them. On a split's tokens, the frequency model
that does best is the split's own distribution (no smoothing, fitted to the very tokens it is
scored on): its entropy, -sum p log p, is the least cross-entropy any one fixed distribution
reaches there, and the share of the most frequent token the best accuracy of any one fixed guess.
Printed for the training split (what training-iteration losses compare with) and the validation
split (what a validation loss compares with).
"""
import math
import struct
import sys
from array import array
from collections import Counter

DTYPES = {1: "B", 2: "b", 3: "h", 4: "i", 8: "H"}  # Megatron's DType codes trident reads


def read_indexed(prefix):
    """(documents as lists of token arrays, one per sequence)."""
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    if idx[:9] != b"MMIDIDX\x00\x00" or struct.unpack_from("<Q", idx, 9)[0] != 1:
        sys.exit(f"{prefix}.idx: not an MMIDIDX v1 index")
    code = idx[17]
    nseq, ndoc = struct.unpack_from("<QQ", idx, 18)
    lens = struct.unpack_from(f"<{nseq}i", idx, 34)
    ptrs = struct.unpack_from(f"<{nseq}q", idx, 34 + 4 * nseq)
    docs = struct.unpack_from(f"<{ndoc}q", idx, 34 + 12 * nseq)
    tokens = array(DTYPES[code])
    with open(prefix + ".bin", "rb") as f:
        tokens.frombytes(f.read())
    if sys.byteorder != "little":
        tokens.byteswap()
    step = tokens.itemsize
    seqs = [tokens[p // step : p // step + n] for p, n in zip(ptrs, lens)]
    return [seqs[docs[j] : docs[j + 1]] for j in range(ndoc - 1)]


def split_ranges(split, n):
    w = [float(x) for x in split.replace("/", ",").split(",")]
    w += [0.0] * (3 - len(w))
    w = [x / sum(w) for x in w]
    idx = [0]
    for x in w:
        idx.append(idx[-1] + int(round(x * n)))
    excess = idx[-1] - n
    idx[1:] = [i - excess for i in idx[1:]]
    return [(idx[j], idx[j + 1]) for j in range(3)]


def stream(docs, lo, hi):
    out = []
    for d in docs[lo:hi]:
        for s in d:
            out.extend(s)
    return out


def gpt(docs, split, vocab):
    (t0, t1), (v0, v1), _ = split_ranges(split, len(docs))
    train, valid = stream(docs, t0, t1), stream(docs, v0, v1)
    uni = Counter(train)
    big = Counter(zip(train, train[1:]))
    n = len(train)

    targets = list(zip(valid, valid[1:]))

    def unigram_loss(k):
        return -sum(math.log((uni[t] + k) / (n + k * vocab)) for _, t in targets) / len(targets)

    unigram, k = min((unigram_loss(k), k) for k in (1, 0.5, 0.2, 0.1, 0.05, 0.02, 0.01))

    def p_uni(t):
        return (uni[t] + k) / (n + k * vocab)

    best = None
    for i in range(1, 20):
        lam = i / 20
        s = 0.0
        for u, t in targets:
            cu = uni[u]
            p = p_uni(t)
            if cu:
                p = lam * big[(u, t)] / cu + (1 - lam) * p
            s -= math.log(p)
        if best is None or s / len(targets) < best[0]:
            best = (s / len(targets), lam)
    print(f"validation documents [{v0}, {v1}), {len(targets)} targets; training documents [{t0}, {t1}), "
          f"{n} tokens")
    print(f"unigram {unigram:.4f} (add-{k:g}) bigram {best[0]:.4f} (interpolation {best[1]:.2f})")


def bert(docs, split):
    for name, (lo, hi) in zip(("training", "validation"), split_ranges(split, len(docs))):
        c = Counter(stream(docs, lo, hi))
        n = sum(c.values())
        if n == 0:
            print(f"{name} documents [{lo}, {hi}): no tokens")
            continue
        h = -sum(k / n * math.log(k / n) for k in c.values())
        print(f"{name} documents [{lo}, {hi}), {n} tokens, {len(c)} distinct: "
              f"entropy {h:.4f} most frequent {max(c.values()) / n:.4f}")


def main():
    if len(sys.argv) != 5 or sys.argv[4] not in ("gpt", "bert"):
        sys.exit("usage: ngram_loss.py PREFIX SPLIT VOCAB gpt|bert")
    docs = read_indexed(sys.argv[1])
    if sys.argv[4] == "gpt":
        gpt(docs, sys.argv[2], int(sys.argv[3]))
    else:
        bert(docs, sys.argv[2])


if __name__ == "__main__":
    main()
