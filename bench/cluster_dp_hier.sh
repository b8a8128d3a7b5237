#!/usr/bin/env bash
# Data parallelism across emulated nodes: dp 4 on 2 nodes x 2 ranks (scripts/cluster.sh, each
# node's egress shaped to RATE), the buckets' collectives flat, hierarchical (--dp-collectives)
# and flat under Open MPI's HAN (--mca coll_han_priority 100), with the plain and the distributed
# optimizer and with --overlap-grad-reduce; the runs alternated round by round (same load).
# Prints per run the median time per iteration and the communication per iteration (the time
# rank 0 was blocked in its groups: here the dp group), after the first iteration, and the line
# --dp-collectives auto prints; then bench_dp_collectives (one gradient's all-reduce: trident flat,
# hierarchical, blocking MPI_Allreduce) with HAN off and on. Needs root (namespaces). Usage:
#   bench/cluster_dp_hier.sh [--rate 1gbit --layers 4 --hidden 512 --seq 64 --gbs 8 --iters 4 --rounds 2]
# Callable from another bench: `source bench/cluster_dp_hier.sh --functions` defines dp_hier_rows.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rate=1gbit layers=4 hidden=512 seq=64 gbs=8 iters=4 rounds=2 functions=0
while [ $# -gt 0 ]; do
  case $1 in
    --rate) rate=$2 ;; --layers) layers=$2 ;; --hidden) hidden=$2 ;; --seq) seq=$2 ;; --gbs) gbs=$2 ;;
    --iters) iters=$2 ;; --rounds) rounds=$2 ;; --functions) functions=1; shift; continue ;;
    *) echo "cluster_dp_hier.sh: unknown option $1" >&2; exit 2 ;;
  esac; shift 2
done
build=${BUILD:-$root/build}
cluster=$root/scripts/cluster.sh

# dp_hier_rows WORK: the table, on a cluster already up (CLUSTER_DIR) with 2 nodes x 2 ranks
dp_hier_rows() {
  local work=$1 data
  data=$("$root/scripts/get-data.sh")
  local prefix
  prefix=$("$root/bench/shakespeare.sh" "$build/trident" "$data" "$work")
  # the gradient's elements: GPT-2's vocabulary padded to 50304, tied, and the layers
  local elements=$(( 50304 * hidden + seq * hidden + layers * (12 * hidden * hidden + 13 * hidden) + 2 * hidden ))
  local common=(--data-path "$prefix" --vocab-file "$data/gpt2/vocab.json" --merge-file "$data/gpt2/merges.txt"
    --split 100,0,0 --num-layers "$layers" --hidden-size "$hidden" --num-attention-heads 8 --seq-length "$seq"
    --max-position-embeddings "$seq" --global-batch-size "$gbs" --micro-batch-size 1 --train-iters "$iters"
    --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 --log-interval 1000 --peak-tflops 1
    --make-vocab-size-divisible-by 128)
  local specs=(
    "flat|--dp-collectives flat"
    "hierarchical|--dp-collectives hierarchical"
    "HAN (flat, coll_han_priority 100)|HAN --dp-collectives flat"
    "distopt flat|--dp-collectives flat --use-distributed-optimizer"
    "distopt hierarchical|--dp-collectives hierarchical --use-distributed-optimizer"
    "overlap flat (buckets of 4M)|--dp-collectives flat --overlap-grad-reduce --ddp-bucket-size 4000000"
    "overlap hierarchical (buckets of 4M)|--dp-collectives hierarchical --overlap-grad-reduce --ddp-bucket-size 4000000")
  local round i
  for round in $(seq 1 "$rounds"); do
    for i in "${!specs[@]}"; do
      local flags=${specs[$i]#*|} mca=()
      if [ "${flags%% *}" = HAN ]; then mca=(--mca coll_han_priority 100); flags=${flags#HAN }; fi
      # shellcheck disable=SC2086
      timeout 600 "$cluster" run node1 mpirun --hostfile "$CLUSTER_DIR/hostfile" --mca plm_rsh_agent "$CLUSTER_DIR/rsh" \
        --mca btl tcp,self,vader --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 "${mca[@]}" \
        -x OMP_NUM_THREADS -np 4 "$build/trident" train "${common[@]}" $flags \
        --metrics-file "$work/dphier-$i-$round.jsonl" > "$work/dphier-$i-$round.log" 2>&1 ||
        { echo "run '${specs[$i]%%|*}' failed: $work/dphier-$i-$round.log" >&2; tail -5 "$work/dphier-$i-$round.log" >&2; }
    done
    echo "round $round done; $(uptime)" >&2
  done
  echo "uptime after: $(uptime)"
  printf "%-40s %14s %14s   %s\n" "dp 4 = 2 nodes x 2 ranks, $rate" "iter (ms)" "comm (ms)" "per round"
  for i in "${!specs[@]}"; do
    /usr/bin/python3 - "${specs[$i]%%|*}" "$work"/dphier-"$i"-*.jsonl <<'PY'
import json, statistics, sys
name, files = sys.argv[1], sys.argv[2:]
rows, per = [], []
for f in files:
    try: r = [json.loads(l) for l in open(f)][1:]
    except OSError: continue
    rows += r
    if r: per.append(f'{statistics.median(x["elapsed_ms"] for x in r):.0f}')
if rows:
    print(f'{name:40s} {statistics.median(x["elapsed_ms"] for x in rows):14.0f} '
          f'{statistics.median(x["comm_ms"] for x in rows):14.0f}   {" ".join(per)}')
PY
  done
  # what auto picks on this model (one bucket of the run's size, timed both ways at start)
  timeout 600 "$cluster" run node1 mpirun --hostfile "$CLUSTER_DIR/hostfile" --mca plm_rsh_agent "$CLUSTER_DIR/rsh" \
    --mca btl tcp,self,vader --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 -x OMP_NUM_THREADS \
    -np 4 "$build/trident" train "${common[@]}" --train-iters 1 > "$work/dphier-auto.log" 2>&1
  grep -o "dp collectives: .*" "$work/dphier-auto.log" || echo "auto: no line (see $work/dphier-auto.log)"
  # the bare collective, one gradient's worth: HAN takes only the blocking MPI_Allreduce
  local han
  for han in 0 100; do
    echo "coll_han_priority $han:"
    # HAN did not finish its 12 all-reduces of a 154 MB gradient in 3.5 minutes here: bounded at 4
    timeout 240 "$cluster" run node1 mpirun --hostfile "$CLUSTER_DIR/hostfile" --mca plm_rsh_agent "$CLUSTER_DIR/rsh" \
      --mca btl tcp,self,vader --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 --mca coll_han_priority $han \
      -np 4 "$build/bench_dp_collectives" "$elements" 3 2>&1 | tail -4 || echo "  (stopped after 240 s)"
  done
}

[ "$functions" = 1 ] && return 0 2>/dev/null
[ "$(id -u)" -eq 0 ] || { echo "cluster_dp_hier.sh: needs root for the emulated cluster's namespaces" >&2; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
unset OMPI_MCA_pml OMPI_MCA_btl
[ -x "$build/trident" ] || make -C "$root" build >/dev/null
export CLUSTER_DIR=/run/trident-cluster-dphier-bench.$$
trap '"$cluster" down' EXIT
"$cluster" up 2 --ranks-per-node 2 --rate "$rate" >/dev/null || exit $?
work=${WORK:-$build/bench-dp-hier}
mkdir -p "$work"
echo "model: $layers layers x $hidden, seq $seq, vocab GPT-2 (padded 50304), global batch $gbs (micro 1); $iters iterations, $rounds rounds"
dp_hier_rows "$work"
