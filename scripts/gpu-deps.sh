#!/usr/bin/env bash
# Gathers what a build on the GPU machine needs and can't install there (it has torch, CMake,
# ninja and nvcc but no package registry) into .deps/ as a /usr-like prefix: the Debian headers,
# spdlog/fmt/gtest libraries with their CMake packages, and the Fashion-MNIST files.
# Use: scripts/gpu-deps.sh, then carry ".deps" and configure with -DCMAKE_PREFIX_PATH=$PWD/.deps/usr.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=$repo/.deps/usr
rm -rf "$repo/.deps"
mkdir -p "$dest/include" "$dest/lib/x86_64-linux-gnu/cmake" "$dest/share/cmake" "$repo/.deps/fashion-mnist"
for d in gloo spdlog fmt CLI nlohmann gtest gmock; do cp -r "/usr/include/$d" "$dest/include/"; done
cp /usr/include/zlib.h /usr/include/zconf.h "$dest/include/"
cp -r /usr/include/openssl "$dest/include/"
cp -r /usr/include/x86_64-linux-gnu/openssl/. "$dest/include/openssl/"
lib=/usr/lib/x86_64-linux-gnu
cp -a $lib/libspdlog.so* $lib/libfmt.so* $lib/libgtest*.a $lib/libgmock*.a "$dest/lib/x86_64-linux-gnu/"
cp -a $lib/libz.so* $lib/libcrypto.so* "$dest/lib/x86_64-linux-gnu/" 2>/dev/null || true
for p in spdlog fmt GTest; do cp -r "$lib/cmake/$p" "$dest/lib/x86_64-linux-gnu/cmake/"; done
for p in CLI11 nlohmann_json; do cp -r "/usr/share/cmake/$p" "$dest/share/cmake/"; done
cp /usr/share/datasets/fashion-mnist/*.gz "$repo/.deps/fashion-mnist/"
du -sh "$repo/.deps"
