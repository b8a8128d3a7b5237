#!/usr/bin/env bash
# trident eval --task's messages on bad task files (docs/eval.md), on the e2e/gen_models GPT-2:
# an empty file, a HellaSwag label that is no ending's index, a WikiText file that is not UTF-8, LOGLIKELIHOOD items
# without a continuation, of ids and text mixed, with an id outside the vocabulary or no continuation token.
# Each exits 1 with one line naming the file and what is wrong.
# Environment: TRIDENT, VOCAB, MERGES, MODELS, WORK.
set -u
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
E=("$TRIDENT" eval --load "$MODELS/gpt2" --vocab-file "$VOCAB" --merge-file "$MERGES" --micro-batch-size 4)
expect() { # what task file words...
  local what=$1 task=$2 file=$3; shift 3
  "${E[@]}" --task "$task" --valid-data "$file" >out.txt 2>err.txt
  local rc=$? msg; msg=$(grep '^error' err.txt)
  local good=1
  [ $rc -eq 1 ] && [ "$(grep -c '^error' err.txt)" -eq 1 ] || good=0
  for w in "$file" "$@"; do grep -qF -- "$w" <<<"$msg" || good=0; done
  if [ $good -eq 1 ]; then ok "$what: $msg"; else bad "$what: exit $rc: $(cat err.txt | tail -3)"; fi
}
: >empty.jsonl
expect "an empty HellaSwag file" HELLASWAG empty.jsonl "holds no examples (it is empty)"
expect "an empty LAMBADA file" LAMBADA empty.jsonl "holds no examples (it is empty)"
printf '{"ctx": "A man", "label": 0, "endings": ["a", "b", "c", "d"]}\n{"ctx": "A dog", "label": 7, "endings": ["a", "b", "c", "d"]}\n' >label.jsonl
expect "a HellaSwag label of 7" HELLASWAG label.jsonl 'line 2 (example 2): "label" is 7;' "integer 0 to 3"
printf ' = Caf\xe9 = \n' >latin1.tokens
expect "a WikiText file in Latin-1" WIKITEXT103 latin1.tokens "is not UTF-8: byte 6 (0xe9)"
printf '{"context": "a", "continuation": " b"}\n{"context": "a"}\n' >nocont.jsonl
expect "a LOGLIKELIHOOD item without its continuation" LOGLIKELIHOOD nocont.jsonl 'line 2 (item 2): needs "context" and "continuation"'
printf '{"context": [1, 2], "continuation": " b"}\n' >mixed.jsonl
expect "a LOGLIKELIHOOD item of ids and text" LOGLIKELIHOOD mixed.jsonl 'line 1 (item 1): "context" and "continuation" are both texts or both lists'
printf '{"context": [1, 50257], "continuation": [3]}\n' >badid.jsonl
expect "a LOGLIKELIHOOD token id outside the vocabulary" LOGLIKELIHOOD badid.jsonl '"context" token 2 is not a token id (an integer from 0 to 50256)'
printf '{"context": "a", "continuation": []}\n' >nocont2.jsonl
expect "a LOGLIKELIHOOD item with an empty continuation" LOGLIKELIHOOD nocont2.jsonl 'both texts or both lists'
printf '{"context": [5], "continuation": []}\n' >empty2.jsonl
expect "a LOGLIKELIHOOD item of no continuation token" LOGLIKELIHOOD empty2.jsonl 'the continuation holds no token'
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
