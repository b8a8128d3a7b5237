#!/usr/bin/env bash
# --tensorboard-dir end to end. Every record of a run's event file is unframed (its two masked
# CRC32Cs checked, in Python's standard library) and decoded by protoc, a protocol-buffer decoder
# trident did not write: --decode_raw (no schema) must show the file_version, the "lm loss" and
# "learning-rate" tags and the steps; --decode with TensorBoard's field numbers gives the values,
# held against the same run's --metrics-file:
#  - 4 iterations, validation at 2 and 4, interval 1: the file_version event first, the training
#    tags at steps 1..4 with the metrics file's values (as float32), the validation tags at 2 and 4,
#    peak-memory-mib at 4, no loss-scale;
#  - --tensorboard-log-interval 3 with --fp16 --loss-scale 1024: training tags (with loss-scale) at
#    step 3 only, the validation tags still at 2 and 4;
#  - a --tensorboard-dir that cannot be created and --tensorboard-log-interval 0 fail with messages
#    naming the path and the flag.
# Environment: TRIDENT, DATA, VOCAB, MERGES, WORK.
set -u
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
command -v protoc >/dev/null || { echo "FAIL: protoc not found (scripts/deps.sh installs protobuf-compiler)"; exit 1; }
train() { # name, extra flags...
  local name=$1; shift
  "$TRIDENT" train --data-path "$DATA" --vocab-file "$VOCAB" --merge-file "$MERGES" --split 949,50,1 \
    --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 32 --micro-batch-size 2 --train-iters 4 \
    --eval-interval 2 --eval-iters 1 --lr 1e-3 --log-interval 100 --peak-tflops 1 --metrics-file "$name.jsonl" "$@" >"$name.log" 2>&1
}
train every --tensorboard-dir tb/every || { echo "FAIL: training"; tail -5 every.log; exit 1; }
train third --tensorboard-dir tb/third --tensorboard-log-interval 3 --fp16 --loss-scale 1024 ||
  { echo "FAIL: training with --tensorboard-log-interval 3"; tail -5 third.log; exit 1; }
/usr/bin/python3 - tb/every every.jsonl tb/third third.jsonl <<'PY' || exit 1
import glob, json, math, struct, subprocess, sys, time
def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c ^= x
        for _ in range(8): c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF
mask = lambda c: (((c >> 15) | (c << 17)) + 0xa282ead8) & 0xFFFFFFFF
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
SCHEMA = """syntax = "proto3";
message Event { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
message Summary { message Value { string tag = 1; float simple_value = 2; } repeated Value value = 1; }
"""  # the field numbers of TensorBoard's event.proto and summary.proto
open("tb.proto", "w").write(SCHEMA)
protoc = lambda args, rec: subprocess.run(["protoc"] + args, input=rec, capture_output=True, check=True).stdout.decode()
def events(d):
    """The one event file in d, each record decoded by protoc: its fields, and decode_raw's text."""
    files = glob.glob(d + "/events.out.tfevents.*")
    assert len(files) == 1, f"{d}: {files}"
    data, off, out, raw = open(files[0], "rb").read(), 0, [], []
    while off < len(data):
        n, = struct.unpack("<Q", data[off:off + 8])
        assert struct.unpack("<I", data[off + 8:off + 12])[0] == mask(crc32c(data[off:off + 8])), "length CRC"
        rec = data[off + 12:off + 12 + n]
        assert struct.unpack("<I", data[off + 12 + n:off + 16 + n])[0] == mask(crc32c(rec)), "data CRC"
        raw.append(protoc(["--decode_raw"], rec))
        ev = {}
        for line in protoc(["--decode=Event", "tb.proto"], rec).splitlines():
            key, _, val = line.strip().partition(": ")
            if key in ("wall_time", "simple_value"): ev[key] = float(val)
            if key == "step": ev[key] = int(val)
            if key in ("file_version", "tag"): ev[key] = json.loads(val)
        out.append(ev)
        off += 16 + n
    assert off == len(data), "trailing bytes"
    # without a schema (the bytes of some tags, e.g. "iteration-time", also parse as a message)
    text = "\n".join(raw)
    for s in ['3: "brain.Event:2"', '1: "lm loss"', '1: "learning-rate"']:
        assert s in text, f"protoc --decode_raw: no {s}"
    raw_steps = sorted({int(l[3:]) for l in text.splitlines() if l.startswith("2: ")})
    return out, raw_steps
def check(d, metrics, interval, scaled):
    evs, raw_steps = events(d)
    now = time.time()
    assert all(now - 600 < e["wall_time"] <= now for e in evs), "wall_time"
    assert evs[0].get("file_version") == "brain.Event:2" and "step" not in evs[0], f"first event {evs[0]}"
    got = {(e.get("step", 0), e["tag"]): e.get("simple_value", 0.0) for e in evs[1:]}
    assert len(got) == len(evs) - 1, "a tag twice at one step"
    want = {}
    for m in map(json.loads, open(metrics)):
        it = m["iteration"]
        if it % interval == 0:
            want.update({(it, "lm loss"): m["lm_loss"], (it, "learning-rate"): m["lr"], (it, "grad-norm"): m["grad_norm"],
                         (it, "tokens-per-second"): m["tokens_per_s"], (it, "mfu"): m["mfu"],
                         (it, "iteration-time"): m["elapsed_ms"] / 1e3})
            if scaled: want[(it, "loss-scale")] = m["loss_scale"]
        if "val_loss" in m:
            want.update({(it, "lm loss validation"): m["val_loss"], (it, "lm loss validation ppl"): m["val_ppl"]})
    peak = got.pop((4, "peak-memory-mib"), None)
    assert peak is not None and peak > 1, f"peak-memory-mib {peak}"
    assert set(got) == set(want), f"tags/steps: extra {sorted(set(got) - set(want))} missing {sorted(set(want) - set(got))}"
    for k, v in want.items():  # the metrics file prints some fields with 6 digits
        assert math.isclose(got[k], f32(v), rel_tol=1e-5), f"{k}: {got[k]} vs {v}"
    steps = sorted({s for s, _ in got})
    assert raw_steps == steps, f"protoc --decode_raw steps {raw_steps}"
    print(f"{d}: {len(evs)} records, CRCs good, protoc reads them all; steps {steps}; values match {metrics}")
    return steps
assert check(sys.argv[1], sys.argv[2], 1, False) == [1, 2, 3, 4]
assert check(sys.argv[3], sys.argv[4], 3, True) == [2, 3, 4]
PY
touch file
train baddir --tensorboard-dir file/tb; rc=$?
[ $rc -ne 0 ] && grep -q "file/tb" baddir.log || { echo "FAIL: --tensorboard-dir under a file: rc $rc"; cat baddir.log; exit 1; }
train badint --tensorboard-dir tb/x --tensorboard-log-interval 0; rc=$?
[ $rc -eq 2 ] && grep -q -- "--tensorboard-log-interval" badint.log ||
  { echo "FAIL: --tensorboard-log-interval 0: rc $rc"; cat badint.log; exit 1; }
echo "ok: protoc --decode_raw reads every record; tags, steps and values match the metrics file; bad flags fail"
