# Sourced by the tests that run several Open MPI jobs at once.
# own_session_dir: gives the calling (sub)shell's jobs a session directory base of their own.
# Open MPI 4.1 creates <base>/ompi.HOST.UID/pid.N/... with mkdir -p and, as a job ends, removes
# the top directory once it is empty: a job starting beside one ending can lose that directory
# between two of its mkdirs and fail with "orte_session_dir failed" (seen in CI, one time in a
# few). Call it in each backgrounded job's subshell before its mpirun.
own_session_dir() {
  local base=${OMPI_MCA_orte_tmpdir_base:-/tmp}
  mkdir -p "$base" && OMPI_MCA_orte_tmpdir_base=$(mktemp -d -p "$base" s.XXXXXX) &&
    export OMPI_MCA_orte_tmpdir_base
}
