#!/usr/bin/env bash
# cluster/slurm and cluster/faults side by side (tests/cluster/cluster.cmake): both spend most
# of their time waiting (on slurmctld's 30-s time-limit clock; on distributed timeouts), so as
# two ctest slots they held a core each while using little of it. Each keeps its own WORK and
# cluster; the output of each follows the other's. Exit: 1 if either failed, 77 if both skipped.
set -u
here=$(dirname "$0")
mkdir -p "$WORK" || exit 1
WORK=$WORK/slurm bash "$here/slurm.sh" > "$WORK.slurm.out" 2>&1 & slurm=$!
WORK=$WORK/faults bash "$here/faults.sh" all > "$WORK.faults.out" 2>&1 & faults=$!
wait $slurm; a=$?
wait $faults; b=$?
echo "=== cluster/slurm (exit $a)"; cat "$WORK.slurm.out"
echo "=== cluster/faults (exit $b)"; cat "$WORK.faults.out"
[ $a -eq 77 ] && [ $b -eq 77 ] && exit 77
{ [ $a -eq 0 ] || [ $a -eq 77 ]; } && { [ $b -eq 0 ] || [ $b -eq 77 ]; } && exit 0
exit 1
