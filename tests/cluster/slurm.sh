#!/usr/bin/env bash
# trident under a real Slurm (22.05) on two emulated nodes (scripts/cluster.sh up 2 --slurm:
# munged, slurmctld and one slurmd per node, each in its node's namespaces; docs/cluster.md,
# "Slurm"), every command run from node1 as from a login node:
#  (a) srun -N 2 --ntasks-per-node 2 --mpi=pmix trident train, and salloc -N 2 --ntasks-per-node 2
#      mpirun trident train, tp 2 x dp 2: each node holds one tensor-parallel pair (the placement
#      line), and the losses, grad norms and final parameters are the one-rank run's within 1e-5
#      (compare_runs); srun without --mpi=pmix is refused (each rank would be a world of one);
#  (b) sbatch --time=1 --signal=TERM@22: slurmctld checks time limits every 30 s and sends the
#      signal at the first check that finds the end less than 22 + 30 s away (from 8 s after the
#      start: trident is past its start-up by then); every rank gets SIGTERM, trident
#      (--exit-signal-handler) saves a checkpoint that verifies, and the job ends COMPLETED, exit
#      0, well before its limit;
#  (c) scontrol requeue of that job (submitted with --requeue): the same batch script runs again,
#      resumes from the checkpoint and continues to the uninterrupted one-rank run's losses and
#      parameters within 1e-5 (its metrics file holds both runs' iterations);
#  and `down` leaves no process in the cluster's namespaces while a job still runs there; a
#  slurmd that cannot start makes `up --slurm` say so in one line and exit 77, leaving nothing.
# Environment (tests/cluster/cluster.cmake): TRIDENT, DATA, VOCAB, MERGES, WORK, COMPARE_RUNS, ROOT.
set -u
SCALE=${TD_TIME_SCALE:-1} # the build's slowness (tests/CMakeLists.txt, Limits): 10 under the sanitizers
. "$(dirname "$0")/two_nodes.sh"
own_session_dir # its jobs apart from those of the tests beside it
export CLUSTER_DIR=/run/trident-cluster-slurm.$$
trap '"$cluster" down; CLUSTER_DIR=$CLUSTER_DIR.planted "$cluster" down' EXIT
# A quarter of a core a node (a CPU group; a tenth while the batch job trains): the batch job trains
# until Slurm's signal, 30-60 s away whatever it does, so the less CPU it may take the more the rest
# of the suite gets (with the machine's 2 cores it reached iteration 156 and its one-rank reference
# had to follow it there)
# (where the machine has a CPU cgroup controller)
quarter=(--cpus 0.25)
[ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ] || grep -qsw cpu /sys/fs/cgroup/cgroup.controllers || quarter=()
cluster_up 2 --ranks-per-node 2 --slurm "${quarter[@]}" || exit $? # 77: no namespaces or no Slurm here (skipped, says why)
export SLURM_CONF=$CLUSTER_DIR/slurm/slurm.conf
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Open MPI over TCP between the nodes, on their eth0 (srun passes the environment on)
unset OMPI_MCA_pml
export OMPI_MCA_btl=tcp,self,vader OMPI_MCA_btl_tcp_if_include=eth0 OMPI_MCA_oob_tcp_if_include=eth0
login() { "$cluster" run node1 "$@"; } # node1 doubles as the login node
fail=0
ok() { echo "ok: $* ($SECONDS s)"; }
bad() { echo "FAIL: $*"; fail=1; }

# The layout tests' model; --train-iters fixed for every run, so that the learning-rate schedule
# and the dataset's sample order are the same whichever iteration a run stops at. The signal
# comes after a few iterations (4 measured, at a tenth of a core a node) to 250, as the machine's load has it: --adam-eps 1e-5 keeps the float
# noise Adam amplifies (tp 2 x dp 2 against one rank) under 5e-6 over 400 iterations, where the
# default 1e-8 lets the grad norm's reach 1e-4 from iteration 78 (measured).
BASE=(--data-path "$DATA" --vocab-file "$VOCAB" --merge-file "$MERGES" --split 90,10,0 --num-layers 4
      --hidden-size 64 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
      --hidden-dropout 0.1 --attention-dropout 0.1 --global-batch-size 8 --micro-batch-size 2 --lr 1e-3
      --seed 7 --peak-tflops 1 --log-interval 100 --eval-iters 0 --train-iters 2000 --adam-eps 1e-5)
