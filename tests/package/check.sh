#!/usr/bin/env bash
# Installs this build into a temp prefix, builds tests/package/consumer against it with
# find_package(libtrain), and runs it: the installed CMake package works out of tree.
# usage: check.sh BUILD_DIR SOURCE_DIR TORCH_CMAKE_PREFIX
set -euo pipefail
build=$1 src=$2 torch_prefix=$3
work=$build/test-tmp/package
rm -rf "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$src/tests/package/consumer" -B "$work/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix;$torch_prefix" >"$work/configure.log" 2>&1 || { tail -30 "$work/configure.log"; exit 1; }
cmake --build "$work/consumer" >"$work/build.log" 2>&1 || { tail -30 "$work/build.log"; exit 1; }
out=$("$work/consumer/consumer")
echo "consumer printed: $out"
[ "$out" = "[2, 10] 5" ] || { echo "expected '[2, 10] 5'"; exit 1; }
rm -rf "$work"
