#!/usr/bin/env bash
# The GPU check (docs/gpu.md), one command for a GPU machine without a package registry:
#   scripts/gpu-check.sh OUTDIR [BUNDLE [--smoke]]  (BUNDLE: default build/gpu-bundle.tar.xz, else the
#                                   folder build/gpu-bundle: what scripts/gpu-bundle.sh made)
# Runs, each under its own time limit so that the whole ends inside 8 minutes:
#  1. the GPU tests: tests/gpu/test_gpu_backend (the core's entries: memory, copies, GEMMs, dtypes),
#     test_cuda_elementwise and test_cuda_attention_moe (the kernels' entries), each against the cpu's;
#  2. GPT-2 small (12 x 768, 12 heads, seq 512, micro-batch 2), fp32, dropout 0.1: 20 iterations
#     with --backend cuda and with --backend cpu from one seed, each iteration's loss within
#     1e-4 relative (the worst printed);
#  3. the tests of 1 under compute-sanitizer --tool memcheck (the core's without its timed figures).
# Every step ends by 450 s after the start (its own limit or the time left, the smaller).
# Writes OUTDIR/*.log, OUTDIR/nvidia-smi.txt and OUTDIR/summary.json; exit 0 when every step passed.
# On the device tool: run with carry ["build/gpu-bundle.tar.xz"], OUTDIR under $OUT.
set -uo pipefail
OUT_DIR=${1:?usage: scripts/gpu-check.sh OUTDIR [BUNDLE] [--smoke]}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUNDLE=${2:-$ROOT/build/gpu-bundle.tar.xz}
SMOKE=${3:-} # --smoke: a 2-layer model instead of GPT-2 small, to try the script itself without a GPU
[ -e "$BUNDLE" ] || BUNDLE=$ROOT/build/gpu-bundle
mkdir -p "$OUT_DIR" && OUT_DIR=$(cd "$OUT_DIR" && pwd)
if [ -f "$BUNDLE" ]; then # the archive the device tool carried: unpack it (xz, or Python's lzma)
  dir=${TMPDIR:-/tmp}/trident-gpu-bundle
  rm -rf "$dir" && mkdir -p "$dir"
  { xz -dc "$BUNDLE" 2>/dev/null || python3 -c 'import lzma, sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' "$BUNDLE"; } |
    tar xf - -C "$dir" || { echo "gpu-check: cannot unpack $BUNDLE" >&2; exit 2; }
  BUNDLE=$dir
fi
[ -f "$BUNDLE/env.sh" ] || { echo "gpu-check: no bundle at $BUNDLE: run scripts/gpu-bundle.sh where trident was built" >&2; exit 2; }
# shellcheck source=/dev/null
source "$BUNDLE/env.sh"
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
done
# pip's cuBLAS (PyTorch's), where the toolkit has none
for d in $(python3 -c 'import nvidia.cu13, os; print(os.path.dirname(nvidia.cu13.__file__) + "/lib")' 2>/dev/null) \
         $(python3 -c 'import nvidia.cublas, os; print(os.path.dirname(nvidia.cublas.__file__) + "/lib")' 2>/dev/null); do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
done
T0=$(date +%s)
DEADLINE=$((T0 + 450)) # every step ends by then, whatever its own limit: the whole inside 8 minutes
declare -A RC SECS
left() { local l=$((DEADLINE - $(date +%s))); [ "$l" -lt "$1" ] && echo $((l > 1 ? l : 1)) || echo "$1"; } # min(limit, time left)
step() { # name limit-seconds command...: runs it into OUT_DIR/name.log, records rc and seconds
  local name=$1 limit s
  limit=$(left "$2")
  shift 2
  s=$(date +%s)
  timeout -k 10 "$limit" "$@" >"$OUT_DIR/$name.log" 2>&1
  RC[$name]=$?
  SECS[$name]=$(($(date +%s) - s))
  echo "gpu-check: $name: rc ${RC[$name]} in ${SECS[$name]} s"
}
if command -v nvidia-smi >/dev/null; then # a query only: the card's settings are left as they are
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$OUT_DIR/nvidia-smi.txt" 2>&1
else
  echo "no nvidia-smi" >"$OUT_DIR/nvidia-smi.txt"