one_rank() { # name, stop: the one-rank run to iteration `stop`
  "$TRIDENT" train "${BASE[@]}" --make-vocab-size-divisible-by 512 --exit-interval "$2" --metrics-file "$1.jsonl" \
    --dump-params "$1.params" > "$1.log" 2>&1 || { bad "the one-rank run $1 failed"; tail -5 "$1.log"; }
}
compare() { # reference, run, what
  if "$COMPARE_RUNS" "$1.jsonl" "$2.jsonl" "$1.params" "$2.params" 1e-5 > "$2.cmp" 2>&1; then ok "$3"
  else bad "$3: differs from the one-rank run"; cat "$2.cmp"; fi
}
# A second cluster beside this one whose slurmd cannot start (a planted one that fails): one
# line naming the daemon and its last words, exit 77 (the tests that need Slurm skip), and
# nothing of it left behind
planted_slurmd() {
  mkdir -p bin && printf '#!/bin/sh\necho "slurmd: fatal: planted failure" >&2\nexit 1\n' > bin/slurmd && chmod +x bin/slurmd
  local said rc
  said=$(PATH=$PWD/bin:$PATH CLUSTER_DIR=$CLUSTER_DIR.planted cluster_up 1 --slurm 2>&1); rc=$?
  if [ $rc = 77 ] && [ "$said" = "cluster-slurm.sh: Slurm could not start here (slurmd.node1 ended: slurmd: fatal: planted failure): skipped" ] &&
     [ ! -e "$CLUSTER_DIR.planted" ] && ! pgrep -f "$CLUSTER_DIR.planted" > /dev/null; then
    ok "a slurmd that cannot start: exit 77, one line naming it, nothing left"
  else bad "a slurmd that cannot start: exit $rc, said '$said'"; pgrep -af "$CLUSTER_DIR.planted"; fi
}
# Without --mpi=pmix (this cluster's MpiDefault is none, as Debian's) each rank could start as a
# world of its own: Open MPI must refuse instead
without_pmix() {
  if timeout $((60 * SCALE)) "$cluster" run node1 srun -N 2 --ntasks-per-node 2 "$TRIDENT" train "${BASE[@]}" --exit-interval 3 > nopmix.log 2>&1; then
    bad "srun without --mpi=pmix trained"; grep -m 2 "world" nopmix.log
  elif grep -q 'direct launched using "srun"' nopmix.log && ! grep -q "iteration " nopmix.log; then
    ok "srun without --mpi=pmix: refused by Open MPI before any rank trains ($(grep -m 1 -o 'The application appears to have been direct launched using "srun"' nopmix.log))"
  else bad "srun without --mpi=pmix: failed otherwise"; tail -5 nopmix.log; fi
}

field() { tr ' ' '\n' <<< "$1" | sed -n "s/^$2=//p"; } # scontrol -o line, field name
wait_job() { # id, restarts: waits (120 s x SCALE at most) until the job's run number `restarts` has ended; sets state, runtime
  local line
  for _ in $(seq $((600 * SCALE))); do
    line=$(login scontrol -o show job "$1" 2>/dev/null)
    state=""; [ "$(field "$line" Restarts)" = "$2" ] && state=$(field "$line" JobState)
    case $state in COMPLETED|FAILED|TIMEOUT|CANCELLED|NODE_FAIL|OUT_OF_MEMORY|PREEMPTED|BOOT_FAIL|DEADLINE) break ;; esac
    sleep 0.2
  done
  runtime=$(field "$line" RunTime)
}

# (a) srun with PMIx (Slurm's own launch, no mpirun), and mpirun inside salloc (Open MPI starts its
# daemons through srun): each tp 2 x dp 2 with a tensor-parallel pair on each node
login srun --mpi=list 2>&1 | grep -qx '[[:space:]]*pmix' || bad "srun --mpi=list offers no pmix: $(login srun --mpi=list 2>&1 | tr '\n' ' ')"
one_rank one 3 &
across() { # name, launcher...
  local name=$1; shift
  timeout $((120 * SCALE)) "$cluster" run node1 "$@" "$TRIDENT" train "${BASE[@]}" --make-vocab-size-divisible-by 256 \
    --tensor-model-parallel-size 2 --exit-interval 3 --metrics-file "$name.jsonl" --dump-params "$name.params" > "$name.log" 2>&1 ||
    { bad "$* exited $?"; tail -20 "$name.log"; }
  grep -qF "placement: node1: ranks 0-1 (tp 0-1, pp 0, dp 0); node2: ranks 2-3 (tp 0-1, pp 0, dp 1)" "$name.log" ||
    { bad "$*: no placement line with a tensor-parallel pair on each node"; grep placement "$name.log"; }
}
across srun srun -N 2 --ntasks-per-node 2 --mpi=pmix
wait
compare one srun "srun -N 2 --ntasks-per-node 2 --mpi=pmix: tp 2 x dp 2 across 2 nodes = one rank, a tp pair on each node"
across salloc salloc -N 2 --ntasks-per-node 2 mpirun
compare one salloc "salloc -N 2 --ntasks-per-node 2 mpirun: tp 2 x dp 2 across 2 nodes = one rank, a tp pair on each node"

