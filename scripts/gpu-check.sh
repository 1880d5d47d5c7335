#!/usr/bin/env bash
# GPU checks on a node with NVIDIA GPUs: builds libtrain against that node's torch, runs the GPU
# tests (NCCL DDP parity, CUDA-graph step == eager step, bf16 accuracy) and the GPU benchmark
# against Python DDP (scripts/bench/gpu_bench.py). docs/gpu.md says what each proves.
#   scripts/gpu-check.sh                  # everything; logs in logs/gpu (or $OUT)
#   TRAIN_GPU_TESTS=0 scripts/gpu-check.sh     # benchmark only
#   TRAIN_GPU_BENCH=0 scripts/gpu-check.sh     # tests only
#   TRAIN_GPU_BENCH_ARGS='--configs 1x64' scripts/gpu-check.sh
# Where the node has no package manager, scripts/gpu-deps.sh gathers the headers into .deps/.
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
out=${OUT:-$repo/logs/gpu}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
data=${TRAIN_FASHION_MNIST_DIR:-}
if [[ -z "$data" ]]; then
  if [[ -d "$repo/.deps/fashion-mnist" ]]; then data=$repo/.deps/fashion-mnist; else data=/usr/share/datasets/fashion-mnist; fi
fi
export TRAIN_FASHION_MNIST_DIR=$data
py=$(command -v python3)
export TRAIN_TEST_PYTHON=${TRAIN_TEST_PYTHON:-$py}   # the tests that compare with Python's torch use it
tp=$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)')
prefix="$tp"
[[ -d "$repo/.deps/usr" ]] && prefix="$repo/.deps/usr;$tp"
{ nvidia-smi -L; "$py" -c 'import torch; print("torch", torch.__version__, "gpus", torch.cuda.device_count())'; } | tee "$out/machine.txt"
t0=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAIN_USE_CCACHE=OFF \
  -DCMAKE_PREFIX_PATH="$prefix" >"$out/configure.log" 2>&1 || { tail -40 "$out/configure.log"; exit 1; }
grep "NCCL path" "$out/configure.log"
cmake --build build-gpu -j "$(nproc)" --target train_program trainctl transformer_bench gru_bench ddp_test dist_train_test gpu_train_test fused_optim_test hung_rank_test network_health_test \
  >"$out/build.log" 2>&1 || { grep -E "error|Error" -A3 "$out/build.log" | head -60; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s"
rc=0
if [[ "${TRAIN_GPU_TESTS:-1}" = 1 ]]; then
  # A first run that says at once whether the GPU step works at all.
  build-gpu/bin/train --data "$data" --device cuda --epochs 1 --limit-train-samples 8000 --log-interval 40 \
    >"$out/smoke.out" 2>"$out/smoke.err" || rc=1
  grep -E "training step|Test set|error" "$out/smoke.err" | tail -4; tail -1 "$out/smoke.out"
  # TRAIN_GPU_TEST_LIST: one test command per line, e.g. $'gpu_train_test --gtest_filter=*Fused*\nddp_test'.
  tests=("gpu_train_test" "fused_optim_test --gtest_filter=*Cuda*" "dist_train_test --gtest_filter=DistTrainGpu.*"
         "ddp_test --gtest_filter=*Gpu*:*Nccl*" "hung_rank_test --gtest_filter=HungRankGpu.*"
         "network_health_test --gtest_filter=NetworkHealthGpu.*")
  [[ -n ${TRAIN_GPU_TEST_LIST:-} ]] && mapfile -t tests <<<"$TRAIN_GPU_TEST_LIST"
  for t in "${tests[@]}"; do
    [[ -n $t ]] || continue
    name=${t%% *}
    timeout 420 build-gpu/tests/$t >"$out/$name.log" 2>&1; r=$?
    grep -E "^\[[^ ]|PASSED|FAILED|SKIPPED|^\[ +(OK|FAILED) +\]" "$out/$name.log" | tail -24
    [[ $r = 0 ]] || { rc=1; grep -B2 -A6 "Failure" "$out/$name.log" | head -30; }
  done
fi
if [[ "${TRAIN_GPU_BENCH:-1}" = 1 ]]; then
  # shellcheck disable=SC2086
  "$py" scripts/bench/gpu_bench.py --build build-gpu --data "$data" --results "$out/results.jsonl" \
    ${TRAIN_GPU_BENCH_ARGS:-} 2>&1 | tee "$out/bench.txt" | tail -40
fi
exit $rc
