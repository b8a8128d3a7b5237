#!/usr/bin/env bash
# Context parallelism's figures (docs/parallelism.md, "Context parallelism"): at one long sequence on
# a small model (byte vocabulary), each run one sample an iteration on C ranks of this machine:
#   cp 1, 2, 4 (p2p): peak RSS per rank against the trainer's own prediction (the activations go
#     as 1 / C), time per iteration and tokens/s per rank against cp 1's;
#   cp 2 with all_gather and a2a: the same, beside p2p;
#   for each cp run, the cp group's communication from the trainer's breakdown (over the whole
#     run): exposed (blocked) and in flight, hidden, and the share of the run's time exposed.
# Figures are from iteration ITERS (the last; the first warms up). Ratios in one run are the
# signal on a shared machine; absolute times are not.
# With --experts E every layer is a mixture of E experts (top 2; the MoE block's buffers are of the
# rank's seq / C tokens too), and a run "comm:C:EP" carves expert parallelism EP out of dp x cp.
# Usage: bench/cp.sh [--seq 16384] [--layers 2] [--hidden 64] [--heads 4] [--iters 2] [--experts 0]
#                    [--runs "p2p:1 p2p:2 p2p:4 all_gather:2 a2a:2"]
# Environment: BUILD (default build), WORK (default $BUILD/bench_cp).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seq=16384 layers=2 hidden=64 heads=4 iters=2 experts=0 runs="p2p:1 p2p:2 p2p:4 all_gather:2 a2a:2"
while [ $# -gt 0 ]; do
  case $1 in
    --seq) seq=$2 ;; --layers) layers=$2 ;; --hidden) hidden=$2 ;; --heads) heads=$2 ;; --iters) iters=$2 ;;
    --runs) runs=$2 ;; --experts) experts=$2 ;;
    *) echo "bench/cp.sh: unknown option '$1' (see its header)" >&2; exit 2 ;;
  esac
  shift 2
done
BUILD=${BUILD:-$root/build}
TRIDENT=$BUILD/trident
WORK=${WORK:-$BUILD/bench_cp}
mkdir -p "$WORK"
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ ! -f "$WORK/bytes_text_document.bin" ]; then
  "$root/scripts/text-to-jsonl.sh" "$root/../shared/data/tinyshakespeare.txt" "$WORK/ts.jsonl" 1500 >/dev/null
  python3 "$root/tests/parallel/byte_tokenizer.py" "$WORK/bytes.json"
  "$TRIDENT" preprocess --input "$WORK/ts.jsonl" --output-prefix "$WORK/bytes" --tokenizer-type HuggingFaceTokenizer \
    --tokenizer-model "$WORK/bytes.json" --append-eod >/dev/null
fi
MODEL=(--num-layers "$layers" --hidden-size "$hidden" --num-attention-heads "$heads" --seq-length "$seq"
       --max-position-embeddings "$seq" --micro-batch-size 1 --global-batch-size 1)
[ "$experts" -gt 0 ] && MODEL+=(--num-experts "$experts" --moe-router-topk 2)
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model: ${MODEL[*]}, $iters iterations a run"
printf '| comm | cp%s | RSS/rank (MiB) | predicted | err | activations predicted (MiB) | s/iter | tokens/s/rank | vs cp 1 | cp exposed (ms) | in flight | hidden | exposed share |\n' \
  "$([ "$experts" -gt 0 ] && echo ' (x ep)')"
printf '|---|---|---|---|---|---|---|---|---|---|---|---|---|\n'
base=""
for r in $runs; do
  IFS=: read -r T C EP <<<"$r"
  EP=${EP:-1}
  log=$WORK/${T}_cp${C}_ep$EP.log
  epflag=()
  [ "$EP" -gt 1 ] && epflag=(--expert-model-parallel-size "$EP")
  mpirun --oversubscribe --bind-to none -np "$C" "$TRIDENT" train --data-path "$WORK/bytes_text_document" \
    --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$WORK/bytes.json" --split 90,10,0 "${MODEL[@]}" \
    --train-iters "$iters" --lr 1e-3 --eval-interval 1000 --eval-iters 1 --log-interval 1 \
    --context-parallel-size "$C" --cp-comm-type "$T" "${epflag[@]}" >"$log" 2>&1 ||
    { echo "| $T | $C | failed: see $log |"; continue; }
  python3 - "$log" "$T" "$C" "$iters" "${base:-0}" "$EP" >"$WORK/row" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
T, C, iters, base = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
it = [l for l in text.splitlines() if re.match(r"\s*iteration\s+%d/" % iters, l)][-1]
ms = float(re.search(r"elapsed time per iteration \(ms\): ([0-9.]+)", it).group(1))
m = re.search(r"peak memory \(RSS\), stage 0: ([0-9.]+) MiB measured, ([0-9.]+) MiB predicted", text)
rss, pred = float(m.group(1)), float(m.group(2))
x = re.search(r"cp\s+exposed\s+([0-9.]+) ms of ([0-9.]+) ms in flight \((\d+)% hidden\)", text)
tps = float(re.search(r"tokens/s: ([0-9.]+)", it).group(1)) / C  # the job's tokens/s, per rank
row = [T, str(C) + (" x ep %s" % sys.argv[6] if sys.argv[6] != "1" else ""), "%.1f" % rss, "%.1f" % pred, "%+.1f%%" % (100 * (rss - pred) / pred),
       re.search(r"activations \(rank 0\): ([0-9.]+) MiB", text).group(1), "%.1f" % (ms / 1e3), "%.0f" % tps, "%.2fx" % (tps / base) if base > 0 else "1.00x"]
if x:
    # the breakdown's totals are over the whole run (iters iterations)
    row += [x.group(1), x.group(2), x.group(3) + "%", "%.1f%%" % (100 * float(x.group(1)) / (iters * ms))]
else:
    row += ["-", "-", "-", "-"]
print("| " + " | ".join(row) + " |")
print("BASE %.3f" % tps)
EOF
  grep -v '^BASE' "$WORK/row"
  [ "$C" = 1 ] && base=$(grep '^BASE' "$WORK/row" | cut -d' ' -f2)
done
