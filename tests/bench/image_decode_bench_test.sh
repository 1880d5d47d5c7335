#!/usr/bin/env bash
# image_decode_bench on a few JPEGs it cuts from scikit-image's photos: --make writes them, a run on
# 2 threads checks itself against 1 thread before timing and prints one JSON line that parses, with
# every file drawn. Exit 77 (skipped) without the photos in .venv.
# usage: image_decode_bench_test.sh SOURCE_DIR BIN_DIR
set -uo pipefail
src=$1 bin=$2
photos=$src/.venv/lib/python3.11/site-packages/skimage/data
[ -f "$photos/chelsea.png" ] || { echo "no scikit-image photos in $photos (scripts/setup.sh installs them); skipped"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$bin/image_decode_bench" "$work/jpegs" --make --from "$photos" --count 12 >"$work/make.out" 2>&1 ||
  { cat "$work/make.out"; fail "--make exited non-zero"; }
[ "$(find "$work/jpegs" -name '*.jpg' | wc -l)" = 12 ] || fail "--make wrote $(find "$work/jpegs" -name '*.jpg' | wc -l) JPEGs, expected 12"
"$bin/image_decode_bench" "$work/jpegs" --threads 2 --epochs 1 --size 64 >"$work/run.out" 2>&1 ||
  { cat "$work/run.out"; fail "the run exited non-zero"; }
python3 - "$work/run.out" <<'PY' || fail "checks above"
import json, sys
line = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert line["bench"] == "image_decode" and line["files"] == 12 and line["images"] == 12, line
assert line["images_per_s"] > 0 and line["threads"] == 2 and line["size"] == 64, line
assert line["reduced_decodes"] > 0, f"500x375 crops shrunk to 64 px decode at reduced scale: {line}"
print("ok:", line["images_per_s"], "images/s")
PY
