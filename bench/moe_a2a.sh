#!/usr/bin/env bash
# Written against expert parallelism before this branch had it (--expert-model-parallel-size N,
# --moe-token-dispatcher-type alltoall, the metrics keys ep_exposed_ms / ep_inflight_ms; ep_ms,
# the key first announced, is read where ep_exposed_ms is missing). Checked at a small size
# (--layers 2 --hidden 256 --heads 4 --expert-ffn 256 --seq 64 --iters 4 --gbs 8) against main's
# build at 00f7969 (expert parallelism), on this machine and on 2 emulated nodes; its default
# sizes have not run.
#
# The share of a training step spent in the MoE token exchange (issue 25, "Measure"): the same
# mixture of experts and global batch on N ranks with the experts split over ep = N ranks
# (the all-to-all dispatcher) and, as the baseline, with every rank holding every expert (ep 1,
# dp N: no exchange). Per run, the medians over the iterations after the first of: tokens/s, the
# time per iteration, the time blocked in the token exchange (ep_exposed_ms) and its share of the
# iteration, the time the exchange was under way (ep_inflight_ms: more than the blocked time
# where it overlaps computation), and the time blocked in any communication (comm_ms).
#   local (default): N = each of --ranks (2 4) on this machine, cores / N OpenMP threads a rank;
#   --nodes 2: two emulated nodes (scripts/cluster.sh, root) of 2 ranks each, the links shaped to
#     --rate: ep 2 (each ep group inside a node: the exchange stays on the node) and ep 4 (across
#     the nodes), against ep 1, dp 4.
# Usage: bench/moe_a2a.sh [--ranks "2 4"] [--nodes 2 --rate 1gbit] [--layers 4 --hidden 512
#          --heads 8 --experts 8 --topk 2 --expert-ffn 1024 --seq 128 --mbs 2 --gbs 16 --iters 6]
# Environment: BUILD (default build), WORK (default $BUILD/bench; not under /tmp with --nodes:
# each node has its own).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ranks="2 4" nodes=0 rate=1gbit layers=4 hidden=512 heads=8 experts=8 topk=2 eff=1024 seq=128 mbs=2 gbs=16 iters=6
while [ $# -gt 0 ]; do
  case $1 in
    --ranks) ranks=$2 ;; --nodes) nodes=$2 ;; --rate) rate=$2 ;; --layers) layers=$2 ;; --hidden) hidden=$2 ;;
    --heads) heads=$2 ;; --experts) experts=$2 ;; --topk) topk=$2 ;; --expert-ffn) eff=$2 ;; --seq) seq=$2 ;;
    --mbs) mbs=$2 ;; --gbs) gbs=$2 ;; --iters) iters=$2 ;;
    *) echo "moe_a2a.sh: unknown option $1 (see the usage at the top of bench/moe_a2a.sh)" >&2; exit 2 ;;
  esac; shift 2
done
case $nodes in
  0) ;;
  2) [ "$(id -u)" -eq 0 ] || { echo "moe_a2a.sh: --nodes 2 emulates the nodes with scripts/cluster.sh: run as root" >&2; exit 2; } ;;
  *) echo "moe_a2a.sh: --nodes must be 2 (two emulated nodes of 2 ranks) or absent (this machine)" >&2; exit 2 ;;
esac
build=${BUILD:-$root/build}
[ -x "$build/trident" ] || make -C "$root" build >/dev/null
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
data=$("$root/scripts/get-data.sh")
work=${WORK:-$build/bench}
mkdir -p "$work"
"$root/bench/shakespeare.sh" "$build/trident" "$data" "$work" >/dev/null
# shellcheck disable=SC2054 # --split takes one comma-separated value
model=(--data-path "$work/ts_text_document" --vocab-file "$data/gpt2/vocab.json" --merge-file "$data/gpt2/merges.txt"
  --split 100,0,0 --normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear
  --untie-embeddings-and-output-weights --num-layers "$layers" --hidden-size "$hidden" --num-attention-heads "$heads"
  --num-experts "$experts" --moe-router-topk "$topk" --moe-ffn-hidden-size "$eff" --moe-aux-loss-coeff 1e-2
  --moe-token-dispatcher-type alltoall --seq-length "$seq" --micro-batch-size "$mbs" --global-batch-size "$gbs"
  --train-iters "$iters" --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 --log-interval 1000 --peak-tflops 1)

