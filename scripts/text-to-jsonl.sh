#!/usr/bin/env bash
# Turns a plain-text corpus into loose JSON (one {"text": ...} per line), one document per
# paragraph (blank-line separated), for `trident preprocess`. Usage: text-to-jsonl.sh IN OUT [MAXDOCS]
set -euo pipefail
in=$1 out=$2 max=${3:-0}
awk -v max="$max" '
  function flush() {
    if (doc != "") { gsub(/\\/, "\\\\", doc); gsub(/"/, "\\\"", doc); gsub(/\t/, "\\t", doc); gsub(/\r/, "\\r", doc);
      gsub(/\n/, "\\n", doc); print "{\"text\": \"" doc "\"}"; n++ }
    doc = ""
    if (max > 0 && n >= max) exit  # END runs after exit: doc is already empty, nothing is written twice
  }
  /^[ \t\r]*$/ { flush(); next }
  { doc = doc $0 "\n" }
  END { flush() }' "$in" > "$out.tmp"
mv "$out.tmp" "$out"
