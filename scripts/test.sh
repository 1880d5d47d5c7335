#!/usr/bin/env bash
# The test command: installs what is missing, builds, starts the local SLURM cluster for the
# `slurm` tests, and runs every test with ctest, two at a time (TRAIN_TEST_JOBS). Extra arguments go
# to ctest (e.g. -L unit).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
scripts/setup.sh
scripts/build.sh
started_slurm=0
if [ -x scripts/local-slurm.sh ] && [ "${TRAIN_TEST_SLURM:-1}" = 1 ]; then
  if ! scripts/local-slurm.sh status >/dev/null 2>&1; then
    scripts/local-slurm.sh start
    started_slurm=1
  fi
fi
cleanup() { [ "$started_slurm" = 1 ] && "$repo/scripts/local-slurm.sh" stop >/dev/null 2>&1 || true; }
trap cleanup EXIT
cd build
# Say why the GPU tests skip on a machine without GPUs (ctest itself only prints "Skipped").
ctest -R 'Gpu' -V 2>/dev/null | grep -E '^[0-9]+: .*(Skipped|needs)' | sed 's/^[0-9]*: /gpu tests: /' || true
ctest --output-on-failure --timeout 1200 -j "${TRAIN_TEST_JOBS:-2}" "$@"
