#!/usr/bin/env bash
# trident against the PyTorch peer and llm.c on one GPU (issue 35), one command for the GPU machine:
#   bench/gpu_speed.sh OUTDIR [BUNDLE] [--smoke] [--shapes LIST] [--no-compile] [--seconds N]
# BUNDLE: default build/gpu-bundle.tar.xz, else the folder build/gpu-bundle (scripts/gpu-bundle.sh,
# unpacked as scripts/gpu-check.sh does: scripts/gpu-env.sh). Shapes (LIST: comma-separated names):
#   gpt2_124m  GPT-2 124M: 12 x 768, 12 heads, micro-batch 16, seq 1024
#   gpt2_774m  GPT-2 774M: 36 x 1280, 20 heads, micro-batch 8, seq 1024
#   llama_1b   Llama-style 1.2B (Llama 3.2 1B's body on GPT-2's vocabulary): 16 x 2048, 32 heads,
#              8 key/value groups, SwiGLU 8192, RMSNorm, rope (theta 500000), untied, no biases;
#              micro-batch 8, seq 1024
# each run by: trident train --backend cuda --bf16 (random init, the bundle's GPT-2-tokenized
# tinyshakespeare, 10 iterations, the median tokens/s of iterations 3-10 from --metrics-file);
# the PyTorch peer (bf16 autocast, torch.compile, SDPA, fused AdamW: ../shared/bench/peer_torch_gpt2.py
# as the bundle carries it, bench/peer_torch_llama.py; 6 steps, the best after the compiling
# first); llm.c's train_gpt2cu on the GPT-2 shapes where the bundle has it (bench/llmc-build.sh;
# 10 steps, the median of steps 3-10). First the bf16 GEMM peak: torch.matmul at 8192^3. Besides:
# attention alone at 124M's shape (bench/gpu_attention.c with the tensor-core kernels and with
# TRIDENT_CUDA_ATTENTION=simt, and torch's scaled_dot_product_attention), and generation at batch
# 1 and 8 from 124M's checkpoint against bench/peer_torch_generate.py.
# Order: the peak, 124M's three, attention alone, 774M's trident and llm.c, generation, the Llama's
# trident, then the 774M and Llama peers (torch.compile is the slow part): each run under its own limit and all ending by
# --seconds (default 285) after the start, what the deadline cuts being the last.
# Writes OUTDIR/speed.json (per shape: tokens/s, ratios, MFU against the measured peak by
# Megatron's FLOPs formula, peak device memory), OUTDIR/speed.md (the table) and OUTDIR/logs.tar.gz.
# --smoke: the same flow on the cpu with tiny shapes (trident --backend cpu, the peers on the cpu
# without --compile, no llm.c), to try the script where there is no GPU. Exit 0 when every run
# that was due ran and gave a figure.
set -uo pipefail
USAGE="usage: bench/gpu_speed.sh OUTDIR [BUNDLE] [--smoke] [--shapes gpt2_124m,gpt2_774m,llama_1b] [--no-compile] [--seconds N]"
[ $# -ge 1 ] && [[ $1 != --* ]] || { echo "gpu_speed: no OUTDIR: $USAGE" >&2; exit 2; }
OUT_DIR=$1; shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUNDLE=$ROOT/build/gpu-bundle.tar.xz
SMOKE=0 SHAPES=gpt2_124m,gpt2_774m,llama_1b COMPILE=--compile TOTAL=285
if [ $# -gt 0 ] && [[ $1 != --* ]]; then BUNDLE=$1; shift; fi
while [ $# -gt 0 ]; do
  case $1 in
    --smoke) SMOKE=1 ;;
    --no-compile) COMPILE= ;;
    --shapes|--seconds)
      [ $# -ge 2 ] || { echo "gpu_speed: $1 needs a value: $USAGE" >&2; exit 2; }
      if [ "$1" = --shapes ]; then SHAPES=$2; else TOTAL=$2; fi
      shift ;;
    *) echo "gpu_speed: unknown option '$1': $USAGE" >&2; exit 2 ;;
  esac
  shift
