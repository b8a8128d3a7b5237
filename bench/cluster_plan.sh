#!/usr/bin/env bash
# The planner across nodes (docs/plan.md, "The planner across nodes"): on 2 emulated nodes
# (scripts/cluster.sh, each node's link shaped by tc to RATE), calibrate as the runs are launched
# (`trident plan --calibrate` under the same mpirun: 2 nodes x 1 rank, and 2 nodes x 2 ranks),
# train a GPT (4 layers, hidden 256, 8 heads, seq 128, global batch 8, micro-batch 2, GPT-2's
# vocabulary) for ITERS iterations in layouts whose groups cross the network, and print the
# measured median time per iteration (the first left out) beside `trident plan`'s prediction
# with the same flags, and the exposed communication per group the metrics file measured
# (tp/pp/embd/dp_exposed_ms, medians) beside the plan's (the same keys of `plan --json`).
#   2 x 1: dp 2 across, without and with --overlap-grad-reduce (buckets of 1M); pp 2 across
#   2 x 2: tp 2 inside x dp 2 across; tp 2 inside x pp 2 across with and without scatter/gather;
#          dp 4 over both nodes, flat and hierarchical
# Usage: bench/cluster_plan.sh [RATE...]   (default: 1gbit; needs root for the namespaces)
# Environment: BUILD (default build), WORK (default $BUILD/cluster_plan), ITERS (default 4), CPUS (each
# node's processes get at most CPUS cores' time: scripts/cluster.sh up --cpus; calibrated inside it),
# CLUSTER_SH (default scripts/cluster.sh).
# Sourced (`. bench/cluster_plan.sh`), it only defines cp_calibrate and cp_predict for another
# bench (bench/cluster_scaling.sh): see their comments.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD:-$root/build}
T=$build/trident
cluster=${CLUSTER_SH:-$root/scripts/cluster.sh}
MPI_NET=(--mca btl tcp,self,vader --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 -x OMP_NUM_THREADS)

# cp_calibrate OUT.json NP [mpirun flags...]: `trident plan --calibrate` on the cluster that is up
# (CLUSTER_DIR), NP ranks launched from node1 as a training run would be (e.g. --map-by node).
cp_calibrate() {
  local out=$1 np=$2; shift 2
  "$cluster" run node1 mpirun --hostfile "$CLUSTER_DIR/hostfile" --mca plm_rsh_agent "$CLUSTER_DIR/rsh" "${MPI_NET[@]}" \
    "$@" -np "$np" "$T" plan --calibrate >"$out"
}

# cp_plan_json CLUSTER.json NP FLAGS...: `trident plan --json` for train's model, batch and layout
# flags FLAGS on NP ranks (train-only flags are dropped).
cp_plan_json() {
  local cl=$1 np=$2; shift 2
  local keep=() skip=0 a
  for a in "$@"; do # plan takes the model, batch and layout flags; drop train's data and run flags
    if [ $skip -gt 0 ]; then skip=$((skip - 1)); continue; fi
    case $a in
      --data-path|--vocab-file|--merge-file|--split|--train-iters|--eval-iters|--lr|--log-interval|--hidden-dropout|\
      --attention-dropout|--metrics-file|--seed) skip=1 ;;
      *) keep+=("$a") ;;
    esac
  done
  "$T" plan "${keep[@]}" --vocab-size 50257 --cluster "$cl" --num-gpus "$np" --json 2>&1
}

# cp_predict CLUSTER.json NP FLAGS...: prints "iteration_s tp_s p2p_s dp_s" of cp_plan_json.
cp_predict() {
  cp_plan_json "$@" | python3 -c '
import json, sys
r = json.loads(sys.stdin.read()); b = r["breakdown_s"]
print(r["iteration_s"], b["tensor_parallel"], b["pipeline_p2p"], b["data_parallel"])'
}

# cp_exposed CLUSTER.json NP FLAGS...: prints the plan's "tp pp embd dp" exposed communication (ms).
cp_exposed() {
  cp_plan_json "$@" | python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
print(*("%.0f" % r[k + "_exposed_ms"] for k in ("tp", "pp", "embd", "dp")))'
}

# cp_measured METRICS.jsonl: prints the median "elapsed tp pp embd dp" (ms) of the iterations after
# the first.
cp_measured() {
  python3 - "$1" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()][1:]
keys = ["elapsed_ms"] + [k + "_exposed_ms" for k in ("tp", "pp", "embd", "dp")]
print(*("%.0f" % statistics.median(r.get(k, 0) for r in rows) for k in keys))
PY
}

[ "${BASH_SOURCE[0]}" != "$0" ] && return 0

