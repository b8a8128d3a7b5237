#!/usr/bin/env bash
# Data-parallel overlap across emulated nodes (docs/cluster.md, "Overlap across nodes"): dp 2,
# one rank on each of 2 nodes whose links are shaped (scripts/cluster.sh), the same model trained
# with and without --overlap-grad-reduce, by this build and, when given, by another build (main)
# as the "before". Variants alternate within each repetition so that they share the machine's
# load. Prints per variant the mean time per iteration (the first left out) and, on rank 0,
# the dp communication exposed (blocked) and in flight per iteration from the metrics file
# (dp_exposed_ms, dp_inflight_ms; a build without them shows its comm_ms as exposed). Usage:
#   bench/cluster_overlap.sh [--before PATH/TO/trident] [--rate 1gbit] [--layers 4] [--hidden 256]
#     [--seq 128] [--gbs 32] [--mbs 4] [--bucket 2000000] [--iters 4] [--reps 2] [--untie] [--extra "FLAGS"]
#     [--mca-thread] [--one-node]
# --mca-thread adds the before build with Open MPI's own TCP progress thread
# (btl_tcp_progress_thread=1) and overlap; --one-node runs the two ranks on this machine instead
# (shared memory: the cost of the progress calls where overlap worked already).
# --bucket is --ddp-bucket-size (elements); --untie unties the word embedding and the output
# layer (tied, their gradient bucket closes last in the backward and cannot be hidden).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mca="" one_node="" before="" rate=1gbit layers=4 hidden=256 seq=128 gbs=32 mbs=4 bucket=2000000 iters=4 reps=2 untie="" extra=""
while [ $# -gt 0 ]; do
  case $1 in
    --before) before=$2 ;; --rate) rate=$2 ;; --layers) layers=$2 ;; --hidden) hidden=$2 ;; --seq) seq=$2 ;;
    --gbs) gbs=$2 ;; --mbs) mbs=$2 ;; --bucket) bucket=$2 ;; --iters) iters=$2 ;; --reps) reps=$2 ;;
    --untie) untie=--untie-embeddings-and-output-weights; shift; continue ;;
    --extra) extra=$2 ;;
    --mca-thread) mca=1; shift; continue ;;
    --one-node) one_node=1; shift; continue ;;
    *) echo "cluster_overlap.sh: unknown option $1" >&2; exit 2 ;;
  esac; shift 2
done
build=${BUILD:-$root/build}
[ -x "$build/trident" ] || make -C "$root" build >/dev/null
data=$("$root/scripts/get-data.sh")
work=${WORK:-$build/bench/cluster_overlap} # shared by the nodes: never under /tmp
mkdir -p "$work"
"$root/bench/shakespeare.sh" "$build/trident" "$data" "$work" >/dev/null
export CLUSTER_DIR=/run/trident-cluster-overlap.$$
cluster=$root/scripts/cluster.sh
if [ -z "$one_node" ]; then
  trap '"$cluster" down >/dev/null 2>&1 || true' EXIT
  "$cluster" up 2 --ranks-per-node 1 --rate "$rate" >/dev/null
fi
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset OMPI_MCA_pml OMPI_MCA_btl
common=(--data-path "$work/ts_text_document" --vocab-file "$data/gpt2/vocab.json" --merge-file "$data/gpt2/merges.txt"
  --split 100,0,0 --num-layers "$layers" --hidden-size "$hidden" --num-attention-heads $((hidden / 64))
  --seq-length "$seq" --max-position-embeddings "$seq" --global-batch-size "$gbs" --micro-batch-size "$mbs"
  --train-iters "$iters" --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 --log-interval 1000
  --peak-tflops 1 --make-vocab-size-divisible-by 128 --ddp-bucket-size "$bucket" $untie $extra)

run() { # name binary flags...: one dp 2 run across the two nodes; appends its row to $work/rows
  local name=$1 bin=$2; shift 2
  rm -f "$work/$name.jsonl"
  local launch=(timeout 900 "$cluster" run node1 mpirun --hostfile "$CLUSTER_DIR/hostfile" --mca plm_rsh_agent
    "$CLUSTER_DIR/rsh" --mca btl tcp,self,vader --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0)
  [ -n "$one_node" ] && launch=(timeout 900 mpirun)
  (cd "$work" && "${launch[@]}" ${MPIX:-} -x OMP_NUM_THREADS -np 2 "$bin" train "${common[@]}" "$@" \
    --metrics-file "$work/$name.jsonl") > "$work/$name.log" 2>&1 || { echo "FAIL: $name"; tail -20 "$work/$name.log"; exit 1; }
  awk -v name="$name" '
    { n++; if (n == 1) next; m++
      e = $0; sub(/.*"elapsed_ms": /, "", e); sub(/[,}].*/, "", e); el += e
      if ($0 ~ /"dp_exposed_ms"/) {
        x = $0; sub(/.*"dp_exposed_ms": /, "", x); sub(/[,}].*/, "", x); ex += x
        f = $0; sub(/.*"dp_inflight_ms": /, "", f); sub(/[,}].*/, "", f); fl += f; have = 1
      } else { x = $0; sub(/.*"comm_ms": /, "", x); sub(/[,}].*/, "", x); ex += x }
    }
    END { printf "%s %.3f %.1f %s\n", name, el / m / 1e3, ex / m, have ? sprintf("%.1f", fl / m) : "-" }' \
    "$work/$name.jsonl" >> "$work/rows"
}

: > "$work/rows"
echo "uptime before: $(uptime)"
for rep in $(seq "$reps"); do
  if [ -n "$before" ]; then
    run "before_off.$rep" "$before"
    run "before_on.$rep" "$before" --overlap-grad-reduce
    [ -n "$mca" ] && MPIX="--mca btl_tcp_progress_thread 1" run "before_mcathread.$rep" "$before" --overlap-grad-reduce
  fi
  run "after_off.$rep" "$build/trident"
  run "after_on.$rep" "$build/trident" --overlap-grad-reduce
done
echo "uptime after: $(uptime)"
[ -n "$one_node" ] && echo "dp 2 on this one node (shared memory)" ||
echo "dp 2 across 2 nodes at $rate: $layers layers x $hidden, seq $seq, global batch $gbs, micro-batch $mbs, --ddp-bucket-size $bucket ${untie:+(untied)}"
printf "%-12s %-9s %10s %14s %14s %8s\n" build overlap s/iter "dp exposed ms" "dp in flight ms" hidden
sort "$work/rows" | awk '
  { split($1, p, "."); k = p[1]; s[k] += $2; x[k] += $3; if ($4 != "-") { f[k] += $4; hf[k] = 1 } c[k]++ }
  END { for (k in c) {
          split(k, q, "_"); fl = hf[k] ? sprintf("%.1f", f[k] / c[k]) : "-"
          hid = hf[k] && f[k] > 0 ? sprintf("%.0f%%", 100 * (f[k] - x[k]) / f[k]) : "-"
          printf "%-12s %-9s %10.3f %14.1f %14s %8s\n", q[1], q[2], s[k] / c[k], x[k] / c[k], fl, hid } }' | sort
