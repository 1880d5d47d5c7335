#!/usr/bin/env bash
# Issue #49's GPU line in one call, on one card: ResNet-18 at 224 px, bf16, batch 256 per step, on
# ImageNet-sized JPEGs cut from photographs (image_peers.py --make: a folder and the same images as
# WebDataset shards), each side in turn:
#   - libtrain fed from the shards by the loader (resnet_bench, --data-workers = the cores);
#   - the same with --decode gpu (nvJPEG on the card, crop and flip there too);
#   - libtrain on images decoded once and held on the card (resnet_bench --resident): the card's rate;
#   - the loader alone on the same cores, no model (loader_bench --shards, --device cuda): the CPU
#     ceiling, what the cores decode + crop + flip a second;
#   - Python: torchvision's resnet18 fed by DataLoader(num_workers = the cores) from the folder, and
#     on resident data (resnet_peers.py).
# Needs BUILD with resnet_bench and loader_bench (refactor_check.sh's build, or cmake --build).
# Prints one line per side and the ratios. Not a test. Example (the device tool, .deps carried):
#   BUILD=build-gpu PHOTOS=.deps/photos OUT=$OUT scripts/bench/resnet_gpu.sh
set -u
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
BUILD=${BUILD:-build-gpu}
PYTHON=${PYTHON:-python3}
WORKERS=${WORKERS:-$(nproc)}
COUNT=${COUNT:-16384} EPOCHS=${EPOCHS:-3} BATCH=${BATCH:-256} RESIDENT=${RESIDENT:-2048}
DATA=${DATA:-$BUILD/resnet-data/$COUNT}
OUT=${OUT:-$DATA}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
nvidia-smi -L | tee "$OUT/machine.txt"
"$PYTHON" scripts/bench/image_peers.py --make "$DATA" --count "$COUNT" --shards 64 --only-make ${PHOTOS:+--photos "$PHOTOS"} \
  || exit 1
cat "$DATA"/train/*/* "$DATA"/shards/*.tar > /dev/null  # in the page cache for every side alike
spec=$("$PYTHON" -c 'import sys; sys.path.insert(0, "scripts/bench"); import image_peers; print(image_peers.shard_spec(sys.argv[1]))' "$DATA")
F="--device cuda --precision bf16 --batch-size $BATCH --log-interval 100000 --test-batch-size 256"
side() {  # name, command...: runs it, keeps its output, prints the rate line
  local name=$1; shift
  timeout ${SIDE_TIMEOUT:-150} "$@" > "$OUT/$name.out" 2> "$OUT/$name.err"
  local rc=$?
  echo "$name rc=$rc $(grep -ho '"images_per_sec[a-z_]*":[0-9.]*\|"samples_per_sec":[0-9.]*\|"data_wait_seconds":[0-9.e-]*' "$OUT/$name.out" | tr '\n' ' ')"
  [ $rc = 0 ] || tail -5 "$OUT/$name.err"
}
{
  side loader-alone "$BUILD/bin/loader_bench" --shards "$spec" --workers "$WORKERS" --prefetch "$WORKERS" --batch-size "$BATCH" --epochs 2 --device cuda
  side libtrain-fed "$BUILD/bin/resnet_bench" --shards "$spec" --data-workers "$WORKERS" --epochs "$EPOCHS" $F
  side libtrain-fed-gpu-decode "$BUILD/bin/resnet_bench" --shards "$spec" --decode gpu --data-workers "$WORKERS" --epochs "$EPOCHS" $F
  side libtrain-resident "$BUILD/bin/resnet_bench" --shards "$spec" --resident "$RESIDENT" --epochs $(( EPOCHS * COUNT / RESIDENT )) $F
  side python-dataloader "$PYTHON" scripts/bench/resnet_peers.py --data "$DATA" --fed dataloader --workers "$WORKERS" --batch-size "$BATCH"
  side python-resident "$PYTHON" scripts/bench/resnet_peers.py --data "$DATA" --fed resident --resident "$RESIDENT" --batch-size "$BATCH"
} | tee "$OUT/resnet.txt"
"$PYTHON" - "$OUT/resnet.txt" <<'PY' | tee -a "$OUT/resnet.txt"
import re, sys
rate = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) rc=0 .*?\"(?:images_per_sec_steady|samples_per_sec)\":([0-9.]+)", line) or \
        re.match(r"(\S+) rc=0 .*?\"images_per_sec\":([0-9.]+)", line)
    if m: rate[m.group(1)] = float(m.group(2))
def ratio(a, b):
    return f"{rate[a] / rate[b]:.3f}" if a in rate and b in rate else "n/a"
print("fed / resident (libtrain):", ratio("libtrain-fed", "libtrain-resident"),
      "| loader alone / resident (the CPU ceiling):", ratio("loader-alone", "libtrain-resident"),
      "| fed, --decode gpu / resident:", ratio("libtrain-fed-gpu-decode", "libtrain-resident"),
      "| libtrain fed / Python DataLoader:", ratio("libtrain-fed", "python-dataloader"),
      "| Python DataLoader / Python resident:", ratio("python-dataloader", "python-resident"))
PY