fi
GPU=$(head -1 "$OUT_DIR/nvidia-smi.txt" | sed 's/"/\\"/g')
echo "gpu-check: $GPU; bundle $(head -1 "$BUNDLE/MANIFEST")"
trident --version >"$OUT_DIR/version.txt" 2>&1
SEED=$(date +%s)

# 1. the backend's entries against the cpu's
step gpu_backend 90 test_gpu_backend "$SEED"
step gpu_elementwise 45 test_cuda_elementwise
step gpu_attention_moe 45 test_cuda_attention_moe
# 2. GPT-2 small, cuda against cpu (the cpu run on the other cores at the same time)
D=$BUNDLE/data
GPT2=(train --data-path "$D/ts_text_document" --vocab-file "$D/vocab.json" --merge-file "$D/merges.txt"
      --split 949,50,1 --num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 512
      --max-position-embeddings 1024 --micro-batch-size 2 --global-batch-size 2 --train-iters 20 --lr 6e-4
      --lr-warmup-iters 2 --hidden-dropout 0.1 --attention-dropout 0.1 --eval-iters 0 --log-interval 1 --seed 1234
      --peak-tflops 1)
[ "$SMOKE" = --smoke ] && GPT2=("${GPT2[@]}" --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64)
s=$(date +%s) lim=$(left 240)
( cd "$OUT_DIR" && OMP_NUM_THREADS=$(($(nproc) - 1)) timeout -k 10 "$lim" trident "${GPT2[@]}" --backend cpu \
    --metrics-file gpt2_cpu.jsonl >gpt2_cpu.log 2>&1; echo $? >gpt2_cpu.rc ) &
( cd "$OUT_DIR" && OMP_NUM_THREADS=1 timeout -k 10 "$lim" trident "${GPT2[@]}" --backend cuda \
    --metrics-file gpt2_cuda.jsonl >gpt2_cuda.log 2>&1; echo $? >gpt2_cuda.rc )
wait
SECS[gpt2]=$(($(date +%s) - s))
WORST=$(python3 - "$OUT_DIR/gpt2_cpu.jsonl" "$OUT_DIR/gpt2_cuda.jsonl" <<'PY' 2>"$OUT_DIR/gpt2_compare.log"
import json, sys
def losses(p):
    return {r["iteration"]: r["lm_loss"] for r in map(json.loads, open(p)) if "lm_loss" in r}
c, g = losses(sys.argv[1]), losses(sys.argv[2])
if len(c) < 20 or set(c) != set(g):
    print("nan"); sys.exit(0)
for i in sorted(c):
    print(i, c[i], g[i], abs(g[i] - c[i]) / abs(c[i]), file=sys.stderr)
print(max(abs(g[i] - c[i]) / abs(c[i]) for i in c))
PY
)
[ -n "$WORST" ] || WORST=nan
if [ "$(cat "$OUT_DIR/gpt2_cpu.rc" 2>/dev/null)" = 0 ] && [ "$(cat "$OUT_DIR/gpt2_cuda.rc")" = 0 ] &&
   python3 -c "import sys; sys.exit(0 if float('$WORST') <= 1e-4 else 1)"; then RC[gpt2]=0; else RC[gpt2]=1; fi
echo "gpu-check: gpt2: rc ${RC[gpt2]} in ${SECS[gpt2]} s, worst relative loss difference $WORST"
# 3. memcheck (after GPT-2: what the deadline cuts short first)
MEMCHECK=(compute-sanitizer --tool memcheck --error-exitcode 99 --target-processes application-only)
if command -v compute-sanitizer >/dev/null; then
  step memcheck 90 "${MEMCHECK[@]}" "$(command -v test_gpu_backend)" "$SEED" --sanitizer
  step memcheck_elementwise 60 "${MEMCHECK[@]}" "$(command -v test_cuda_elementwise)"
  step memcheck_attention_moe 60 "${MEMCHECK[@]}" "$(command -v test_cuda_attention_moe)"
