#!/usr/bin/env bash
# Failure behaviour under mpirun: every bad layout exits 2 with one line naming the flag, before
# any rank allocates; a rank killed, stopped or failing mid-run ends the whole job, non-zero,
# naming what was lost. Every job runs under the README's launch, --mca odls_base_sigkill_timeout
# 60, with which mpirun alone would take 2 minutes to end a job once a rank exits non-zero or
# dies: each must end well within 60 s (a hang guard, not a speed test).
# Usage: failures.sh TRIDENT DATA_PREFIX VOCAB MERGES
set -u
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
trident=$1 data=$2 vocab=$3 merges=$4
SCALE=${TD_TIME_SCALE:-1} # the build's slowness (tests/CMakeLists.txt, Limits): 10 under the sanitizers
. "$(dirname "$0")/../session_dir.sh"
mpirun=(mpirun --oversubscribe --bind-to none --mca odls_base_sigkill_timeout 60)
base=(--vocab-file "$vocab" --merge-file "$merges" --split 90,10,0 --num-layers 4
      --hidden-size 32 --num-attention-heads 4 --seq-length 16 --micro-batch-size 1 --train-iters 2 --peak-tflops 1)
pass=0 fail=0
results=$(mktemp -d)
# check name expected_rc expected_text np flags...: one job in the background (at most 3 at a
# time); its verdict goes to $results, read by tally.
check() {
  while [ "$(jobs -rp | wc -l)" -ge 3 ]; do wait -n; done
  nchecks=$((nchecks + 1))
  check_one "$@" >"$results/$(printf %03d "$nchecks")" 2>&1 &
}
nchecks=0
check_one() {
  local name=$1 want=$2 text=$3 np=$4; shift 4
  local out rc
  own_session_dir
  out=$(timeout $((50 * SCALE)) "${mpirun[@]}" -np "$np" "$trident" train "${base[@]}" "$@" 2>&1); rc=$?
  if [ "$rc" -eq "$want" ] && grep -qF -- "$text" <<<"$out"; then
    echo "ok: $name (exit $rc): $(grep -F -- "$text" <<<"$out" | head -1)"
  else
    echo "FAIL: $name: exit $rc (want $want), output:"; echo "$out" | tail -5
  fi
}
tally() {
  wait
  local f
  for f in "$results"/*; do
    cat "$f"
    local oks fails
    oks=$(grep -c "^ok: " "$f") fails=$(grep -c "^FAIL" "$f")
    [ $((oks + fails)) -eq 0 ] && fails=1 # a check that said nothing failed
    pass=$((pass + oks)) fail=$((fail + fails))
  done
  rm -rf "$results"
}
# the longest (40 iterations) first, so that it does not end last
check "NaN gradient norm" 1 "(NaN or Inf); lower --lr" 2 --data-path "$data" --train-iters 40 --lr 1000 --init-method-std 5 --clip-grad 0 --hidden-size 64
check "heads not divisible by tp" 2 "--num-attention-heads 4 is not divisible by --tensor-model-parallel-size 3" 3 --tensor-model-parallel-size 3 --data-path "$data"
check "world not divisible by tp x pp" 2 "the world size 3 is not divisible" 3 --tensor-model-parallel-size 2 --data-path "$data"
check "layers not divisible by pp" 2 "--num-layers 4 is not divisible by --pipeline-model-parallel-size 3" 3 --pipeline-model-parallel-size 3 --data-path "$data"
check "ffn not divisible by tp" 2 "--ffn-hidden-size 30 is not divisible by --tensor-model-parallel-size 4" 4 --tensor-model-parallel-size 4 --ffn-hidden-size 30 --data-path "$data"
check "batch not divisible by mbs x dp" 2 "--global-batch-size 5 is not divisible by --micro-batch-size 1 x data-parallel size 2" 2 --global-batch-size 5 --data-path "$data"
check "virtual stages need layers" 2 "--num-layers 4 is not divisible by --pipeline-model-parallel-size 2 x --num-layers-per-virtual-pipeline-stage 3" 2 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 3 --data-path "$data"
check "virtual stages above the per-rank limit" 2 "17 virtual stages per rank is more than 16; raise --num-layers-per-virtual-pipeline-stage" 2 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 --num-layers 34 --global-batch-size 2 --data-path "$data"
check "interleaving needs micro-batches % pp" 2 "divisible by --pipeline-model-parallel-size 2" 2 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 --global-batch-size 3 --data-path "$data"
check "uneven split that does not add up" 2 "--decoder-first-pipeline-num-layers 3 + --decoder-last-pipeline-num-layers 3 is not --num-layers 4" 2 --pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 3 --decoder-last-pipeline-num-layers 3 --data-path "$data"
check "uneven split leaving a stage no layer" 2 "leaves 1 for 2 other stages" 4 --pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 2 --decoder-last-pipeline-num-layers 1 --data-path "$data"
check "sequence not divisible by tp" 2 "--seq-length 18 is not divisible by --tensor-model-parallel-size 4" 4 --tensor-model-parallel-size 4 --sequence-parallel --seq-length 18 --max-position-embeddings 18 --data-path "$data"
check "accounted split that does not divide" 2 "--num-layers 4 + 1 for --account-for-embedding-in-pipeline-split is not divisible by the 2 stages" 2 --pipeline-model-parallel-size 2 --account-for-embedding-in-pipeline-split --data-path "$data"
check "two kinds of uneven split" 2 "do not combine with --account-for-embedding/loss-in-pipeline-split" 2 --pipeline-model-parallel-size 2 --account-for-loss-in-pipeline-split --decoder-first-pipeline-num-layers 1 --data-path "$data"
check "accounted split on one stage" 2 "--account-for-embedding/loss-in-pipeline-split need --pipeline-model-parallel-size > 1" 1 --account-for-loss-in-pipeline-split --data-path "$data"
check "recompute method without granularity" 2 "--recompute-method and --recompute-num-layers need --recompute-granularity full" 1 --recompute-method uniform --data-path "$data"
check "full recompute without method" 2 "--recompute-granularity full needs --recompute-method" 1 --recompute-granularity full --recompute-num-layers 1 --data-path "$data"
check "full recompute without num-layers" 2 "needs --recompute-num-layers between 1 and 4" 1 --recompute-granularity full --recompute-method block --data-path "$data"
check "recompute num-layers above a stage's" 2 "needs --recompute-num-layers between 1 and 2 (the layers per pipeline stage)" 2 --pipeline-model-parallel-size 2 --recompute-granularity full --recompute-method uniform --recompute-num-layers 3 --data-path "$data"
check "selective recompute with a method" 2 "--recompute-granularity selective takes no --recompute-method" 1 --recompute-granularity selective --recompute-method block --data-path "$data"
check "unknown recompute granularity" 2 "--recompute-granularity" 1 --recompute-granularity partial --data-path "$data"
check "param gather needs the distributed optimizer" 2 "--overlap-param-gather needs --use-distributed-optimizer" 2 --overlap-param-gather --data-path "$data"
check "unknown flag" 2 "unknown flag --tensor-parallel" 2 --tensor-parallel 2 --data-path "$data"
check "missing dataset" 1 "/nonexistent/ds" 2 --data-path /nonexistent/ds
tally

# The ranks of one job are mpirun's children: never match by command line (other tests' ranks
# run the same binary under ctest -j).
ranks_of() { pgrep -P "$1"; }
# rank_pid JOB N: the pid of the job's world rank N (by its OMPI_COMM_WORLD_RANK: the ranks' pids
# need not be in rank order — under load one run found rank 2 last by pid, and the faults below
# expect the last rank)
rank_pid() {
  local p
  for p in $(ranks_of "$1"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$p"; return; }
  done
}
# start_job LOG FLAGS...: a 4-rank job in the background; sets $job once it is training.
start_job() {
  local log=$1; shift
  : >"$log" # emptied first, so the wait below never reads the last job's lines
  "${mpirun[@]}" ${extra_mpirun[@]+"${extra_mpirun[@]}"} -np 4 "$trident" train "${base[@]}" --data-path "$data" \
    --train-iters 100000 "$@" >"$log" 2>&1 &
  job=$!
  for _ in $(seq 1 $((300 * SCALE))); do grep -qE "iteration +[0-9]+/" "$log" && break; sleep 0.2; done
}
# started LOG VICTIM: false, with a FAIL line, when the job never started (no rank to fault)
started() {
  [ -n "$2" ] && return 0
  echo "FAIL: the job did not start, output:"; tail -5 "$1"; return 1
}
# end_job NAME LIMIT_S TEXT: the job must end non-zero within LIMIT_S, its output holding TEXT (the
# verdict is the line it prints: "ok: ..." or "FAIL: ...").
end_job() {
  local name=$1 limit=$2 text=$3 start rc took
  start=$(date +%s)
  for _ in $(seq 1 $((limit * 10 * SCALE))); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$job" 2>/dev/null; then
    echo "FAIL: $name: job still running after $((limit * SCALE)) s"
    for p in $(ranks_of "$job"); do kill -9 "$p"; done; kill -9 "$job"; return
  fi
  wait "$job"; rc=$?
  took=$(( $(date +%s) - start ))
  if [ "$rc" -ne 0 ] && grep -qF -- "$text" "$log"; then
    echo "ok: $name ends the job in ${took} s (exit $rc): $(grep -F -- "$text" "$log" | head -1)"
  else
    echo "FAIL: $name: exit $rc, output:"; tail -5 "$log"
  fi
}

# The three faults below run side by side (each its own job, log and verdict file; tallied as the
# checks above): the stopped rank's job mostly waits out its timeout.
results=$(mktemp -d)
# fault N NAME: runs the function NAME in the background, its lines to $results/N.
fault() { (own_session_dir; "$2") >"$results/$1" 2>&1 & }

# A rank killed with SIGKILL in the middle of training: the job must end, non-zero, within 20 s
# (mpirun alone: 119 s), the others naming the rank lost by its pid and host.
killed_rank() {
  local log victim; log=$(mktemp)
  start_job "$log" --pipeline-model-parallel-size 2
  victim=$(rank_pid "$job" 3)
  started "$log" "$victim" || return
  kill -9 "$victim"
  end_job "killed rank" 20 "(pid $victim on $(hostname)) is gone (killed or crashed): ending the job"
  rm -f "$log"
}
fault 1 killed_rank

# The same with the victim on "another node": only rank 0 watches its node's peers and the ranks
# talk over TCP (which does not report the loss: their waits would go on); the others must hear
# of it from rank 0 and end too (on a real cluster, their own node's orted would otherwise sleep
# twice the timeout). On one machine mpirun is the victim's parent and would end the job itself,
# killing the ranks before they print what they heard: --enable-recovery keeps it from acting on
# the loss (and makes it exit 0 whatever its ranks do), so the ranks alone must end the job, and
# both ranks that are not rank 0 must say they heard of it.
killed_rank_other_node() {
  local log victim extra_mpirun=(--enable-recovery --mca btl tcp,self) start took heard
  log=$(mktemp)
  start_job "$log" --pipeline-model-parallel-size 2 --debug-watch-only-rank 0
  victim=$(rank_pid "$job" 3)
  started "$log" "$victim" || return
  kill -9 "$victim"
  start=$(date +%s)
  for _ in $(seq 1 $((200 * SCALE))); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$job" 2>/dev/null; then
    echo "FAIL: killed rank, heard of by the ranks of other nodes: job still running after 20 s"
    for p in $(ranks_of "$job"); do kill -9 "$p"; done; kill -9 "$job"
  else
    wait "$job"; took=$(( $(date +%s) - start ))
    heard=$(grep -F "(pid $victim on $(hostname)) is gone (killed or crashed): ending the job (heard from a rank of its node)" "$log" |
      grep -oE "^\[rank [0-9]+\]" | sort -u | tr '\n' ' ')
    if [ "$heard" = "[rank 1] [rank 2] " ]; then
      echo "ok: killed rank, heard of by the ranks of other nodes, ends the job in ${took} s: $(grep -F "heard from a rank of its node" "$log" | head -1)"
    else
      echo "FAIL: killed rank, heard of by the ranks of other nodes: ranks 1 and 2 must say they heard (said: '$heard'), output:"; tail -5 "$log"
    fi
  fi
  rm -f "$log"
}
fault 2 killed_rank_other_node

# A rank stopped (SIGSTOP) in tp 2 x pp 2: the others wait in a communication until
# --distributed-timeout-minutes (here 3 s; times SCALE, 30 s under the sanitizers, whose start-up
# collectives on a loaded machine took longer than 3 s and ended the job before it trained), then
# abort naming the call, the group and the peer.
TMIN=$(awk -v s="$SCALE" 'BEGIN { print 0.05 * s }')
stopped_rank() {
  local log victim; log=$(mktemp)
  start_job "$log" --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --distributed-timeout-minutes "$TMIN"
  victim=$(rank_pid "$job" 3)
  started "$log" "$victim" || return
  kill -STOP "$victim"
  end_job "stopped rank" 30 "no progress for"
  kill -CONT "$victim" 2>/dev/null
  grep -E "no progress for" "$log" | head -2
  if ! grep -qE "failed: no progress for [0-9.]+ s \(--distributed-timeout-minutes $TMIN\) on the [a-z-]+ group \(rank [0-9]+ of [0-9]+\)" "$log"; then
    echo "FAIL: the timeout message does not name the call, the limit and the group"
  fi
  rm -f "$log"
}
fault 3 stopped_rank

# A rank stopped in dp 4 with every float sum through the ring collectives (src/comm/ring.c): the
# others wait in a ring step's point-to-point message, which must end at the timeout naming the data-parallel
# group and the peer.
stopped_rank_ring() {
  local log victim; log=$(mktemp)
  TRIDENT_RING_MIN_BYTES=0 start_job "$log" --distributed-timeout-minutes "$TMIN"
  victim=$(rank_pid "$job" 3)
  started "$log" "$victim" || return
  kill -STOP "$victim"
  end_job "stopped rank in a ring all-reduce" 30 "no progress for"
  kill -CONT "$victim" 2>/dev/null
  grep -E "no progress for" "$log" | head -2
  if ! grep -qE "MPI_I(send|recv).* failed: no progress for [0-9.]+ s \(--distributed-timeout-minutes $TMIN\) on the data-parallel group \(rank [0-9] of 4\) with peer [0-9]" "$log"; then
    echo "FAIL: the ring step's timeout does not name the call, the dp group and the peer"
  fi
  rm -f "$log"
}
fault 4 stopped_rank_ring
tally
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
