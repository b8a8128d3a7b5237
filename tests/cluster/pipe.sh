#!/usr/bin/env bash
# scripts/cluster.sh up returns to a caller that reads its output through a pipe: `up ... | cat`
# and `x=$(up ...)` end once `up` has, with its line read, for a plain cluster and one with Slurm's
# daemons (where Slurm is installed), each with the watchdog of --owner (this test's pid, so that
# no cluster outlives the test). What `up` leaves running must not hold the caller's stdout or
# stderr (before: the namespaces' holders did, and the reader waited until `down`).
# Environment: ROOT, WORK.
set -u
. "$(dirname "$0")/two_nodes.sh"
export CLUSTER_DIR=/run/trident-cluster-pipe.$$
trap '"$cluster" down' EXIT
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
slurm=(--slurm)
command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null || slurm=()
fail=0
# how, up's flags...: the reader (cat, or a command substitution) ends within 30 s
returns() {
  local how=$1; shift
  local rc
  if [ "$how" = pipe ]; then timeout $((30 * ${TD_TIME_SCALE:-1})) bash -c '"$0" up "$@" 2>&1 | cat > up.out' "$cluster" "$@"; rc=$?
  else timeout $((30 * ${TD_TIME_SCALE:-1})) bash -c 'x=$("$0" up "$@" 2>&1); echo "$x" > up.out' "$cluster" "$@"; rc=$?; fi
  if [ $rc = 124 ]; then echo "FAIL: $how: scripts/cluster.sh up $* did not return in 30 s (something it left running holds the pipe)"; fail=1
  elif grep -q "^cluster: 1 nodes" up.out; then echo "ok: $how: scripts/cluster.sh up $* returned, its line read"
  else echo "FAIL: $how: scripts/cluster.sh up $*: exit $rc, said: $(cat up.out)"; fail=1
    grep -q 'skipped$' up.out && exit 77; fi # no namespaces here (says why)
  "$cluster" down
}
returns pipe 1 --owner $$
returns substitution 1 "${slurm[@]}" --owner $$
returns pipe 1 "${slurm[@]}" --owner $$
[ ${#slurm[@]} -gt 0 ] || echo "note: Slurm is not installed: its daemons were not tried"
exit $fail