done
[[ $TOTAL =~ ^[0-9]+$ ]] || { echo "gpu_speed: --seconds '$TOTAL': give whole seconds" >&2; exit 2; }
T0=$(date +%s)
DEADLINE=$((T0 + TOTAL))
[ -e "$BUNDLE" ] || BUNDLE=$ROOT/build/gpu-bundle
mkdir -p "$OUT_DIR" && OUT_DIR=$(cd "$OUT_DIR" && pwd)
# shellcheck source=scripts/gpu-env.sh
source "$ROOT/scripts/gpu-env.sh"
gpu_bundle_env gpu_speed "$BUNDLE"
D=$BUNDLE/data
PY=$ROOT/bench/gpu_speed_peer.py
PYTHON=${PYTHON:-python3} # the peers': the first of PYTHON and Debian's python3 that has PyTorch
$PYTHON -c 'import torch' 2>/dev/null || { /usr/bin/python3 -c 'import torch' 2>/dev/null && PYTHON=/usr/bin/python3; }
PEER_GPT2=$BUNDLE/peer/peer_torch_gpt2.py
[ -f "$PEER_GPT2" ] || PEER_GPT2=$ROOT/../shared/bench/peer_torch_gpt2.py
PEER_LLAMA=$ROOT/bench/peer_torch_llama.py
LLMC=$BUNDLE/llmc
ITERS=10 STEPS=6 WARMUP=2
if [ $SMOKE = 1 ]; then
  BK=cpu DEV=cpu COMPILE="" ITERS=4 STEPS=3
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
  #       name      arch  layers hidden heads groups ffn mbs seq
  TABLE="gpt2_124m gpt2  2 64 4 4 256 2 64
gpt2_774m gpt2 3 96 4 4 384 2 64
llama_1b llama 2 64 4 2 128 2 64"
else
  BK=cuda DEV=cuda
  export OMP_NUM_THREADS=1
  TABLE="gpt2_124m gpt2 12 768 12 12 3072 16 1024
gpt2_774m gpt2 36 1280 20 20 5120 8 1024
llama_1b llama 16 2048 32 8 8192 8 1024"
fi
declare -A ARCH LAY HID NH GRP FFN MBS SEQ
for s in ${SHAPES//,/ }; do
  row=$(awk -v n="$s" '$1 == n' <<<"$TABLE")
  [ -n "$row" ] || { echo "gpu_speed: --shapes: no shape '$s' (gpt2_124m, gpt2_774m, llama_1b)" >&2; exit 2; }
  read -r _ ARCH[$s] LAY[$s] HID[$s] NH[$s] GRP[$s] FFN[$s] MBS[$s] SEQ[$s] <<<"$row"
done
if command -v nvidia-smi >/dev/null; then # a query only: the card's settings are left as they are
  GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)
else
  GPU="no nvidia-smi"
fi
echo "gpu_speed: $GPU; bundle $(head -1 "$BUNDLE/MANIFEST"); shapes $SHAPES; ${TOTAL} s; peers $PEER_GPT2, $PEER_LLAMA ($PYTHON)"

