#!/usr/bin/env bash
# The main job: installs what is missing, builds what the job runs (train, trainctl and what they
# link; scripts/test.sh builds the rest), starts the local two-node SLURM cluster,
# submits scripts/ddp.sh (the MNIST CNN on the full Fashion-MNIST, 1 epoch, 2 nodes,
# Gloo on CPU), follows its log and prints the result. Extra arguments go to `train`.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
scripts/setup.sh
TRAIN_BUILD_TARGETS="train_program trainctl" scripts/build.sh
scripts/local-slurm.sh start
# shellcheck disable=SC1091
source .slurm/env.sh

mkdir -p logs   # SLURM opens the job log before the script runs
# 2 ranks x 32 = the recipe's batch of 64 per step.
job=$(sbatch --parsable scripts/ddp.sh --epochs 1 --batch-size 32 --threads 1 "$@")
job=${job%%;*}
log=$(scontrol show job "$job" | sed -n 's/.*StdOut=\([^ ]*\).*/\1/p')
echo "demo: submitted job $job; log: $log"
trap 'scancel "$job" 2>/dev/null || true' INT TERM
while [ ! -f "$log" ]; do sleep 1; done
tail -n +1 -f "$log" --pid="$$" &
tailer=$!
while squeue -h -j "$job" 2>/dev/null | grep -q .; do sleep 2; done
sleep 1
kill "$tailer" 2>/dev/null || true
state=$(scontrol show job "$job" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
echo "demo: job $job finished: ${state:-unknown}"
result=$(grep '"event":"done"' "$log" | tail -n 1 || true)
if [ "$state" != COMPLETED ] || [ -z "$result" ]; then
  echo "demo: the job did not complete; see $log" >&2
  exit 1
fi
echo "demo: the local SLURM cluster is still up (scripts/local-slurm.sh stop ends it)"
echo "$result"
