#!/usr/bin/env bash
# The loader's memory, proven: `train --dataset npy --stream` on GIB GiB of images (Fashion-MNIST's, tiled)
# under a memory cgroup that allows LIMIT_MB MB (cgroup v1's memory controller; a child group of
# /sys/fs/cgroup/memory), for STEPS steps in DistributedSampler's order over the whole file. The
# page cache is dropped first, so every image read is charged to the group. Prints the group's peak
# usage and failures, the done line's peak RSS (anonymous and file-backed apart) and params_sha256.
# Not a test: it writes GIB GiB to DIR. Needs root. Example:
#   GIB=4 LIMIT_MB=1024 STEPS=300 scripts/bench/memory_bound.sh
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
GIB=${GIB:-4} LIMIT_MB=${LIMIT_MB:-1024} STEPS=${STEPS:-300} WORKERS=${WORKERS:-2}
dir=${DIR:-/tmp/libtrain-memory-bound}
train=${TRAIN:-$repo/build/bin/train}
fm=${TRAIN_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
group=/sys/fs/cgroup/memory/libtrain-memory-bound-$$
[ -d /sys/fs/cgroup/memory ] || { echo "memory_bound: no cgroup v1 memory controller at /sys/fs/cgroup/memory" >&2; exit 1; }
mkdir -p "$dir"
"$repo/.venv/bin/python" - "$dir" "$GIB" "$fm" <<'PY'
import gzip, sys, numpy as np
out, gib, fm = sys.argv[1], float(sys.argv[2]), sys.argv[3]
img = np.frombuffer(gzip.open(fm + "/train-images-idx3-ubyte.gz").read(), np.uint8, offset=16).reshape(-1, 28, 28)
lab = np.frombuffer(gzip.open(fm + "/train-labels-idx1-ubyte.gz").read(), np.uint8, offset=8).astype(np.int64)
n = int(gib * 2**30) // (28 * 28)
x = np.lib.format.open_memmap(out + "/train_x.npy", mode="w+", dtype=np.uint8, shape=(n, 28, 28))
y = np.lib.format.open_memmap(out + "/train_y.npy", mode="w+", dtype=np.int64, shape=(n,))
for s in range(0, n, len(img)):
    k = min(len(img), n - s); x[s:s + k] = img[:k]; y[s:s + k] = lab[:k]
x.flush(); y.flush(); del x, y
np.save(out + "/test_x.npy", np.frombuffer(gzip.open(fm + "/t10k-images-idx3-ubyte.gz").read(), np.uint8, offset=16).reshape(-1, 28, 28))
np.save(out + "/test_y.npy", np.frombuffer(gzip.open(fm + "/t10k-labels-idx1-ubyte.gz").read(), np.uint8, offset=8).astype(np.int64))
print(f"wrote {n} images ({n * 784 / 2**30:.2f} GiB) and their labels ({n * 8 / 2**30:.2f} GiB) to {out}")
PY
sync
echo 1 > /proc/sys/vm/drop_caches 2>/dev/null && echo "page cache dropped" || echo "page cache NOT dropped (no permission): cached pages were charged to the writer"
mkdir "$group"
trap 'rmdir "$group" 2>/dev/null || true' EXIT
echo $((LIMIT_MB * 1024 * 1024)) > "$group/memory.limit_in_bytes"
echo "cgroup $group: memory.limit_in_bytes $(cat "$group/memory.limit_in_bytes") (data: $(du -sh "$dir" | cut -f1))"
set +e
sh -c "echo \$\$ > $group/cgroup.procs && exec $train --dataset npy --stream --data $dir --epochs 1 --max-steps $STEPS \
  --limit-test-samples 1000 --log-interval 100 --threads 2 --data-workers $WORKERS" > "$dir/run.out" 2> "$dir/run.err"
rc=$?
set -e
grep -E "loader of|Test set|Train Epoch" "$dir/run.err" | tail -4
echo "exit $rc; cgroup peak usage $(( $(cat "$group/memory.max_usage_in_bytes") >> 20 )) MB of $LIMIT_MB MB, failcnt $(cat "$group/memory.failcnt")"
grep -E "^(total_)?(rss|cache|mapped_file) " "$group/memory.stat" | tr '\n' ' '; echo
tail -1 "$dir/run.out" | grep -oE '"(steps|peak_rss_mb|rss_anon_mb|rss_file_mb|data_wait_seconds|params_sha256|images_per_sec)":[^,]*' | tr '\n' ' '; echo
exit $rc
