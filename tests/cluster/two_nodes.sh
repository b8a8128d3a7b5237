# Sourced by the cluster tests: two_nodes NAME brings up 2 emulated nodes of 2 slots with links
# shaped to 1 Gbit/s (CLUSTER_DIR /run/trident-cluster-NAME.PID, removed on exit; exits 77, saying
# why, where namespaces cannot be made), makes WORK afresh and enters it, and sets the ranks'
# environment: one OpenMP thread, root allowed, TCP between the nodes (the suite's one-node
# transports unset), each script's Open MPI jobs under a session directory base of their own
# (the node-fault kinds and the Slurm test run side by side: tests/session_dir.sh). Needs ROOT and
# WORK; sets $cluster.
. "$(dirname "${BASH_SOURCE[0]}")/../session_dir.sh"
cluster=$ROOT/scripts/cluster.sh
# cluster_up ARGS...: scripts/cluster.sh up ARGS for this test: down once the test's process has
# ended, however it ended (--owner: a ctest timeout SIGKILLs the test's processes, and no trap
# runs), and every path of the test's environment seen by the nodes wherever it is (--share: each
# node has its own /tmp, and a checkout or build under /tmp must be seen there too)
cluster_up() {
  local v shares=()
  for v in TRIDENT DATA VOCAB MERGES BYTES_DATA BYTES_TOKENIZER COMPARE_RUNS WORK; do
    [ -z "${!v:-}" ] || shares+=(--share "${!v}")
  done
  "$cluster" up "$@" --owner $$ "${shares[@]}"
}
two_nodes() {
  export CLUSTER_DIR=/run/trident-cluster-$1.$$
  trap '"$cluster" down' EXIT
  cluster_up 2 --ranks-per-node 2 --rate 1gbit || exit $? # 77: no namespaces here (skipped, says why)
  rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
  export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  # the emulated nodes share this machine's cores: unbound, or Open MPI binds each node's ranks to
  # the same first cores, where a rank cannot move off a core another test keeps busy
  export OMPI_MCA_hwloc_base_binding_policy=none
  unset OMPI_MCA_pml OMPI_MCA_btl
  own_session_dir
}
