#!/usr/bin/env bash
# regenerate-wrappers.sh: writes the committed sbatch wrappers (scripts/ddp.sh, scripts/ddp-gpu.sh,
# scripts/ddp-cpu-debug.sh) with `trainctl sbatch`. They are its output, never edited by hand: change
# a command below and rerun this. The test SbatchWrappers.MatchTheGenerator regenerates them into a
# temp folder and fails when the committed copies differ.
#
#   scripts/regenerate-wrappers.sh [OUTDIR]    # OUTDIR defaults to scripts/
#   TRAINCTL=/path/to/trainctl scripts/regenerate-wrappers.sh   # default: build/bin/trainctl
#
# --no-cluster-checks: the wrappers are meant for any cluster, so they don't depend on the partitions
# of the machine they are regenerated on.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$repo/scripts}
trainctl=${TRAINCTL:-$repo/build/bin/trainctl}
if [[ ! -x "$trainctl" ]]; then
  echo "regenerate-wrappers.sh: expected the trainctl program at $trainctl, found none." >&2
  echo "Hint: build it (cmake --build build --target trainctl), or set TRAINCTL=/path/to/trainctl." >&2
  exit 1
fi
mkdir -p "$out"

# CPU or GPU, whatever the allocation has (train's --backend auto); the cluster's default partition.
"$trainctl" sbatch --job-name ddp --nodes 2 --ntasks-per-node 1 --no-cluster-checks \
  --out "$out/ddp.sh"

# GPU nodes: one task per GPU (--gres=gpu:N); NCCL.
"$trainctl" sbatch --job-name ddp-gpu --nodes 1 --gres gpu:2 --cpus-per-task 4 --no-cluster-checks \
  --out "$out/ddp-gpu.sh"

# A CPU debug partition: Gloo on the CPU, a short time limit.
"$trainctl" sbatch --job-name ddp-cpu-debug --partition debug --nodes 2 --ntasks-per-node 1 --time 00:30:00 \
  --no-cluster-checks --out "$out/ddp-cpu-debug.sh" -- --backend gloo --device cpu
