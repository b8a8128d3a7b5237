#!/usr/bin/env bash
# scripts/cluster.sh up --cpus: a node's processes get at most its share of CPU time. A busy loop
# run on a node of half a core for 2 s must use at most 1.3 s of CPU (1.0 s plus slack; without
# the quota it takes 2 s of a free core), whether started by `run` or through the rsh agent as
# Open MPI starts ranks; `cpus 0.1` lowers the share while the node runs (at most 0.45 s then);
# `down` removes the CPU groups. Environment: ROOT, WORK.
set -u
. "$(dirname "$0")/two_nodes.sh"
export CLUSTER_DIR=/run/trident-cluster-cpus.$$
trap '"$cluster" down' EXIT
cluster_up 1 --cpus 0.5 >/dev/null || exit $?
top=$(cat "$CLUSTER_DIR/cgroup")
fail=0
# cpu_of CMD...: seconds of CPU the command and its children used
cpu_of() { /usr/bin/time -f '%U %S' "$@" 2>&1 >/dev/null | tail -n 1 | awk '{ print $1 + $2 }'; }
for how in run rsh; do
  if [ $how = run ]; then used=$(cpu_of "$cluster" run node1 timeout 2 sh -c 'while :; do :; done')
  else used=$(cpu_of "$CLUSTER_DIR/rsh" node1 timeout 2 sh -c "'while :; do :; done'"); fi
  if awk -v u="$used" 'BEGIN { exit !(u > 0.05 && u <= 1.3) }'; then echo "ok: a busy loop started by $how on a node of 0.5 cores for 2 s used $used s of CPU"
  else echo "FAIL: a busy loop started by $how on a node of 0.5 cores for 2 s used ${used:-?} s of CPU (want at most 1.3)"; fail=1; fi
done
# `cpus C` while the cluster runs: a tenth of a core, the loop's 2 s at most 0.45 s of CPU
"$cluster" cpus 0.1 || { echo "FAIL: cluster.sh cpus 0.1 failed"; fail=1; }
used=$(cpu_of "$cluster" run node1 timeout 2 sh -c 'while :; do :; done')
if awk -v u="$used" 'BEGIN { exit !(u > 0.01 && u <= 0.45) }'; then echo "ok: after cpus 0.1, the busy loop used $used s of CPU in 2 s"
else echo "FAIL: after cpus 0.1, the busy loop used ${used:-?} s of CPU in 2 s (want at most 0.45)"; fail=1; fi
"$cluster" down
trap - EXIT
if [ -d "$top" ]; then echo "FAIL: down left the CPU group $top"; fail=1; else echo "ok: down removed the CPU groups"; fi
exit $fail
