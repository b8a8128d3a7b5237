#!/usr/bin/env bash
# Test-time references that are not Debian packages: GPT-2's reference encoder (npm
# gpt-3-encoder), installed into BUILD/node. The tokenizer tests compare against it.
set -euo pipefail
build=${1:-build}
ref="$build/node/node_modules/gpt-3-encoder/Encoder.js"
if [ ! -f "$ref" ]; then
  echo "test-deps: installing npm gpt-3-encoder@1.1.4 into $build/node" >&2
  mkdir -p "$build/node"
  npm install --prefix "$build/node" --no-audit --no-fund --silent gpt-3-encoder@1.1.4 >&2 || {
    echo "test-deps: npm install gpt-3-encoder failed; the tokenizer reference tests need it" >&2; exit 1; }
fi
