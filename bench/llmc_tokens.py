#!/usr/bin/env python3
"""Converts a Megatron indexed dataset (trident preprocess's PREFIX.{idx,bin}) to llm.c's token
files, for bench/gpu_speed.sh's llm.c runs (issue 35):

  python3 bench/llmc_tokens.py PREFIX OUT [--val-fraction 0.1]

writes OUT_train.bin and OUT_val.bin: every sequence's tokens in the dataset's order (the EOD
tokens preprocess --append-eod put there kept), the last --val-fraction of them (whole sequences,
at least one) to _val. llm.c's token file (its dev/data/data_common.py, llmc/dataloader.h): a
header of 256 little-endian int32 (magic 20240520, version 1, the token count, zeros), then the
tokens as uint16. The .idx (docs/indexed-dataset.md): magic "MMIDIDX\\0\\0", version u64 = 1,
dtype u8, sequence count u64 S, document-index entries u64, lengths i32[S], pointers i64[S]
(byte offsets into .bin), document index. Prints the counts; exit 1 on a malformed dataset or a
token id above 65535 (llm.c's files hold uint16).
"""
import argparse, struct, sys
from array import array

MAGIC, VERSION, HEADER_INTS = 20240520, 1, 256
DTYPES = {1: "B", 3: "h", 4: "i", 8: "H"}  # Megatron's codes: uint8, int16, int32, uint16


def read_indexed(prefix):
    """The dataset's sequences as lists of ints, in order."""
    idx = open(prefix + ".idx", "rb").read()
    if idx[:9] != b"MMIDIDX\x00\x00":
        raise ValueError("%s.idx: not a Megatron indexed dataset (magic)" % prefix)
    version, dtype, nseq, _ndoc = struct.unpack_from("<QBQQ", idx, 9)
    if version != 1 or dtype not in DTYPES:
        raise ValueError("%s.idx: version %d dtype %d: want version 1 and an integer dtype" % (prefix, version, dtype))
    sizes = array("i"); sizes.frombytes(idx[34:34 + 4 * nseq])
    ptrs = array("q"); ptrs.frombytes(idx[34 + 4 * nseq:34 + 12 * nseq])
    if sys.byteorder != "little":
        sizes.byteswap(); ptrs.byteswap()
    binary = open(prefix + ".bin", "rb").read()
    item = array(DTYPES[dtype]).itemsize
    seqs = []
    for n, p in zip(sizes, ptrs):
        if p < 0 or p + n * item > len(binary):
            raise ValueError("%s.bin: a sequence at byte %d (%d tokens) runs past the file's %d bytes" % (prefix, p, n, len(binary)))
        t = array(DTYPES[dtype]); t.frombytes(binary[p:p + n * item])
        if sys.byteorder != "little":
            t.byteswap()
        seqs.append(t.tolist())
    return seqs


def write_llmc(path, tokens):
    if tokens and (max(tokens) > 65535 or min(tokens) < 0):
        raise ValueError("%s: token ids outside uint16 (max %d): llm.c's files hold uint16" % (path, max(tokens)))
    header = array("i", [0] * HEADER_INTS)
    header[0], header[1], header[2] = MAGIC, VERSION, len(tokens)
    body = array("H", tokens)
    if sys.byteorder != "little":
        header.byteswap(); body.byteswap()
    with open(path, "wb") as f:
        f.write(header.tobytes()); f.write(body.tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("prefix"); ap.add_argument("out")
    ap.add_argument("--val-fraction", type=float, default=0.1)
    a = ap.parse_args()
    if not 0 < a.val_fraction < 1:
        print("llmc_tokens: --val-fraction %g: give a fraction in (0, 1)" % a.val_fraction, file=sys.stderr); sys.exit(2)
    try:
        seqs = read_indexed(a.prefix)
        if len(seqs) < 2:
            raise ValueError("%s: %d sequences: need two or more (train and val)" % (a.prefix, len(seqs)))
        total = sum(map(len, seqs))
        cut, acc = len(seqs), 0
        while cut > 1 and acc < a.val_fraction * total:
            cut -= 1; acc += len(seqs[cut])
        train = [t for s in seqs[:cut] for t in s]
        val = [t for s in seqs[cut:] for t in s]
        write_llmc(a.out + "_train.bin", train)
        write_llmc(a.out + "_val.bin", val)
    except (OSError, ValueError) as e:
        print("llmc_tokens: %s" % e, file=sys.stderr); sys.exit(1)
    print("llmc_tokens: %d sequences, %d tokens: %s_train.bin %d, %s_val.bin %d" % (len(seqs), total, a.out, len(train), a.out, len(val)))


if __name__ == "__main__":
    main()
