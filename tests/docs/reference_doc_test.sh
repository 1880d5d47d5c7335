#!/usr/bin/env bash
# Keeps docs/reference.md in step with the programs: every flag that `train --help` and each
# `trainctl SUBCOMMAND --help` list is documented in its section, every flag the page documents
# is listed by a --help (and shown there as typed, without CLI11's `{false}`), and every
# environment variable the sources and scripts read is named.
# usage: reference_doc_test.sh SOURCE_DIR BIN_DIR
set -uo pipefail
src=$1 bindir=$2
doc=$src/docs/reference.md
train=$bindir/train trainctl=$bindir/trainctl
fails=0
fail() { echo "FAILED: $*" >&2; fails=$((fails + 1)); }
[[ -f $doc ]] || { echo "FAILED: $doc is missing" >&2; exit 1; }
for p in "$train" "$trainctl"; do [[ -x $p ]] || { echo "FAILED: $p is not built" >&2; exit 1; }; done

# Flags of a --help text: the option lines' first field ("  -n,--nproc INT", "  --no-requeue{false}").
help_flags() { sed -n '/^Options:/,/^[^ ]/p' | grep -E '^  +-' | awk '{print $1}' | sed 's/{[^}]*}//' | tr ',' '\n' | grep -E '^-'; }
# The text of a section: from a heading line matching $1 to the next heading of level <= $2 hashes.
section() { awk -v start="$1" -v lvl="$2" '
  index($0, start) == 1 && substr($0, length(start) + 1, 1) ~ /^([ `]|)$/ { on = 1; print; next }
  on && /^#+ / { n = match($0, /^#+/); if (RLENGTH <= lvl) exit }
  on { print }' "$doc"; }
# Flags documented in a section's table rows: the first cell's `-x` / `--name ARG` items.
table_flags() { grep -E '^\| `-' | awk -F'|' '{print $2}' | grep -oE '`-[-a-zA-Z0-9_]+' | tr -d '`'; }
# Is flag $1 named in text on stdin, as `--flag` or `--flag ARG`?
documented() { grep -qE "\`$1([ \`]|\$)"; }

train_sec=$(section '## `train`' 2)
trainctl_sec=$(section '## `trainctl`' 2)
shape_sec=$(section '### Job shape options' 3)
env_sec=$(section '## Environment variables' 2)
[[ -n $train_sec && -n $trainctl_sec && -n $shape_sec && -n $env_sec ]] || fail "reference.md lacks one of its sections"

# train
# A flag's name as --help prints it is the flag a user types: no CLI11 decoration such as `{false}`.
plain_names() { ! grep -E '^  +-[^ ]*\{' <<<"$2" || fail "$1 --help shows a flag with CLI11's {...} decoration (above)"; }
train_help=$("$train" --help) || fail "train --help failed"
plain_names train "$train_help"
mapfile -t tflags < <(help_flags <<<"$train_help" | sort -u)
((${#tflags[@]} > 30)) || fail "train --help: expected over 30 flags, parsed ${#tflags[@]}"
for f in "${tflags[@]}"; do documented "$f" <<<"$train_sec" || fail "train $f is not documented in docs/reference.md (## \`train\`)"; done
for f in $(table_flags <<<"$train_sec" | sort -u); do
  grep -qxF -- "$f" <<<"$(printf '%s\n' "${tflags[@]}")" || fail "docs/reference.md documents train $f, which train --help doesn't list"
done

# trainctl subcommands
mapfile -t subs < <("$trainctl" --help | sed -n '/^Subcommands:/,$p' | grep -E '^  +[a-z]' | awk '{print $1}')
((${#subs[@]} >= 14)) || fail "trainctl --help: expected at least 14 subcommands, parsed ${#subs[@]}"
all_ctl=()
for s in "${subs[@]}"; do
  sub_sec=$(section "### \`trainctl $s" 3)
  [[ -n $sub_sec ]] || { fail "trainctl $s has no section (### \`trainctl $s ...) in docs/reference.md"; continue; }
  h=$("$trainctl" "$s" --help) || fail "trainctl $s --help failed"
  plain_names "trainctl $s" "$h"
  mapfile -t sflags < <(help_flags <<<"$h" | grep -vxE -- '-h|--help' | sort -u)
  all_ctl+=("${sflags[@]}")
  for f in "${sflags[@]}"; do
    documented "$f" <<<"$sub_sec" || documented "$f" <<<"$shape_sec" ||
      fail "trainctl $s $f is not documented in docs/reference.md (its section or the job shape options)"
  done
  for f in $(table_flags <<<"$sub_sec" | sort -u); do
    grep -qxF -- "$f" <<<"$(printf '%s\n' "${sflags[@]}")" || fail "docs/reference.md documents trainctl $s $f, which trainctl $s --help doesn't list"
  done
done
for f in $(table_flags <<<"$shape_sec" | sort -u); do
  grep -qxF -- "$f" <<<"$(printf '%s\n' "${all_ctl[@]}")" || fail "docs/reference.md's job shape options list $f, which no trainctl --help lists"
done

# Environment variables: what the programs read (getenv, and the launch variables the launcher
# parses), what the job scripts and scripts/*.sh read.
mapfile -t vars < <({
  grep -rhoE 'getenv\("[A-Z][A-Z0-9_]*"\)' "$src"/libtrain "$src"/launcher "$src"/datasets "$src"/models | grep -oE '[A-Z][A-Z0-9_]+'
  for f in libtrain/base/src/{env,env_slurm,device}.cpp launcher/src/{local_launch,local_output,local_signals,preflight}.cpp; do
    grep -hoE '"[A-Z][A-Z0-9_]+"' "$src/$f"
  done |
    tr -d '"' | grep -vE '^(SIG[A-Z0-9]+|PATH)$'
  grep -hoE '\$\{?TRAIN[A-Z_]*' "$src"/scripts/*.sh | tr -d '${'
  grep -hoE '\$\{?TRAINCTL_BIN' "$src"/launcher/src/sbatch_script.cpp | tr -d '${'
} | grep -vxE 'TRAIN_ARGS' | sort -u)
((${#vars[@]} > 40)) || fail "expected over 40 environment variables from the sources, found ${#vars[@]}"
for v in "${vars[@]}"; do
  grep -qF "\`$v\`" <<<"$env_sec" || fail "environment variable $v is read by the code but not documented in docs/reference.md"
done

echo "checked ${#tflags[@]} train flags, ${#subs[@]} trainctl subcommands (${#all_ctl[@]} flags), ${#vars[@]} variables"
((fails == 0)) || { echo "$fails problem(s)" >&2; exit 1; }
echo PASSED
