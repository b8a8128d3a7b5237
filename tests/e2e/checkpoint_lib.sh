# Shared by the checkpoint e2e scripts (sourced). Environment from tests/e2e/checkpoint.cmake:
# TRIDENT (binary), DATA (dataset prefix), VOCAB, MERGES, WORK (a scratch folder for this test),
# COMPARE_RUNS (tests/parallel/compare_runs).
set -u
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1 # (the single-copy mechanism: TD_MPI_ENV, tests/CMakeLists.txt)
# Open MPI's start-up, half a second per launch, mostly probes for network transports (UCX, OFI,
# openib) a one-node job never uses: name the ones it does use (ob1 over shared memory and self,
# which it picks anyway), and let a one-rank run start without an orted (an isolated singleton).
# A job that fails (most runs here are meant to) ends when mpirun has killed its other ranks,
# which by default waits a second between SIGTERM and SIGKILL: kill at once (no run here saves
# after a peer failed; checkpoint_signal.sh, which tests that grace, sets its own).
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_ess_singleton_isolated=1 OMPI_MCA_odls_base_sigkill_timeout=0
# a waiting rank yields its core, also when a job has no more ranks than cores (TD_MPI_ENV says why)
export OMPI_MCA_mpi_yield_when_idle=1
MPIRUN=(mpirun --oversubscribe --bind-to none)
# each run its own session directory base: several run at once in some scripts (session_dir.sh)
. "$(dirname "${BASH_SOURCE[0]}")/../session_dir.sh"
pass=0 fail=0
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1

ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
finish() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; }
# unsanitized [FILE]: the lines a user sees, less the suppression table a sanitizer build's leak
# checker prints at exit (dashes, "Suppressions used:", its header, its rows)
unsanitized() { grep -v -e '^-*$' -e 'Suppressions used' -e '^ *count *bytes template' -e '^ *[0-9]\+ \+[0-9]\+ ' "$@"; }

# The tiny model of the layout tests: 4 layers, hidden 32, dropout on, global batch 8; the padded
# vocabulary is held whatever tp (--make-vocab-size-divisible-by 512/tp): 50688 rows in GPT-2's
# tokens, 512 in bytes (CKPT_TOKENS=bytes set before sourcing this: the scripts that check no
# GPT-2 figure, at a third of the CPU time).
if [ "${CKPT_TOKENS:-gpt2}" = bytes ]; then
  TOKENS=(--data-path "$BYTES_DATA" --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$BYTES_TOKENIZER")
else
  TOKENS=(--data-path "$DATA" --vocab-file "$VOCAB" --merge-file "$MERGES")
fi
BASE=("${TOKENS[@]}" --split 90,10,0
      --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --max-position-embeddings 16
      --hidden-dropout 0.1 --attention-dropout 0.1 --global-batch-size 8 --lr 1e-3 --lr-warmup-iters 1
      --lr-decay-style cosine --eval-interval 2 --eval-iters 1 --clip-grad 1.0 --seed 7 --peak-tflops 1
      --log-interval 100 --micro-batch-size 1)

# train NP TP [flags...]: one run of NP ranks (tp TP), under mpirun unless NP is 1; output in $last_log.
train() {
  local np=$1 tp=$2 launch=("${MPIRUN[@]}" -np "$1"); shift 2
  [ "$np" = 1 ] && launch=()
  last_log=$WORK/run$((++nrun)).log
  OMPI_MCA_orte_tmpdir_base=$(session_base) timeout $((120 * ${TD_TIME_SCALE:-1})) "${launch[@]}" "$TRIDENT" train "${BASE[@]}" \
    --tensor-model-parallel-size "$tp" --make-vocab-size-divisible-by $((512 / tp)) "$@" >"$last_log" 2>&1
}
nrun=0

# Metrics lines without the timing fields (what must be bit-identical between runs).
untimed() { sed -E 's/"(tokens_per_s|model_tflops_per_rank|mfu|elapsed_ms|comm_ms|pp_ms|[a-z]+_exposed_ms|[a-z]+_inflight_ms)": [^,}]*(, )?//g' "$@"; }

# Rank processes of a job started as `timeout ... mpirun ...` with pid $1 (its grandchildren).
ranks_of() { local mp; for mp in $(pgrep -P "$1"); do pgrep -P "$mp"; done; }

# Checksums of every file under a folder, for "nothing was overwritten" (not the --save lock,
# which names the run that last held it).
tree_sums() { (cd "$1" && find . -type f ! -name .trident-save.lock -print0 | sort -z | xargs -0 md5sum); }
