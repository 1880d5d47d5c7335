#!/usr/bin/env bash
# The test command: installs what is missing, builds, starts a local SLURM cluster of its own for
# the `slurm` tests (unless one runs already), and runs every test with ctest, two at a time (TRAIN_TEST_JOBS). Extra arguments go
# to ctest (e.g. -L unit).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
scripts/setup.sh
TRAIN_BUILD_TARGETS= scripts/build.sh   # everything, the test suites included
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
summary=$(mktemp)
rc=0
ctest --output-on-failure --timeout 1200 -j "${TRAIN_TEST_JOBS:-2}" "$@" | tee "$summary" || rc=$?
# ctest only prints "Skipped": say why each skipped test skipped (the GPU tests on a machine
# without GPUs, the slurm ones without a cluster, ...), from the test's output in ctest's log: a
# GoogleTest skip's message, else (a script's exit 77) its last line.
skipped=$(sed -nE 's/^[[:space:]]+[0-9]+ - (.+) \(Skipped\)$/\1/p' "$summary" | tr '\n' ' ')
if [ -n "$skipped" ] && [ -f Testing/Temporary/LastTest.log ]; then
  awk -v skipped=" $skipped" '
    /^[0-9]+\/[0-9]+ Testing: / { name = $3; out = 0; gskip = 0; msg = ""; last = ""; next }
    /^Output:$/ { out = 1; getline; next }
    /^<end of output>$/ {
      if (index(skipped, " " name " ")) print "skipped " name ": " (msg != "" ? msg : last)
      out = 0; next }
    out && /^\[  SKIPPED \]/ { gskip = 0 }
    out && gskip { msg = msg (msg == "" ? "" : " / ") $0 }
    out && /: Skipped$/ { gskip = 1 }
    out && NF { last = $0 }' Testing/Temporary/LastTest.log
fi
rm -f "$summary"
exit "$rc"
