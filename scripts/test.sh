#!/usr/bin/env bash
# The test command: installs what is missing, builds, starts a local SLURM cluster of its own for
# the `slurm` tests (unless one runs already), and runs every test with ctest, two at a time (TRAIN_TEST_JOBS). Extra arguments go
# to ctest (e.g. -L unit).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
scripts/setup.sh
scripts/build.sh
started_slurm=0
if [ -x scripts/local-slurm.sh ] && [ "${TRAIN_TEST_SLURM:-1}" = 1 ]; then
  if ! scripts/local-slurm.sh status >/dev/null 2>&1; then
    # No cluster of the user's runs: start one whose state lives in the build folder (not .slurm/),
    # and stop it at the end, so the suite's jobs are never in the user's cluster afterwards. The
    # tests submit from outside the checkout in any case (TRAIN_TEST_JOB_DIR, tests/common/test_util.h),
    # so `trainctl status` there doesn't list them.
    export TRAIN_SLURM_DIR=$repo/build/test-slurm
    scripts/local-slurm.sh start
    export SLURM_CONF=$TRAIN_SLURM_DIR/slurm.conf
    started_slurm=1
  fi
fi
cleanup() { [ "$started_slurm" = 1 ] && "$repo/scripts/local-slurm.sh" stop >/dev/null 2>&1 || true; }
trap cleanup EXIT
cd build
# Say why the GPU tests skip on a machine without GPUs (ctest itself only prints "Skipped").
ctest -R 'Gpu' -V 2>/dev/null | grep -E '^[0-9]+: .*(Skipped|needs)' | sed 's/^[0-9]*: /gpu tests: /' || true
ctest --output-on-failure --timeout 1200 -j "${TRAIN_TEST_JOBS:-2}" "$@"
