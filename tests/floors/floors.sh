#!/usr/bin/env bash
# The floors hold: a file of the model floor compiles with a header of a floor below it and not
# with one of a floor above; a library over the comm floor links against the floors below it and
# not when it calls a function of the model floor above. Compiled with the model floor's own
# flags (compile_commands.json), linked with the floor-check libraries the build made.
# Usage: floors.sh BUILD_DIR SOURCE_DIR
set -u
build=$1 src=$2
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# the compile command of one file of src/model/, with its output and input swapped for a probe
cmd=$(python3 - "$build/compile_commands.json" "$src/src/model/" <<'PY'
import json, sys, shlex
for e in json.load(open(sys.argv[1])):
    if e["file"].startswith(sys.argv[2]) and "_floor_check" not in e.get("output", ""):
        args = shlex.split(e["command"])
        out = []
        skip = False
        for i, a in enumerate(args):
            if skip: skip = False; continue
            if a in ("-o", "-c"): skip = True; continue
            if a == e["file"]: continue
            out.append(a)
        print(shlex.join(out)); break
PY
)
[ -n "$cmd" ] || fail "no compile command of src/model/ in $build/compile_commands.json"

probe() { # $1: header; the compile's exit status
  printf '#include "%s"\nint floors_probe;\n' "$1" > "$tmp/probe.c"
  # shellcheck disable=SC2086
  eval "$cmd -c $tmp/probe.c -o $tmp/probe.o" 2> "$tmp/err"
}
probe trident/comm.h || { cat "$tmp/err"; fail "src/model cannot include trident/comm.h (a floor below)"; }
probe trident/gpt.h || { cat "$tmp/err"; fail "src/model cannot include its own trident/gpt.h"; }
for up in trident/pipeline.h trident/optim.h trident/checkpoint.h trident/trainer.h trident/plan.h; do
  probe "$up" && fail "src/model compiles with $up, a header of a floor above it"
  grep -q "No such file" "$tmp/err" || { cat "$tmp/err"; fail "including $up failed for another reason"; }
done
echo "includes: model sees comm and its own headers, not pipeline, optim, checkpoint, trainer or plan"

# calls: a shared object over the check libraries of the comm floor and the one below, --no-undefined
libs=("$build/libtrident_comm_floor_check.so" "$build/libtrident_core_floor_check.so")
for lib in "${libs[@]}"; do
  [ -f "$lib" ] || fail "$lib is missing: the build makes one floor-check library per floor"
done
link() { # $1: the function the probe calls
  printf 'void %s(void);\nvoid floors_probe(void) { %s(); }\n' "$1" "$1" > "$tmp/call.c"
  cc -fPIC -shared -o "$tmp/call.so" "$tmp/call.c" "${libs[@]}" -Wl,--no-undefined 2> "$tmp/err"
}
link comm_world_finalize || { cat "$tmp/err"; fail "a call into the comm floor itself does not link"; }
link td_die || { cat "$tmp/err"; fail "a call into the core floor below does not link"; }
link gpt_num_params && fail "a call from the comm floor up into the model floor links"
grep -q "undefined reference to .gpt_num_params" "$tmp/err" || { cat "$tmp/err"; fail "the upward call failed for another reason"; }
echo "calls: over comm, comm and core link, model (above) does not"
