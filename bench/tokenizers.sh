#!/usr/bin/env bash
# Tokenizer speed: `trident tokenize --tokenizer-type HuggingFaceTokenizer` against Hugging Face's
# tokenizers library (Rust, npm @anush008/tokenizers through scripts/hf-reference.js), side by side in
# one run, on each tokenizer.json the tests read: Llama 3 (128K vocabulary, 280K merges), Llama 2
# (SentencePiece-style BPE), GPT-2 (its vocab.json and merges.txt as a tokenizer.json) and BERT
# (WordPiece). For each: the load (the tokenizer read, an empty input encoded) and the encoding of
# tinyshakespeare four times over as one text, each the best of --repeat runs of a fresh process, and
# whether both gave the same ids.
#
# Usage: bench/tokenizers.sh [--repeat N]
# Environment: BUILD (default build: the references scripts/test-deps.sh installs into BUILD/node).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
repeat=3
while [ $# -gt 0 ]; do
  case $1 in
    --repeat) repeat=$2 ;;
    *) echo "tokenizers.sh: unknown option $1 (--repeat N)" >&2; exit 2 ;;
  esac; shift 2
done
build=${BUILD:-$root/build}
[ -x "$build/trident" ] || { cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "$build" -j "$(nproc)" >/dev/null; }
mods=$build/node/node_modules
[ -d "$mods/@anush008/tokenizers" ] || "$root/scripts/test-deps.sh" "$build" >/dev/null
data=$("$root/scripts/get-data.sh")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
text=$work/text.txt # tinyshakespeare four times: the encoding well above the clock's and the load's noise
for _ in 1 2 3 4; do cat "$data/tinyshakespeare.txt"; done >"$text"
href=(node "$root/scripts/hf-reference.js")
"${href[@]}" gpt2-json "$data/gpt2/vocab.json" "$data/gpt2/merges.txt" "$work/gpt2.json"
"${href[@]}" bert-json "$build/node/bert/vocab.txt" lower "$work/bert.json"
: >"$work/empty.txt"

# best INPUT COMMAND...: the best wall seconds of $repeat runs of COMMAND <INPUT, its stdout to $work/out
best() {
  local b=1e9 t in=$1; shift
  for _ in $(seq "$repeat"); do
    local t0=$(date +%s.%N)
    "$@" <"$in" >"$work/out" 2>/dev/null
    t=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {print b - a}')
    b=$(awk -v a="$b" -v c="$t" 'BEGIN {print (c < a ? c : a)}')
  done
  echo "$b"
}
mb=$(awk -v n="$(stat -c %s "$text")" 'BEGIN {printf "%.2f", n / 1e6}')
echo "tinyshakespeare x 4: $mb MB; best of $repeat runs; $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
printf '%-8s %10s %10s %12s %12s %8s %s\n' tokenizer trident_load lib_load trident_MB/s lib_MB/s ratio same_ids
for name in llama3 llama2 gpt2 bert; do
  case $name in
    llama3|llama2) json=$mods/@lenml/tokenizer-$name/models/tokenizer.json ;;
    *) json=$work/$name.json ;;
  esac
  tok=("$build/trident" tokenize --whole --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$json")
  tl=$(best "$work/empty.txt" "${tok[@]}")
  tw=$(best "$text" "${tok[@]}"); cp "$work/out" "$work/trident.ids"
  ll=$(best /dev/null "${href[@]}" encode "$mods" "$json" "$work/empty.txt")
  lw=$(best /dev/null "${href[@]}" encode "$mods" "$json" "$text"); cp "$work/out" "$work/lib.ids"
  same=$(cmp -s "$work/trident.ids" "$work/lib.ids" && echo yes || echo NO)
  awk -v n="$name" -v tl="$tl" -v tw="$tw" -v ll="$ll" -v lw="$lw" -v mb="$mb" -v s="$same" 'BEGIN {
    te = tw - tl; le = lw - ll; if (te < 1e-3) te = 1e-3; if (le < 1e-3) le = 1e-3
    printf "%-8s %10.2fs %9.2fs %12.1f %12.1f %7.2fx %s\n", n, tl, ll, mb / te, mb / le, le / te, s }'
done
echo "load: a fresh process reading the file (node's own start-up, ~0.05 s, is in lib_load); MB/s: the"
echo "encoding alone (whole text less the load); ratio: the library's encoding time over trident's"
