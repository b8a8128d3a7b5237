#!/usr/bin/env bash
# trident train's command-line contract, every exit code checked (no pipe hides one): --help;
# flag-parser and config errors exit 2 naming the flag, printed once however many ranks
# (mpirun -np 4); a missing tokenizer file is a flag error; a --split that leaves nothing to
# train on is a flag error, while an empty validation or test split only means no validation.
# Environment from tests/e2e/train.cmake: TRIDENT, DATA (a dataset prefix), VOCAB, MERGES.
set -u
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1 OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_mpi_yield_when_idle=1
MPIRUN=(mpirun --oversubscribe --bind-to none)
SCALE=${TD_TIME_SCALE:-1} # the build's slowness (tests/CMakeLists.txt, "Limits"): 10 under the sanitizers
. "$(dirname "$0")/../session_dir.sh"
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

# expect NAME RC TEXT CMD...: CMD must exit RC and print TEXT (a fixed string) on stdout or stderr.
expect() {
  local name=$1 want=$2 text=$3; shift 3
  out=$(timeout $((120 * SCALE)) "$@" 2>&1); rc=$?
  if [ "$rc" = "$want" ] && grep -qF -- "$text" <<<"$out"; then ok "$name: exit $rc: $(grep -m1 -F -- "$text" <<<"$out")"
  else bad "$name: exit $rc (expected $want, and '$text' in the output):"; echo "$out" | tail -5; fi
}
# once NAME: the last output holds exactly one "error:" line.
once() {
  local n; n=$(grep -c "error:" <<<"$out")
  [ "$n" = 1 ] && ok "$1: printed once" || { bad "$1: $n error lines"; echo "$out" | head -8; }
}

TOK=(--vocab-file "$VOCAB" --merge-file "$MERGES")
TINY=(--data-path "$DATA" "${TOK[@]}" --num-layers 1 --hidden-size 8 --num-attention-heads 2 --seq-length 8
      --micro-batch-size 1 --train-iters 2 --eval-interval 1 --eval-iters 1 --peak-tflops 1)
# (--peak-tflops: the runs that train do not hold the MFU; without it each measures the GEMM peak at
# its start and end, half a second each)

expect "--help" 0 "--tensor-model-parallel-size" "$TRIDENT" train --help
expect "bad value" 2 "--num-layers 'two' is not an integer" "$TRIDENT" train --num-layers two
expect "no data" 2 "--data-path is required" "$TRIDENT" train --train-iters 2
# --backend: a name of the registry (src/backend/registry.c), before anything is allocated
for cmd in train eval generate serve convert plan; do
  expect "$cmd: unknown backend" 2 "--backend 'tpu' is not one of auto|cpu" "$TRIDENT" $cmd --backend tpu
done
expect "iterations and samples" 2 "exactly one of" "$TRIDENT" train --data-path x "${TOK[@]}" --train-iters 1 \
  --train-samples 8
expect "missing --vocab-file" 2 "--vocab-file is required" "$TRIDENT" train --data-path "$DATA" --train-iters 1
expect "vocab file not there" 2 "--vocab-file $PWD/nowhere/vocab.json: No such file or directory" \
  "$TRIDENT" train --data-path "$DATA" --vocab-file "$PWD/nowhere/vocab.json" --merge-file "$MERGES" --train-iters 1
expect "merge file not there" 2 "--merge-file nowhere.txt: No such file or directory" \
  "$TRIDENT" train --data-path "$DATA" --vocab-file "$VOCAB" --merge-file nowhere.txt --train-iters 1
expect "train weight 0" 2 "--split 0,1,0 gives the train split weight 0" "$TRIDENT" train "${TINY[@]}" --split 0,1,0
expect "no training documents" 2 "--split 1,100000,0 leaves the train split of $DATA with 0 documents" \
  "$TRIDENT" train "${TINY[@]}" --split 1,100000,0
expect "empty validation split (weight, no documents)" 0 "leaves no validation documents: no validation runs" \
  "$TRIDENT" train "${TINY[@]}" --split 100000,1,0
expect "empty test split (weight, no documents)" 0 "iteration        2/       2" \
  "$TRIDENT" train "${TINY[@]}" --split 100000,0,1
# the mixture of experts' flags (docs/moe.md): each error names the flag, exit 2, once on 2 ranks
expect "moe flag without experts" 2 "--moe-router-topk needs --num-experts" "$TRIDENT" train "${TINY[@]}" --moe-router-topk 2
expect "more experts a token than there are" 2 "--moe-router-topk 3 is more than --num-experts 2" \
  "$TRIDENT" train "${TINY[@]}" --num-experts 2 --moe-router-topk 3
expect "expert bias without sigmoid" 2 "--moe-router-enable-expert-bias needs --moe-router-score-function sigmoid" \
  "$TRIDENT" train "${TINY[@]}" --num-experts 4 --moe-router-enable-expert-bias
