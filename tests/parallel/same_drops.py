#!/usr/bin/env python3
"""Usage: same_drops.py BASE RUN... [-- BASE RUN...]: each RUN's metrics (jsonl) against its BASE
(the one-rank run): per iteration the same `dropped_tokens` (the share of the (token, expert)
choices dropped over capacity, as logged), and the base drops some (above 0 in some iteration),
so that the layout rows with capacity are not dropless ones. Exit 1 on a difference."""
import json
import sys


def drops(path):
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    out = [r.get("dropped_tokens") for r in rows if "lm_loss" in r]
    if not out or any(d is None for d in out):
        sys.exit(f"same_drops: {path}: an iteration without dropped_tokens")
    return out


def main(argv):
    groups, cur = [], []
    for a in argv:
        if a == "--":
            groups.append(cur)
            cur = []
        else:
            cur.append(a)
    groups.append(cur)
    bad = 0
    for g in groups:
        if len(g) < 2:
            sys.exit("usage: same_drops.py BASE RUN... [-- BASE RUN...]")
        base = drops(g[0])
        if max(base) <= 0:
            print(f"FAIL {g[0]}: nothing dropped ({base}): the rows check no drops")
            bad += 1
        for run in g[1:]:
            got = drops(run)
            ok = got == base
            print(f"{'ok' if ok else 'FAIL'} {run}: dropped {got} (one rank: {base})")
            bad += not ok
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
