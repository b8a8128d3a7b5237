#!/usr/bin/env bash
# BERT training steps on the CPU: trident against the PyTorch peer (bench/peer_torch_bert.py,
# Debian's python3-torch), back to back in one run, same shapes, all cores. The BERT counterpart
# of bench/cpu_gpt2.sh.
#
# trident trains on tinyshakespeare preprocessed here with --split-sentences (documents of 8
# paragraphs, so samples fill most of the sequence); the peer on random tokens with lengths in
# [seq/2, seq]. Both compute every position of the sequence (padding included) through the layers
# and the LM head, as Megatron does.
#
# Usage: bench/bert.sh [--shapes LIST] [--steps N] [--repeat R] [--threads T] [--precision fp32|bf16]
#                      [--blas-core env|auto|NAME] [--no-peer] [--no-trident]
#   --shapes   comma-separated, each LAYERSxHIDDENxHEADS:MBSxSEQ, or the names
#              base (12x768x12:8x128, BERT-base), large (24x1024x16:8x128, BERT-large); default base
#   --steps    steps per run (6); the first warms up and is left out of every figure
#   --repeat   trident and the peer alternate R times per shape (the ratio of each pair, then the median)
#   --threads  OMP_NUM_THREADS of both sides (nproc)
#   --precision  fp32 (default), or bf16: trident --bf16 against the peer's bf16 autocast
#   --blas-core  OPENBLAS_CORETYPE for both sides: env (default, as the environment says), auto
#              (SkylakeX where the CPU has AVX-512) or a core name
# Environment: BUILD (default build-bench, configured with TRIDENT_NATIVE=${NATIVE:-OFF}, as
# cpu_gpt2.sh), WORK (default $BUILD/bench: logs and metrics), VOCAB (default
# $BUILD/node/bert/vocab.txt, bert-base-uncased's WordPiece vocabulary, 30522 entries; made by
# scripts/test-deps.sh when missing), TRIDENT (default $BUILD/trident).
# Both sides count mbs * seq tokens per step, padding included (Megatron's throughput).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shapes=base steps=6 repeat=1 threads=$(nproc) blas_core=env peer=1 trident=1 precision=fp32
while [ $# -gt 0 ]; do
  case $1 in
    --shapes) shapes=$2 ;; --steps) steps=$2 ;; --repeat) repeat=$2 ;; --threads) threads=$2 ;;
    --blas-core) blas_core=$2 ;; --precision) precision=$2 ;;
    --no-peer) peer=0; shift; continue ;;
    --no-trident) trident=0; shift; continue ;;
    *) echo "bert.sh: unknown option $1" >&2; exit 2 ;;
  esac; shift 2
done
case $precision in
  fp32) tprec=() pprec=() ;;
  bf16) tprec=(--bf16) pprec=(--bf16) ;;
  *) echo "bert.sh: --precision fp32 or bf16" >&2; exit 2 ;;
esac
build=${BUILD:-$root/build-bench}
TRIDENT=${TRIDENT:-$build/trident}
peer_py=$root/bench/peer_torch_bert.py
pyt=/usr/bin/python3
if ! $pyt -c "import torch" 2>/dev/null; then
  if [ "$peer" = 1 ] && [ "$(id -u)" -eq 0 ]; then DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch >/dev/null
  elif [ "$peer" = 1 ]; then echo "bert.sh: the peer needs Debian's python3-torch: apt-get install python3-torch" >&2; exit 1; fi
fi
work=${WORK:-$build/bench}
mkdir -p "$work"
if [ "$trident" = 1 ]; then
  if [ ! -x "$TRIDENT" ]; then
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTRIDENT_NATIVE="${NATIVE:-OFF}" >/dev/null
    cmake --build "$build" -j "$(nproc)" >/dev/null
  fi
  VOCAB=${VOCAB:-$build/node/bert/vocab.txt}
  [ -f "$VOCAB" ] || "$root/scripts/test-deps.sh" "$build" >/dev/null ||
    echo "bert.sh: no $VOCAB (scripts/test-deps.sh failed); set VOCAB to a BERT vocab.txt" >&2
  data=$work/bert_shk_text_sentence
  if [ ! -f "$data.idx" ]; then
    "$root/scripts/text-to-jsonl.sh" "${SHAKESPEARE:-$root/../shared/data/tinyshakespeare.txt}" "$work/bert_par.jsonl"
    $pyt -c 'import json, sys
p = [json.loads(l)["text"] for l in open(sys.argv[1])]
with open(sys.argv[2], "w") as f:
    for i in range(0, len(p), 8): f.write(json.dumps({"text": "\n".join(p[i:i + 8])}) + "\n")' \
      "$work/bert_par.jsonl" "$work/bert_shk.jsonl"
    "$TRIDENT" preprocess --input "$work/bert_shk.jsonl" --output-prefix "$work/bert_shk" --split-sentences \
      --tokenizer-type BertWordPieceLowerCase --vocab-file "$VOCAB" --workers 2 >/dev/null
  fi