# a tokenizer.json that does not load: rank 0 opens it (and broadcasts the vocabulary's size), so
# one line says why and every rank exits 1, none waiting on the others
unigram=$(mktemp --suffix=.json) && echo '{"model": {"type": "Unigram"}}' > "$unigram"
expect "a tokenizer.json of another model, 2 ranks" 1 "model Unigram is not supported" \
  "${MPIRUN[@]}" -np 2 "$TRIDENT" train --data-path "$DATA" --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$unigram" \
  --num-layers 1 --hidden-size 8 --num-attention-heads 2 --seq-length 8 --micro-batch-size 1 --train-iters 2
once "a tokenizer.json of another model, 2 ranks"
rm -f "$unigram"
expect "expert width not divisible by tp" 2 "--moe-ffn-hidden-size 31 is not divisible by --tensor-model-parallel-size 2" \
  "${MPIRUN[@]}" -np 2 "$TRIDENT" train "${TINY[@]}" --num-experts 4 --tensor-model-parallel-size 2 \
  --moe-ffn-hidden-size 31
expect "expert parallelism without experts" 2 "--expert-model-parallel-size needs --num-experts" \
  "$TRIDENT" train "${TINY[@]}" --expert-model-parallel-size 2
expect "experts not divisible by ep" 2 "--num-experts 3 is not divisible by --expert-model-parallel-size 2" \
  "$TRIDENT" train "${TINY[@]}" --num-experts 3 --moe-router-topk 1 --expert-model-parallel-size 2
expect "ep that does not divide dp" 2 "--expert-model-parallel-size 2 does not divide the data-parallel x context-parallel size 3" \
  "${MPIRUN[@]}" -np 3 "$TRIDENT" train "${TINY[@]}" --num-experts 4 --expert-model-parallel-size 2
expect "generate with expert parallelism, not built" 2 "--expert-model-parallel-size 2: trident generate holds every expert" \
  "$TRIDENT" generate --load nowhere --vocab-file "$VOCAB" --merge-file "$MERGES" --prompt a --expert-model-parallel-size 2
# (at tp 1 the only value is 1: the message says so, not "give the tensor-parallel size (1 ...) or 1")
expect "expert tensor parallelism 2 at tp 1" 2 "--expert-tensor-parallel-size 2: with --tensor-model-parallel-size 1 it can only be 1 (each expert whole); give 1 or leave the flag out, or split the experts with --tensor-model-parallel-size of the same size" \
  "$TRIDENT" train "${TINY[@]}" --num-experts 4 --expert-tensor-parallel-size 2
expect "expert tensor parallelism other than tp or 1, not built" 2 "--expert-tensor-parallel-size 4: give the tensor-parallel size (2, the default" \
  "${MPIRUN[@]}" -np 2 "$TRIDENT" train "${TINY[@]}" --num-experts 4 --expert-tensor-parallel-size 4 --tensor-model-parallel-size 2
expect "unknown dispatcher" 2 "--moe-token-dispatcher-type" \
  "$TRIDENT" train "${TINY[@]}" --num-experts 4 --moe-token-dispatcher-type flex
expect "padding without capacity" 2 "--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor" \
  "$TRIDENT" train "${TINY[@]}" --num-experts 4 --moe-pad-expert-input-to-capacity
# --moe-layer-freq: which layers are MoE, an integer or a list of 0 and 1 one a layer
expect "layer freq without experts" 2 "--moe-layer-freq needs --num-experts" \
  "$TRIDENT" train "${TINY[@]}" --moe-layer-freq 2
expect "layer list of the wrong length" 2 "--moe-layer-freq [1,0,1] names 3 layers but --num-layers is 2" \
  "${MPIRUN[@]}" -np 2 "$TRIDENT" train "${TINY[@]}" --num-layers 2 --num-experts 4 --moe-layer-freq "[1,0,1]"
once "layer list of the wrong length"
expect "layer freq not a list" 2 "--moe-layer-freq range(2) is neither an integer nor a list of 0 and 1" \
  "$TRIDENT" train "${TINY[@]}" --num-experts 4 --moe-layer-freq "range(2)"
expect "layer freq zero" 2 "--moe-layer-freq 0: give an integer N >= 1" \
  "$TRIDENT" train "${TINY[@]}" --num-experts 4 --moe-layer-freq 0

# Under mpirun: one line, from rank 0; every rank exits 2 (so mpirun does). A rank exiting 2
# first made mpirun end the job before rank 0 had printed (the line was missing 4 times in 20):
# ten runs must each print it once. They run five at a time (a run mostly waits: 0.9 s of wall,
# 0.1 s of CPU), twenty ranks on the cores at once, which jostles the ranks' order more than
# runs one after another did.
runs=$(mktemp -d)
flag_run() { # i: one run, its exit code and output in $runs/i
  own_session_dir
  timeout $((120 * SCALE)) "${MPIRUN[@]}" -np 4 "$TRIDENT" train --num-layers two >"$runs/$1.out" 2>&1
  echo $? >"$runs/$1.rc"
}
# (in a slower build, e.g. under the sanitizers, where a start alone is seconds of CPU, two at a time)
at_once=5; [ "$SCALE" -gt 1 ] && at_once=2
for i in $(seq 1 10); do
  flag_run "$i" &
  [ $((i % at_once)) = 0 ] && wait
