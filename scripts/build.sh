#!/usr/bin/env bash
# Configures and builds libtrain into build/ (programs in build/bin). Extra arguments go to cmake.
# ccache keeps its cache outside the repo, so a fresh clone rebuilds quickly. TRAIN_BUILD_TARGETS
# (space separated, e.g. "train_program trainctl") builds only those targets and what they link;
# unset builds everything, the test suites included.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
export CCACHE_BASEDIR=$repo           # hits across clones in different folders
export CCACHE_NOHASHDIR=1
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
command -v ccache >/dev/null && ccache -M 5G >/dev/null 2>&1 || true
build=${TRAIN_BUILD_DIR:-build}
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
fi
targets=()
for t in ${TRAIN_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j "${TRAIN_JOBS:-$(nproc)}" "${targets[@]}"
