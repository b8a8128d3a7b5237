#!/usr/bin/env bash
# The emulated nodes see the paths under /tmp they are given, and keep their own /tmp otherwise
# (scripts/cluster.sh up --share; docs/cluster.md). A clone under /tmp failed every cluster test:
# each node's own /tmp hid the checkout, and mpirun "could not access or execute" build/trident.
# A program and a data file placed in a host folder under /tmp (2 nodes, that folder --share'd):
# - started on node1 by `run`, on node2 through the rsh agent, and on both by mpirun across the
#   nodes (2 ranks, as the tests start trident): each runs, reads the data file and names its node;
# - what a node writes there the host sees, what the host writes there after `up` the nodes see;
# - still private: a host file elsewhere under /tmp is seen by no node; a file node1 writes to its
#   /tmp is seen neither by node2 nor by the host;
# - the checkout is seen by the nodes without --share wherever it is.
# Environment: ROOT, WORK.
set -u
. "$(dirname "$0")/two_nodes.sh"
export CLUSTER_DIR=/run/trident-cluster-tmp.$$
host=/tmp/td-cluster-paths.$$
trap '"$cluster" down; rm -rf "$host" "$host.private"' EXIT
rm -rf "$WORK" && mkdir -p "$WORK" "$host/bin" && cd "$WORK" || exit 1
echo "seen from the host" > "$host/data.txt"
printf '#!/bin/sh\necho "$(hostname): $(cat %s)"\n' "$host/data.txt" > "$host/bin/hello"
chmod +x "$host/bin/hello"
echo "not shared" > "$host.private"
"$cluster" up 2 --ranks-per-node 1 --share "$host/bin/hello" --owner $$ > up.out 2>&1 || { rc=$?; cat up.out; exit $rc; }
fail=0
check() { # what, got, want
  if [ "$2" = "$3" ]; then echo "ok: $1"; else echo "FAIL: $1: got '$2', want '$3'"; fail=1; fi
}
check "run: node1 runs $host/bin/hello" "$("$cluster" run node1 "$host/bin/hello" 2>&1)" "node1: seen from the host"
check "rsh agent: node2 runs it" "$("$CLUSTER_DIR/rsh" node2 "$host/bin/hello" 2>&1)" "node2: seen from the host"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset OMPI_MCA_pml OMPI_MCA_btl
own_session_dir
check "mpirun across the nodes runs it on both" "$(timeout $((60 * ${TD_TIME_SCALE:-1})) "$cluster" run node1 mpirun --hostfile "$CLUSTER_DIR/hostfile" \
  --mca plm_rsh_agent "$CLUSTER_DIR/rsh" --mca oob_tcp_if_include eth0 -np 2 "$host/bin/hello" 2>&1 | sort)" \
  "$(printf 'node1: seen from the host\nnode2: seen from the host')"
"$cluster" run node2 sh -c "echo written by node2 > $host/from_node2"
check "the host sees what node2 wrote there" "$(cat "$host/from_node2" 2>&1)" "written by node2"
echo "written after up" > "$host/later.txt"
check "node1 sees what the host wrote there after up" "$("$cluster" run node1 cat "$host/later.txt" 2>&1)" "written after up"
check "no node sees $host.private" "$("$cluster" run node1 cat "$host.private" 2>/dev/null)$("$cluster" run node2 cat "$host.private" 2>/dev/null)" ""
"$cluster" run node1 sh -c 'echo node1 only > /tmp/td-node1-only'
check "node1 reads its own /tmp" "$("$cluster" run node1 cat /tmp/td-node1-only 2>&1)" "node1 only"
check "node2 does not see node1's /tmp" "$("$cluster" run node2 cat /tmp/td-node1-only 2>/dev/null)" ""
check "the host does not see node1's /tmp" "$(cat /tmp/td-node1-only 2>/dev/null)" ""
check "node2 sees the checkout ($ROOT)" "$("$cluster" run node2 sh -c "test -x '$ROOT/scripts/cluster.sh' && echo yes")" "yes"
exit $fail
