#!/usr/bin/env bash
# A Mixtral-shaped mixture of experts against the dense model of the same active parameters,
# trident and the plain-torch peer (bench/peer_torch_moe.py, Debian's python3-torch), in one run,
# same shapes, all cores, back to back.
#
# Usage: bench/moe.sh [--shape LxHxNH:MBSxSEQ] [--experts E] [--topk K] [--expert-ffn F] [--groups G]
#                     [--steps N] [--repeat R] [--threads T] [--peer-blas-core same|env|NAME]
#                     [--no-peer] [--no-dense-peer] [--smoke]
#   --shape      default 12x768x12:4x128 (the issue's 12 layers x 768; micro-batch 4 x seq 128)
#   --experts    8, --topk 2, --expert-ffn 2048 (each expert is the SwiGLU MLP of a Llama-shaped
#                768-wide model, as each of Mixtral's is Mistral's), --groups 4 key/value heads
#   --steps      4 per run (the first warms up and is left out of every figure); --repeat R: the
#                four runs alternate R times and the median of each ratio is printed
#   --smoke      a small model to see the script work: 2x256x4:2x64, 8 experts of 256, 2 groups, 3 steps
#   --no-peer    trident only; --no-dense-peer: the torch MoE but not the torch dense model
#   --peer-blas-core  the peer's OpenBLAS kernels: same (default: the core trident runs, read from
#                its log, so both sides run the same GEMMs), env (as OpenBLAS picks), or a core name
# The models: pre-RMSNorm, rope, grouped-query attention, no biases, untied output layer, AdamW,
# fp32, vocabulary GPT-2's padded to 50304; the MoE's MLP is E SwiGLU experts of F and a top-k
# softmax router (dropless, load-balancing loss 1e-2), the dense model's one SwiGLU MLP of K x F.
# Active parameters: those a token goes through (the K experts of a layer, the router, attention,
# norms, embedding and output layer); the dense model's are the MoE's less the routers' E x h a
# layer. FLOPs per token: Megatron's num_floating_point_operations, the count trident's MFU uses,
# with K x F as the MLP's width for the MoE (the router not counted, as Megatron counts it not):
# the same for both models, so the ratio per active FLOP is the ratio of tokens/s.
# The trident runs and the peer run with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset, as a new
# user's do (trident picks the CPU's best core itself at start-up).
# Environment: BUILD (default build-bench, configured TRIDENT_NATIVE=${NATIVE:-OFF} when it has
# no trident yet), WORK (default $BUILD/bench), DATA (a dataset prefix of tinyshakespeare in
# GPT-2's BPE; default: made in WORK), PEAK_TFLOPS (given to trident as --peak-tflops instead of
# the sgemm peak it measures; the tests' use).
# The script fails (exit 1) when its own count of the parameters or of the FLOPs per iteration
# differs from trident's or the peer's.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shape=12x768x12:4x128 experts=8 topk=2 expertffn=2048 groups=4 steps=4 repeat=1 threads=$(nproc)
peer=1 dense_peer=1 peer_core=same
while [ $# -gt 0 ]; do
  case $1 in
    --shape) shape=$2 ;; --experts) experts=$2 ;; --topk) topk=$2 ;; --expert-ffn) expertffn=$2 ;;
    --groups) groups=$2 ;; --steps) steps=$2 ;; --repeat) repeat=$2 ;; --threads) threads=$2 ;;
    --peer-blas-core) peer_core=$2 ;;
    --no-peer) peer=0; shift; continue ;;
    --no-dense-peer) dense_peer=0; shift; continue ;;
    --smoke) shape=2x256x4:2x64 expertffn=256 groups=2 steps=3; shift; continue ;;
    *) echo "moe.sh: unknown option $1 (see the usage at the top of bench/moe.sh)" >&2; exit 2 ;;
  esac; shift 2
done
[[ $shape =~ ^[1-9][0-9]*x[1-9][0-9]*x[1-9][0-9]*:[1-9][0-9]*x[1-9][0-9]*$ ]] ||
  { echo "moe.sh: --shape $shape must be LAYERSxHIDDENxHEADS:MBSxSEQ, positive integers (e.g. 12x768x12:4x128)" >&2; exit 2; }
