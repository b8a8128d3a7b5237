#!/usr/bin/env bash
# Failure behaviour under mpirun: every bad layout exits 2 with one line naming the flag, before
# any rank allocates; a rank killed mid-run ends the whole job, non-zero, within 30 seconds.
# Usage: failures.sh TRIDENT DATA_PREFIX VOCAB MERGES
set -u
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
trident=$1 data=$2 vocab=$3 merges=$4
mpirun=(mpirun --oversubscribe --bind-to none)
base=(--vocab-file "$vocab" --merge-file "$merges" --split 90,10,0 --num-layers 4
      --hidden-size 32 --num-attention-heads 4 --seq-length 16 --micro-batch-size 1 --train-iters 2 --peak-tflops 1)
pass=0 fail=0
check() { # name expected_rc expected_text np flags...
  local name=$1 want=$2 text=$3 np=$4; shift 4
  local out rc
  # the dataset comes first so a check may name another
  out=$(timeout 60 "${mpirun[@]}" -np "$np" "$trident" train "${base[@]}" "$@" 2>&1); rc=$?
  if [ "$rc" -eq "$want" ] && grep -qF -- "$text" <<<"$out"; then
    echo "ok: $name (exit $rc): $(grep -F -- "$text" <<<"$out" | head -1)"; pass=$((pass + 1))
  else
    echo "FAIL: $name: exit $rc (want $want), output:"; echo "$out" | tail -5; fail=$((fail + 1))
  fi
}
check "heads not divisible by tp" 2 "--num-attention-heads 4 is not divisible by --tensor-model-parallel-size 3" 3 --tensor-model-parallel-size 3 --data-path "$data"
check "world not divisible by tp x pp" 2 "the world size 3 is not divisible" 3 --tensor-model-parallel-size 2 --data-path "$data"
check "layers not divisible by pp" 2 "--num-layers 4 is not divisible by --pipeline-model-parallel-size 3" 3 --pipeline-model-parallel-size 3 --data-path "$data"
check "ffn not divisible by tp" 2 "--ffn-hidden-size 30 is not divisible by --tensor-model-parallel-size 4" 4 --tensor-model-parallel-size 4 --ffn-hidden-size 30 --data-path "$data"
check "batch not divisible by mbs x dp" 2 "--global-batch-size 5 is not divisible by --micro-batch-size 1 x data-parallel size 2" 2 --global-batch-size 5 --data-path "$data"
check "virtual stages need layers" 2 "--num-layers 4 is not divisible by --pipeline-model-parallel-size 2 x --num-layers-per-virtual-pipeline-stage 3" 2 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 3 --data-path "$data"
check "interleaving needs micro-batches % pp" 2 "divisible by --pipeline-model-parallel-size 2" 2 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 --global-batch-size 3 --data-path "$data"
check "unknown flag" 2 "unknown flag --tensor-parallel" 2 --tensor-parallel 2 --data-path "$data"
check "missing dataset" 1 "/nonexistent/ds" 2 --data-path /nonexistent/ds

# A rank killed with SIGKILL in the middle of training: the job must end, non-zero, within 30 s.
log=$(mktemp)
"${mpirun[@]}" -np 4 "$trident" train "${base[@]}" --data-path "$data" --train-iters 100000 --pipeline-model-parallel-size 2 >"$log" 2>&1 &
job=$!
for _ in $(seq 1 100); do grep -q "iteration" "$log" && break; sleep 0.2; done
victim=$(pgrep -P "$job" | tail -1) # a rank of this job (not of a test running beside it)
start=$(date +%s)
kill -9 "$victim"
for _ in $(seq 1 300); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$job" 2>/dev/null; then
  echo "FAIL: job still running 30 s after a rank was killed"; fail=$((fail + 1)); ranks=$(pgrep -P "$job"); kill -9 "$job" $ranks
else
  wait "$job"; rc=$?
  took=$(( $(date +%s) - start ))
  if [ "$rc" -ne 0 ]; then echo "ok: killed rank ends the job in ${took} s (exit $rc)"; pass=$((pass + 1))
  else echo "FAIL: job exited 0 after a rank was killed"; fail=$((fail + 1)); fi
fi
rm -f "$log"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
