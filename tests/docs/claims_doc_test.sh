#!/usr/bin/env bash
# Holds the docs' claims to the code where a flag table can't: the exit codes of `train` (a flag
# error run here, the others from the sources), the hostlist claim and its exception where it is
# made, the torchrun form in the README, and the CIFAR-10 record count the readers warn about.
# usage: claims_doc_test.sh SOURCE_DIR BIN_DIR
set -uo pipefail
src=$1 bindir=$2
train=$bindir/train
fails=0
fail() { echo "FAILED: $*" >&2; fails=$((fails + 1)); }
[[ -x $train ]] || { echo "FAILED: $train is not built" >&2; exit 1; }
ref=$src/docs/reference.md env=$src/docs/environment.md readme=$src/README.md

# Exit codes: the sentence in reference.md's `train` section names every code train ends with.
codes=$(awk '/^## `train`/ { on = 1 } on && /Exit codes:/ { grab = 1 } grab { print } grab && /\.$/ { exit }' "$ref" | tr '\n' ' ')
[[ -n $codes ]] || fail "reference.md's train section has no 'Exit codes:' sentence"
rc=0
"$train" --no-such-flag >/dev/null 2>&1 || rc=$?
(( rc != 0 )) || fail "train --no-such-flag exited 0"
grep -q "[ ,]$rc a flag error" <<<"$codes" || fail "train exits $rc for a flag error; reference.md says: $codes"
preempted=$(grep -oE 'kExitPreempted = [0-9]+' "$src/libtrain/include/train/preemption.h" | grep -oE '[0-9]+$')
[[ -n $preempted ]] || fail "no kExitPreempted in preemption.h"
grep -q "[ ,]$preempted stopped by a preemption" <<<"$codes" || fail "train exits $preempted when preempted; reference.md says: $codes"
# A cancel exits 128 + the signal (cli.h's contract): 143 for SIGTERM, 130 for SIGINT.
grep -q '128 + signal' "$src/libtrain/include/train/cli.h" || fail "cli.h no longer says a cancel exits 128 + signal"
for c in 143 130; do grep -q "$c (128 + SIG" <<<"$codes" || fail "a cancel exits $c; reference.md says: $codes"; done

# Hostlists: no page claims an exact match with scontrol without the exception beside it.
for f in "$ref" "$env"; do
  if grep -qE 'exactly (as|what) `scontrol show hostnames`' "$f"; then
    fail "$(basename "$f") claims hostlists expand exactly as scontrol show hostnames, without the exception"
  fi
done
awk '/^### `trainctl hostnames/ { on = 1; next } on && /^#/ { exit } on' "$ref" | tr '\n' ' ' | grep -q 'Slurm 22.05 rejects' ||
  fail "reference.md's trainctl hostnames section doesn't name the suffix Slurm 22.05 rejects"
grep -A12 'expanded by `train::hostlist_expand()`' "$env" | tr '\n' ' ' | grep -q 'Slurm 22.05 rejects' ||
  fail "environment.md's hostlist paragraph doesn't name the suffix Slurm 22.05 rejects"
# ...and the exception is real: trainctl accepts the suffix.
[[ "$("$bindir/trainctl" hostnames 'n[1-2]x' | tr '\n' ' ')" == "n1x n2x " ]] || fail "trainctl hostnames 'n[1-2]x' no longer accepts the suffix"

# torchrun: the README's command runs train with --no-python before the program.
line=$(grep -E '^[^#]*torchrun .*build/bin/train' "$readme" | head -n 1)
[[ -n $line ]] || fail "README.md has no torchrun command running build/bin/train"
grep -qE -- '--no-python +build/bin/train' <<<"$line" || fail "README.md's torchrun command lacks --no-python before the program: $line"

# CIFAR-10: the record count the readers hold a batch to is the one the README states.
per_file=$(grep -oE 'kCifarRecordsPerFile = [0-9]+' "$src/datasets/catalog/include/train/catalog/catalog.h" | grep -oE '[0-9]+$')
grep -q "batch holds $per_file records" "$readme" || fail "README.md doesn't say each official CIFAR-10 batch holds $per_file records"

((fails == 0)) || { echo "$fails problem(s)" >&2; exit 1; }
echo PASSED
