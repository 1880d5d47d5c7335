#!/usr/bin/env bash
# A refactor's numbers on one GPU, in one device call: builds this tree (build-gpu/) and a base
# tree (BASE, default .base/: `git archive` of the commit before the refactor, unpacked there) against
# the machine's torch, in parallel, then runs
#   - gpu_train_test's TrainGpu.* (graph == eager, fused optimizers, resume): the hashes of docs/gpu.md;
#   - scripts/bench/ab_compare.py: `train` (MNIST) at 1x64 and 1x512 and gru_bench at 1x64, base (A)
#     against this tree (B), alternating, REPEATS times: steady images/s, the ratio, the same bits;
#   - loader: Fashion-MNIST as .npy (written here with numpy), `train --dataset npy` (the loader's
#     threads, pinned buffers, the side stream's copy) with the CUDA graph and eagerly, against the
#     in-memory IDX run: params_sha256 of each, and the host syncs per step (scripts/bench/synctrace.c);
#   - tokens: the transformer benchmark in memory against the same tokens from a file through the
#     loader (--tokens), alternating: tokens/s of each and the bits.
# Output in $OUT. Example (the device tool; .deps from scripts/gpu-deps.sh):
#   git archive eef82d1 | (mkdir -p .base && tar -x -C .base)
#   OUT=/tmp/out scripts/bench/refactor_check.sh
set -u
OUT=${OUT:-$PWD/logs/gpu}
BASE=${BASE:-$PWD/.base}
NEW=${NEW:-.}   # this tree, or a `git archive` of a commit (a working tree others are editing may not build)
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TRAIN_FASHION_MNIST_DIR=$PWD/.deps/fashion-mnist
nvidia-smi -L | tee $OUT/machine.txt
tp=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
jobs=$(( $(nproc) / 2 ))
build() {  # src dir, build dir, targets...
  local src=$1 dir=$2; shift 2
  [ -f $dir/build.ninja ] || cmake -S $src -B $dir -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAIN_USE_CCACHE=OFF \
    -DCMAKE_PREFIX_PATH="$PWD/.deps/usr;$tp" > $OUT/configure-$(basename $dir).log 2>&1 || return 1
  cmake --build $dir -j $jobs $(for t in "$@"; do printf -- '--target %s ' $t; done) > $OUT/build-$(basename $dir).log 2>&1
}
t0=$(date +%s)
# Only what the parts asked for (PARTS) is built: the base tree for ab and gru alone.
parts=" ${PARTS:-tests loader ab gru} "
targets="train_program ${EXTRA_TARGETS:-}"  # EXTRA_TARGETS: more of this tree (e.g. resnet_bench loader_bench)
[[ $parts == *" tests "* ]] && targets+=" gpu_train_test"
[[ $parts == *" tokens "* ]] && targets+=" transformer_bench"
[[ $parts == *" gru "* ]] && targets+=" gru_bench"
[[ $parts == *" ab "* || $parts == *" gru "* || -n ${BUILD_BASE:-} ]] || jobs=$(nproc)  # one tree: all the cores
build $NEW build-gpu $targets & new=$!
rc_base=0
if [[ $parts == *" ab "* || $parts == *" gru "* || -n ${BUILD_BASE:-} ]]; then
  build $BASE build-base train_program gru_bench & base=$!
fi
wait $new; rc_new=$?; [ -n "${base:-}" ] && { wait $base; rc_base=$?; }
echo "built in $(( $(date +%s) - t0 )) s (this tree rc=$rc_new, base rc=$rc_base)"
[ $rc_new = 0 ] || { grep -E "error" -A3 $OUT/build-build-gpu.log | head -40; exit 1; }
[ $rc_base = 0 ] || { grep -E "error" -A3 $OUT/build-build-base.log | head -40; exit 1; }
# BUILD_ONLY=1: build PARTS' programs (and the base tree with BUILD_BASE=1) and stop, for a later call
# on the same warm machine to run them.
[ -n "${BUILD_ONLY:-}" ] && exit 0
for part in ${PARTS:-tests loader ab gru}; do
  case $part in
  tests)
    (cd build-gpu && timeout ${TESTS_TIMEOUT:-240} ./tests/gpu_train_test --gtest_filter="${GPU_FILTER:-TrainGpu.*}" \
      > $OUT/gpu_train_test.log 2>&1; echo "gpu_train_test rc=$?")
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |OK \]|FAILED \]|params_sha256|sha" $OUT/gpu_train_test.log | head -40 ;;
  ab)
    python3 scripts/bench/ab_compare.py --a build-base --b build-gpu --data .deps/fashion-mnist \
      --configs ${AB_CONFIGS:-1x64,1x512} --repeats ${REPEATS:-2} --epochs 3 2>&1 | tee $OUT/ab_mnist.txt ;;
  loader)
    python3 - <<'PY'
