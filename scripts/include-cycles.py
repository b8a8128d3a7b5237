#!/usr/bin/env python3
"""The shape of the source tree (docs/architecture.md, issue 33): no circle of includes between
files, and no .c, .h, .cu or .cuh file over 1,000 lines, under src/ and include/.

The graph: an edge from a file to each file its `#include "..."` lines name, resolved as the
build resolves them: the including file's folder first, then include/<floor>/ and src/<floor>/
of its own floor, then those of the other floors, then src/ (white-box paths such as
"backend/backend.h"). Angle-bracket includes (system headers) are not followed. A cycle is
printed as the chain of files that closes it.

Usage: include-cycles.py SOURCE_DIR     check the tree; exit 1 naming every problem found
       include-cycles.py --self-test    the check finds a planted cycle and a long file
"""
import os
import re
import sys
import tempfile

MAX_LINES = 1000
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources(root):
    out = []
    for top in ("src", "include"):
        for d, _, files in os.walk(os.path.join(root, top)):
            out += [os.path.join(d, f) for f in files if f.endswith((".c", ".h", ".cu", ".cuh"))]
    return sorted(out)


def floor_of(root, path):
    parts = os.path.relpath(path, root).split(os.sep)
    return parts[1] if len(parts) > 2 else ""


def resolve(root, floors, path, name):
    own = floor_of(root, path)
    dirs = [os.path.dirname(path)]
    order = [own] + [f for f in floors if f != own]
    for f in order:
        dirs += [os.path.join(root, "include", f), os.path.join(root, "src", f)]
    dirs.append(os.path.join(root, "src"))
    for d in dirs:
        p = os.path.normpath(os.path.join(d, name))
        if os.path.isfile(p):
            return p
    return None


def find_cycle(graph):
    """One cycle of the graph as a list of nodes (first == last), or None."""
    WHITE, GREY, BLACK = 0, 1, 2
    color = {n: WHITE for n in graph}
    for start in sorted(graph):
        if color[start] != WHITE:
            continue
        stack = [(start, iter(sorted(graph[start])))]
        path = [start]
        color[start] = GREY
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                color[node] = BLACK
                stack.pop()
                path.pop()
            elif color.get(nxt, BLACK) == GREY:
                return path[path.index(nxt):] + [nxt]
            elif color.get(nxt) == WHITE:
                color[nxt] = GREY
                stack.append((nxt, iter(sorted(graph[nxt]))))
                path.append(nxt)
    return None


def check(root):
    root = os.path.abspath(root)
    files = sources(root)
    floors = sorted({floor_of(root, f) for f in files} - {""})
    graph, problems = {}, []
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        n = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        if n > MAX_LINES:
            problems.append("%s: %d lines, over %d: split it along a seam" % (os.path.relpath(f, root), n, MAX_LINES))
        graph[f] = {p for p in (resolve(root, floors, f, m) for m in INCLUDE.findall(text)) if p}
    while True:  # every cycle, one at a time: report it, cut its closing edge, look again
        cyc = find_cycle(graph)
        if not cyc:
            break
        problems.append("include cycle: " + " -> ".join(os.path.relpath(p, root) for p in cyc))
        graph[cyc[-2]].discard(cyc[-1])
    return len(files), problems


def self_test():
    with tempfile.TemporaryDirectory() as t:
        os.makedirs(os.path.join(t, "src", "model"))
        os.makedirs(os.path.join(t, "include", "core", "trident"))
        w = lambda p, s: open(os.path.join(t, p), "w").write(s)
        w("src/model/a.h", '#include "b.h"\n')
        w("src/model/b.h", '#include "trident/c.h"\n')
        w("include/core/trident/c.h", '#include "a.h"\n#include <stdio.h>\n')  # a.h: found via src/model
        w("src/model/ok.c", '#include "a.h"\n' + "x\n" * MAX_LINES)
        w("src/model/fine.c", "x\n" * (MAX_LINES - 1))
        _, probs = check(t)
        want_cycle = "include cycle: include/core/trident/c.h -> src/model/a.h -> src/model/b.h -> include/core/trident/c.h"
        assert want_cycle in probs, probs
        assert any(p.startswith("src/model/ok.c: 1001 lines") for p in probs), probs
        assert len(probs) == 2, probs
        w("include/core/trident/c.h", "#include <stdio.h>\n")
        _, probs = check(t)
        assert [p for p in probs if "cycle" in p] == [], probs
    print("self-test: a planted cycle and a 1,001-line file are found")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    if sys.argv[1] == "--self-test":
        self_test()
        return
    n, probs = check(sys.argv[1])
    for p in probs:
        print("FAIL: " + p)
    if probs:
        sys.exit(1)
    print("ok: %d files under src/ and include/: no include cycle, none over %d lines" % (n, MAX_LINES))


if __name__ == "__main__":
    main()