fi

avx512=0
grep -q ' avx512f' /proc/cpuinfo && grep -q ' avx512bw' /proc/cpuinfo && grep -q ' avx512vl' /proc/cpuinfo && avx512=1
case $blas_core in
  env) benv= ;;
  auto) benv=; [ $avx512 = 1 ] && benv=OPENBLAS_CORETYPE=SkylakeX ;;
  *) benv=OPENBLAS_CORETYPE=$blas_core ;;
esac
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), avx512 $avx512, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "OpenBLAS kernels: ${benv:-OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(auto)}} for both sides; trident $TRIDENT"

run_trident() { # layers hidden heads mbs seq -> prints "best median tokens mfu", or returns 1
  local log=$work/trident-bert-$1-$2-$4-$5.log metrics=$work/metrics-bert-$1-$2-$4-$5.jsonl
  rm -f "$metrics"
  # shellcheck disable=SC2086
  env $benv OMP_NUM_THREADS="$threads" "$TRIDENT" train --model bert --data-path "$data" --split 100,0,0 \
    --tokenizer-type BertWordPieceLowerCase --vocab-file "$VOCAB" \
    --num-layers "$1" --hidden-size "$2" --num-attention-heads "$3" --micro-batch-size "$4" --seq-length "$5" \
    --max-position-embeddings 512 --global-batch-size "$4" --train-iters "$steps" --eval-iters 0 \
    --hidden-dropout 0 --attention-dropout 0 --lr 1e-4 --metrics-file "$metrics" --log-interval 1000 \
    "${tprec[@]}" > "$log" 2>&1 || return 1
  [ -s "$metrics" ] || return 1
  $pyt - "$metrics" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
rows = rows[1:] or rows  # the first step warms up
ms = [r["elapsed_ms"] for r in rows]
b = min(rows, key=lambda r: r["elapsed_ms"])
print(f'{b["elapsed_ms"]:.1f} {statistics.median(ms):.1f} {b["tokens_per_s"]:.1f} {100*b["mfu"]:.1f}')
PY
}

run_peer() { # layers hidden heads mbs seq -> prints "best tokens tflops"
  # shellcheck disable=SC2086
  env $benv OMP_NUM_THREADS="$threads" $pyt "$peer_py" --layers "$1" --hidden "$2" --heads "$3" --mbs "$4" \
    --seq "$5" --steps "$steps" --threads "$threads" --vocab 30522 "${pprec[@]}" > "$work/peer-bert.out" 2>&1 ||
    { cat "$work/peer-bert.out" >&2; return 1; }
  local f=$work/peer-bert.out
  echo "$(grep -o 'best_step_ms [0-9.]*' "$f" | grep -o '[0-9.]*$') $(grep -o 'tokens_per_s [0-9.]*' "$f" | grep -o '[0-9.]*$')" \
    "$(grep -o 'model_tflops [0-9.]*' "$f" | grep -o '[0-9.]*$')"
}

IFS=, read -r -a list <<<"$shapes"
for shape in "${list[@]}"; do
  case $shape in
    base) shape=12x768x12:8x128 ;; large) shape=24x1024x16:8x128 ;;
  esac
  IFS='x:' read -r L H NH MB S <<<"$shape"
  echo
  echo "== bert: $L layers, hidden $H, $NH heads, micro-batch $MB x seq $S, vocab 30522 (30592 padded), $precision, AdamW, $threads threads, $steps steps (load $(cut -d' ' -f1 /proc/loadavg))"
  ratios=()
  for ((r = 1; r <= repeat; r++)); do
    ttok=
    if [ "$trident" = 1 ]; then
      log=$work/trident-bert-$L-$H-$MB-$S.log
      if read -r tbest tmed ttok tmfu < <(run_trident "$L" "$H" "$NH" "$MB" "$S") && [ -n "$ttok" ]; then
        echo "trident: best step $tbest ms, median $tmed ms, $ttok tokens/s, MFU $tmfu%"
      else
        ttok=
        echo "trident: failed; the end of $log:"
        tail -n 3 "$log" | sed 's/^/  /'
      fi
    fi
    if [ "$peer" = 1 ]; then
      if read -r pbest ptok ptf < <(run_peer "$L" "$H" "$NH" "$MB" "$S") && [ -n "$ptok" ]; then
        echo "peer:    best step $pbest ms, $ptok tokens/s, $ptf model TFLOP/s ($(grep -o 'torch [^ ]*' "$work/peer-bert.out"))"
        if [ -n "$ttok" ]; then
          ratio=$(awk "BEGIN{printf \"%.2f\", $ttok/$ptok}")
          ratios+=("$ratio")
          echo "ratio (trident tokens/s / peer tokens/s): $ratio"
        fi
      else
        echo "peer: failed (see above)"
      fi
    fi
  done
  if [ ${#ratios[@]} -gt 1 ]; then
    echo "median ratio over ${#ratios[@]} pairs: $(printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END{print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}')"
  fi
done
