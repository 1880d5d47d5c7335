#!/usr/bin/env bash
# The image loaders' CPU speed in one call (issue #49): writes ImageNet-sized JPEGs cut from
# scikit-image's photographs and the same images as WebDataset shards (image_peers.py --make), builds
# loader_bench, then runs libtrain's image dataset (folder and shards) and its Python peers
# (DataLoader + ImageFolder, WebDataset, SPDL) in turn with `nproc` workers. A missing peer is
# skipped with a message. Not a test. Examples:
#   scripts/bench/image_bench.sh                                   # here: build-bench, .venv's python
#   BUILD=build-gpu OUT=/tmp/out scripts/bench/image_bench.sh      # the GPU machine's 16 cores
#   (without scikit-image there: PHOTOS=DIR, a copy of .venv/lib/python3.11/site-packages/skimage/data)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
BUILD=${BUILD:-build-bench}
WORKERS=${WORKERS:-$(nproc)}
COUNT=${COUNT:-$(( WORKERS * 500 > 2000 ? WORKERS * 500 : 2000 ))}  # about 4 s of work per epoch a core
SHARDS=${SHARDS:-$(( WORKERS * 2 > 32 ? WORKERS * 2 : 32 ))}       # WebDataset splits shards among workers
DATA=${DATA:-/tmp/libtrain-image-bench/$COUNT}
OUT=${OUT:-$DATA}
BATCH=${BATCH:-32} EPOCHS=${EPOCHS:-2} ROUNDS=${ROUNDS:-2} DEVICE=${DEVICE:-cpu}
RESULTS=${RESULTS-$repo/docs/benchmarks/results.jsonl}  # empty: no rows appended
mkdir -p "$DATA" "$OUT"

# PYTHON (the venv's with torch, else python3) and the build: build_loader_bench.sh.
source scripts/bench/build_loader_bench.sh
build_loader_bench image_bench.sh || exit 1

# The photographs: scikit-image's data folder, or PHOTOS=DIR (a copy of it) where scikit-image is missing.
"$PYTHON" scripts/bench/image_peers.py --make "$DATA" --count "$COUNT" --shards "$SHARDS" --only-make \
  ${PHOTOS:+--photos "$PHOTOS"}
cat "$DATA"/train/*/* "$DATA"/shards/*.tar > /dev/null  # in the page cache for every side alike
note="${NOTE:-$(nproc) cores, $(date -u +%F); scripts/bench/image_bench.sh}"
"$PYTHON" scripts/bench/image_peers.py --data "$DATA" --workers "$WORKERS" --batch-size "$BATCH" --epochs "$EPOCHS" \
  --rounds "$ROUNDS" --device "$DEVICE" --bench "$BUILD/bin/loader_bench" --results "$RESULTS" --note "$note" \
  2>&1 | tee "$OUT/images.txt"
