#!/usr/bin/env bash
# trident across emulated nodes, weak scaling (docs/cluster.md, "Scaling across nodes"): 1, 2 and
# 4 nodes (scripts/cluster.sh), each node given CPUS cores of CPU time (a CPU cgroup) and a link
# shaped to RATE, so that the network against a node's compute is that of a real CPU cluster
# (defaults: 0.5 core and 500 Mbit/s, 1 Gbit/s a core: a 100-core node on 100 Gbit/s). Each node
# trains BATCH sequences an iteration (weak scaling: the global batch grows with the nodes).
# For each node count, the layouts the 2021 paper weighs, each beside `trident plan`'s prediction
# for the same flags on a cluster file `trident plan --calibrate` measured on the same nodes:
#   dp across (1 rank a node), without and with --overlap-grad-reduce;
#   tp 2 inside x dp across (2 ranks a node), with overlap;
#   dp across nodes x 2 ranks a node, flat and hierarchical, without and with overlap;
#   tp 2 across nodes (1 rank a node: to show why not);
#   tp 2 inside x pp across, scatter/gather on and off.
# Per row: the median time per iteration after the first, the communication rank 0 was blocked
# in per group (tp, pp + the tied embedding's sum, dp), tokens/s per node and the weak-scaling
# efficiency (1-node tokens/s per node = 1), then the plan's time per iteration and its error.
# Usage: bench/cluster_scaling.sh [--nodes "2 4"] [--cpus 0.5] [--rate 500mbit] [--iters 4]
#          [--layers 8 --hidden 256 --heads 8 --seq 256 --batch 16 --bucket 1000000] [--rows REGEX]
#        bench/cluster_scaling.sh --replan   (the table of the last run again, with the plan's
#          predictions computed anew from its saved cluster files: after a change to the planner)
# Needs root (namespaces, cgroups). Environment: BUILD (default build), WORK (default
# $BUILD/cluster_scaling; not under /tmp, which each node has its own of).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
nodes_list="2 4" cpus=0.5 rate=500mbit iters=4 layers=8 hidden=256 heads=8 seq=256 batch=16 bucket=1000000 rows=. replan=""
while [ $# -gt 0 ]; do
  case $1 in
    --replan) replan=1; shift; continue ;;
    --nodes) nodes_list=$2 ;; --cpus) cpus=$2 ;; --rate) rate=$2 ;; --iters) iters=$2 ;; --layers) layers=$2 ;;
    --hidden) hidden=$2 ;; --heads) heads=$2 ;; --seq) seq=$2 ;; --batch) batch=$2 ;; --bucket) bucket=$2 ;; --rows) rows=$2 ;;
    *) echo "cluster_scaling.sh: unknown option $1 (see the usage at the top)" >&2; exit 2 ;;
  esac
  shift 2
done
build=${BUILD:-$root/build}
[ -x "$build/trident" ] || make -C "$root" build >/dev/null
T=$build/trident
cluster=$root/scripts/cluster.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
unset OMPI_MCA_pml OMPI_MCA_btl # TCP carries the job between the nodes
. "$root/bench/cluster_plan.sh" # cp_calibrate, cp_predict
data=$("$root/scripts/get-data.sh")
work=${WORK:-$build/cluster_scaling}
mkdir -p "$work"
prefix=$("$root/bench/shakespeare.sh" "$T" "$data" "$work")
export CLUSTER_DIR=/run/trident-cluster-scaling.$$
trap '"$cluster" down' EXIT
MPI=(--hostfile "$CLUSTER_DIR/hostfile" --mca plm_rsh_agent "$CLUSTER_DIR/rsh" --mca btl tcp,self,vader
     --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 -x OMP_NUM_THREADS)
model=(--num-layers "$layers" --hidden-size "$hidden" --num-attention-heads "$heads" --seq-length "$seq"
       --max-position-embeddings "$seq" --make-vocab-size-divisible-by 128 --ddp-bucket-size "$bucket")
train_only=(--data-path "$prefix" --vocab-file "$data/gpt2/vocab.json" --merge-file "$data/gpt2/merges.txt" --split 100,0,0
            --train-iters "$iters" --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 --log-interval 1000 --lr 1e-4)

printf '%-34s %5s %9s %8s %8s %8s %9s %6s %9s %6s\n' layout ranks "iter ms" "tp ms" "pp ms" "dp ms" "tok/s/nd" weak \
  "plan ms" "error"