summarise() { # metrics file label -> one row; fails when the metrics have no ep group
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][1:]  # the first iteration warms up
if not rows: sys.exit(f"moe_a2a.sh: {sys.argv[1]} has fewer than 2 iterations")
# the token exchange: blocked in it (ep_exposed_ms) and under way (ep_inflight_ms); ep_ms was the
# key announced before expert parallelism was built
key = "ep_exposed_ms" if "ep_exposed_ms" in rows[0] else "ep_ms"
if key not in rows[0]:
    sys.exit(f"moe_a2a.sh: {sys.argv[1]} has no ep_exposed_ms: this trident does not report the token exchange")
med = lambda k: statistics.median(r.get(k, float("nan")) for r in rows)
it, ep = med("elapsed_ms"), med(key)
print(f'{sys.argv[2]:<36} {med("tokens_per_s"):10.1f} {it:10.1f} {ep:9.1f} {100 * ep / it:6.1f}% '
      f'{med("ep_inflight_ms"):11.1f} {med("comm_ms"):9.1f}')
PY
}

launch() { # np log metrics trident-flags... (local mpirun, or on node1 of the emulated cluster)
  local np=$1 log=$2 metrics=$3; shift 3
  if [ "$nodes" = 0 ]; then
    OMP_NUM_THREADS=$(( $(nproc) / np > 0 ? $(nproc) / np : 1 )) mpirun --oversubscribe --bind-to none -np "$np" \
      "$build/trident" train "${model[@]}" "$@" --metrics-file "$metrics" > "$log" 2>&1
  else
    "$root/scripts/cluster.sh" run node1 mpirun --hostfile "$CLUSTER_DIR/hostfile" --mca plm_rsh_agent "$CLUSTER_DIR/rsh" \
      --mca btl tcp,self,vader --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 -x OMP_NUM_THREADS \
      -np "$np" "$build/trident" train "${model[@]}" "$@" --metrics-file "$metrics" > "$log" 2>&1
  fi
}

run() { # np ep label
  local np=$1 ep=$2 name=$work/a2a-np$1-ep$2
  rm -f "$name.jsonl"
  if ! launch "$np" "$name.log" "$name.jsonl" --expert-model-parallel-size "$ep"; then
    echo "moe_a2a.sh: np $np, ep $ep failed ($name.log):" >&2
    grep -v -e '^---' -e '^ *$' -e 'mpirun' -e 'Primary job' -e 'non-zero' -e 'Process name' -e 'Exit code' \
      -e 'terminated' -e 'user-direction' "$name.log" | tail -5 >&2
    grep -q -e "unknown flag --expert-model-parallel-size" -e "unknown flag --moe-token-dispatcher-type" "$name.log" &&
      echo "moe_a2a.sh: this trident has no expert parallelism yet (docs/moe.md, Not built yet)" >&2
    return 1
  fi
  if [ "$ep" -gt 1 ] && ! grep -q "over expert parallelism $ep " "$name.log"; then
    echo "moe_a2a.sh: $name.log does not say its experts are split over expert parallelism $ep" >&2; return 1
  fi
  summarise "$name.jsonl" "$3"
}

if [ "$nodes" = 2 ]; then
  export OMP_NUM_THREADS=1 CLUSTER_DIR=/run/trident-cluster-a2a.$$
  unset OMPI_MCA_pml OMPI_MCA_btl # TCP must carry the job between the nodes
  trap '"$root/scripts/cluster.sh" down' EXIT
  "$root/scripts/cluster.sh" down || true
  "$root/scripts/cluster.sh" up 2 --ranks-per-node 2 --rate "$rate"
  where="2 emulated nodes x 2 ranks, links at $rate"
  plan=("4 1 ep 1, dp 4 (no exchange)" "4 2 ep 2 (inside each node)" "4 4 ep 4 (across the nodes)")
else
  where="this machine, $(nproc) cores"
  plan=()
  for np in $ranks; do plan+=("$np 1 $np ranks: ep 1, dp $np (no exchange)" "$np $np $np ranks: ep $np"); done
fi
echo "model: $layers layers, hidden $hidden, $heads heads, $experts SwiGLU experts of $eff, top-$topk, seq $seq," \
     "micro-batch $mbs, global batch $gbs; $where; $iters iterations, the first left out; load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-36s %10s %10s %9s %7s %11s %9s\n' run tokens/s "iter ms" "ep ms" share "ep flight" "comm ms"
for p in "${plan[@]}"; do
  read -r np ep label <<<"$p"
  run "$np" "$ep" "$label"
done
