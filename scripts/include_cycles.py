#!/usr/bin/env python3
"""Include cycles of the source tree, from its #include "..." lines.

A module is a header and its .cpp (a/b.h + a/b.cpp); module A depends on B when a file of A includes a header
of B. Prints every strongly connected set of folders and of modules with more than one member, and exits 1
when any lies in one of the folders given (default: models train infer), else 0.

  scripts/include_cycles.py [FOLDER ...]
"""
import collections
import os
import re
import sys

TOPS = ["framework", "models", "infer", "train", "cli", "dashboard", "checkpoints"]
INCLUDE = re.compile(r'#include "([^"]+)"')


def graphs(root="."):
    modules = collections.defaultdict(set)
    for top in TOPS:
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in names:
                if not name.endswith((".h", ".cpp", ".mm")):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), root)
                src = os.path.splitext(path)[0]
                with open(os.path.join(root, path), errors="ignore") as f:
                    for line in f:
                        m = INCLUDE.match(line)
                        if m and os.path.exists(os.path.join(root, m.group(1))):
                            dst = os.path.splitext(m.group(1))[0]
                            if dst != src:
                                modules[src].add(dst)
    folders = collections.defaultdict(set)
    for a, bs in modules.items():
        for b in bs:
            if os.path.dirname(a) != os.path.dirname(b):
                folders[os.path.dirname(a)].add(os.path.dirname(b))
    return folders, modules


def cycles(graph):
    """Tarjan's strongly connected components with more than one member (iterative)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    nodes = sorted(set(graph) | {w for ws in graph.values() for w in ws})
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def main():
    checked = sys.argv[1:] or ["models", "train", "infer"]
    folders, modules = graphs()
    bad = 0
    for kind, graph in (("folders", folders), ("modules", modules)):
        for comp in cycles(graph):
            inside = any(c == t or c.startswith(t + "/") for c in comp for t in checked)
            bad += inside
            print(f"{kind} cycle{' (checked)' if inside else ''}: " + " <-> ".join(comp))
    print(f"include_cycles: {bad} cycle(s) in {', '.join(checked)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