base_tps=""
# show NAME NODES: the line of a run made by row (its flags and cluster file in WORK/NAME.nNODES.args)
show() {
  local name=$1 n=$2 out="$work/$1.n$2"
  local args; mapfile -t args < "$out.args"
  local np=${args[0]} cl=${args[1]}
  local plan; plan=$(cp_predict "$cl" "$np" "${model[@]}" "${args[@]:2}" 2>/dev/null | awk '{ print $1 }') || plan=""
  python3 - "$out.jsonl" "$name" "$np" "$n" "${base_tps:-0}" "${plan:-nan}" <<'PY'
import json, statistics, sys
path, name, np_, n, base, plan = sys.argv[1:]
rows = [json.loads(l) for l in open(path)][1:]
med = lambda k: statistics.median(r.get(k, 0.0) for r in rows)
it = med("elapsed_ms")
tps = statistics.median(r["tokens_per_s"] for r in rows) / int(n)
weak = tps / float(base) if float(base) > 0 else 1.0
plan_ms = float(plan) * 1e3
err = (plan_ms - it) / it * 100
print(f'{name:<34} {np_:>5} {it:9.0f} {med("tp_exposed_ms"):8.0f} {med("pp_exposed_ms") + med("embd_exposed_ms"):8.0f} '
      f'{med("dp_exposed_ms"):8.0f} {tps:9.0f} {weak:6.2f} {plan_ms:9.0f} {err:+5.0f}%')
with open(path + ".tps", "w") as f: f.write(f"{tps}\n")
PY
  [ "$name" != one_rank ] || base_tps=$(cat "$out.jsonl.tps")
}

# row NAME NODES NP CLUSTER_FILE MPIRUN_MAP FLAGS...: one run and its line; the flags are the
# layout's (the model, batch and run flags are added here)
row() {
  local name=$1 n=$2 np=$3 cl=$4 map=$5; shift 5
  [[ $name =~ $rows ]] || return 0
  local out="$work/$name.n$n" map_flags=()
  [ "$map" = node ] && map_flags=(--map-by ppr:1:node)
  rm -f "$out.jsonl" "$out.args"
  if ! "$cluster" run node1 mpirun "${MPI[@]}" "${map_flags[@]}" -np "$np" "$T" train "${model[@]}" "${train_only[@]}" \
       "$@" --metrics-file "$out.jsonl" > "$out.log" 2>&1; then
    echo "cluster_scaling.sh: $name on $n nodes failed: $(grep -m1 -i error "$out.log" || tail -n 1 "$out.log")" >&2
    return 0
  fi
  printf '%s\n' "$np" "$cl" "$@" > "$out.args"
  echo "$name $n" >> "$work/rows.list"
  show "$name" "$n"
}

if [ -n "$replan" ]; then
  [ -f "$work/rows.list" ] || { echo "cluster_scaling.sh --replan: no earlier run in $work" >&2; exit 2; }
  while read -r name n; do show "$name" "$n"; done < "$work/rows.list"
  exit 0
fi
rm -f "$work/rows.list"
for n in 1 $nodes_list; do
  "$cluster" down >/dev/null 2>&1 || true
  "$cluster" up "$n" --ranks-per-node 2 --cpus "$cpus" --rate "$rate" >/dev/null
  echo "== $n node(s): $cpus cores and a $rate link each; $(uptime | sed 's/.*load/load/')"
  cp_calibrate "$work/cl1.n$n.json" "$n" --map-by ppr:1:node
  cp_calibrate "$work/cl2.n$n.json" "$((2 * n))"
  gbs=$((batch * n))
  if [ "$n" = 1 ]; then
    row one_rank 1 1 "$work/cl1.n1.json" node --global-batch-size "$batch" --micro-batch-size "$batch"
    row tp2_inside 1 2 "$work/cl2.n1.json" slot --global-batch-size "$batch" --micro-batch-size "$batch" \
      --tensor-model-parallel-size 2
    continue
  fi
  row dp_across "$n" "$n" "$work/cl1.n$n.json" node --global-batch-size "$gbs" --micro-batch-size "$batch"
  row dp_across_overlap "$n" "$n" "$work/cl1.n$n.json" node --global-batch-size "$gbs" --micro-batch-size "$batch" \
    --overlap-grad-reduce
  row tp2_inside_dp_across_overlap "$n" "$((2 * n))" "$work/cl2.n$n.json" slot --global-batch-size "$gbs" \
    --micro-batch-size "$batch" --tensor-model-parallel-size 2 --overlap-grad-reduce
  for coll in flat hierarchical; do
    row "dp_2pernode_$coll" "$n" "$((2 * n))" "$work/cl2.n$n.json" slot --global-batch-size "$gbs" \
      --micro-batch-size "$((batch / 2))" --dp-collectives "$coll"
    row "dp_2pernode_${coll}_overlap" "$n" "$((2 * n))" "$work/cl2.n$n.json" slot --global-batch-size "$gbs" \
      --micro-batch-size "$((batch / 2))" --dp-collectives "$coll" --overlap-grad-reduce
  done
  row tp2_across "$n" "$n" "$work/cl1.n$n.json" node --global-batch-size "$gbs" --micro-batch-size "$((2 * batch / n))" \
    --tensor-model-parallel-size 2
  for sg in on off; do
    flags=(); [ $sg = off ] && flags=(--no-scatter-gather-tensors-in-pipeline)
    row "tp2_inside_pp_across_sg_$sg" "$n" "$((2 * n))" "$work/cl2.n$n.json" slot --global-batch-size "$gbs" \
      --micro-batch-size 2 --tensor-model-parallel-size 2 --pipeline-model-parallel-size "$n" "${flags[@]}"
  done
done