IFS='x:' read -r L H NH MB S <<<"$shape"
for v in experts topk expert-ffn groups steps repeat threads; do
  val=${v//-/}; val=${!val}
  [[ $val =~ ^[1-9][0-9]*$ ]] || { echo "moe.sh: --$v $val must be a positive integer" >&2; exit 2; }
done
if [ $((H % NH)) != 0 ] || [ $((NH % groups)) != 0 ]; then
  echo "moe.sh: hidden $H must divide by heads $NH, and heads by --groups $groups" >&2; exit 2
fi
[ "$topk" -le "$experts" ] || { echo "moe.sh: --topk $topk is more than --experts $experts" >&2; exit 2; }
[ "$steps" -ge 2 ] || { echo "moe.sh: --steps must be at least 2 (the first warms up)" >&2; exit 2; }
dff=$((topk * expertffn)) # the dense model's MLP: the K experts' width

pyt=/usr/bin/python3
if [ "$peer" = 1 ] && ! $pyt -c "import torch" 2>/dev/null; then "$root/scripts/deps.sh" --bench; fi
build=${BUILD:-$root/build-bench}
if [ ! -x "$build/trident" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTRIDENT_NATIVE="${NATIVE:-OFF}" >/dev/null
  cmake --build "$build" -j "$(nproc)" --target trident >/dev/null
fi
work=${WORK:-$build/bench}
mkdir -p "$work"
data_dir=$("$root/scripts/get-data.sh")
prefix=${DATA:-$("$root/bench/shakespeare.sh" "$build/trident" "$data_dir" "$work")}
peak=() peak_name="the sgemm trident measured"
[ -n "${PEAK_TFLOPS:-}" ] && peak=(--peak-tflops "$PEAK_TFLOPS") peak_name="--peak-tflops"
clean=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS="$threads")

# The script's own count, from the shape alone: "total_moe active_moe total_dense flops_per_token"
# (Megatron's vocabulary padding to a multiple of 128; FLOPs per token of either model).
read -r P_MOE A_MOE P_DENSE FLOP_TOK VP < <($pyt - "$L" "$H" "$NH" "$groups" "$S" "$experts" "$topk" "$expertffn" <<'PY'
import sys
L, h, nh, g, s, E, k, f = map(int, sys.argv[1:])
vp = (50257 + 127) // 128 * 128
d = h // nh
common = 2 * h * nh * d + 2 * h * g * d + 2 * h           # q, o, k and v, the two norms
outer = 2 * vp * h + h                                     # embedding, output layer, final norm
moe = outer + L * (common + E * h + E * 3 * h * f)         # + router, E experts of [gate|up] and down
active = outer + L * (common + E * h + k * 3 * h * f)
dense = outer + L * (common + 3 * h * k * f)
flops = 12 * L * h * h * ((1 + g / nh + s / h) + k * f / h * 1.5) + 6 * h * vp
print(moe, active, dense, repr(flops), vp)
PY
)

run_trident() { # kind (moe|dense) -> "best_ms median_ms tokens_per_s flops_per_iter params peak_tflops"
  local kind=$1 log=$work/moe-$1.log metrics=$work/moe-$1.jsonl mlp
  if [ "$kind" = moe ]; then
    mlp=(--num-experts "$experts" --moe-router-topk "$topk" --moe-ffn-hidden-size "$expertffn" --moe-aux-loss-coeff 1e-2)
  else mlp=(--ffn-hidden-size "$dff"); fi
  rm -f "$metrics"
  "${clean[@]}" "$build/trident" train --data-path "$prefix" --vocab-file "$data_dir/gpt2/vocab.json" \
    --merge-file "$data_dir/gpt2/merges.txt" --split 100,0,0 --normalization RMSNorm \
    --position-embedding-type rope --rotary-base 1000000 --swiglu --group-query-attention \
    --num-query-groups "$groups" --disable-bias-linear --untie-embeddings-and-output-weights \
    --num-layers "$L" --hidden-size "$H" --num-attention-heads "$NH" "${mlp[@]}" \
    --micro-batch-size "$MB" --global-batch-size "$MB" --seq-length "$S" --train-iters "$steps" \
    --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 --lr 1e-4 --metrics-file "$metrics" \
    --log-interval 1000 "${peak[@]}" > "$log" 2>&1 || { tail -20 "$log" >&2; echo "moe.sh: trident ($kind) failed: $log" >&2; return 1; }
  local params pk
  params=$(grep -o 'of its [0-9]* parameters' "$log" | grep -o '[0-9]*')
  pk=$(grep -o 'peak for MFU: [0-9.e+-]*' "$log" | tail -1 | grep -o '[0-9.e+-]*$')
  $pyt - "$metrics" "$params" "$pk" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])][1:]  # the first step warms up