done
wait
missed=0
for i in $(seq 1 10); do
  out=$(cat "$runs/$i.out") rc=$(cat "$runs/$i.rc")
  n=$(grep -c "error: trident train: --num-layers 'two' is not an integer" <<<"$out")
  if [ "$rc" != 2 ] || [ "$n" != 1 ] || [ "$(grep -c "error:" <<<"$out")" != 1 ]; then
    missed=$((missed + 1)); echo "run $i: exit $rc, $n lines:"; echo "$out" | head -5
  fi
done
rm -rf "$runs"
[ "$missed" = 0 ] && ok "np 4: flag-parser error: exit 2 and rank 0's line once, 10 runs of 10" ||
  bad "np 4: flag-parser error: $missed runs of 10 without exit 2 and exactly one line"
# the race made certain: rank 0 starts a second late (before the fix: exit 2, no line)
expect "np 4, rank 0 late: flag-parser error" 2 "--num-layers 'two' is not an integer" "${MPIRUN[@]}" -np 4 \
  bash -c '[ "$OMPI_COMM_WORLD_RANK" = 0 ] && sleep 1; exec "$0" "$@"' "$TRIDENT" train --num-layers two
once "np 4, rank 0 late: flag-parser error"
expect "np 4: unknown flag" 2 "unknown flag --bogus" "${MPIRUN[@]}" -np 4 "$TRIDENT" train --bogus 1
once "np 4: unknown flag"
expect "np 4: config error" 2 "--vocab-file nowhere.json: No such file" "${MPIRUN[@]}" -np 4 "$TRIDENT" train \
  --data-path "$DATA" --vocab-file nowhere.json --merge-file "$MERGES" --train-iters 1
once "np 4: config error"
# an error only rank 0 finds (it opens the dataset first; the others wait in a barrier): its exit
# ends the job at once (a usage error's barrier of its own; it took 30 s when that barrier was the
# world's, where rank 0's matched the others' and rank 1 then waited alone). The bound is a hang guard.
t0=$SECONDS
expect "np 2: no training documents" 2 "--split 1,100000,0 leaves the train split" "${MPIRUN[@]}" -np 2 "$TRIDENT" train \
  "${TINY[@]}" --split 1,100000,0
once "np 2: no training documents"
[ $((SECONDS - t0)) -lt $((15 * SCALE)) ] && ok "np 2: an error only rank 0 finds ends the job in $((SECONDS - t0)) s" ||
  bad "np 2: an error only rank 0 finds took $((SECONDS - t0)) s to end the job"

# the hang guard (TRIDENT_HANG_GUARD_S, which ctest sets for every test): a trident process that outlives
# it ends with exit 124 and a line naming the command; here tokenize waiting on a stdin that stays open
# --comm (docs/gpu.md, NCCL): on every command that moves device buffers; nccl where it cannot work
# (here the cpu backend) exits 2 before the backend exists, the reason agreed over the ranks, once
for cmd in train eval generate serve; do
  expect "$cmd: unknown communicator" 2 "--comm 'gloo' is not one of auto|mpi|nccl" "$TRIDENT" $cmd --comm gloo
done
expect "--comm nccl on the cpu" 2 "--comm nccl: the cpu backend's buffers are host memory" "${MPIRUN[@]}" -np 2 \
  "$TRIDENT" train "${TINY[@]}" --backend cpu --comm nccl
once "--comm nccl on the cpu"
t0=$SECONDS
out=$(TRIDENT_HANG_GUARD_S=1 timeout $((20 * SCALE)) "$TRIDENT" tokenize "${TOK[@]}" 2>&1 < <(exec sleep 30 2>/dev/null)); rc=$?
[ "$rc" = 124 ] && grep -q "error: trident tokenize (pid [0-9]* on .*) still running after 1 s" <<<"$out" &&
  [ $((SECONDS - t0)) -lt $((10 * SCALE)) ] && ok "hang guard: exit 124 in $((SECONDS - t0)) s: $out" ||
  bad "hang guard: exit $rc after $((SECONDS - t0)) s: $out"
expect "hang guard: not a number" 2 "TRIDENT_HANG_GUARD_S='soon' is not a number of seconds" \
  env TRIDENT_HANG_GUARD_S=soon "$TRIDENT" version

# packed documents: --model bert refuses them (e2e/bert); a tokenizer without an end-of-document
# token (GPT-2's byte alphabet alone) cannot split documents: exit 2, once
noeod=$(mktemp -d)
python3 "$(dirname "$0")/../parallel/byte_tokenizer.py" "$noeod/bytes.json" &&
  sed 's/<|endoftext|>/<|pad|>/g' "$noeod/bytes.json" > "$noeod/noeod.json"
expect "packed: no EOD" 2 "and this tokenizer has none: leave them out" "${MPIRUN[@]}" -np 2 "$TRIDENT" train \
  --data-path "$DATA" --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$noeod/noeod.json" --num-layers 1 \
  --hidden-size 8 --num-attention-heads 2 --seq-length 8 --train-iters 2 --eod-mask-loss
once "packed: no EOD"
rm -rf "$noeod"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
