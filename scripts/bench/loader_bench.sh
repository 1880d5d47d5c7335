#!/usr/bin/env bash
# The loader benchmark in one call: writes an .npy pair (Fashion-MNIST's images tiled, uint8 28x28)
# and a uint16 token file, builds loader_bench, then runs libtrain's loader and its Python peers
# (scripts/bench/loader_peers.py: DataLoader, StatefulDataLoader, SPDL) on both, in turn, with
# `nproc` workers. A missing peer is skipped with a message. Not a test. Examples:
#   scripts/bench/loader_bench.sh                         # here: build-bench, .venv's python
#   BUILD=build-gpu DEVICE=cuda OUT=/tmp/out scripts/bench/loader_bench.sh   # the GPU machine
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
BUILD=${BUILD:-build-bench}
DATA=${DATA:-/tmp/libtrain-loader-bench}
OUT=${OUT:-$DATA}
NPY_MB=${NPY_MB:-300}            # the images' file size
TOKENS_M=${TOKENS_M:-100}        # millions of uint16 tokens (2 bytes each)
SEQ_LEN=${SEQ_LEN:-1024}
NPY_BATCH=${NPY_BATCH:-256} TOKENS_BATCH=${TOKENS_BATCH:-32}
EPOCHS=${EPOCHS:-2} ROUNDS=${ROUNDS:-2} DEVICE=${DEVICE:-cpu}
WORKERS=${WORKERS:-$(nproc)}
RESULTS=${RESULTS-$repo/docs/benchmarks/results.jsonl}  # empty: no rows appended
mkdir -p "$DATA" "$OUT"

# PYTHON (the venv's with torch, else python3) and the build: build_loader_bench.sh.
source scripts/bench/build_loader_bench.sh
build_loader_bench loader_bench.sh || exit 1

# The files, written once per size (kept between calls).
"$PYTHON" - "$DATA" "$NPY_MB" "$TOKENS_M" <<'PY'
import gzip, os, sys
import numpy as np
out, npy_mb, tokens_m = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
n = int(npy_mb * 2**20) // 784
npy = os.path.join(out, f"npy-{n}")
if not os.path.exists(os.path.join(npy, "train_y.npy")):
    os.makedirs(npy, exist_ok=True)
    fm = next((d for d in [os.environ.get("TRAIN_FASHION_MNIST_DIR", ""), ".deps/fashion-mnist",
                           "/usr/share/datasets/fashion-mnist"] if d and os.path.exists(d + "/train-images-idx3-ubyte.gz")), None)
    if fm:
        img = np.frombuffer(gzip.open(fm + "/train-images-idx3-ubyte.gz").read(), np.uint8, offset=16).reshape(-1, 28, 28)
        lab = np.frombuffer(gzip.open(fm + "/train-labels-idx1-ubyte.gz").read(), np.uint8, offset=8).astype(np.int64)
    else:  # no Fashion-MNIST here: random images of its shape (the loader's work is the same)
        print("loader_bench.sh: no Fashion-MNIST found (TRAIN_FASHION_MNIST_DIR, .deps/fashion-mnist): random uint8 images")
        rng = np.random.default_rng(0)
        img, lab = rng.integers(0, 256, (60000, 28, 28), np.uint8), rng.integers(0, 10, 60000).astype(np.int64)
    x = np.lib.format.open_memmap(npy + "/train_x.npy", mode="w+", dtype=np.uint8, shape=(n, 28, 28))
    y = np.lib.format.open_memmap(npy + "/train_y.npy.tmp", mode="w+", dtype=np.int64, shape=(n,))
    for s in range(0, n, len(img)):
        k = min(len(img), n - s); x[s:s + k] = img[:k]; y[s:s + k] = lab[:k]
    x.flush(); y.flush(); del x, y
    os.rename(npy + "/train_y.npy.tmp", npy + "/train_y.npy")
tokens = os.path.join(out, f"tokens-{int(tokens_m * 1e6)}.bin")
if not os.path.exists(tokens):
    t = np.random.default_rng(0).integers(0, 50257, int(tokens_m * 1e6), dtype=np.uint16)
    t[0] = 0  # so the file never starts with llm.c's magic (it is read as raw uint16)
    t.tofile(tokens + ".tmp"); os.rename(tokens + ".tmp", tokens)
print(f"files: {npy} ({n} images of 28x28, {n * 784 / 2**20:.0f} MiB), {tokens} "
      f"({os.path.getsize(tokens) / 2**20:.0f} MiB)")
open(os.path.join(out, "paths"), "w").write(f"{npy}\n{tokens}\n")
PY
npy=$(sed -n 1p "$DATA/paths") tokens=$(sed -n 2p "$DATA/paths")
cat "$npy/train_x.npy" "$npy/train_y.npy" "$tokens" > /dev/null  # in the page cache for every side alike

note="${NOTE:-$(nproc) cores, $(date -u +%F); scripts/bench/loader_bench.sh}"
common=(--workers "$WORKERS" --epochs "$EPOCHS" --rounds "$ROUNDS" --device "$DEVICE"
        --bench "$BUILD/bin/loader_bench" --results "$RESULTS" --note "$note")
"$PYTHON" scripts/bench/loader_peers.py --npy "$npy" --batch-size "$NPY_BATCH" "${common[@]}" 2>&1 | tee "$OUT/loader-npy.txt"
"$PYTHON" scripts/bench/loader_peers.py --tokens "$tokens" --seq-len "$SEQ_LEN" --batch-size "$TOKENS_BATCH" \
  "${common[@]}" 2>&1 | tee "$OUT/loader-tokens.txt"