FAILED=0
left() { local l=$((DEADLINE - $(date +%s))); [ "$l" -lt "$1" ] && echo $((l > 1 ? l : 1)) || echo "$1"; } # min(limit, time left)
job() { # name limit-seconds command...: runs it in OUT_DIR into name.log, its exit status into name.rc
  local name=$1 lim s rc
  lim=$(left "$2"); shift 2
  if [ $((DEADLINE - $(date +%s))) -lt 5 ]; then
    echo "skipped: the ${TOTAL} s deadline" >"$OUT_DIR/$name.log"; echo 124 >"$OUT_DIR/$name.rc"
    echo "gpu_speed: $name: skipped (deadline)"; FAILED=1; return
  fi
  s=$(date +%s)
  (cd "$OUT_DIR" && timeout -k 10 "$lim" "$@") >"$OUT_DIR/$name.log" 2>&1
  rc=$?
  echo $rc >"$OUT_DIR/$name.rc"
  [ $rc = 0 ] || FAILED=1
  echo "gpu_speed: $name: rc $rc in $(($(date +%s) - s)) s (limit $lim)"
}
trident_run() { # shape
  local s=$1 lim=45
  # shellcheck disable=SC2054 # --split 949,50,1 is one argument
  local A=(trident train --data-path "$D/ts_text_document" --vocab-file "$D/vocab.json" --merge-file "$D/merges.txt"
           --split 949,50,1 --num-layers "${LAY[$s]}" --hidden-size "${HID[$s]}" --num-attention-heads "${NH[$s]}"
           --seq-length "${SEQ[$s]}" --max-position-embeddings "${SEQ[$s]}" --micro-batch-size "${MBS[$s]}"
           --global-batch-size "${MBS[$s]}" --train-iters "$ITERS" --lr 6e-4 --lr-warmup-iters 2 --eval-iters 0
           --log-interval 1 --seed 1 --bf16 --backend "$BK" --metrics-file "$OUT_DIR/${s}_trident.jsonl")
  [ "${ARCH[$s]}" = llama ] &&
    A+=(--normalization RMSNorm --position-embedding-type rope --rotary-base 500000 --swiglu --ffn-hidden-size "${FFN[$s]}"
        --group-query-attention --num-query-groups "${GRP[$s]}" --disable-bias-linear --untie-embeddings-and-output-weights)
  [ "$s" = gpt2_124m ] || lim=60
  [ "$s" = gpt2_124m ] && A+=(--save "$CK") # generation's model, below
  rm -f "$OUT_DIR/${s}_trident.jsonl"
  job "${s}_trident" $lim "${A[@]}"
}
# generation at batch 1 and 8 (greedy, prompt 16, 128 new tokens, fp32 on both sides) from the
# checkpoint of 124M's run, against bench/peer_torch_generate.py on the same device and shape
CK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-speed-ck.XXXXXX")
trap 'rm -rf "$CK"' EXIT
gen_run() { # shape
  local s=$1 b prompts new=128
  [ "${SEQ[$s]}" -ge 144 ] || new=$((SEQ[$s] - 16)) # --smoke's shapes hold 64 positions
  [ -f "$CK/latest_checkpointed_iteration.txt" ] || { echo "gpu_speed: generation: no checkpoint from ${s}_trident"; FAILED=1; return; }
  for b in 1 8; do
    prompts=(); for ((i = 0; i < b; i++)); do prompts+=("$(printf ' the%.0s' $(seq 16))"); done
    job "gen_b${b}_trident" 30 trident generate --load "$CK" --backend "$BK" --vocab-file "$D/vocab.json" \
      --merge-file "$D/merges.txt" --prompt "${prompts[@]}" --max-new-tokens $new --greedy --ignore-eod
    job "gen_b${b}_torch" 60 "$PYTHON" "$ROOT/bench/peer_torch_generate.py" --device $DEV --batch $b --prompt 16 \
      --new $new --layers "${LAY[$s]}" --hidden "${HID[$s]}" --heads "${NH[$s]}" --threads "${OMP_NUM_THREADS:-1}"
  done
}
torch_run() { # shape
  local s=$1 A
  if [ "${ARCH[$s]}" = gpt2 ]; then
    [ -f "$PEER_GPT2" ] || { echo "no peer_torch_gpt2.py in the bundle nor at $PEER_GPT2" >"$OUT_DIR/${s}_torch.log"; echo 2 >"$OUT_DIR/${s}_torch.rc"; FAILED=1; return; }
    A=("$PEER_GPT2" --layers "${LAY[$s]}" --heads "${NH[$s]}" --hidden "${HID[$s]}" --vocab 50257)
  else
    A=("$PEER_LLAMA" --layers "${LAY[$s]}" --hidden "${HID[$s]}" --heads "${NH[$s]}" --groups "${GRP[$s]}"
       --ffn "${FFN[$s]}" --vocab 50304 --theta 500000)
  fi
  # shellcheck disable=SC2086 # COMPILE is one flag or none
  job "${s}_torch" 90 "$PYTHON" "$PY" run "${A[@]}" --mbs "${MBS[$s]}" --seq "${SEQ[$s]}" --steps $STEPS \
    --device $DEV --bf16 $COMPILE
}
LLMC_NOTE=
llmc_run() { # shape
  local s=$1 lim=30
  [ "${ARCH[$s]}" = gpt2 ] || return 0
  if [ $SMOKE = 1 ]; then LLMC_NOTE="not run: --smoke (llm.c needs a GPU)"; return 0; fi
  if [ ! -x "$LLMC/train_gpt2cu" ]; then
    LLMC_NOTE="not carried: the bundle has no llmc/train_gpt2cu (bench/llmc-build.sh before scripts/gpu-bundle.sh)"
    echo "gpu_speed: llm.c $LLMC_NOTE"; return 0
  fi
  [ "$s" = gpt2_124m ] || lim=40
  job "${s}_llmc" $lim "$LLMC/train_gpt2cu" -i "$LLMC/ts_train.bin" -j "$LLMC/ts_val.bin" -e "d${LAY[$s]}" \
    -b "${MBS[$s]}" -t "${SEQ[$s]}" -d $((MBS[$s] * SEQ[$s])) -x $ITERS -l 6e-4 -u 2 -v 100000 -m 1 -s 0 -h 0
}

