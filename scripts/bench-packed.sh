#!/usr/bin/env bash
# Packed against padded documents (docs/training.md, "Packed sequences"): tinyshakespeare cut into
# documents of long-tailed lengths (log-normal, median 300 bytes, sigma 1, clipped to [16, 8192];
# seed 1), byte-tokenized (257 ids: the runs spend their time in the layers, not a 50257-row output
# layer), each ended by EOD; a small GPT (4 layers, hidden 256, 4 heads, seq 1024) trained on one
# rank twice: on the packed stream with --reset-attention-mask --reset-position-ids --eod-mask-loss,
# and plain (full causal attention over every 1024 positions, the compute of a padded sample). A
# padded run puts one document (or a 1024-token piece of a longer one) in each sample: its document
# tokens per second are the plain run's tokens/s times the share of a padded sample's positions that
# hold a document, computed here from the lengths. Usage: scripts/bench-packed.sh [BUILD] [ITERS]
set -euo pipefail
build=${1:-build} iters=${2:-8}
root=$(cd "$(dirname "$0")/.." && pwd)
data=${TRIDENT_SHARED_DATA:-$root/../shared/data}
[ -f "$data/tinyshakespeare.txt" ] || data=$root/data
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
read -r ndocs mean median fill < <(python3 - "$data/tinyshakespeare.txt" "$dir/docs.jsonl" <<'EOF'
import json, math, random, sys
text = open(sys.argv[1], encoding="utf-8").read()
rng, i, lens, S = random.Random(1), 0, [], 1024
with open(sys.argv[2], "w") as out:
    while i < len(text):
        n = max(16, min(8192, int(rng.lognormvariate(math.log(300), 1.0))))
        doc, i = text[i:i + n], i + n
        out.write(json.dumps({"text": doc}) + "\n")
        lens.append(len(doc.encode()) + 1)  # bytes and the EOD
pieces = sum(math.ceil(n / S) for n in lens)
print(len(lens), f"{sum(lens) / len(lens):.0f}", sorted(lens)[len(lens) // 2], f"{sum(lens) / (pieces * S):.4f}")
EOF
)
python3 "$root/tests/parallel/byte_tokenizer.py" "$dir/bytes.json"
"$build/trident" preprocess --input "$dir/docs.jsonl" --output-prefix "$dir/d" --tokenizer-type HuggingFaceTokenizer \
  --tokenizer-model "$dir/bytes.json" --append-eod > /dev/null
common=(--data-path "$dir/d_text_document" --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$dir/bytes.json"
  --split 100,0,0 --eval-iters 0 --num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 1024
  --max-position-embeddings 1024 --micro-batch-size 2 --global-batch-size 4 --train-iters "$iters" --lr 1e-3
  --log-interval 1000 --seed 1)
"$build/trident" train "${common[@]}" --metrics-file "$dir/plain.jsonl" > "$dir/plain.log" 2>&1
"$build/trident" train "${common[@]}" --reset-attention-mask --reset-position-ids --eod-mask-loss \
  --metrics-file "$dir/packed.jsonl" > "$dir/packed.log" 2>&1
rate() { # mean tokens/s of the iterations after the first
  python3 -c 'import json,sys; r=[json.loads(l)["tokens_per_s"] for l in open(sys.argv[1]) if "tokens_per_s" in l][1:]; print(f"{sum(r)/len(r):.0f}")' "$1"
}
plain=$(rate "$dir/plain.jsonl") packed=$(rate "$dir/packed.jsonl")
padded=$(python3 -c "print(f'{$plain * $fill:.0f}')")
echo "documents: $ndocs, mean $mean tokens, median $median (with the EOD); a padded sample is $fill document"
echo "plain (the compute of a padded sample):  $plain tokens/s"
echo "padded: document tokens/s                $padded"
echo "packed (the three flags): tokens/s       $packed (every position a document's)"
python3 -c "print(f'packed / padded: {$packed / $padded:.2f}x document tokens per second')"