b = min(rows, key=lambda r: r["elapsed_ms"])
flops = b["model_tflops_per_rank"] * 1e12 * b["elapsed_ms"] / 1e3  # trident's count per iteration
print(f'{b["elapsed_ms"]:.1f} {statistics.median(r["elapsed_ms"] for r in rows):.1f} {b["tokens_per_s"]:.1f} '
      f'{flops:.6g} {sys.argv[2]} {sys.argv[3]}')
PY
}

peer_env=()
run_peer() { # kind -> "best_ms median_ms tokens_per_s params active_params"
  local out=$work/peer-$1.out e=$experts f=$expertffn
  [ "$1" = dense ] && e=0 f=$dff
  "${clean[@]}" "${peer_env[@]}" $pyt "$root/bench/peer_torch_moe.py" --layers "$L" --hidden "$H" \
    --heads "$NH" --groups "$groups" --experts "$e" --topk "$topk" --ffn "$f" --vocab "$VP" --mbs "$MB" \
    --seq "$S" --steps "$steps" --threads "$threads" > "$out" 2>&1 || { cat "$out" >&2; echo "moe.sh: the peer ($1) failed" >&2; return 1; }
  local k; for k in best_step_ms median_step_ms tokens_per_s params active_params; do
    grep -o " $k [0-9.]*" "$out" | awk '{printf "%s ", $2}'; done; echo
}

same() { [ "$(awk -v a="$1" -v b="$2" 'BEGIN{d=a-b; if (d<0) d=-d; print (d <= 1e-3*b) ? 1 : 0}')" = 1 ]; }
fail() { echo "moe.sh: $*" >&2; exit 1; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg), $(awk '/MemAvailable/{printf "%.1f", $2/1048576}' /proc/meminfo) GiB available"
echo "model: $L layers, hidden $H, $NH heads ($groups key/value groups), micro-batch $MB x seq $S, vocab $VP, RMSNorm, rope, SwiGLU, no biases, untied, fp32, AdamW, $threads thread$([ "$threads" = 1 ] || echo s), $steps steps (the first left out)"
awk -v p="$P_MOE" -v a="$A_MOE" -v d="$P_DENSE" -v f="$FLOP_TOK" -v e="$experts" -v k="$topk" -v ef="$expertffn" -v df="$dff" 'BEGIN{
  printf "  MoE:   %d experts of SwiGLU %d, top-%d: %.0f parameters (%.2fM), %.0f active (%.2fM)\n", e, ef, k, p, p/1e6, a, a/1e6
  printf "  dense: SwiGLU %d: %.0f parameters (%.2fM; all active: the MoE'\''s active less its routers)\n", df, d, d/1e6
  printf "  FLOPs per token (Megatron'\''s count, forward and backward), either model: %.0f (%.4g GFLOP)\n", f, f/1e9 }'

