#!/usr/bin/env bash
# Filesystems across emulated nodes (scripts/cluster.sh up 2 --private-disk: each node its own disk
# at /mnt/local, the rest shared; docs/cluster.md, "Filesystems"), 2 nodes x 2 ranks:
# - data on the shared filesystem: each index cache built once, by one rank, the others read it;
# - data copied to each node's own disk: each cache built once per node (never by two ranks of a
#   node into one file), and the run's losses and parameters are the shared-data run's, bit for bit;
# - a checkpoint saved on the shared filesystem loads on both nodes (save at 2, resume to 4 = the
#   uninterrupted 4);
# - --save on a node-local disk, and --load of a checkpoint only node1's disk holds: refused at
#   start, exit 2, one line naming node2's ranks; the same checkpoint copied to both disks loads.
# Builds are counted from each rank's debug line "gpt dataset ..., <split> split: built|loaded"
# (--verbose 2), grouped by the node the rank ran on, and held against the files on each disk.
# The checkpoint tests' tinyshakespeare in bytes (the byte-level tokenizer: no GPT-2 figure is held
# here, and a run's start loads no 50257-entry BPE on each rank).
# Environment (tests/cluster/cluster.cmake): TRIDENT, BYTES_DATA, BYTES_TOKENIZER, WORK, COMPARE_RUNS, ROOT.
set -u
. "$(dirname "$0")/two_nodes.sh"
own_session_dir # its jobs apart from those of the tests beside it
export CLUSTER_DIR=/run/trident-cluster-disk.$$
trap '"$cluster" down' EXIT
cluster_up 2 --ranks-per-node 2 --private-disk || exit $? # 77: no namespaces here (skipped, says why)
rm -rf "$WORK" && mkdir -p "$WORK/data" && cd "$WORK" || exit 1
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset OMPI_MCA_pml OMPI_MCA_btl # the suite's one-node transports: here TCP must carry the job
# the dataset, without caches: once on the shared filesystem, once on each node's own disk
cp "$BYTES_DATA.bin" "$BYTES_DATA.idx" data/
for k in 1 2; do mkdir -p "$CLUSTER_DIR/node$k/disk/data" && cp "$BYTES_DATA.bin" "$BYTES_DATA.idx" "$CLUSTER_DIR/node$k/disk/data/"; done
# a minute old: the check of the token ids is cached only for a .bin older than 2 s (docs/data.md)
touch -d '1 minute ago' data/* "$CLUSTER_DIR"/node*/disk/data/*
name=$(basename "$BYTES_DATA")
BASE=(--tokenizer-type HuggingFaceTokenizer --tokenizer-model "$BYTES_TOKENIZER" --split 90,10,0 --num-layers 2
      --hidden-size 64 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
      --hidden-dropout 0.1 --attention-dropout 0.1 --global-batch-size 8 --micro-batch-size 2 --lr 1e-3
      --seed 7 --peak-tflops 1 --log-interval 100 --eval-iters 1 --eval-interval 2 --make-vocab-size-divisible-by 256
      --tensor-model-parallel-size 2 --verbose 2)
fail=0
bad() { echo "FAIL: $*"; fail=1; }
across() { # name, flags...: 4 ranks, 2 on each node; its exit code in $rc
  local name=$1; shift
  timeout -k 10 $((120 * ${TD_TIME_SCALE:-1})) "$cluster" run node1 mpirun --hostfile "$CLUSTER_DIR/hostfile" --mca plm_rsh_agent "$CLUSTER_DIR/rsh" \
    --mca btl tcp,self,vader --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 -x OMP_NUM_THREADS \
    -np 4 "$TRIDENT" train "${BASE[@]}" "$@" > "$name.log" 2>&1
  rc=$?
}
ran() { # name: the run ended well
  [ "$rc" -eq 0 ] && return 0
  bad "$1 exited $rc"; tail -20 "$1.log"; holders; return 1
}
holders() { # a failure's first suspect: a namespace of the cluster gone (its holder process ended)
  while read -r node pid _; do
    kill -0 "$pid" 2>/dev/null || echo "note: the process holding $node's namespaces (pid $pid) has ended: the cluster broke"
  done < "$CLUSTER_DIR/nodes"
}
# "node file built|loaded" for every cache line of a run (ranks 0-1 on node1, 2-3 on node2)
caches() {
  sed -n 's/^\[rank \([0-9]*\)\] gpt dataset .* split: \(built\|loaded\) .*(\(.*\))$/\1 \3 \2/p' "$1.log" |
    awk '{ print ($1 < 2 ? "node1" : "node2"), $2, $3 }' | sort
}
# the nodes whose ranks scanned the token ids (and wrote the .ids cache), one line per scan
scans() { sed -n 's/^\[rank \([0-9]*\)\] .* token ids below .*/\1/p' "$1.log" | awk '{ print ($1 < 2 ? "node1" : "node2") }' | sort | tr '\n' ' '; }
# every cache file of the run: built by exactly `builds` ranks per node (each once) and loaded by the others
held() { # name, what the cache lines must be (sorted)
  local got; got=$(caches "$1")
  if [ -n "$got" ] && [ "$got" = "$2" ]; then echo "ok: $1: $3"
  else bad "$1: $3 — cache lines differ"; echo "want:"; echo "$2"; echo "got:"; echo "$got"; fi
}

