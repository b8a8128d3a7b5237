#!/usr/bin/env bash
# SIGTERM to mpirun (Ctrl-C, a scheduler, `kill`) with --exit-signal-handler and a save that takes
# seconds (TRIDENT_TEST_SAVE_DELAY_MS=1500: about 4.5 s). Open MPI forwards SIGTERM to the ranks
# and SIGKILLs them odls_base_sigkill_timeout seconds later (default 1).
#  1. With the documented launch (--mca odls_base_sigkill_timeout 10 here): rank 0 says "received
#     SIGTERM: saving iteration N to DIR before exiting" then "saved checkpoint at iteration N",
#     latest names N, it verifies and a run resumes from it.
#     The same with a log line every iteration (mpirun does not drain the ranks' output while
#     it waits, so a rank must not block writing it): the save completes.
#  2. Without it: the save is lost (SIGKILL), but it is reported: a warning at start names the
#     grace period and how to raise it, and the signal and the save that started are printed.
. "$(dirname "$0")/checkpoint_lib.sh"
unset OMPI_MCA_odls_base_sigkill_timeout
latest() { cat "$1/latest_checkpointed_iteration.txt" 2>/dev/null; }

# sigterm_mpirun NAME LOG-INTERVAL [mpirun flags...]: trains under mpirun (tp1 x dp2) until 2
# iterations are logged, sends SIGTERM to mpirun itself and waits for it (at most 60 s). Sets $n
# (iterations logged).
sigterm_mpirun() {
  local name=$1 logi=$2; shift 2
  TRIDENT_TEST_SAVE_DELAY_MS=1500 "${MPIRUN[@]}" "$@" -np 2 "$TRIDENT" train "${BASE[@]}" --tensor-model-parallel-size 1 \
    --make-vocab-size-divisible-by 512 --train-iters 100000 --exit-signal-handler --save "$name" \
    --eval-interval "$logi" --log-interval "$logi" --metrics-file "$name.jsonl" >"$name.log" 2>&1 &
  local job=$!
  for _ in $(seq 1 1200); do [ -f "$name.jsonl" ] && [ "$(wc -l <"$name.jsonl")" -ge 2 ] && break; sleep 0.05; done
  kill -TERM "$job"
  local t0=$SECONDS
  for _ in $(seq 1 1200); do kill -0 "$job" 2>/dev/null || break; sleep 0.05; done
  if kill -0 "$job" 2>/dev/null; then bad "$name: mpirun still running 60 s after SIGTERM"; kill -9 "$job"; fi
  wait "$job"; rc=$?
  n=$(wc -l <"$name.jsonl")
  echo "$name: mpirun exit $rc, $((SECONDS - t0)) s after SIGTERM, $n iterations"
}

sigterm_mpirun grace 1000 --mca odls_base_sigkill_timeout 10
if grep -q "received SIGTERM: saving iteration $n to grace before exiting" grace.log &&
   grep -q "saved checkpoint at iteration $n to grace" grace.log && [ "$(latest grace)" = "$n" ] &&
   [ -z "$(ls -d grace/*.tmp 2>/dev/null)" ] && "$TRIDENT" checkpoint info grace >/dev/null 2>&1; then
  ok "SIGTERM to mpirun with odls_base_sigkill_timeout 10: iteration $n saved and verifies: $(grep -o 'received SIGTERM.*' grace.log | head -1)"
else bad "SIGTERM to mpirun with the grace period: latest $(latest grace), iterations $n"; tail -5 grace.log; ls grace; fi
if train 1 1 --train-iters $((n + 1)) --load grace >/dev/null && grep -q "loaded checkpoint grace/iter_$(printf %07d "$n")" "$last_log"; then
  ok "it resumes: iteration $((n + 1)) from iteration $n"; else bad "resume after SIGTERM"; tail -3 "$last_log"; fi

# a run that logs every iteration fills mpirun's undrained output while it waits: the rank must
# not block there (its messages may be lost, the save must not)
sigterm_mpirun chatty 1 --mca odls_base_sigkill_timeout 20 # long enough to fill it
if [ "$(latest chatty)" = "$n" ] && "$TRIDENT" checkpoint info chatty >/dev/null 2>&1; then
  ok "logging every iteration: iteration $n saved and verifies"
else bad "logging every iteration: latest $(latest chatty), iterations $n"; tail -3 chatty.log; ls chatty; fi

sigterm_mpirun nograce 1000
if grep -q "warning: .*odls_base_sigkill_timeout" nograce.log && grep -q "received SIGTERM: saving iteration $n to nograce" nograce.log &&
   ! grep -q "saved checkpoint at iteration $n" nograce.log; then
  ok "without the grace period the loss is reported: $(grep -o 'warning: .*' nograce.log | head -1 | cut -c1-160)..."
else bad "without the grace period nothing is reported"; tail -5 nograce.log; ls nograce; fi
finish
