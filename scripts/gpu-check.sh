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
#  3. on the bytes-tokenized tinyshakespeare of the layout matrix (tests/parallel/layouts.cmake),
#     several ranks on the one GPU, each layout against the one-rank GPU run within 1e-5
#     (compare_runs): tp 2, pp 2 interleaved, dp 2 with the distributed optimizer and both
#     overlaps, tp 2 x pp 2 x dp 2 (8 ranks), and a MoE's tp 2 x ep 2; the one-rank GPU run
#     against the cpu's (1e-4);
#  3b. NCCL at world size 1: tests/gpu/test_gpu_nccl (the world's twin on device buffers), and the
#     one-rank layout run with --comm nccl against --comm mpi, bit for bit (compare_runs, tolerance 0);
#  4. Llama-shaped, MoE and BERT models on the GPU against the cpu from one seed (1e-4), the MoE
#     with --moe-grouped-gemm against it without (1e-5), and GPT-2-shaped bf16 against fp32
#     after 50 iterations (final loss within 2%);
#  5. generate --greedy from a GPU-trained checkpoint: cuda's tokens equal the cpu's; serve on the
#     GPU answers a completion; that checkpoint resumed on the cpu and a cpu one on the GPU, each
#     against the uninterrupted run (1e-5);
#  6. tokens/s of GPT-2 124M, bf16, micro-batch 16, seq 1024 (the first speed figure);
#  7. the tests of 1 under compute-sanitizer --tool memcheck (the core's without its timed figures).
# Every step ends by 450 s after the start (its own limit or the time left, the smaller); the
# later steps are what the deadline cuts short first. --smoke runs steps 3-6 with --backend cpu
# in place of cuda (and small models), to try the script itself on a machine without a GPU.
# Writes OUTDIR/*.log, OUTDIR/nvidia-smi.txt and OUTDIR/summary.json; exit 0 when every step passed.
# On the device tool: run with carry ["build/gpu-bundle.tar.xz"], OUTDIR under $OUT.
set -uo pipefail
OUT_DIR=${1:?usage: scripts/gpu-check.sh OUTDIR [BUNDLE] [--smoke]}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUNDLE=${2:-$ROOT/build/gpu-bundle.tar.xz}
SMOKE=${3:-} # --smoke: a 2-layer model instead of GPT-2 small, to try the script itself without a GPU
BK=cuda # the backend under test in steps 3-6
[ "$SMOKE" = --smoke ] && BK=cpu
[ -e "$BUNDLE" ] || BUNDLE=$ROOT/build/gpu-bundle
mkdir -p "$OUT_DIR" && OUT_DIR=$(cd "$OUT_DIR" && pwd)
# shellcheck source=scripts/gpu-env.sh
source "$ROOT/scripts/gpu-env.sh"
gpu_bundle_env gpu-check "$BUNDLE"
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
fstep() { # name limit-seconds function: step for a shell function (its commands bound themselves by left)
  local name=$1 limit s pid w
  limit=$(left "$2")
  s=$(date +%s)
  ( "$3" ) >"$OUT_DIR/$name.log" 2>&1 &
  pid=$!
  ( sleep "$limit"; kill -TERM "$pid" 2>/dev/null ) &
  w=$!
  wait "$pid"
  RC[$name]=$?
  kill "$w" 2>/dev/null; wait "$w" 2>/dev/null
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
# 3. the layouts on the one GPU, each against the one-rank GPU run (the layout matrix's model)
L=$OUT_DIR/layouts
mkdir -p "$L"
LAYD=(--data-path "$D/bytes_text_document" --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$D/bytes.json")
LAY=(--split 90,10,0 --num-layers 8 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64
     --hidden-dropout 0.1 --attention-dropout 0.1 --global-batch-size 8 --train-iters 4 --lr 1e-3 --min-lr 1e-4
     --lr-warmup-iters 1 --lr-decay-style cosine --eval-interval 2 --eval-iters 1 --clip-grad 1.0 --seed 7
     --peak-tflops 1 --log-interval 100 --distributed-timeout-minutes 2)
MOE_ARCH=(--num-layers 4 --swiglu --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 64 --moe-aux-loss-coeff 1e-2
          --moe-z-loss-coeff 1e-3 --moe-shared-expert-intermediate-size 32 --moe-shared-expert-gate)
LLAMA_ARCH=(--normalization RMSNorm --position-embedding-type rope --swiglu --ffn-hidden-size 128
            --group-query-attention --num-query-groups 2 --disable-bias-linear --untie-embeddings-and-output-weights)
lay_run() { # name backend np tp mbs flags...: one layout run into $L/name.{jsonl,params,log}
  local name=$1 be=$2 np=$3 tp=$4 mbs=$5; shift 5
  OMP_NUM_THREADS=1 timeout -k 5 "$(left 60)" mpirun --oversubscribe --bind-to none -np "$np" trident train "${LAYD[@]}" "${LAY[@]}" \
    --backend "$be" --tensor-model-parallel-size "$tp" --make-vocab-size-divisible-by $((512 / tp)) --micro-batch-size "$mbs" \
    --metrics-file "$L/$name.jsonl" --dump-params "$L/$name.params" "$@" >"$L/$name.log" 2>&1 </dev/null
}
lay_cmp() { # ref name tol: compare_runs, its verdict line kept
  compare_runs "$L/$1.jsonl" "$L/$2.jsonl" "$L/$1.params" "$L/$2.params" "$3" >"$L/$2.cmp" 2>&1
  local rc=$?
  echo "$2 vs $1 (tol $3): rc $rc, $(tail -1 "$L/$2.cmp")"
  return $rc
}
layouts() {
  local bad=0
  rm -f "$L"/*.jsonl
  lay_run base "$BK" 1 1 2 || { echo "base: rc $?"; tail -5 "$L/base.log"; return 1; }
  lay_run cpu_base cpu 1 1 2 && lay_cmp cpu_base base 1e-4 || bad=1
  lay_run tp2 "$BK" 2 2 2 && lay_cmp base tp2 1e-5 || bad=1
  lay_run pp2_vp2 "$BK" 2 1 1 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 &&
    lay_cmp base pp2_vp2 1e-5 || bad=1
  lay_run distopt_dp2_overlap "$BK" 2 1 1 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather \
    --ddp-bucket-size 5000 && lay_cmp base distopt_dp2_overlap 1e-5 || bad=1
  lay_run tp2_pp2_dp2 "$BK" 8 2 1 --pipeline-model-parallel-size 2 && lay_cmp base tp2_pp2_dp2 1e-5 || bad=1
  # activation recomputation on the GPU: bitwise the run without it (as the cpu's layout matrix
  # holds it: the recomputed forward is the same deterministic kernels)
  lay_run rc_full "$BK" 1 1 2 --recompute-granularity full --recompute-method uniform --recompute-num-layers 3 &&
    lay_cmp base rc_full 0 || bad=1
  lay_run rc_selective "$BK" 1 1 2 --recompute-granularity selective && lay_cmp base rc_selective 0 || bad=1
  lay_run moe_base "$BK" 1 1 2 "${MOE_ARCH[@]}" || { echo "moe_base: rc $?"; bad=1; }
  lay_run moe_tp2_ep2 "$BK" 4 2 2 --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall "${MOE_ARCH[@]}" &&
    lay_cmp moe_base moe_tp2_ep2 1e-5 || bad=1
  return $bad
}
fstep layouts 150 layouts
# 3b. NCCL at world size 1 (docs/gpu.md, "NCCL"): the world's twin on device buffers against the
#     arithmetic (tests/gpu/test_gpu_nccl.c), and the one-rank layout run with --comm nccl equal to
#     --comm mpi bit for bit. --smoke: the test skips (77) and --comm nccl on the cpu exits 2.
nccl() {
  local bad=0 rc
  timeout -k 5 "$(left 45)" test_gpu_nccl
  rc=$?
  echo "test_gpu_nccl: rc $rc"
  if [ "$SMOKE" = --smoke ]; then [ $rc = 77 ] || bad=1; else [ $rc = 0 ] || bad=1; fi
  lay_run nccl_mpi "$BK" 1 1 2 --comm mpi || { echo "nccl_mpi: rc $?"; tail -5 "$L/nccl_mpi.log"; return 1; }
  if [ "$SMOKE" = --smoke ]; then
    lay_run nccl_nccl "$BK" 1 1 2 --comm nccl
    rc=$?
    echo "--comm nccl on the $BK backend: rc $rc (2 expected): $(grep -m1 -- '--comm nccl' "$L/nccl_nccl.log")"
    [ $rc = 2 ] || bad=1
  else
    lay_run nccl_nccl "$BK" 1 1 2 --comm nccl && lay_cmp nccl_mpi nccl_nccl 0 || { bad=1; tail -5 "$L/nccl_nccl.log"; }
    grep -m1 'comm: device buffers' "$L/nccl_nccl.log"
  fi
  return $bad
}
fstep nccl 60 nccl
# 4. the model kinds on the GPU against the cpu from one seed, and bf16 against fp32
models() {
  local bad=0
  lay_run llama_cpu cpu 1 1 2 "${LLAMA_ARCH[@]}" && lay_run llama "$BK" 1 1 2 "${LLAMA_ARCH[@]}" &&
    lay_cmp llama_cpu llama 1e-4 || bad=1
  lay_run moe_cpu cpu 1 1 2 "${MOE_ARCH[@]}" && lay_cmp moe_cpu moe_base 1e-4 || bad=1
  # the experts' GEMMs grouped (matmul_grouped_fwd/bwd: cublasSgemmGroupedBatched) against the
  # same run one expert at a time: other cuBLAS kernels and db's other summation order, so 1e-5
  lay_run moe_grouped "$BK" 1 1 2 "${MOE_ARCH[@]}" --moe-grouped-gemm && lay_cmp moe_base moe_grouped 1e-5 || bad=1
  if [ -f "$D/bert_text_sentence.idx" ]; then
    local LAYD=(--model bert --data-path "$D/bert_text_sentence" --tokenizer-type BertWordPieceLowerCase
                --vocab-file "$D/bert_vocab.txt")
    lay_run bert_cpu cpu 1 1 2 --num-layers 4 && lay_run bert "$BK" 1 1 2 --num-layers 4 && lay_cmp bert_cpu bert 1e-4 || bad=1
  else
    echo "bert: no BERT data in the bundle (scripts/test-deps.sh before scripts/gpu-bundle.sh)"; bad=1
  fi
  # bf16 against fp32: a GPT-2-vocabulary model, 50 iterations, the last training loss within 2%
  local M=(train --data-path "$D/ts_text_document" --vocab-file "$D/vocab.json" --merge-file "$D/merges.txt"
           --split 949,50,1 --num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 256
           --micro-batch-size 8 --global-batch-size 8 --train-iters 50 --lr 1e-3 --lr-warmup-iters 5
           --eval-iters 0 --log-interval 1 --seed 5 --peak-tflops 1 --backend "$BK")
  [ "$SMOKE" = --smoke ] && M=("${M[@]}" --hidden-size 64 --seq-length 64 --train-iters 10)
  OMP_NUM_THREADS=1 timeout -k 5 "$(left 60)" trident "${M[@]}" --metrics-file "$L/fp32.jsonl" >"$L/fp32.log" 2>&1 &&
  OMP_NUM_THREADS=1 timeout -k 5 "$(left 60)" trident "${M[@]}" --bf16 --metrics-file "$L/bf16.jsonl" >"$L/bf16.log" 2>&1 &&
  python3 - "$L/fp32.jsonl" "$L/bf16.jsonl" "$([ "$SMOKE" = --smoke ] && echo 0.2 || echo 1)" <<'PY' || bad=1
import json, sys
f, b = ([json.loads(l)["lm_loss"] for l in open(p) if "lm_loss" in l] for p in sys.argv[1:3])
r = abs(b[-1] - f[-1]) / f[-1]
print("bf16 against fp32 after %d iterations: %.4f against %.4f, %.2f%% apart (limit 2%%); first loss %.4f" % (len(f), b[-1], f[-1], 100 * r, f[0]))
sys.exit(0 if len(f) == len(b) and r <= 0.02 and f[-1] < f[0] - float(sys.argv[3]) else 1)
PY
  return $bad
}
fstep models 120 models
# 5. generation, the server and checkpoints across devices
devices() {
  local bad=0 C=$L/ck
  rm -rf "$C" "$C"_cpu
  # a 4-iteration GPU run saving at 2 (and at its end), and the uninterrupted metrics of both devices
  lay_run ck_full "$BK" 1 1 2 && lay_run ck_full_cpu cpu 1 1 2 || { echo "ckpt: uninterrupted runs failed"; return 1; }
  lay_run ck_half "$BK" 1 1 2 --save "$C" --exit-interval 2 || { echo "ckpt: the GPU's first half failed"; return 1; }
  lay_run ck_half_cpu cpu 1 1 2 --save "$C"_cpu --exit-interval 2 || { echo "ckpt: the cpu's first half failed"; return 1; }
  # the resumed runs append their iterations 3-4 to the first half's 1-2
  cp "$L/ck_half.jsonl" "$L/ck_resumed_cpu.jsonl" && cp "$L/ck_half_cpu.jsonl" "$L/ck_resumed_gpu.jsonl" || return 1
  lay_run ck_resumed_cpu cpu 1 1 2 --load "$C" && lay_cmp ck_full ck_resumed_cpu 1e-5 || bad=1
  lay_run ck_resumed_gpu "$BK" 1 1 2 --load "$C"_cpu && lay_cmp ck_full_cpu ck_resumed_gpu 1e-5 || bad=1
  # greedy generation from the GPU's checkpoint: the same tokens on both devices
  local G=(generate --load "$C" --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$D/bytes.json" --greedy
           --max-new-tokens 48 --prompt "First Citizen:")
  OMP_NUM_THREADS=1 timeout -k 5 "$(left 30)" trident "${G[@]}" --backend "$BK" >"$L/gen_gpu.txt" 2>"$L/gen_gpu.log" &&
  OMP_NUM_THREADS=1 timeout -k 5 "$(left 30)" trident "${G[@]}" --backend cpu >"$L/gen_cpu.txt" 2>"$L/gen_cpu.log" &&
    cmp -s "$L/gen_gpu.txt" "$L/gen_cpu.txt" && [ -s "$L/gen_gpu.txt" ] &&
    echo "generate --greedy: the same $(wc -c <"$L/gen_gpu.txt") bytes on both devices" ||
    { echo "generate --greedy: the devices differ or failed"; bad=1; }
  # serve on the GPU: one completion over HTTP
  local port=$((20000 + RANDOM % 20000))
  OMP_NUM_THREADS=1 trident serve --load "$C" --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$D/bytes.json" \
    --backend "$BK" --port "$port" >"$L/serve.log" 2>&1 &
  local pid=$! ans="" i
  for i in $(seq 60); do
    [ "$(left 5)" -lt 5 ] && break
    ans=$(python3 - "$port" <<'PY' 2>/dev/null
import json, sys, urllib.request
req = urllib.request.Request("http://127.0.0.1:%s/v1/completions" % sys.argv[1], method="POST",
      data=json.dumps({"prompt": "First Citizen:", "max_tokens": 16, "temperature": 0}).encode(),
      headers={"Content-Type": "application/json"})
r = json.load(urllib.request.urlopen(req, timeout=10))
print(json.dumps(r["choices"][0]["text"]), r["usage"]["completion_tokens"])
PY
) && break
    sleep 0.5
  done
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  if [ -n "$ans" ]; then echo "serve: answered $ans"; else echo "serve: no answer"; tail -5 "$L/serve.log"; bad=1; fi
  # plan --calibrate on the device: one rank, and two sharing it (each gets half its memory)
  OMP_NUM_THREADS=1 timeout -k 5 "$(left 60)" trident plan --calibrate --backend "$BK" --calibrate-seconds 0.2 \
    >"$L/cal1.json" 2>"$L/cal1.log" &&
  OMP_NUM_THREADS=1 timeout -k 5 "$(left 60)" mpirun --oversubscribe --bind-to none -np 2 trident plan --calibrate \
    --backend "$BK" --calibrate-seconds 0.2 >"$L/cal2.json" 2>"$L/cal2.log" </dev/null &&
  python3 - "$L/cal1.json" "$L/cal2.json" "$BK" <<'PY' || bad=1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
gpu = sys.argv[3] == "cuda"
print("plan --calibrate: %s: fp32 %.3g, bf16 %.3g FLOP/s, %.1f GiB (two ranks: %.1f each), held %.2f GiB, HBM %.3g B/s"
      % (a["name"], a["peak_fp32_flops"], a["peak_bf16_flops"], a["memory_gib"], b["memory_gib"], a["reserved_gib"], a["memory_bandwidth"]))
ok = a["framework"] == ("trident-cuda" if gpu else "trident-cpu") and b["gpus_per_node"] == 2
if gpu:
    ok = ok and a["peak_bf16_flops"] > 2 * a["peak_fp32_flops"] > 0 and 0.45 < b["memory_gib"] / a["memory_gib"] < 0.55
sys.exit(0 if ok else 1)
PY
  return $bad
}
fstep devices 120 devices
# 6. the first speed figure: GPT-2 124M, bf16, micro-batch 16, seq 1024
speed() {
  local S=(train --data-path "$D/ts_text_document" --vocab-file "$D/vocab.json" --merge-file "$D/merges.txt"
           --split 949,50,1 --num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024
           --max-position-embeddings 1024 --micro-batch-size 16 --global-batch-size 16 --train-iters 12 --lr 6e-4
           --lr-warmup-iters 2 --eval-iters 0 --log-interval 1 --seed 1 --bf16 --backend "$BK")
  [ "$SMOKE" = --smoke ] && S=("${S[@]}" --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64
                               --micro-batch-size 2 --global-batch-size 2 --train-iters 4)
  OMP_NUM_THREADS=1 timeout -k 5 "$(left 90)" trident "${S[@]}" --metrics-file "$L/speed.jsonl" >"$L/speed.log" 2>&1 || return 1
  python3 - "$L/speed.jsonl" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
t = [x["tokens_per_s"] for x in r if "tokens_per_s" in x][2:] or [x.get("tokens_per_s", 0) for x in r]
t.sort()
print("GPT-2 124M bf16 mbs 16 seq 1024: median %.0f tokens/s over iterations 3-%d" % (t[len(t) // 2], len(r)))
PY
}
fstep speed 100 speed

# 7. memcheck (after GPT-2: what the deadline cuts short first)
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
lines() { python3 -c 'import json, sys; print(json.dumps(open(sys.argv[1]).read().splitlines()[-12:]))' "$OUT_DIR/$1.log" 2>/dev/null || echo '[]'; }
failed=0
for k in gpu_backend gpu_elementwise gpu_attention_moe memcheck memcheck_elementwise memcheck_attention_moe gpt2 \
         layouts nccl models devices speed; do
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
 "layouts": {"rc": ${RC[layouts]}, "seconds": ${SECS[layouts]}, "lines": $(lines layouts)},
 "nccl": {"rc": ${RC[nccl]}, "seconds": ${SECS[nccl]}, "lines": $(lines nccl)},
 "models": {"rc": ${RC[models]}, "seconds": ${SECS[models]}, "lines": $(lines models)},
 "devices": {"rc": ${RC[devices]}, "seconds": ${SECS[devices]}, "lines": $(lines devices)},
 "speed": {"rc": ${RC[speed]}, "seconds": ${SECS[speed]}, "lines": $(lines speed)},
 "seconds": $(($(date +%s) - T0)), "passed": $((1 - failed))}
JSON
# the device tool brings back at most 8 files: everything in one archive, the main ones beside it
tgz=$(mktemp "${TMPDIR:-/tmp}/gpu-check-logs.XXXXXX")
tar czf "$tgz" -C "$OUT_DIR" . && mv "$tgz" "$OUT_DIR/logs.tar.gz" &&
  find "$OUT_DIR" -maxdepth 1 -type f ! -name logs.tar.gz ! -name summary.json ! -name gpu_backend.log \
    ! -name memcheck.log ! -name gpt2_compare.log ! -name gpu_elementwise.log ! -name gpu_attention_moe.log -delete
rm -rf "$L"
echo "gpu-check: $([ $failed = 0 ] && echo PASSED || echo FAILED) in $(($(date +%s) - T0)) s; $OUT_DIR/summary.json"
exit $failed