# 1. shared data, the first 2 of 4 iterations, saved to a shared folder
across shared --data-path "$WORK/data/$name" --train-iters 4 --exit-interval 2 --save "$WORK/ckpt" --metrics-file shared.jsonl
if ran shared; then
  files=$(ls data/*.tdidx | grep -v '\.ids\.' | sed "s|^|$WORK/|")
  want=$(for f in $files; do echo "node1 $f built"; echo "node1 $f loaded"; echo "node2 $f loaded"; echo "node2 $f loaded"; done | sort)
  held shared "$want" "shared data: each index cache built once (rank 0), loaded by the 3 others"
  [ "$(echo "$files" | wc -l)" -ge 2 ] || bad "shared: expected train and valid caches in data/, found: $files"
  ls data | grep -q '\.tmp\.' && bad "shared: a temporary left in data/: $(ls data)"
  [ "$(scans shared)" = "node1 " ] || bad "shared: the token ids were scanned by: $(scans shared)(expected once, on node1)"
  grep -q "node-local" shared.log && bad "shared: data on the shared filesystem was called node-local"
fi

# 2. the same data on each node's own disk: 4 iterations uninterrupted
across private --data-path "/mnt/local/data/$name" --train-iters 4 --metrics-file private.jsonl --dump-params private.params
if ran private; then
  files=$(cd "$CLUSTER_DIR/node1/disk" && ls data/*.tdidx | grep -v '\.ids\.' | sed 's|^|/mnt/local/|')
  want=$(for f in $files; do for k in 1 2; do echo "node$k $f built"; echo "node$k $f loaded"; done; done | sort)
  held private "$want" "node-local data: each index cache built once per node (by its lowest rank), loaded by the other"
  [ "$(scans private)" = "node1 node2 " ] || bad "private: the token ids were scanned by: $(scans private)(expected once per node)"
  for k in 1 2; do
    ls "$CLUSTER_DIR/node$k/disk/data/" | grep -q '\.tmp\.' && bad "private: a temporary left on node$k's disk"
    [ "$(cd "$CLUSTER_DIR/node$k/disk" && ls data/*.tdidx | grep -v '\.ids\.' | sed 's|^|/mnt/local/|')" = "$files" ] ||
      bad "private: node$k's disk holds other caches than node1's"
  done
  if [ "$(grep -c "index caches in /mnt/local/data: 2 separate folders at this path (node-local): node1 (rank 0), node2 (rank 2) build" private.log)" = 1 ]
  then echo "ok: private: rank 0 said once that the cache folder is node-local and who builds"
  else bad "private: no single line saying the cache folder is node-local"; grep "index caches" private.log; fi
fi

# 3. resume the shared-data run from its checkpoint across both nodes: iterations 3-4
across resumed --data-path "$WORK/data/$name" --train-iters 4 --load "$WORK/ckpt" --save "$WORK/ckpt" \
  --metrics-file resumed.jsonl --dump-params resumed.params
if ran resumed; then
  grep -q "split: built" resumed.log && bad "resumed: rebuilt an index cache the shared run had built"
  cat shared.jsonl resumed.jsonl > shared_resumed.jsonl
  if "$COMPARE_RUNS" private.jsonl shared_resumed.jsonl private.params resumed.params 0 > resumed.cmp 2>&1; then
    echo "ok: node-local data = shared data, and saved at 2 + resumed to 4 across 2 nodes = 4 uninterrupted (bit for bit)"
  else bad "the node-local data run, or the resumed run, differs"; cat resumed.cmp; fi
fi

# 4. --save on a node-local disk: refused before training, once, naming the ranks that do not see it
refused() { # name, what the one line must hold
  if [ "$rc" = 2 ] && [ "$(grep -c "$2" "$1.log")" = 1 ] && ! grep -q "gpt dataset" "$1.log"; then
    echo "ok: $1: refused at start, exit 2, one line naming node2's ranks"
  else bad "$1: exit $rc, expected 2 with one line holding '$2', before the data opens"; cat "$1.log"; holders; fi
}
across save_local --data-path "$WORK/data/$name" --train-iters 2 --save /mnt/local/ckpt
refused save_local "error: --save /mnt/local/ckpt is not one folder for all ranks: node2 (ranks 2-3) do not see the folder that rank 0 sees on node1"

# 5. --load of a checkpoint that only node1's disk holds: refused; a copy on each node's disk loads
cp -r "$WORK/ckpt" "$CLUSTER_DIR/node1/disk/copy"
across load_one --data-path "$WORK/data/$name" --train-iters 4 --load /mnt/local/copy
refused load_one "error: --load /mnt/local/copy shows the ranks different checkpoints: rank 0 on node1 finds iteration 4 in /mnt/local/copy/iter_0000004 (run [0-9a-f]*), but node2 (ranks 2-3) do not (rank 2 finds no checkpoint)"
cp -r "$WORK/ckpt" "$CLUSTER_DIR/node2/disk/copy"
# ... with a blend of the shared and the node-local copy (new caches: other sample counts): two
# cache folders, one shared and one per node, each file built once on its disk, in three turns
across load_copies --data-path 0.5 "$WORK/data/$name" 0.5 "/mnt/local/data/$name" --train-iters 4 --load /mnt/local/copy
if ran load_copies; then
  echo "ok: a --load copied to each node's disk (the same checkpoint on every rank) loads"
  got=$(caches load_copies | awk '{ disk = $2 ~ /^\/mnt\/local\// ? $1 : "shared"; k = disk " " $2; n[k]++; b[k] += $3 == "built" }
    END { for (k in n) print k, b[k] " built of " n[k] }' | sort)
  want=$(echo "$got" | awk '{ print $1, $2, "1 built of", ($1 == "shared" ? 4 : 2) }')
  if [ "$(echo "$got" | wc -l)" = 6 ] && [ "$got" = "$want" ]; then
    echo "ok: load_copies: a blend of shared and node-local data: each cache built once on its disk (shared: once in all)"
  else bad "load_copies: caches of the blend, per disk: want 2 shared + 2 per node, each built once"; echo "$got"; fi
fi
exit $fail
