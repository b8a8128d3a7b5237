#!/usr/bin/env bash
# bench/moe.sh at its smoke size, trident only (the suite needs no torch): the script's count of
# the parameters and FLOPs against arithmetic worked by hand here, and (inside the script, which
# exits 1 on a difference) against the parameters trident allocated and the FLOPs its MFU counts.
# Environment: ROOT, BUILD (holding trident), DATA (tinyshakespeare in GPT-2's BPE), WORK.
#
# The smoke shape: 2 layers, h 256, 4 heads of 64 in 2 key/value groups, seq 64, vocabulary 50257
# padded to 50304, 8 SwiGLU experts of 256, top-2; the dense model's SwiGLU is 512.
#   a layer's attention and norms: q and o 2 x 256 x 256 = 131072, k and v 2 x 256 x 128 = 65536,
#     norms 2 x 256 = 512: 197120
#   outside the layers: embedding and output layer 2 x 50304 x 256 = 25755648, final norm 256: 25755904
#   MoE layer: 197120 + router 8 x 256 = 2048 + experts 8 x 3 x 256 x 256 = 1572864: 1772032
#     -> 25755904 + 2 x 1772032 = 29299968 parameters
#   active: 197120 + 2048 + 2 x 3 x 256 x 256 = 393216: 592384 -> 25755904 + 2 x 592384 = 26940672
#   dense layer: 197120 + 3 x 256 x 512 = 393216: 590336 -> 25755904 + 2 x 590336 = 26936576
#   FLOPs per token (Megatron): 12 x 2 x 256^2 x ((1 + 2/4 + 64/256) + 512/256 x 1.5)
#     = 1572864 x 4.75 = 7471104, + logits 6 x 256 x 50304 = 77266944: 84738048
set -euo pipefail
# bad options: exit 2 before anything runs, one line naming the option and the rule
refused() { # expected-text args...
  local want=$1 msg rc=0; shift
  msg=$("$ROOT/bench/moe.sh" "$@" 2>&1 >/dev/null) || rc=$?
  [ "$rc" = 2 ] && grep -qF -- "$want" <<<"$msg" ||
    { echo "bench_moe: moe.sh $* gave exit $rc and '$msg', expected exit 2 and '$want'" >&2; exit 1; }
  echo "refused as it should be: moe.sh $* -> $msg"
}
refused "hidden 768 must divide by heads 5" --shape 12x768x5:4x128 --groups 1
refused "--topk 9 is more than --experts 8" --topk 9
refused "--shape 12x768 must be LAYERSxHIDDENxHEADS:MBSxSEQ" --shape 12x768
refused "--expert-ffn 0 must be a positive integer" --expert-ffn 0
refused "unknown option --layers" --layers 12
out=$(BUILD=$BUILD DATA=$DATA WORK=$WORK PEAK_TFLOPS=1 "$ROOT/bench/moe.sh" --smoke --no-peer --threads 1)
echo "$out"
expect() {
  grep -qF -- "$1" <<<"$out" || { echo "bench_moe: no line of the output has: $1" >&2; exit 1; }
}
expect "top-2: 29299968 parameters (29.30M), 26940672 active (26.94M)"
expect "dense: SwiGLU 512: 26936576 parameters"
expect "either model: 84738048 (0.08474 GFLOP)"
for run in "trident MoE" "trident dense"; do
  tok=$(grep "^$run " <<<"$out" | awk '{print $5}')
  awk -v t="$tok" 'BEGIN{exit !(t > 0)}' || { echo "bench_moe: no tokens/s in the row of $run" >&2; exit 1; }
done
expect "MoE / dense per active FLOP (best steps): trident "
echo "bench_moe: the counts agree with the arithmetic worked by hand"