else
  for k in memcheck memcheck_elementwise memcheck_attention_moe; do
    echo "compute-sanitizer not found" >"$OUT_DIR/$k.log"; RC[$k]=127; SECS[$k]=0
  done
fi

checks=$(grep -o '[0-9]* of [0-9]* checks passed' "$OUT_DIR/gpu_backend.log" | tail -1)
# issue 34's memory figure: the device pool's peak against trident's prediction (the trainer's line)
devmem=$(grep -o 'peak device memory, stage 0: .*' "$OUT_DIR/gpt2_cuda.log" 2>/dev/null | head -1 | sed 's/"/\\"/g')
figures=$(grep '^figures:' "$OUT_DIR/gpu_backend.log" | head -1 | sed 's/"/\\"/g')
failed=0
for k in gpu_backend gpu_elementwise gpu_attention_moe memcheck memcheck_elementwise memcheck_attention_moe gpt2; do
  [ "${RC[$k]}" = 0 ] || failed=1
done
cat >"$OUT_DIR/summary.json" <<JSON
{"date": "$(date -u +%FT%TZ)", "gpu": "$GPU", "bundle": "$(head -1 "$BUNDLE/MANIFEST" | sed 's/"/\\"/g')",
 "version": "$(head -1 "$OUT_DIR/version.txt" | sed 's/"/\\"/g')", "seed": $SEED,
 "gpu_backend": {"rc": ${RC[gpu_backend]}, "seconds": ${SECS[gpu_backend]}, "checks": "$checks", "figures": "$figures"},
 "gpu_elementwise": {"rc": ${RC[gpu_elementwise]}, "seconds": ${SECS[gpu_elementwise]}},
 "gpu_attention_moe": {"rc": ${RC[gpu_attention_moe]}, "seconds": ${SECS[gpu_attention_moe]}},
 "memcheck": {"rc": ${RC[memcheck]}, "seconds": ${SECS[memcheck]}},
 "memcheck_elementwise": {"rc": ${RC[memcheck_elementwise]}, "seconds": ${SECS[memcheck_elementwise]}},
 "memcheck_attention_moe": {"rc": ${RC[memcheck_attention_moe]}, "seconds": ${SECS[memcheck_attention_moe]}},
 "gpt2_small_fp32_20_iterations": {"rc": ${RC[gpt2]}, "seconds": ${SECS[gpt2]}, "worst_relative_loss_difference": "$WORST",
   "tolerance": 1e-4, "device_memory": "$devmem", "cpu_rc": "$(cat "$OUT_DIR/gpt2_cpu.rc" 2>/dev/null)", "cuda_rc": "$(cat "$OUT_DIR/gpt2_cuda.rc" 2>/dev/null)"},
 "seconds": $(($(date +%s) - T0)), "passed": $((1 - failed))}
JSON
# the device tool brings back at most 8 files: everything in one archive, the main ones beside it
tgz=$(mktemp "${TMPDIR:-/tmp}/gpu-check-logs.XXXXXX")
tar czf "$tgz" -C "$OUT_DIR" . && mv "$tgz" "$OUT_DIR/logs.tar.gz" &&
  find "$OUT_DIR" -maxdepth 1 -type f ! -name logs.tar.gz ! -name summary.json ! -name gpu_backend.log \
    ! -name memcheck.log ! -name gpt2_compare.log ! -name gpu_elementwise.log ! -name gpu_attention_moe.log -delete
echo "gpu-check: $([ $failed = 0 ] && echo PASSED || echo FAILED) in $(($(date +%s) - T0)) s; $OUT_DIR/summary.json"
exit $failed
