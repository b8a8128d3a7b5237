#!/usr/bin/env python3
"""bench/llmc_tokens.py (issue 35's llm.c token files) against the formats' published layouts.

  python3 tests/e2e/llmc_tokens.py TRIDENT DATA   (DATA: the folder with gpt2/vocab.json, merges.txt)

1. A Megatron dataset written here by hand (uint16 and int32), converted: llm.c's header (256
   int32: 20240520, 1, the count) and the tokens read back equal the sequences written, the last
   whole sequences in _val; a token above 65535 and a bad magic exit 1 with one line.
2. trident preprocess on two documents, converted: "Hello world" is GPT-2's 15496 995 then the
   EOD 50256, and train + val equal the .bin read raw as uint16.
"""
import os, struct, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONV = os.path.join(ROOT, "bench", "llmc_tokens.py")
fails = []


def check(cond, what):
    if not cond:
        fails.append(what); print("FAIL:", what)


def write_idx(prefix, seqs, dtype_code, fmt):
    item = struct.calcsize(fmt)
    with open(prefix + ".bin", "wb") as f:
        for s in seqs:
            f.write(struct.pack("<%d%s" % (len(s), fmt), *s))
    ptrs, p = [], 0
    for s in seqs:
        ptrs.append(p); p += len(s) * item
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, dtype_code, len(seqs), len(seqs) + 1))
        f.write(struct.pack("<%di" % len(seqs), *map(len, seqs)))
        f.write(struct.pack("<%dq" % len(seqs), *ptrs))
        f.write(struct.pack("<%dq" % (len(seqs) + 1), *range(len(seqs) + 1)))


def read_llmc(path):
    b = open(path, "rb").read()
    head = struct.unpack_from("<256i", b)
    n = head[2]
    check(head[0] == 20240520 and head[1] == 1 and not any(head[3:]), "%s: header %s" % (path, head[:4]))
    check(len(b) == 1024 + 2 * n, "%s: %d bytes for %d tokens" % (path, len(b), n))
    return list(struct.unpack_from("<%dH" % n, b, 1024))


def conv(prefix, out, *extra):
    return subprocess.run([sys.executable, CONV, prefix, out, *extra], capture_output=True, text=True)


with tempfile.TemporaryDirectory() as t:
    # 1. by hand
    seqs = [[1, 2, 3, 50256], [65535, 0], [7, 8, 9, 10, 11], [40, 41, 50256]]
    for code, fmt in ((8, "H"), (4, "i")):
        p = os.path.join(t, "hand%d" % code)
        write_idx(p, seqs, code, fmt)
        r = conv(p, p + "_llmc", "--val-fraction", "0.2")
        check(r.returncode == 0, "dtype %d: rc %d %s" % (code, r.returncode, r.stderr))
        tr, va = read_llmc(p + "_llmc_train.bin"), read_llmc(p + "_llmc_val.bin")
        check(tr == [1, 2, 3, 50256, 65535, 0, 7, 8, 9, 10, 11], "dtype %d: train tokens %s" % (code, tr))
        check(va == [40, 41, 50256], "dtype %d: val tokens %s" % (code, va))
    p = os.path.join(t, "big")
    write_idx(p, [[1, 70000], [2]], 4, "i")
    r = conv(p, p + "_llmc")
    check(r.returncode == 1 and "uint16" in r.stderr and r.stderr.count("\n") == 1, "token 70000: rc %d %r" % (r.returncode, r.stderr))
    open(p + ".idx", "r+b").write(b"NOTIDX")
    r = conv(p, p + "_llmc")
    check(r.returncode == 1 and "magic" in r.stderr, "bad magic: rc %d %r" % (r.returncode, r.stderr))
    # 2. through trident preprocess, GPT-2's BPE
    if len(sys.argv) > 2:
        trident, data = sys.argv[1], sys.argv[2]
        j = os.path.join(t, "docs.jsonl")
        with open(j, "w") as f:
            f.write('{"text": "Hello world"}\n' + '{"text": "%s"}\n' % ("To be, or not to be: that is the question. " * 40))
        p = os.path.join(t, "ts")
        r = subprocess.run([trident, "preprocess", "--input", j, "--output-prefix", p, "--vocab-file",
                            os.path.join(data, "gpt2", "vocab.json"), "--merge-file", os.path.join(data, "gpt2", "merges.txt"),
                            "--append-eod", "--workers", "1"], capture_output=True, text=True)
        check(r.returncode == 0, "trident preprocess: rc %d %s" % (r.returncode, r.stderr[-400:]))
        p += "_text_document"
        r = conv(p, p + "_llmc", "--val-fraction", "0.01")
        check(r.returncode == 0, "convert: rc %d %s" % (r.returncode, r.stderr))
        tr, va = read_llmc(p + "_llmc_train.bin"), read_llmc(p + "_llmc_val.bin")
        raw = open(p + ".bin", "rb").read()
        raw = list(struct.unpack("<%dH" % (len(raw) // 2), raw))
        check(tr == [15496, 995, 50256], "train: 'Hello world' + EOD as %s" % tr[:8])
        check(tr + va == raw and va[-1] == 50256 and len(va) > 400, "train + val (%d + %d) against the .bin's %d uint16" % (len(tr), len(va), len(raw)))
print("llmc_tokens: %s" % ("FAILED: %d" % len(fails) if fails else "all checks passed"))
sys.exit(1 if fails else 0)
