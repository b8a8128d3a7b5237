#!/usr/bin/env bash
# The threads a rank runs (comm_threads_per_rank): with OMP_NUM_THREADS unset, the cores the rank
# may use over the ranks of its host whose affinity masks overlap its own. Counted here by hand
# from this process's mask (nproc) and held against the start-up line's "N thread(s)": one rank
# alone takes them all; two and four unbound ranks (--bind-to none) share them; two ranks bound to
# a core each (mpirun's default at np 2, where the machine has 2 cores) take their one core;
# OMP_NUM_THREADS, when set, wins on every rank. Usage: threads.sh TRIDENT DATA_PREFIX VOCAB MERGES WORK
set -u
trident=$1 data=$2 vocab=$3 merges=$4 work=$5
base=(--data-path "$data" --vocab-file "$vocab" --merge-file "$merges" --split 90,10,0 --num-layers 1
      --hidden-size 64 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 --micro-batch-size 1
      --global-batch-size 4 --train-iters 1 --eval-iters 0 --log-interval 100 --peak-tflops 1
      --make-vocab-size-divisible-by 256)
rm -rf "$work" && mkdir -p "$work" || exit 1
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) # nproc obeys both
fail=0
want_of() { local n=$(( cores / $1 )); echo $(( n > 0 ? n : 1 )); }
# run name want launcher... : every rank's kernels line must say want thread(s)
run() {
  local name=$1 want=$2; shift 2
  if ! env -u OMP_NUM_THREADS timeout $((60 * ${TD_TIME_SCALE:-1})) "$@" "$trident" train "${base[@]}" \
      --tensor-model-parallel-size 1 > "$work/$name.log" 2>&1 < /dev/null; then
    echo "FAIL: $name exited non-zero"; tail -20 "$work/$name.log"; fail=1; return
  fi
  local got
  got=$(grep -o 'sgemm, [0-9]* thread' "$work/$name.log" | sort -u | awk '{print $2}' | tr '\n' ' ')
  if [ "$got" = "$want " ]; then echo "ok: $name: $want thread(s) a rank ($cores cores)"
  else echo "FAIL: $name: threads a rank '$got', want $want ($cores cores)"; grep kernels "$work/$name.log"; fail=1; fi
}
run alone "$(want_of 1)"
run np2_unbound "$(want_of 2)" mpirun --oversubscribe --bind-to none -np 2
run np4_unbound "$(want_of 4)" mpirun --oversubscribe --bind-to none -np 4
if [ "$cores" -ge 2 ]; then run np2_bound_core 1 mpirun --bind-to core --map-by core -np 2; fi
run np2_omp3 3 env OMP_NUM_THREADS=3 mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS -np 2
exit $fail
