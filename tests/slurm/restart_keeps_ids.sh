#!/usr/bin/env bash
# SLURM test (label slurm, run alone): job ids never repeat on this machine. Submits a job, stops
# and starts the local cluster, submits again, and checks that the new id is above every id in the
# completion log, and that the log's line for it is the new job's (its own work dir).
# usage: restart_keeps_ids.sh SOURCE_DIR
# The jobs are submitted from outside the checkout (TRAIN_TEST_JOB_DIR, as the C++ suites do), so
# `trainctl status` there never lists them.
set -euo pipefail
src=$1
work=${TRAIN_TEST_JOB_DIR:-${TMPDIR:-/tmp}/libtrain-jobs-$(id -u)}/restart-ids-$$
if [ "${TRAIN_TEST_SLURM:-1}" = 0 ]; then echo "skipped: TRAIN_TEST_SLURM=0 turns the slurm tests off"; exit 77; fi
conf=${SLURM_CONF:-$src/.slurm/slurm.conf}
export SLURM_CONF=$conf
dir=$(dirname "$conf")
jobcomp=$dir/jobcomp.txt
fail() { echo "FAILED: $*" >&2; exit 1; }
rm -rf "$work"; mkdir -p "$work/a" "$work/b"

submit() {  # submit DIR: a one-second job from DIR; prints its id once it has ended
  (cd "$1" && sbatch --parsable --wait --job-name=ids -o /dev/null --wrap 'true') | cut -d';' -f1
}
wait_line() {  # wait_line ID DIR: the completion log's line for job ID run from DIR, within 30 s
  for _ in $(seq 1 150); do
    grep "^JobId=$1 .* WorkDir=$2 " "$jobcomp" 2>/dev/null && return 0
    sleep 0.2
  done
  return 1
}

first=$(submit "$work/a")
[ -n "$first" ] || fail "sbatch gave no job id"
wait_line "$first" "$work/a" >/dev/null || fail "no completion record for job $first"
TRAIN_SLURM_DIR=$dir "$src/scripts/local-slurm.sh" stop >/dev/null 2>&1
TRAIN_SLURM_DIR=$dir "$src/scripts/local-slurm.sh" start >/dev/null 2>&1 || fail "the cluster did not start again"
max=$(grep -o '^JobId=[0-9]*' "$jobcomp" | cut -d= -f2 | sort -n | tail -n 1)
second=$(submit "$work/b")
echo "before the restart: job $first; highest id in $jobcomp: $max; after the restart: job $second"
[ "$second" -gt "$max" ] || fail "job id $second after the restart repeats or precedes an id in the log ($max)"
line=$(wait_line "$second" "$work/b") || fail "no completion record for job $second"
[ "$(grep -c "^JobId=$second " "$jobcomp")" = 1 ] || fail "the log has more than one job $second"
case "$line" in *JobState=COMPLETED*) ;; *) fail "job $second: $line" ;; esac
rm -rf "$work"
echo "1 passed, 0 failed"