import gzip, numpy as np, os
d = ".deps/fashion-mnist/"; o = "/tmp/npyfm"; os.makedirs(o, exist_ok=True)
img = lambda f: np.frombuffer(gzip.open(d + f).read(), np.uint8, offset=16).reshape(-1, 28, 28)
lab = lambda f: np.frombuffer(gzip.open(d + f).read(), np.uint8, offset=8).astype(np.int64)
np.save(o + "/train_x.npy", img("train-images-idx3-ubyte.gz")); np.save(o + "/train_y.npy", lab("train-labels-idx1-ubyte.gz"))
np.save(o + "/test_x.npy", img("t10k-images-idx3-ubyte.gz")); np.save(o + "/test_y.npy", lab("t10k-labels-idx1-ubyte.gz"))
PY
    gcc -shared -fPIC -O2 -o /tmp/synctrace.so scripts/bench/synctrace.c -ldl
    F="--device cuda --epochs 2 --max-steps 1500 --batch-size 64 --limit-test-samples 1000 --log-interval 1000 --precision fp32"
    for cfg in "idx graph:--cuda-graph on" "npy graph:--cuda-graph on --dataset npy --data /tmp/npyfm" \
               "npy eager:--cuda-graph off --dataset npy --data /tmp/npyfm" "idx eager:--cuda-graph off"; do
      name=${cfg%%:*}; flags=${cfg#*:}
      SYNC_FROM=100000 LD_PRELOAD=/tmp/synctrace.so timeout 120 build-gpu/bin/train $F $flags > "$OUT/loader-${name// /-}.out" 2> "$OUT/loader-${name// /-}.err"
      echo "$name rc=$? $(grep -o '"params_sha256":"[0-9a-f]*"' "$OUT/loader-${name// /-}.out") $(grep -o '"images_per_sec_steady":[0-9.]*' "$OUT/loader-${name// /-}.out") $(grep -o '"data_wait_seconds":[0-9.e-]*' "$OUT/loader-${name// /-}.out") $(grep SYNCCOUNT "$OUT/loader-${name// /-}.err") $(grep -o 'training step: .*' "$OUT/loader-${name// /-}.err" | cut -c1-90)"
    done | tee $OUT/loader.txt ;;
  tokens)
    # The transformer on its generated sequences in memory, then on the same tokens from a file
    # through the loader, alternating: the rates' ratio and the bits.
    F="--device cuda --epochs 2 --train-sequences ${TF_SEQUENCES:-8192} --log-interval 100000"
    build-gpu/bin/transformer_bench $F --max-steps 2 --write-tokens /tmp/tf.bin > /dev/null 2>&1
    for round in 1 2; do
      for src in memory tokens; do
        extra=""; [ $src = tokens ] && extra="--tokens /tmp/tf.bin"
        timeout 200 build-gpu/bin/transformer_bench $F $extra > $OUT/tf-$src-$round.out 2> $OUT/tf-$src-$round.err
        echo "transformer $src round $round rc=$? $(grep -o '"tokens_per_sec_steady":[0-9.]*' $OUT/tf-$src-$round.out) $(grep -o '"params_sha256":"[0-9a-f]*"' $OUT/tf-$src-$round.out) $(grep -o '"data_wait_seconds":[0-9.e-]*' $OUT/tf-$src-$round.out)"
      done
    done | tee $OUT/tokens.txt ;;
  gru)
    python3 scripts/bench/ab_compare.py --a build-base --b build-gpu --data - --program gru_bench \
      --configs 1x64 --repeats ${REPEATS:-2} --epochs 3 2>&1 | tee $OUT/ab_gru.txt ;;
  esac
done
