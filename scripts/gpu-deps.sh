#!/usr/bin/env bash
# Gathers what a libtrain build needs into .deps/, for a GPU node without a package manager (one
# that has the driver, CUDA, Python with torch, CMake and Ninja, but no apt): .deps/usr is a
# /usr-like prefix with the Debian headers (Gloo, spdlog, fmt, CLI11, nlohmann-json, GoogleTest,
# zlib, OpenSSL, libjpeg-turbo's TurboJPEG, libpng) and the spdlog/fmt/GoogleTest libraries with their CMake packages; .deps/fashion-mnist
# holds the dataset. Run it on a machine with those packages installed (scripts/setup.sh), copy the
# repository with .deps/ to the node, and run scripts/gpu-check.sh there (it uses .deps when
# present), or configure with -DCMAKE_PREFIX_PATH="$PWD/.deps/usr;<torch's cmake prefix>".
# docs/gpu.md has the steps.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=$repo/.deps/usr
rm -rf "$repo/.deps"
mkdir -p "$dest/include" "$dest/lib/x86_64-linux-gnu/cmake" "$dest/share/cmake" "$repo/.deps/fashion-mnist"
for d in gloo spdlog fmt CLI nlohmann gtest gmock; do cp -r "/usr/include/$d" "$dest/include/"; done
cp /usr/include/zlib.h /usr/include/zconf.h /usr/include/turbojpeg.h "$dest/include/"
cp /usr/include/png.h /usr/include/pngconf.h /usr/include/pnglibconf.h "$dest/include/"
cp -r /usr/include/libpng16 "$dest/include/"
cp -r /usr/include/openssl "$dest/include/"
cp -r /usr/include/x86_64-linux-gnu/openssl/. "$dest/include/openssl/"
lib=/usr/lib/x86_64-linux-gnu
cp -a $lib/libspdlog.so* $lib/libfmt.so* $lib/libgtest*.a $lib/libgmock*.a "$dest/lib/x86_64-linux-gnu/"
cp -a $lib/libz.so* $lib/libcrypto.so* "$dest/lib/x86_64-linux-gnu/" 2>/dev/null || true
cp -a $lib/libturbojpeg.so* $lib/libpng16.so* $lib/libpng.so "$dest/lib/x86_64-linux-gnu/"
for p in spdlog fmt GTest; do cp -r "$lib/cmake/$p" "$dest/lib/x86_64-linux-gnu/cmake/"; done
for p in CLI11 nlohmann_json; do cp -r "/usr/share/cmake/$p" "$dest/share/cmake/"; done
cp /usr/share/datasets/fashion-mnist/*.gz "$repo/.deps/fashion-mnist/"
# The photographs the image benchmarks cut their JPEGs from (scikit-image's data folder), for PHOTOS=.deps/photos.
skimage=$repo/.venv/lib/python3.11/site-packages/skimage/data
[ -d "$skimage" ] && cp -r "$skimage" "$repo/.deps/photos"
du -sh "$repo/.deps"
