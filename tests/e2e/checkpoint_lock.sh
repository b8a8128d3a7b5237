#!/usr/bin/env bash
# Two trainings into one --save folder: the second is refused (exit 1, one line naming the
# folder and the holder, printed once by its 2 ranks) while the first holds the folder's lock,
# and the first finishes intact. The first is paused (SIGSTOP) while the second tries, so the
# overlap does not depend on timing. The lock is free again once its holder ends, normally or
# by kill -9 (checked with util-linux flock, independent of trident, and by a next run).
CKPT_TOKENS=bytes . "$(dirname "$0")/checkpoint_lib.sh"
LOCK=.trident-save.lock

# wait_lock DIR: until the holder has written its name into DIR's lock file (at most ~60 s)
wait_lock() { local k; for k in $(seq 600); do [ -s "$1/$LOCK" ] && return 0; sleep 0.1; done; return 1; }
stop_ranks() { local p; for p in $(ranks_of "$1"); do kill "-$2" "$p"; done; }

# A: 2 ranks, seed 7, saving every iteration, each save held 0.5 s (--debug-save-delay-ms): in bytes its 4
# iterations take a few milliseconds, and A once ended before the pause below reached it
OMPI_MCA_orte_tmpdir_base=$(session_base) timeout $((200 * ${TD_TIME_SCALE:-1})) "${MPIRUN[@]}" -np 2 "$TRIDENT" train "${BASE[@]}" --debug-save-delay-ms 500 \
  --tensor-model-parallel-size 2 --make-vocab-size-divisible-by 256 --train-iters 4 --save shared --save-interval 1 >a.log 2>&1 &
a=$!
if ! wait_lock shared; then
  bad "run A wrote no lock file into shared/"; ls -a shared; tail -3 a.log; kill $a; finish; exit
fi
stop_ranks $a STOP
holder=$(cat shared/$LOCK)
if [ "$(flock -n shared/$LOCK true; echo $?)" = 1 ]; then ok "the lock is held while A runs ($holder)"
else bad "flock -n took shared/$LOCK while A holds it"; fi
# B: 2 ranks, another seed, same folder: refused before it trains
train 2 2 --train-iters 4 --save shared --save-interval 1 --seed 8
rc=$?
line=$(grep "error: " "$last_log")
if [ "$rc" = 1 ] && [ "$(grep -c "error: " "$last_log")" = 1 ] &&
   grep -qF -- "--save shared is in use by another training run ($holder)" <<<"$line" &&
   ! grep -q "iteration " "$last_log"; then
  ok "B refused (exit 1, once): $line"
else bad "B: exit $rc, want 1 and one line naming shared and '$holder':"; tail -5 "$last_log"; fi
stop_ranks $a CONT
wait $a
rc=$?
seed=$(jq -r .rng.seed shared/iter_0000004/meta.json 2>/dev/null)
if [ "$rc" = 0 ] && [ "$(cat shared/latest_checkpointed_iteration.txt)" = 4 ] && [ "$seed" = 7 ] &&
   "$TRIDENT" checkpoint info shared | grep -Eq "CRC32: all [0-9]+ entries ok"; then
  ok "A finished intact: exit 0, iteration 4, seed 7, every CRC32 ok"
else bad "A: exit $rc, seed '$seed'"; tail -5 a.log; fi

# after A ended: the lock is free; a run continuing A's checkpoint takes it
if flock -n shared/$LOCK true; then ok "the lock is free once A ended"; else bad "shared/$LOCK still held after A ended"; fi
if train 2 2 --train-iters 6 --load shared --save shared && [ "$(cat shared/latest_checkpointed_iteration.txt)" = 6 ]
then ok "a later run into shared (resuming A) saves iteration 6"; else bad "the run after A:"; tail -3 "$last_log"; fi

# a holder killed with kill -9 leaves no stale lock
OMPI_MCA_orte_tmpdir_base=$(session_base) timeout $((200 * ${TD_TIME_SCALE:-1})) "${MPIRUN[@]}" -np 2 "$TRIDENT" train "${BASE[@]}" \
  --tensor-model-parallel-size 2 --make-vocab-size-divisible-by 256 --train-iters 100000 --save killed --save-interval 100000 >c.log 2>&1 &
c=$!
if wait_lock killed; then
  stop_ranks $c STOP
  stop_ranks $c KILL
  wait $c
  if flock -n killed/$LOCK true; then ok "the lock is free after its holder was killed (kill -9)"
  else bad "killed/$LOCK still held after kill -9"; fi
  if train 2 2 --train-iters 2 --save killed && [ -d killed/iter_0000002 ]; then ok "the next run into killed/ trains and saves"
  else bad "the run after kill -9:"; tail -3 "$last_log"; fi
else bad "run C wrote no lock file"; kill $c; fi
finish
