#!/usr/bin/env bash
# Pipeline across nodes with and without scatter/gather (docs/cluster.md, "Pipeline across
# nodes: scatter/gather"): two emulated nodes (scripts/cluster.sh), each node's link shaped to a
# rate, tp 2 inside each node and pp 2 across them (4 ranks, 2 a node), 1F1B. Each rate's runs
# alternate A/B (scatter/gather on, then --no-scatter-gather-tensors-in-pipeline) so that both see
# the same load; `uptime` is printed beside them. Per run: the median over the iterations after
# the first of the time per iteration, the communication the reporting rank (last stage, tp 0)
# was blocked in, and of it the stage transfers (metrics "pp_ms": receives, their all-gathers,
# waits on sends: the time the other stage was still computing included).
# The output layer is untied (--untie-embeddings-and-output-weights): a tied embedding's gradient
# sum between the first and last stage (vocab x hidden / tp floats a rank, every iteration) would
# cross the same link and hide the stage transfers.
# Usage: bench/cluster_pp_sg.sh [--rates "1gbit 200mbit"] [--pairs 2] [--layers 2 --hidden 512
#          --heads 8 --seq 256 --mbs 4 --gbs 8 --iters 4]
# Sourced, it only defines pp_sg_pair (one A/B pair on a cluster already up), for
# bench/cluster_scaling.sh.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# pp_sg_pair LABEL: one run with scatter/gather and one without on the cluster at $CLUSTER_DIR
# (2 nodes, 2 slots each), trident at $build/trident, the model's flags in the array pp_sg_flags
# and the job's files under $work (not under /tmp); prints one row each, and fails if the two
# runs' losses are not bitwise the same.
pp_sg_pair() {
  local label=$1 sg flags name
  for sg in on off; do
    flags=(); [ "$sg" = off ] && flags=(--no-scatter-gather-tensors-in-pipeline)
    name="$work/ppsg-$label-$sg"
    rm -f "$name.jsonl"
    "$root/scripts/cluster.sh" run node1 mpirun --hostfile "$CLUSTER_DIR/hostfile" --mca plm_rsh_agent "$CLUSTER_DIR/rsh" \
      --mca btl tcp,self,vader --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 -x OMP_NUM_THREADS \
      -np 4 "$build/trident" train "${pp_sg_flags[@]}" "${flags[@]}" --metrics-file "$name.jsonl" > "$name.log" 2>&1 ||
      { echo "cluster_pp_sg.sh: the run $name failed:" >&2; tail -5 "$name.log" >&2; return 1; }
    grep -q "scatter/gather $sg" "$name.log" || { echo "cluster_pp_sg.sh: $name.log does not say scatter/gather $sg" >&2; return 1; }
    /usr/bin/python3 - "$name.jsonl" "$label" "$sg" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][1:]
med = lambda k: statistics.median(r[k] for r in rows)
print(f'{sys.argv[2]:<8} {sys.argv[3]:<4} {med("elapsed_ms"):12.1f} {med("comm_ms"):10.1f} {med("pp_ms"):10.1f}')
PY
  done
  /usr/bin/python3 - "$work/ppsg-$label-on.jsonl" "$work/ppsg-$label-off.jsonl" <<'PY' || return 1
import json, sys
a, b = ([json.loads(l)["lm_loss"] for l in open(p)] for p in sys.argv[1:])
if a != b: sys.exit(f"cluster_pp_sg.sh: losses differ with and without scatter/gather: {a} vs {b}")
PY
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  rates="1gbit 200mbit" pairs=2 layers=2 hidden=512 heads=8 seq=256 mbs=4 gbs=8 iters=4
  while [ $# -gt 0 ]; do
    case $1 in
      --rates) rates=$2 ;; --pairs) pairs=$2 ;; --layers) layers=$2 ;; --hidden) hidden=$2 ;; --heads) heads=$2 ;;
      --seq) seq=$2 ;; --mbs) mbs=$2 ;; --gbs) gbs=$2 ;; --iters) iters=$2 ;;
      *) echo "cluster_pp_sg.sh: unknown option $1" >&2; exit 2 ;;
    esac; shift 2
  done
  build=${BUILD:-$root/build}
  [ -x "$build/trident" ] || make -C "$root" build >/dev/null
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
  unset OMPI_MCA_pml OMPI_MCA_btl # TCP must carry the job between the nodes
  data=$("$root/scripts/get-data.sh")
  work=${WORK:-$build/bench} # not under /tmp: each node has its own
  mkdir -p "$work"
  "$root/bench/shakespeare.sh" "$build/trident" "$data" "$work" >/dev/null
  pp_sg_flags=(--data-path "$work/ts_text_document" --vocab-file "$data/gpt2/vocab.json" --merge-file "$data/gpt2/merges.txt"
    --split 100,0,0 --num-layers "$layers" --hidden-size "$hidden" --num-attention-heads "$heads" --seq-length "$seq"
    --max-position-embeddings "$seq" --micro-batch-size "$mbs" --global-batch-size "$gbs" --train-iters "$iters"
    --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 --log-interval 1000 --peak-tflops 1
    --make-vocab-size-divisible-by 128 --untie-embeddings-and-output-weights
    --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2)
  export CLUSTER_DIR=/run/trident-cluster-ppsg.$$
  trap '"$root/scripts/cluster.sh" down' EXIT
  kib=$((mbs * seq * hidden * 4 / 1024))
  echo "model: $layers layers, hidden $hidden, heads $heads, seq $seq, micro-batch $mbs, global batch $gbs" \
       "($((gbs / mbs)) micro-batches); tp 2 in each node x pp 2 across 2 nodes; a stage transfer: $kib KiB," \
       "$((kib / 2)) KiB a tp rank with scatter/gather; $iters iterations, the first left out"
  for rate in $rates; do
    "$root/scripts/cluster.sh" down || true
    "$root/scripts/cluster.sh" up 2 --ranks-per-node 2 --rate "$rate"
    echo "link $rate; $(uptime)"
    printf "%-8s %-4s %12s %10s %10s\n" link s/g "iter (ms)" "comm (ms)" "pp (ms)"
    for _ in $(seq "$pairs"); do pp_sg_pair "$rate"; done
    echo "after: $(uptime)"
  done
fi