set -uo pipefail
work=${WORK:-$build/cluster_plan}
iters=${ITERS:-4}
rates=("$@")
[ ${#rates[@]} -eq 0 ] && rates=(1gbit)
mkdir -p "$work"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset OMPI_MCA_pml OMPI_MCA_btl
export CLUSTER_DIR=/run/trident-cluster-plan-bench.$$
trap '"$cluster" down' EXIT
data=${SHARED:-$root/../shared/data}
if [ ! -f "$work/ts_text_document.idx" ]; then
  "$root/scripts/text-to-jsonl.sh" "$data/tinyshakespeare.txt" "$work/ts.jsonl"
  "$T" preprocess --input "$work/ts.jsonl" --output-prefix "$work/ts" --vocab-file "$data/gpt2/vocab.json" \
    --merge-file "$data/gpt2/merges.txt" --append-eod >/dev/null
fi
MODEL=(--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 128 --max-position-embeddings 128
       --global-batch-size 8 --micro-batch-size 2 --make-vocab-size-divisible-by 128)
TRAIN=(--data-path "$work/ts_text_document" --vocab-file "$data/gpt2/vocab.json" --merge-file "$data/gpt2/merges.txt"
       --split 100,0,0 --train-iters "$iters" --eval-iters 0 --lr 1e-4 --log-interval 1000 --hidden-dropout 0
       --attention-dropout 0)
cd "$work" || exit 1
echo "uptime: $(uptime)${CPUS:+; each node at most $CPUS cores of CPU time (a CPU cgroup)}"
printf "| rate | nodes x ranks | layout | measured (ms) | predicted (ms) | error | exposed measured: tp / pp / embd / dp (ms) | plan: tp / pp / embd / dp (ms) |\n|---|---|---|---|---|---|---|---|\n"
run() { # rate shape np cluster.json name mpirun-flags(comma-separated) train flags...
  local rate=$1 shape=$2 np=$3 cl=$4 name=$5 mflags=$6; shift 6
  local log=$work/$rate-${name//[^A-Za-z0-9]/_}
  rm -f "$log.jsonl"
  # shellcheck disable=SC2086
  timeout 600 "$cluster" run node1 mpirun --hostfile "$CLUSTER_DIR/hostfile" --mca plm_rsh_agent "$CLUSTER_DIR/rsh" \
    "${MPI_NET[@]}" ${mflags//,/ } -np "$np" "$T" train "${MODEL[@]}" "${TRAIN[@]}" "$@" --metrics-file "$log.jsonl" \
    >"$log.log" 2>&1 || { echo "| $rate | $shape | $name | train failed, see $log.log | | | | |"; return; }
  local meas pred expo
  meas=$(cp_measured "$log.jsonl")
  pred=$(cp_predict "$cl" "$np" "${MODEL[@]}" "$@")
  expo=$(cp_exposed "$cl" "$np" "${MODEL[@]}" "$@")
  awk -v r="$rate" -v s="$shape" -v n="$name" -v m="$meas" -v p="$pred" -v e="$expo" 'BEGIN {
    split(m, a, " "); split(p, x, " "); split(e, y, " ")
    printf "| %s | %s | %s | %.0f | %.0f | %+.1f%% | %s / %s / %s / %s | %s / %s / %s / %s |\n", r, s, n, a[1], x[1] * 1e3,
      100 * (x[1] * 1e3 - a[1]) / a[1], a[2], a[3], a[4], a[5], y[1], y[2], y[3], y[4] }'
}
for rate in "${rates[@]}"; do
  "$cluster" up 2 --ranks-per-node 2 --rate "$rate" ${CPUS:+--cpus "$CPUS"} >/dev/null || exit $?
  cp_calibrate "$work/$rate-2x1.json" 2 --map-by node || { echo "calibrate 2x1 at $rate failed"; exit 1; }
  cp_calibrate "$work/$rate-2x2.json" 4 || { echo "calibrate 2x2 at $rate failed"; exit 1; }
  for s in 2x1 2x2; do
    echo "<!-- $rate $s: $(python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); print("intra %.3g B/s %.3g s, inter %.3g B/s a rank %.3g s, sgemm %.3g FLOP/s, copy %.3g B/s" % (c["intra_node_bandwidth"], c["intra_node_latency"], c["inter_node_bandwidth"], c["inter_node_latency"], c["peak_fp32_flops"], c["memory_bandwidth"]))' "$work/$rate-$s.json") -->"
  done
  run "$rate" "2 x 1" 2 "$work/$rate-2x1.json" "dp 2 across" --map-by,node
  run "$rate" "2 x 1" 2 "$work/$rate-2x1.json" "dp 2 across, overlap (1M buckets)" --map-by,node --overlap-grad-reduce \
    --ddp-bucket-size 1000000
  run "$rate" "2 x 1" 2 "$work/$rate-2x1.json" "pp 2 across" --map-by,node --pipeline-model-parallel-size 2
  run "$rate" "2 x 2" 4 "$work/$rate-2x2.json" "tp 2 inside x dp 2 across" "" --tensor-model-parallel-size 2
  run "$rate" "2 x 2" 4 "$work/$rate-2x2.json" "tp 2 inside x pp 2 across, scatter/gather" "" --tensor-model-parallel-size 2 \
    --pipeline-model-parallel-size 2
  run "$rate" "2 x 2" 4 "$work/$rate-2x2.json" "tp 2 inside x pp 2 across, no scatter/gather" "" \
    --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --no-scatter-gather-tensors-in-pipeline
  run "$rate" "2 x 2" 4 "$work/$rate-2x2.json" "dp 4 flat" "" --dp-collectives flat
  run "$rate" "2 x 2" 4 "$work/$rate-2x2.json" "dp 4 hierarchical" "" --dp-collectives hierarchical
  "$cluster" down >/dev/null
done
echo "uptime: $(uptime)"
