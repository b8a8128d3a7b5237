#!/usr/bin/env bash
# Context parallelism across 2 emulated nodes (scripts/cluster.sh: links shaped to 1 Gbit/s) against
# the same ranks on one machine: cp 2, one rank a node, for each --cp-comm-type; the cp group's
# communication from the trainer's breakdown (exposed, in flight, hidden, the share of the run's
# time exposed) and the time per iteration. Needs root (namespaces). docs/parallelism.md. The emulated
# nodes share this machine's cores: --bind-to none, or Open MPI binds each node's rank to the same
# first core (every kernel then ran at half speed: attention 7.6 s against 3.4 s an iteration).
# Usage: bench/cp_nodes.sh [--seq 8192] [--layers 2] [--hidden 64] [--heads 4] [--iters 2] [--types "p2p all_gather a2a"]
# Environment: BUILD (default build), WORK (default $BUILD/bench_cp_nodes).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seq=8192 layers=2 hidden=64 heads=4 iters=2 types="p2p all_gather a2a"
while [ $# -gt 0 ]; do
  case $1 in
    --seq) seq=$2 ;; --layers) layers=$2 ;; --hidden) hidden=$2 ;; --heads) heads=$2 ;; --iters) iters=$2 ;;
    --types) types=$2 ;;
    *) echo "bench/cp_nodes.sh: unknown option '$1' (see its header)" >&2; exit 2 ;;
  esac
  shift 2
done
BUILD=${BUILD:-$root/build}
TRIDENT=$BUILD/trident
WORK=${WORK:-$BUILD/bench_cp_nodes}
mkdir -p "$WORK" && cd "$WORK" || exit 1
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ ! -f bytes_text_document.bin ]; then
  "$root/scripts/text-to-jsonl.sh" "$root/../shared/data/tinyshakespeare.txt" ts.jsonl 1500 >/dev/null
  python3 "$root/tests/parallel/byte_tokenizer.py" bytes.json
  "$TRIDENT" preprocess --input ts.jsonl --output-prefix bytes --tokenizer-type HuggingFaceTokenizer \
    --tokenizer-model bytes.json --append-eod >/dev/null
fi
cluster=$root/scripts/cluster.sh
export CLUSTER_DIR=/run/trident-cluster-bench-cp.$$
trap '"$cluster" down' EXIT
"$cluster" up 2 --ranks-per-node 1 --rate 1gbit --owner $$ --share "$TRIDENT" --share "$WORK" >/dev/null || exit $?
RUN=(train --data-path "$WORK/bytes_text_document" --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$WORK/bytes.json"
     --split 90,10,0 --num-layers "$layers" --hidden-size "$hidden" --num-attention-heads "$heads" --seq-length "$seq"
     --max-position-embeddings "$seq" --micro-batch-size 1 --global-batch-size 1 --train-iters "$iters" --lr 1e-3
     --eval-interval 1000 --eval-iters 1 --log-interval 1 --context-parallel-size 2)
echo "machine: $(getconf _NPROCESSORS_ONLN) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model: seq $seq, $layers layers, hidden $hidden, $heads heads, one sample an iteration, $iters iterations a run; cp 2"
printf '| where | comm | s/iter | cp exposed (ms) | in flight (ms) | hidden | exposed share |\n|---|---|---|---|---|---|---|\n'
row() { # log where comm
  python3 - "$@" "$iters" <<'PY'
import re, sys
log, where, T, iters = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
text = open(log).read()
its = [l for l in text.splitlines() if re.match(r"\s*iteration\s+%d/" % iters, l)]
if not its:
    print("| %s | %s | failed: see %s |" % (where, T, log)); sys.exit()
ms = float(re.search(r"elapsed time per iteration \(ms\): ([0-9.]+)", its[-1]).group(1))
x = re.search(r"cp\s+exposed\s+([0-9.]+) ms of ([0-9.]+) ms in flight \((\d+)% hidden\)", text)
cells = [where, T, "%.2f" % (ms / 1e3)]
cells += [x.group(1), x.group(2), x.group(3) + "%", "%.1f%%" % (100 * float(x.group(1)) / (iters * ms))] if x else ["-"] * 4
print("| " + " | ".join(cells) + " |")
PY
}
for T in $types; do
  mpirun --oversubscribe --bind-to none -np 2 "$TRIDENT" "${RUN[@]}" --cp-comm-type "$T" > one_$T.log 2>&1
  row one_$T.log "one machine" "$T"
  timeout 600 "$cluster" run node1 mpirun --hostfile "$CLUSTER_DIR/hostfile" --mca plm_rsh_agent "$CLUSTER_DIR/rsh" \
    --mca btl tcp,self,vader --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 -x OMP_NUM_THREADS \
    --bind-to none -np 2 "$TRIDENT" "${RUN[@]}" --cp-comm-type "$T" > two_$T.log 2>&1
  row two_$T.log "2 nodes, 1 Gbit/s" "$T"
done
