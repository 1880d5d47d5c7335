#!/usr/bin/env bash
# This round's GPU lines in as few device calls as a lent machine allows, each call under its
# 600 s limit (DEADLINE_S, default 570): the trees are built once into /root/lt (outside the
# device tool's copy of the repo, which is refreshed every call) and later calls on the same warm
# machine reuse them. STAGE picks the call:
#   1  copy this tree to /root/lt, build it (build-gpu: train, the GPU tests, the benchmarks), then,
#      while time is left: TrainGpu.* (#47's graph == eager hashes), the loader's graph == eager and
#      host syncs (#48), gpu_decode_test (#49), the transformer from a token file (#48)
#   2  build the base tree (.base, the commit before #47's refactor) and run the A/B (#47): MNIST
#      1x64 and 1x512, the GRU 1x64, within 1%
#   3  resnet_gpu.sh (#49: ResNet-18 fed from JPEG shards, --decode gpu, resident, Python) and the
#      one-GPU tests of loader/augment/watch/memsets/fused optimizers
#   4  image_bench.sh at the machine's cores (#49's CPU figures and memory at 16 workers)
# Each part prints its lines as it ends; what a part leaves unfinished is said. Output in $OUT.
set -u
STAGE=${STAGE:-1}
start=$(date +%s)
deadline=$(( start + ${DEADLINE_S:-570} ))
left() { echo $(( deadline - $(date +%s) )); }
W=/root/lt
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/gpu-session}
mkdir -p "$OUT"
nvidia-smi -L | tee -a "$OUT/machine.txt"
if [ "$STAGE" = 1 ]; then
  rm -rf $W && mkdir -p $W && cp -a . $W
elif [ ! -d $W/build-gpu ]; then
  echo "gpu_session: no /root/lt/build-gpu here: a fresh machine; run STAGE=1 first"; exit 3
else
  # This call's copies of the scripts (a fix made between calls), not the sources (no rebuild).
  cp -a scripts/. $W/scripts/
fi
cd $W
export TRAIN_FASHION_MNIST_DIR=$PWD/.deps/fashion-mnist
part() {  # name, seconds it needs at least, command...
  local name=$1 need=$2; shift 2
  if [ "$(left)" -lt "$need" ]; then echo "== $name: not run ($(left) s left, needs $need)"; return; fi
  echo "== $name ($(left) s left)"
  timeout $(( $(left) - 5 )) "$@"
  echo "== $name rc=$? ($(left) s left)"
}
case $STAGE in
1)
  BUILD_ONLY=1 PARTS="tests tokens" EXTRA_TARGETS="gpu_decode_test resnet_bench loader_bench" OUT=$OUT \
    timeout $(( $(left) - 60 )) scripts/bench/refactor_check.sh
  echo "build rc=$? ($(left) s left)"; grep -h "decode gpu\|CUDA:" $OUT/configure-build-gpu.log
  part gpu_decode 40 bash -c "cd build-gpu && ./tests/gpu_decode_test 2>&1 | grep -E 'OK|FAILED|SKIPPED|measured|Failure|expected|Which|actual' | head -40"
  part tests 120 env PARTS=tests TESTS_TIMEOUT=$(( $(left) > 240 ? 200 : $(left) - 40 )) OUT=$OUT scripts/bench/refactor_check.sh
  part loader 100 env PARTS=loader OUT=$OUT scripts/bench/refactor_check.sh
  part tokens 150 env PARTS=tokens OUT=$OUT scripts/bench/refactor_check.sh ;;
2)
  part build-base 200 bash -c "cmake -S .base -B build-base -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAIN_USE_CCACHE=OFF \
      -DCMAKE_PREFIX_PATH=\"$PWD/.deps/usr;\$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')\" > $OUT/configure-base.log 2>&1 && \
      cmake --build build-base -j \$(nproc) --target train_program gru_bench > $OUT/build-base.log 2>&1; echo base build rc=\$?"
  part ab 150 env PARTS=ab REPEATS=${REPEATS:-2} OUT=$OUT scripts/bench/refactor_check.sh
  part gru 60 env PARTS=gru REPEATS=${REPEATS:-2} OUT=$OUT scripts/bench/refactor_check.sh ;;
3)
  part resnet 200 env BUILD=build-gpu PHOTOS=.deps/photos OUT=$OUT/resnet SIDE_TIMEOUT=${SIDE_TIMEOUT:-90} COUNT=${COUNT:-8192} scripts/bench/resnet_gpu.sh
  part onegpu-tests 60 bash -c "cmake --build build-gpu -j \$(nproc) --target loader_test augment_test nonfinite_watch_test \
      fused_optim_test graph_memsets_test > $OUT/build-tests.log 2>&1; cd build-gpu && for t in loader_test augment_test \
      nonfinite_watch_test fused_optim_test graph_memsets_test; do timeout 60 ./tests/\$t > $OUT/\$t.log 2>&1; \
      echo \"\$t rc=\$? \$(grep -c '^\[       OK' $OUT/\$t.log) ok \$(grep -E '^\[  (FAILED|SKIPPED) ' $OUT/\$t.log | head -3)\"; done" ;;
4)
  part images 300 env BUILD=build-gpu OUT=$OUT/images RESULTS= ROUNDS=1 PHOTOS=.deps/photos scripts/bench/image_bench.sh ;;
esac
echo "gpu_session stage $STAGE done in $(( $(date +%s) - start )) s"
