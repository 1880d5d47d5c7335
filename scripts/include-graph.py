#!/usr/bin/env python3
"""The include graph between libtrain's components, and a check that its arrows only run down.

Draws two graphs from the `#include` lines (Python 3 standard library only):
  1. between the components that the top-level folders hold (libtrain/ holds four: base, the
     training library, builtin and app), checked against the layers declared in LAYERS below;
  2. between the components inside the training library (libtrain/src and libtrain/include: a
     component is a file pair, `x.h` + `x.cpp`, its public `train/x.h` included), which must have
     no cycle: an arrow back up is an arrow inside a cycle.
Exit status 0 when every arrow runs down, 1 (with each offending include named) when one doesn't.

Usage: scripts/include-graph.py [--root DIR] [--dot]    (--dot prints Graphviz text of graph 1)
"""
import argparse
import collections
import os
import re
import sys

# (component, its folder, layer). An include may only reach a component of a lower layer: no
# arrow runs back up, and none sideways (launcher, models and libtrain don't know each other).
# datasets sits above libtrain: its memory-mapped readers implement train::SampleDataset.
# scripts/ and tests/ use everything and are used by nothing.
LAYERS = [
    ("base", "libtrain/base", 0),
    ("catalog", "datasets/catalog", 1),
    ("images", "datasets/images", 1),
    ("launcher", "launcher", 2),
    ("models", "models", 2),
    ("libtrain", "libtrain", 2),
    ("datasets", "datasets", 3),
    ("builtin", "libtrain/builtin", 4),
    ("app", "libtrain/app", 5),
    ("scripts", "scripts", 6),
    ("tests", "tests", 6),
]
SOURCE_EXT = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]', re.M)


def component_of(rel):
    """The component that holds the file at `rel` (a path relative to the root), or None."""
    best = None
    for name, folder, _ in LAYERS:
        if rel == folder or rel.startswith(folder + "/"):
            if best is None or len(folder) > len(best[1]):
                best = (name, folder)
    return best[0] if best else None


def source_files(root):
    for name, folder, _ in LAYERS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, folder)):
            dirnames[:] = [d for d in dirnames if d not in ("build", ".venv", "data", "__pycache__")]
            for f in filenames:
                if f.endswith(SOURCE_EXT):
                    yield os.path.relpath(os.path.join(dirpath, f), root)


def include_roots(root):
    """Every component's include/ and src/ folder: where a quoted include may be found."""
    roots = []
    for _, folder, _ in LAYERS:
        for sub in ("include", "src"):
            if os.path.isdir(os.path.join(root, folder, sub)):
                roots.append(os.path.join(folder, sub))
    return roots


def resolve(root, rel, target, roots, quoted):
    """The file an `#include "target"` (or `<target>`) in `rel` names: next to it first (quoted
    only), then the include roots; None for a system or third-party header. Several candidates
    (the same name in two components) resolve to the including component's own."""
    here = os.path.normpath(os.path.join(os.path.dirname(rel), target))
    if quoted and os.path.isfile(os.path.join(root, here)):
        return here
    found = [os.path.normpath(os.path.join(r, target)) for r in roots
             if os.path.isfile(os.path.join(root, r, target))]
    own = [f for f in found if component_of(f) == component_of(rel)]
    return (own or found or [None])[0]


def edges(root):
    """(from file, to file) for every resolved quoted include."""
    roots = include_roots(root)
    out = []
    for rel in sorted(source_files(root)):
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for quote, target in INCLUDE_RE.findall(text):
            dest = resolve(root, rel, target, roots, quote == '"')
            if dest is not None:
                out.append((rel, dest))
    return out


def check_layers(file_edges):
    """Arrows between components; those that don't run down to a lower layer."""
    layer = {name: lvl for name, _, lvl in LAYERS}
    arrows = collections.Counter()
    bad = []
    for a, b in file_edges:
        ca, cb = component_of(a), component_of(b)
        if ca == cb:
            continue
        arrows[(ca, cb)] += 1
        if layer[cb] >= layer[ca]:
            bad.append(f"{a} includes {b}: {ca} (layer {layer[ca]}) may only include "
                       f"components of lower layers, found {cb} (layer {layer[cb]})")
    return arrows, bad


