#!/usr/bin/env bash
# Crashes during a save (kill -9) leave the previous checkpoint loadable and
# latest_checkpointed_iteration.txt pointing at it.
#  1. One rank, continuing a checkpoint of iteration 1 (saved once, without delay, for both);
#     --debug-save-delay-ms makes the saver pause after each shard and before the renames.
#     Killed (a) with only the model shard of iteration 2 written, (b) with every shard and
#     meta.json written but not yet renamed. Each time: latest says 1, `checkpoint info`
#     verifies iteration 1, and a run resumed from it (with --save into the same folder) matches
#     the uninterrupted run exactly and removes the stale iter_0000002.tmp.
#  2. tp2 x pp2 under mpirun (continuing its own checkpoint of iteration 1): one rank killed while
#     the shards of iteration 2 are written; the job ends non-zero and the previous checkpoint is
#     intact.
#  3. A run saving every iteration (--keep-last 2) killed at random moments and restarted with
#     --load, 6 times: whatever latest names always verifies, and it keeps advancing. The moment is
#     uniform over the half second after the run's first save, which spans two or more cycles of
#     an iteration and its save (tens of milliseconds in bytes), so kills land in training, writing and renaming.
CKPT_TOKENS=bytes . "$(dirname "$0")/checkpoint_lib.sh"
train 1 1 --train-iters 5 --metrics-file full.jsonl >/dev/null || { bad "uninterrupted run failed"; cat "$last_log"; }
train 1 1 --train-iters 5 --exit-interval 1 --save it1 >/dev/null || { bad "the run saving iteration 1 failed"; cat "$last_log"; }

# run_direct LOG flags...: one rank without mpirun, in the background; pid in $job
run_direct() {
  local log=$1; shift
  OMPI_MCA_orte_tmpdir_base=$(session_base) "$TRIDENT" train "${BASE[@]}" --tensor-model-parallel-size 1 \
    --make-vocab-size-divisible-by 512 "$@" >"$log" 2>&1 &
  job=$!
}
wait_for() { # seconds test...
  local n=$(($1 * 20)); shift
  for _ in $(seq 1 "$n"); do "$@" && return 0; sleep 0.05; done
  return 1
}
latest_is() { [ -f "$1/latest_checkpointed_iteration.txt" ] && [ "$(cat "$1/latest_checkpointed_iteration.txt")" = "$2" ]; }

kill_during_save() { # name file-that-marks-the-moment
  local name=$1 mark=$2
  rm -rf "$name" && mkdir "$name" && cp -r it1 "$name/ckpt"
  run_direct "$name/run.log" --debug-save-delay-ms 800 --train-iters 5 --load "$name/ckpt" --save "$name/ckpt" \
    --save-interval 1 --metrics-file "$name/m.jsonl"
  if ! wait_for 60 test -e "$name/ckpt/iter_0000002.tmp/$mark"; then
    bad "$name: $mark never appeared"; kill -9 "$job"; cat "$name/run.log"; return
  fi
  kill -9 "$job"; wait "$job" 2>/dev/null
  latest_is "$name/ckpt" 1 && ok "$name: killed with iter_0000002.tmp/$mark written: latest still says 1" ||
    bad "$name: latest does not say 1"
  [ -d "$name/ckpt/iter_0000002" ] && bad "$name: a half-written iter_0000002 is visible"
  if out=$("$TRIDENT" checkpoint info "$name/ckpt" 2>&1) && grep -q "^iteration 1;" <<<"$out"; then
    ok "$name: checkpoint info verifies iteration 1 ($(tail -1 <<<"$out"))"
  else bad "$name: checkpoint info:"; echo "$out"; fi
  if train 1 1 --train-iters 5 --load "$name/ckpt" --save "$name/ckpt" --metrics-file "$name/resumed.jsonl" &&
     diff <(untimed full.jsonl | tail -n 4) <(untimed "$name/resumed.jsonl") >/dev/null; then
    ok "$name: resumed from iteration 1; iterations 2-5 identical to the uninterrupted run"
  else bad "$name: resume failed or differs"; cat "$last_log"; fi
  [ -e "$name/ckpt/iter_0000002.tmp" ] && bad "$name: the stale iter_0000002.tmp was not removed"
  latest_is "$name/ckpt" 5 || bad "$name: latest is not 5 after the resumed run"
}
kill_during_save after_model_shard model_tp000_pp000.safetensors
kill_during_save before_rename meta.json