moe_r=() torch_r=() vs_moe=() vs_dense=()
for ((r = 1; r <= repeat; r++)); do
  [ "$repeat" -gt 1 ] && echo && echo "round $r of $repeat (load $(cut -d' ' -f1 /proc/loadavg))"
  read -r tm_best tm_med tm_tok tm_flops tm_params tm_peak < <(run_trident moe) || exit 1
  read -r td_best td_med td_tok td_flops td_params td_peak < <(run_trident dense) || exit 1
  # held against trident's own tables: the parameters it allocated and the FLOPs its MFU counts
  [ "$tm_params" = "$P_MOE" ] || fail "trident's MoE has $tm_params parameters, this script counts $P_MOE"
  [ "$td_params" = "$P_DENSE" ] || fail "trident's dense model has $td_params parameters, this script counts $P_DENSE"
  same "$tm_flops" "$(awk -v f="$FLOP_TOK" -v n=$((MB * S)) 'BEGIN{print f*n}')" ||
    fail "trident counts $tm_flops FLOPs per MoE iteration, this script $FLOP_TOK x $((MB * S)) tokens"
  same "$td_flops" "$(awk -v f="$FLOP_TOK" -v n=$((MB * S)) 'BEGIN{print f*n}')" ||
    fail "trident counts $td_flops FLOPs per dense iteration, this script $FLOP_TOK x $((MB * S)) tokens"
  pk=$(awk -v a="$tm_peak" -v b="$td_peak" 'BEGIN{print (a > b ? a : b) * 1e12}') # FLOP/s, raised if a step passed it
  pm=() pd=()
  if [ "$peer" = 1 ]; then
    if [ "$r" = 1 ]; then
      "${clean[@]}" $pyt "$root/bench/peer_torch_moe.py" --check | sed 's/^/peer /' || fail "the peer's dispatch check failed"
      case $peer_core in
        same) core=$(grep -o 'OpenBLAS [A-Za-z0-9]* sgemm' "$work/moe-moe.log" | head -1 | awk '{print $2}')
              [ -n "$core" ] && peer_env=(OPENBLAS_CORETYPE="$core") ;;
        env) ;;
        *) peer_env=(OPENBLAS_CORETYPE="$peer_core") ;;
      esac
    fi
    read -r -a pm < <(run_peer moe) || exit 1
    [ "${pm[3]} ${pm[4]}" = "$P_MOE $A_MOE" ] ||
      fail "the peer's MoE has ${pm[3]} parameters (${pm[4]} active), this script counts $P_MOE ($A_MOE)"
    if [ "$dense_peer" = 1 ]; then
      read -r -a pd < <(run_peer dense) || exit 1
      [ "${pd[3]}" = "$P_DENSE" ] || fail "the peer's dense model has ${pd[3]} parameters, this script counts $P_DENSE"
    fi
  fi
  echo
  printf '%-14s %9s %10s %10s %9s %s\n' run "best ms" "median ms" tokens/s GFLOP/s "of the GEMM peak ($(awk -v p="$pk" 'BEGIN{printf "%.1f", p/1e9}') GFLOP/s, $peak_name)"
  row() { awk -v n="$1" -v b="$2" -v m="$3" -v t="$4" -v f="$FLOP_TOK" -v p="$pk" \
            'BEGIN{printf "%-14s %9.1f %10.1f %10.1f %9.1f %5.1f%%\n", n, b, m, t, t*f/1e9, 100*t*f/p}'; }
  row "trident MoE" "$tm_best" "$tm_med" "$tm_tok"
  row "trident dense" "$td_best" "$td_med" "$td_tok"
  [ ${#pm[@]} -gt 0 ] && row "torch MoE" "${pm[0]}" "${pm[1]}" "${pm[2]}"
  [ ${#pd[@]} -gt 0 ] && row "torch dense" "${pd[0]}" "${pd[1]}" "${pd[2]}"
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.3f", a/b}'; }
  moe_r+=("$(ratio "$tm_tok" "$td_tok")") line="MoE / dense per active FLOP (best steps): trident ${moe_r[-1]} (goal >= 0.8)"
  if [ ${#pd[@]} -gt 0 ]; then torch_r+=("$(ratio "${pm[2]}" "${pd[2]}")"); line+=", torch ${torch_r[-1]}"; fi
  echo "$line"
  if [ ${#pm[@]} -gt 0 ]; then
    vs_moe+=("$(ratio "$tm_tok" "${pm[2]}")") line="trident / torch tokens/s: MoE ${vs_moe[-1]}"
    if [ ${#pd[@]} -gt 0 ]; then vs_dense+=("$(ratio "$td_tok" "${pd[2]}")"); line+=", dense ${vs_dense[-1]}"; fi
    echo "$line"
  fi
  if [ "$r" = 1 ]; then
    line="busiest expert against the mean, last step, worst layer: trident $(tail -1 "$work/moe-moe.jsonl" | grep -o '"expert_load_max_mean": [0-9.]*' | cut -d' ' -f2) (tinyshakespeare)"
    [ ${#pm[@]} -gt 0 ] && line+=", torch $(grep -o 'expert_load_max_mean [0-9.]*' "$work/peer-moe.out" | cut -d' ' -f2) (random tokens)"
    echo "$line"
    for kind in moe dense; do
      echo "trident $kind, $(grep -o 'memory per rank (predicted).*' "$work/moe-$kind.log" | sed 's/.*= //') predicted; $(sed -n '/time breakdown, mean/,/untimed/p' "$work/moe-$kind.log" | head -1 | sed 's/^time breakdown, //')"
      sed -n '/time breakdown, mean/,/untimed/p' "$work/moe-$kind.log" | sed '1d;s/^/  /'
    done
  fi
done
if [ "$repeat" -gt 1 ]; then
  echo
  echo "medians over $repeat rounds: MoE / dense per active FLOP: trident $(median "${moe_r[@]}")$([ ${#torch_r[@]} -gt 0 ] && echo ", torch $(median "${torch_r[@]}")")"
  [ ${#vs_moe[@]} -gt 0 ] && echo "  trident / torch: MoE $(median "${vs_moe[@]}")$([ ${#vs_dense[@]} -gt 0 ] && echo ", dense $(median "${vs_dense[@]}")")"
fi
exit 0