SOURCE_ONLY = (".cpp", ".cc", ".cu")


def library_units(file_edges):
    """Each training-library file's unit: its file pair's name (train/x.h, src/dir/x.h, src/dir/x.cpp:
    "x"). A private header with no source file of its own whose name extends a unit's
    (process_group_impl.h, trainer_run.h) is that unit's inside: it belongs to it."""
    stems = {}
    for rel in {f for e in file_edges for f in e}:
        for prefix in ("libtrain/include/train/", "libtrain/src/"):
            if rel.startswith(prefix):
                # src/optim/schedule.cpp pairs with src/optim/schedule.h and train/schedule.h:
                # the folder says the file's role, the name its unit.
                stems[rel] = os.path.splitext(os.path.basename(rel[len(prefix):]))[0]
    with_source = {stems[r] for r in stems if r.endswith(SOURCE_ONLY)}
    units = {}
    for rel, stem in stems.items():
        unit = stem
        if stem not in with_source:
            owners = [u for u in with_source if stem.startswith(u + "_")]
            if owners:
                unit = max(owners, key=len)
        units[rel] = unit
    return units


def library_cycles(file_edges):
    """Cycles among the training library's file pairs (strongly connected components > 1)."""
    graph = collections.defaultdict(set)
    why = {}
    units = library_units(file_edges)
    for a, b in file_edges:
        ua, ub = units.get(a), units.get(b)
        if ua and ub and ua != ub:
            graph[ua].add(ub)
            why.setdefault((ua, ub), f"{a} includes {b}")
    index, low, stack, on_stack, sccs = {}, {}, [], set(), []

    def strongconnect(v):  # Tarjan's algorithm, iterative enough for a few hundred files
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                sccs.append(sorted(scc))

    for v in sorted(list(graph)):
        if v not in index:
            strongconnect(v)
    bad = []
    for scc in sccs:
        inside = [why[(a, b)] for a in scc for b in sorted(graph[a]) if b in scc]
        bad.append(f"cycle among {', '.join(scc)}: " + "; ".join(inside))
    return graph, bad


def floors(graph):
    """Each unit's floor: 0 for one that includes no other unit, else one above its highest."""
    memo = {}

    def floor(v, seen=()):
        if v not in memo:
            memo[v] = 1 + max((floor(w, seen + (v,)) for w in graph[v] if w not in seen), default=-1)
        return memo[v]

    return {v: floor(v) for v in list(graph)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    parser.add_argument("--dot", action="store_true", help="print the component graph as Graphviz text")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    file_edges = edges(root)
    arrows, bad_layers = check_layers(file_edges)
    graph, bad_cycles = library_cycles(file_edges)
    if args.dot:
        print("digraph components {")
        for (a, b), n in sorted(arrows.items()):
            print(f'  "{a}" -> "{b}" [label="{n}"];')
        print("}")
    else:
        print("components (layer: arrows to lower layers, with their include counts):")
        layer = {name: lvl for name, _, lvl in LAYERS}
        for name, folder, lvl in LAYERS:
            outs = ", ".join(f"{b} x{n}" for (a, b), n in sorted(arrows.items()) if a == name)
            print(f"  {lvl} {name:9} ({folder}/): {outs or '-'}")
        if not bad_cycles:
            fl = floors(graph)
            print(f"training library: {len(graph)} file pairs on {1 + max(fl.values(), default=0)} floors, no cycle")
        del layer
    for line in bad_layers + bad_cycles:
        print("error: " + line, file=sys.stderr)
    if bad_layers or bad_cycles:
        print(f"error: {len(bad_layers)} include(s) between components and {len(bad_cycles)} cycle(s) "
              "inside the training library run back up. Hint: move what both sides need down a "
              "layer (into libtrain/base, or a smaller header) instead of including upwards.",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
