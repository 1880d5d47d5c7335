#!/usr/bin/env bash
# The main job on one machine without SLURM: installs what is missing, builds, and trains the
# seeds' MNIST CNN for 1 epoch on the full Fashion-MNIST on CPU. Extra arguments go to `train`.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
scripts/setup.sh
scripts/build.sh
exec build/bin/train --model mnist --dataset fashion-mnist --data /usr/share/datasets/fashion-mnist \
  --epochs 1 --device cpu "$@"
