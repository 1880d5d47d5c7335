#!/usr/bin/env bash
# Builds libtrain on a GPU machine against that machine's own torch and runs the NCCL tests and
# the GPU benchmarks (docs/gpu.md). Needs .deps/ from scripts/gpu-deps.sh. Logs go to $OUT.
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
out=${OUT:-$repo/logs/gpu}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TRAIN_FASHION_MNIST_DIR=$repo/.deps/fashion-mnist
py=$(command -v python3)
tp=$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)')
{ nvidia-smi -L; "$py" -c 'import torch; print("torch", torch.__version__, "gpus", torch.cuda.device_count())'; } | tee "$out/machine.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAIN_USE_CCACHE=OFF \
  -DCMAKE_PREFIX_PATH="$repo/.deps/usr;$tp" >"$out/configure.log" 2>&1 || { tail -40 "$out/configure.log"; exit 1; }
grep "NCCL path" "$out/configure.log"
cmake --build build-gpu -j "$(nproc)" --target train_program trainctl ddp_test dist_train_test models_test shm_group_test >"$out/build.log" 2>&1 \
  || { grep -E "error|Error" -A3 "$out/build.log" | head -60; exit 1; }
rc=0
set -x
build-gpu/tests/ddp_test 2>&1 | tee "$out/ddp_test.log" | tail -5; [ "${PIPESTATUS[0]}" = 0 ] || rc=1
# The host CPU of the GPU machine runs the CPU kernels and the shared-memory allreduce too.
{ lscpu | grep -E "Model name|Flags" | cut -c1-200; } > "$out/host_cpu.txt"
build-gpu/tests/models_test 2>&1 | tee "$out/models_test.log" | grep -E "fused kernels|PASSED|FAILED" | sort | uniq -c
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
build-gpu/tests/shm_group_test 2>&1 | tee "$out/shm_group_test.log" | tail -3; [ "${PIPESTATUS[0]}" = 0 ] || rc=1
build-gpu/tests/dist_train_test --gtest_filter='DistTrainGpu.*' 2>&1 | tee "$out/dist_train_gpu.log" | tail -5
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
set +x
if [ "${TRAIN_GPU_BENCH:-1}" = 1 ]; then
  for world in 1 2; do
    "$py" scripts/bench/compare.py --build build-gpu --device cuda --world $world --threads 4 \
      --limit-train-samples 0 --limit-test-samples 0 --epochs 2 --loaders resident,seeds \
      --data "$TRAIN_FASHION_MNIST_DIR" --json "$out/bench-cuda-w$world.json" 2>&1 | tee "$out/bench-cuda-w$world.txt"
  done
fi
exit $rc