# 2. a rank of tp2 x pp2 killed while shards are written
rm -rf mp && mkdir mp
train 4 2 --pipeline-model-parallel-size 2 --train-iters 5 --exit-interval 1 --save mp/ckpt >/dev/null ||
  { bad "tp2 x pp2: the run saving iteration 1 failed"; cat "$last_log"; }
OMPI_MCA_orte_tmpdir_base=$(session_base) timeout $((120 * ${TD_TIME_SCALE:-1})) "${MPIRUN[@]}" -np 4 "$TRIDENT" train "${BASE[@]}" --debug-save-delay-ms 800 --tensor-model-parallel-size 2 \
  --make-vocab-size-divisible-by 256 --pipeline-model-parallel-size 2 --train-iters 5 --load mp/ckpt --save mp/ckpt \
  --save-interval 1 >mp/run.log 2>&1 &
job=$!
if wait_for 60 test -e mp/ckpt/iter_0000002.tmp/model_tp001_pp001.safetensors; then
  victim=$(ranks_of "$job" | tail -1)
  kill -9 "$victim"
  if wait_for 30 bash -c "! kill -0 $job 2>/dev/null"; then
    wait "$job"; rc=$?
    [ "$rc" -ne 0 ] && ok "tp2 x pp2: a rank killed mid-save ends the job (exit $rc)" || bad "tp2 x pp2: job exited 0"
  else
    bad "tp2 x pp2: job still running 30 s after a rank was killed"; kill -9 "$job"
  fi
  latest_is mp/ckpt 1 && "$TRIDENT" checkpoint info mp/ckpt >/dev/null 2>&1 &&
    ok "tp2 x pp2: latest says 1 and it verifies" || bad "tp2 x pp2: previous checkpoint not intact"
  if train 2 1 --pipeline-model-parallel-size 2 --train-iters 2 --load mp/ckpt >/dev/null; then
    ok "tp2 x pp2: iteration 1 loads (in pp2)"; else bad "tp2 x pp2: iteration 1 does not load"; cat "$last_log"; fi
else
  bad "tp2 x pp2: the save of iteration 2 never started"; kill -9 "$job"; cat mp/run.log
fi

# 3. random moments
rm -rf rnd && mkdir rnd
RANDOM=7
for k in 1 2 3 4 5 6; do
  run_direct rnd/run$k.log --train-iters 100000 --load rnd/ckpt --save rnd/ckpt --save-interval 1 --keep-last 2
  # once this run has saved (latest moved), kill it at a random moment within the next half second
  wait_for 120 bash -c "[ \"\$(cat rnd/ckpt/latest_checkpointed_iteration.txt 2>/dev/null)\" -gt ${prev:-0} ]" ||
    { bad "random kill $k: the run never saved"; kill -9 "$job"; cat rnd/run$k.log; continue; }
  sleep "$(printf '0.%03d' $((RANDOM % 500)))"
  kill -9 "$job"; wait "$job" 2>/dev/null
  it=$(cat rnd/ckpt/latest_checkpointed_iteration.txt)
  if [ "$it" -lt "${prev:-0}" ]; then bad "random kill $k: latest went back from $prev to $it"; fi
  prev=$it
  if "$TRIDENT" checkpoint info rnd/ckpt >rnd/info$k.txt 2>&1; then
    ok "random kill $k: latest says $it and it verifies ($(ls rnd/ckpt | tr '\n' ' '))"
  else bad "random kill $k: latest says $it but:"; cat rnd/info$k.txt; fi
done
it=$(cat rnd/ckpt/latest_checkpointed_iteration.txt 2>/dev/null || echo 0)
if train 1 1 --train-iters $((it + 1)) --load rnd/ckpt >/dev/null && grep -q "loaded checkpoint" "$last_log"; then
  ok "after the random kills, iteration $it resumes"; else bad "resume after random kills"; cat "$last_log"; fi
finish
