# Sourced by the tests that run several Open MPI jobs (mpirun, or ranks started without it) at once.
# Open MPI 4.1 creates <base>/ompi.HOST.UID/... with mkdir -p and, as a job ends, removes the top
# directory once it is empty: a job starting beside one ending can lose that directory between
# two of its mkdirs and fail with "orte_session_dir failed" (seen in CI, one time in a few).
# session_base: prints a new session directory base under the test's own (ctest gives each test
# one: tests/CMakeLists.txt).
session_base() {
  local base=${OMPI_MCA_orte_tmpdir_base:-/tmp}
  mkdir -p "$base" && mktemp -d -p "$base" s.XXXXXX
}
# own_session_dir: gives the calling (sub)shell's jobs a base of their own; call it in each
# backgrounded job's subshell before its mpirun.
own_session_dir() {
  local b; b=$(session_base) && export OMPI_MCA_orte_tmpdir_base=$b
}
