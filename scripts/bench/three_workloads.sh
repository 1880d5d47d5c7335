#!/usr/bin/env bash
# The three-workload GPU benchmark in one call on a bare GPU node: configures and builds build-gpu/
# the way scripts/gpu-check.sh does (only train, trainctl, transformer_bench and gru_bench), then runs
# scripts/bench/three_workloads.py; results, table and logs in $OUT (or logs/gpu). Extra
# arguments go to three_workloads.py (e.g. --nproc 1,2 --budget-s 420 --modes eager,graph).
#   scripts/bench/three_workloads.sh --budget-s 420
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo" || exit 1
out=${OUT:-$repo/logs/gpu}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
py=$(command -v python3)
tp=$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)')
prefix="$tp"
[[ -d "$repo/.deps/usr" ]] && prefix="$repo/.deps/usr;$tp"
{ nvidia-smi -L; "$py" -c 'import torch; print("torch", torch.__version__, "gpus", torch.cuda.device_count())'; } | tee "$out/machine.txt"
t0=$(date +%s)
if [[ ! -f build-gpu/build.ninja ]]; then
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAIN_USE_CCACHE=OFF -DTRAIN_BUILD_TESTS=OFF \
    -DCMAKE_PREFIX_PATH="$prefix" >"$out/configure.log" 2>&1 || { tail -40 "$out/configure.log"; exit 1; }
fi
cmake --build build-gpu -j "$(nproc)" --target train_program trainctl transformer_bench gru_bench >"$out/build.log" 2>&1 ||
  { grep -E "error|Error" -A3 "$out/build.log" | head -60; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s"
"$py" scripts/bench/three_workloads.py --build build-gpu --results "$out/three_workloads.jsonl" "$@" 2>&1 |
  tee "$out/three_workloads.txt" | grep -v '^{'
exit "${PIPESTATUS[0]}"
