#!/usr/bin/env bash
# Context parallelism's bad combinations: each job exits 2 with one line naming the flags and the
# rule (rank 0 says it; every rank checks the flags before anything is allocated, as
# failures.sh's layouts). Usage: cp_refusals.sh TRIDENT DATA_PREFIX VOCAB MERGES
set -u
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
trident=$1 data=$2 vocab=$3 merges=$4
SCALE=${TD_TIME_SCALE:-1}
base=(--vocab-file "$vocab" --merge-file "$merges" --data-path "$data" --split 90,10,0 --num-layers 2
      --hidden-size 32 --num-attention-heads 4 --seq-length 16 --micro-batch-size 1 --train-iters 2 --peak-tflops 1)
fail=0
# check name np text flags...: exit 2 and `text` in the output
check() {
  local name=$1 np=$2 text=$3; shift 3
  local out rc n
  out=$(timeout $((50 * SCALE)) mpirun --oversubscribe --bind-to none -np "$np" "$trident" train "${base[@]}" "$@" 2>&1); rc=$?
  n=$(grep -cF -- "$text" <<<"$out")
  if [ "$rc" -eq 2 ] && [ "$n" -ge 1 ]; then
    echo "ok: $name: $(grep -F -- "$text" <<<"$out" | head -1)"
  else
    echo "FAIL: $name: exit $rc (want 2), \"$text\" said $n times; output:"; echo "$out" | tail -5
    fail=$((fail + 1))
  fi
}
check "seq not divisible by 2 x cp" 3 "--seq-length 16 is not divisible by 2 x --context-parallel-size 3" \
  --context-parallel-size 3
check "world not divisible by tp x cp x pp" 3 "the world size 3 is not divisible by --tensor-model-parallel-size 1 x --context-parallel-size 2" \
  --context-parallel-size 2
check "heads not divisible by cp (a2a)" 4 "splits each tensor-parallel rank's 2 attention heads and 2 key/value groups over --context-parallel-size 4" \
  --context-parallel-size 4 --num-attention-heads 2 --cp-comm-type a2a
check "comm type unknown" 2 "--cp-comm-type 'ring' is not one of a2a|all_gather|p2p" --context-parallel-size 2 --cp-comm-type ring
check "ep not dividing dp x cp" 2 "--expert-model-parallel-size 4 does not divide the data-parallel x context-parallel size 2" \
  --context-parallel-size 2 --num-experts 4 --expert-model-parallel-size 4
[ "$fail" -eq 0 ]
