#!/usr/bin/env bash
# --tensorboard-dir end to end: 4 iterations (validation at 2 and 4), then every record of the
# event file unframed (its two masked CRC32Cs checked, in Python) and decoded by protoc
# --decode_raw, a protocol-buffer decoder trident did not write: the file_version event, the
# tags, steps 1..4 and the validation tags must be there.
# Environment: TRIDENT, DATA, VOCAB, MERGES, WORK.
set -u
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
command -v protoc >/dev/null || { echo "FAIL: protoc not found (scripts/deps.sh installs protobuf-compiler)"; exit 1; }
OMP_NUM_THREADS=2 "$TRIDENT" train --data-path "$DATA" --vocab-file "$VOCAB" --merge-file "$MERGES" --split 949,50,1 \
  --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 32 --micro-batch-size 2 --train-iters 4 \
  --eval-interval 2 --eval-iters 1 --lr 1e-3 --log-interval 100 --tensorboard-dir tb/run >train.log 2>&1 ||
  { echo "FAIL: training"; tail -5 train.log; exit 1; }
f=$(ls tb/run/events.out.tfevents.* 2>/dev/null | head -1)
[ -n "$f" ] || { echo "FAIL: no events.out.tfevents.* in tb/run"; exit 1; }
/usr/bin/python3 - "$f" <<'PY' || exit 1
import struct, subprocess, sys
def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c ^= x
        for _ in range(8): c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF
mask = lambda c: (((c >> 15) | (c << 17)) + 0xa282ead8) & 0xFFFFFFFF
data = open(sys.argv[1], "rb").read()
off, out = 0, []
while off < len(data):
    n, = struct.unpack("<Q", data[off:off + 8])
    assert struct.unpack("<I", data[off + 8:off + 12])[0] == mask(crc32c(data[off:off + 8])), "length CRC"
    rec = data[off + 12:off + 12 + n]
    assert struct.unpack("<I", data[off + 12 + n:off + 16 + n])[0] == mask(crc32c(rec)), "data CRC"
    out.append(subprocess.run(["protoc", "--decode_raw"], input=rec, capture_output=True, check=True).stdout.decode())
    off += 16 + n
text = "\n".join(out)
need = ['3: "brain.Event:2"', '1: "lm loss"', '1: "learning-rate"', '1: "grad-norm"', '1: "tokens-per-second"',
        '1: "lm loss validation"', '1: "lm loss validation ppl"', '1: "peak-memory-mib"']
missing = [s for s in need if s not in text]
steps = sorted({int(l.split(":")[1]) for l in text.splitlines() if l.startswith("2: ")})
print(f"{len(out)} records, CRCs good; steps {steps}")
if missing or steps != [1, 2, 3, 4]:
    print("FAIL: missing", missing, "steps", steps); print(out[1]); sys.exit(1)
print("ok: protoc --decode_raw reads every record: file_version, the tags and steps 1..4")
PY
