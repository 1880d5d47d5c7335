#!/usr/bin/env bash
# Holds the layers of docs/architecture.md to the includes: scripts/include-graph.py finds no arrow
# between components that runs back up, and no cycle inside the training library; and it does
# find both in a small tree built here with one of each (so a pass is not a script that sees nothing).
# usage: include_graph_test.sh SOURCE_DIR
set -uo pipefail
src=$1
script=$src/scripts/include-graph.py
fails=0
fail() { echo "FAILED: $*" >&2; fails=$((fails + 1)); }

out=$(python3 "$script" --root "$src" 2>&1) || fail "the repository's includes run back up:"$'\n'"$out"
grep -q 'base .*(libtrain/base/)' <<<"$out" || fail "no component table in the output: $out"
grep -q 'libtrain .*(libtrain/): base x' <<<"$out" || fail "the training library's arrows to train::base are missing: $out"
grep -q 'no cycle' <<<"$out" || fail "the training library's floors are missing: $out"
if grep -q 'libtrain .*(libtrain/):.*launcher' <<<"$out"; then fail "train::train includes the launcher: $out"; fi
grep -q 'train::launcher' "$src/libtrain/torch_targets.cmake" && fail "libtrain/torch_targets.cmake names train::launcher"

# A tree with a back arrow (base includes the training library) and a cycle (a <-> b).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/libtrain/base/include/train/base" "$tmp/libtrain/include/train" "$tmp/libtrain/src"
printf '#pragma once\n#include "train/trainer.h"\n' >"$tmp/libtrain/base/include/train/base/log.h"
printf '#pragma once\n#include "train/base/log.h"\n' >"$tmp/libtrain/include/train/trainer.h"
printf '#pragma once\n' >"$tmp/libtrain/src/a.h"
printf '#pragma once\n#include "a.h"\n' >"$tmp/libtrain/src/b.h"
printf '#include "a.h"\n' >"$tmp/libtrain/src/a.cpp"
printf '#include "b.h"\n' >"$tmp/libtrain/src/b.cpp"
printf '#include "b.h"\n' >>"$tmp/libtrain/src/a.cpp"
printf '#include "a.h"\n' >>"$tmp/libtrain/src/b.cpp"
printf '#pragma once\n#include "b.h"\n' >"$tmp/libtrain/src/a.h"
rc=0
bad=$(python3 "$script" --root "$tmp" 2>&1) || rc=$?
(( rc == 1 )) || fail "a tree with a back arrow: expected exit 1, found $rc: $bad"
grep -q 'libtrain/base/include/train/base/log.h includes libtrain/include/train/trainer.h' <<<"$bad" ||
  fail "the back arrow base -> libtrain is not named: $bad"
grep -q 'cycle among a, b' <<<"$bad" || fail "the cycle a <-> b is not named: $bad"

(( fails == 0 )) && echo "include graph: every arrow runs down"
exit $(( fails > 0 ))