# (b) the time limit's signal, then (c) the requeue: one batch script for both runs of the job
# (the signal comes at slurmctld's check 30 s after its start when the job starts within 22 s of
# it, at the next, 60 s, otherwise)
{ echo '#!/bin/bash'
  echo '# trains across the allocation, from the checkpoint in ck once there is one; to the iteration in stop once the test has written it'
  echo 'stop=$(cat stop 2>/dev/null)'
  printf 'exec srun --mpi=pmix %q train' "$TRIDENT"; printf ' %q' "${BASE[@]}"
  echo ' --make-vocab-size-divisible-by 256 --tensor-model-parallel-size 2 --exit-signal-handler --save ck --load ck --metrics-file job.jsonl ${stop:+--exit-interval "$stop" --dump-params job.params}'
} > job.sh
# (a slower build, e.g. under the sanitizers: a 3-minute limit and the signal 100 s before its end, as a
# save there takes minutes at a tenth of a core)
limit=1 lead=22; [ "$SCALE" -gt 1 ] && limit=3 lead=100
id=$(login sbatch --parsable -N 2 --ntasks-per-node 2 --time=$limit --signal=TERM@$lead --requeue --open-mode=append -o job.log job.sh) ||
  { bad "sbatch: $id"; exit 1; }
planted_slurmd # meanwhile (it needs no CPU of this cluster)
# once the job trains, a tenth of a core a node until the signal: what it does in those 30-60 s
# only needs to be under way (its start-up keeps the quarter, so that it is past it by the signal)
if [ ${#quarter[@]} -gt 0 ]; then
  for _ in $(seq $((600 * SCALE))); do [ -s job.jsonl ] && break; sleep 0.1; done
  [ "$SCALE" -gt 1 ] || "$cluster" cpus 0.1
fi
wait_job "$id" 0
[ ${#quarter[@]} -eq 0 ] || "$cluster" cpus 0.25
n=$(cat ck/latest_checkpointed_iteration.txt 2>/dev/null)
if [ "$state" = COMPLETED ] && [ -n "$n" ] && grep -q "received SIGTERM: saving iteration $n to ck before exiting" job.log &&
   grep -q "saved checkpoint at iteration $n to ck" job.log && "$TRIDENT" checkpoint info ck > info.log 2>&1; then
  ok "sbatch --time=$limit --signal=TERM@$lead: SIGTERM from Slurm, iteration $n saved (verifies), job COMPLETED after $runtime of its $limit-minute limit"
else bad "the time limit's signal: job $state, latest '$n'"; tail -20 job.log; fi
grep -q "odls_base_sigkill_timeout" job.log && bad "srun's ranks were warned of mpirun's grace period"

[ -n "$n" ] || exit 1
echo $((n + 3)) > stop
# (pending again) the second run's limit: 10 minutes, so that no time-limit signal comes again before its 3 iterations
login scontrol requeue "$id" && login scontrol update JobId="$id" TimeLimit=10 || bad "scontrol requeue $id failed"
one_rank ref $((n + 3)) & # the uninterrupted run, while the requeued job waits its turn
without_pmix # meanwhile: the nodes are free until the requeued job may start
wait_job "$id" 1
wait
if [ "$state" = COMPLETED ] && grep -q "loaded checkpoint ck/iter_$(printf %07d "$n")" job.log &&
   [ "$(wc -l < job.jsonl)" = $((n + 3)) ]; then
  ok "scontrol requeue: the job ran again ($runtime), resumed from iteration $n and stopped at $((n + 3))"
else bad "the requeued job: $state, $(wc -l < job.jsonl) metrics lines (want $((n + 3)))"; tail -20 job.log; fi
compare ref job "the interrupted and requeued job (iterations 1-$n, then $((n + 1))-$((n + 3))) = the uninterrupted one-rank run"

# down while a job runs: its slurmstepd and tasks outlive slurmd, and must not outlive down
nets=$(awk '{ print $2 }' "$CLUSTER_DIR/nodes" | while read -r p; do readlink "/proc/$p/ns/net"; done)
in_cluster() { # pids of the processes in the cluster's network namespaces
  find /proc -mindepth 3 -maxdepth 3 -path '/proc/[0-9]*/ns/net' -printf '%l %h\n' 2>/dev/null | grep -F "$nets" | cut -d/ -f3
}
tasks() { # how many of them run `sleep 300`
  local p k=0
  for p in $(in_cluster); do tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -q '^[^ ]*sleep 300 $' && k=$((k + 1)); done
  echo $k
}
login sbatch -N 2 -o /dev/null --wrap 'srun sleep 300' > /dev/null
for _ in $(seq 100); do [ "$(tasks)" = 2 ] && break; sleep 0.1; done # one on each node
running=$(tasks) before=$(in_cluster | wc -l)
"$cluster" down
for _ in $(seq 20); do after=$(in_cluster | wc -l); [ "$after" = 0 ] && break; sleep 0.1; done # the holders' unshare ending
if [ "$running" = 2 ] && [ "$after" = 0 ] && ! pgrep -f "$CLUSTER_DIR" > /dev/null; then
  ok "down with a job running (its 2 tasks among $before processes in the cluster's namespaces): none left"
else bad "down with $running of the job's 2 tasks running left $after of $before processes in the cluster's namespaces"; pgrep -af "$CLUSTER_DIR"; fi
exit $fail
