#!/usr/bin/env bash
# A full disk during a save (a real one: a small tmpfs, mounted here as root). The save fails
# with one error naming the file and ENOSPC, the partial iter_N.tmp is removed (the disk is not
# left full), and the message says what is left: "there is no earlier checkpoint" for the first
# save, "the previous checkpoint ... is untouched" (and it verifies) for a later one.
umount "${WORK:?}"/disk_* 2>/dev/null
. "$(dirname "$0")/checkpoint_lib.sh"
mounts=()
trap 'for m in "${mounts[@]}"; do umount "$m"; done' EXIT
small_disk() { # name size: a tmpfs of that size at $WORK/name
  mkdir -p "$1" && mount -t tmpfs -o "size=$2" tmpfs "$1" && mounts+=("$WORK/$1")
}
if ! small_disk disk_probe 1m 2>/dev/null; then
  echo "skip: cannot mount a tmpfs here (needs root); the full-disk checks did not run"; finish; exit
fi

# one checkpoint of the tiny model is ~20 MB (model 6.7 MB + Adam 13.4 MB)
small_disk disk_4m 4m
train 1 1 --train-iters 2 --save disk_4m/ckpt
rc=$?; line=$(grep -m1 "error: " "$last_log")
if [ "$rc" -ne 0 ] && grep -q "No space left on device" <<<"$line" && grep -q "removed the partial" <<<"$line" &&
   grep -q "there is no earlier checkpoint" <<<"$line" && ! grep -q "untouched" "$last_log"; then
  ok "first save on a full disk: exit $rc: $line"
else bad "first save on a full disk: exit $rc"; tail -3 "$last_log"; fi
left=$(ls disk_4m/ckpt 2>/dev/null | tr '\n' ' ')
used=$(df --output=used -k disk_4m | tail -1 | tr -d ' ')
[ -z "$left" ] && [ "$used" -lt 64 ] && ok "nothing left behind (used ${used} KiB)" ||
  bad "left behind: '$left', ${used} KiB used"

small_disk disk_30m 30m
train 1 1 --train-iters 3 --save disk_30m/ckpt --save-interval 1
rc=$?; line=$(grep -m1 "error: " "$last_log")
if [ "$rc" -ne 0 ] && grep -q "No space left on device" <<<"$line" && grep -q "removed the partial .*iter_0000002.tmp" <<<"$line" &&
   grep -q "the previous checkpoint .*iter_0000001 (iteration 1) is untouched" <<<"$line"; then
  ok "second save on a full disk: exit $rc: $line"
else bad "second save on a full disk: exit $rc"; tail -3 "$last_log"; fi
[ "$(ls disk_30m/ckpt | tr '\n' ' ')" = "iter_0000001 latest_checkpointed_iteration.txt " ] &&
  ok "only iter_0000001 is left: $(ls disk_30m/ckpt | tr '\n' ' ')" || bad "left: $(ls disk_30m/ckpt | tr '\n' ' ')"
if out=$("$TRIDENT" checkpoint info disk_30m/ckpt 2>&1) && grep -q "^iteration 1;" <<<"$out"; then
  ok "iteration 1 verifies ($(tail -1 <<<"$out"))"
else bad "iteration 1 does not verify:"; echo "$out"; fi
finish