attn_run() { # -: attention alone at GPT-2 124M's shape: the tensor-core kernels (bf16 inputs, and fp32
  # ones in a bf16 run), the CUDA-core ones, torch's SDPA
  local AT ATT
  if [ $SMOKE = 1 ]; then AT=(--batch 1 --seq 128 --heads 2 --head-size 64 --reps 2)
  else AT=(--batch 16 --seq 1024 --heads 12 --head-size 64 --reps 20); fi
  ATT=$(command -v gpu_attention || echo "$BUNDLE/bin/gpu_attention")
  if [ $SMOKE = 1 ]; then
    job attention_trident 30 "$ATT" --backend cpu --dtype fp32 "${AT[@]}"
  else
    job attention_trident 30 "$ATT" --backend cuda --dtype bf16 "${AT[@]}"
    job attention_trident_f32in 30 "$ATT" --backend cuda --dtype fp32 --bf16-run "${AT[@]}"
    job attention_trident_simt 30 env TRIDENT_CUDA_ATTENTION=simt "$ATT" --backend cuda --dtype bf16 "${AT[@]}"
  fi
  job attention_torch 60 "$PYTHON" "$PY" attention --device $DEV "${AT[@]}"
}

# the bf16 GEMM peak, then the runs in order of what matters most
if [ $SMOKE = 1 ]; then job peak 30 "$PYTHON" "$PY" peak --device cpu --n 256 --seconds 0.3
else job peak 30 "$PYTHON" "$PY" peak --device cuda --n 8192 --seconds 3; fi
ORDER=()
[ -n "${ARCH[gpt2_124m]:-}" ] && ORDER+=("trident gpt2_124m" "llmc gpt2_124m" "torch gpt2_124m")
ORDER+=("attn -")
[ -n "${ARCH[gpt2_774m]:-}" ] && ORDER+=("trident gpt2_774m" "llmc gpt2_774m")
[ -n "${ARCH[gpt2_124m]:-}" ] && ORDER+=("gen gpt2_124m")
[ -n "${ARCH[llama_1b]:-}" ] && ORDER+=("trident llama_1b")
[ -n "${ARCH[gpt2_774m]:-}" ] && ORDER+=("torch gpt2_774m")
[ -n "${ARCH[llama_1b]:-}" ] && ORDER+=("torch llama_1b")
for o in "${ORDER[@]}"; do
  read -r side s <<<"$o"
  "${side}_run" "$s"
done

python3 - "$OUT_DIR/shapes.json" <<PY
import json, sys
rows = """$(for s in ${SHAPES//,/ }; do echo "$s ${ARCH[$s]} ${LAY[$s]} ${HID[$s]} ${NH[$s]} ${GRP[$s]} ${FFN[$s]} ${MBS[$s]} ${SEQ[$s]}"; done)"""
shapes = []
for r in rows.split("\n"):
    n, arch, *v = r.split()
    shapes.append(dict(zip(("layers", "hidden", "heads", "groups", "ffn", "mbs", "seq"), map(int, v)), name=n, arch=arch, padded_vocab=50304))
json.dump({"date": "$(date -u +%FT%TZ)", "gpu": """$GPU""", "bundle": """$(head -1 "$BUNDLE/MANIFEST")""", "smoke": $SMOKE == 1,
           "warmup": $WARMUP, "llmc_note": """$LLMC_NOTE""" or None, "shapes": shapes}, open(sys.argv[1], "w"), indent=1)
PY
python3 "$PY" report "$OUT_DIR" || FAILED=1
# every run that was due gave its figure
python3 - "$OUT_DIR/speed.json" <<'PY' || FAILED=1
import json, sys
r = json.load(open(sys.argv[1]))
miss = ["%s %s" % (n, side) for n, s in r["shapes"].items() for side in ("trident", "torch", "llmc")
        if side in s and s[side].get("rc") is not None and not s[side].get("tokens_per_s")]
if r["bf16_gemm_peak_tflops"] is None: miss.append("the GEMM peak")
if miss: print("gpu_speed: no figure from: " + ", ".join(miss)); sys.exit(1)
PY
# the device tool brings back few files: the logs in one archive, the two results beside it
tgz=$(mktemp "${TMPDIR:-/tmp}/gpu-speed-logs.XXXXXX")
tar czf "$tgz" -C "$OUT_DIR" --exclude logs.tar.gz . && mv "$tgz" "$OUT_DIR/logs.tar.gz" &&
  find "$OUT_DIR" -maxdepth 1 -type f ! -name logs.tar.gz ! -name speed.json ! -name speed.md -delete
echo "gpu_speed: $([ $FAILED = 0 ] && echo PASSED || echo FAILED) in $(($(date +%s) - T0)) s; $OUT_DIR/speed.json"
exit $FAILED
