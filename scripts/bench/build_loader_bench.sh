# Sourced by the loader and image benchmarks: builds loader_bench into $BUILD (an existing build dir as
# it is configured; a new one against $PYTHON's torch, and .deps/usr's libraries where
# scripts/gpu-deps.sh put them), logs in $OUT. $1: the calling script's name, for the message.
# Sourcing it sets PYTHON, unless given: the repo's venv when it imports torch, else python3.
if [ -z "${PYTHON:-}" ]; then
  PYTHON=python3
  [ -x .venv/bin/python ] && .venv/bin/python -c 'import torch' 2>/dev/null && PYTHON=.venv/bin/python
fi

build_loader_bench() {
  if [ ! -f "$BUILD/build.ninja" ]; then
    local tp prefix
    tp=$("$PYTHON" -c 'import torch; print(torch.utils.cmake_prefix_path)')
    prefix="$tp"; [ -d .deps/usr ] && prefix="$PWD/.deps/usr;$tp"
    cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAIN_BUILD_TESTS=OFF -DCMAKE_PREFIX_PATH="$prefix" \
      > "$OUT/configure.log" 2>&1 || { tail -20 "$OUT/configure.log"; return 1; }
  fi
  cmake --build "$BUILD" -j "$(nproc)" --target loader_bench > "$OUT/build.log" 2>&1 ||
    { grep -E "error|Error" -A3 "$OUT/build.log" | head -30; echo "$1: the build failed ($OUT/build.log)"; return 1; }
}
