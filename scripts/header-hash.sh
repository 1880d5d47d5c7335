#!/usr/bin/env bash
# The public headers' fingerprint in CHANGELOG.md: a SHA-256 over every `*/include/train/**/*.h`
# (sorted paths, then each file's path and contents), kept as `<!-- public-headers-sha256: HEX -->`
# under `## [Unreleased]`. A change to a public header needs a CHANGELOG.md line and a new record.
# usage: header-hash.sh           print the headers' hash
#        header-hash.sh --check   exit 1 (with what to do) when CHANGELOG.md records another hash
#        header-hash.sh --update  write the hash into CHANGELOG.md's [Unreleased] record
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
changelog=CHANGELOG.md
marker='public-headers-sha256'

# The components' public include folders (build trees, with their generated train/base/version.h, and
# hidden folders such as .venv are no source).
headers() {
  find . -mindepth 1 \( -name '.*' -o -name 'build*' -o -name CMakeFiles \) -prune -o \
    -type f -path '*/include/train/*' -name '*.h' -print | LC_ALL=C sort
}
hash_headers() {
  headers | while IFS= read -r f; do printf '%s\n' "$f"; cat "$f"; done | sha256sum | cut -d' ' -f1
}
# The hash recorded in [Unreleased]: the first record after that heading, before the next version.
recorded() {
  awk -v m="$marker" '/^## \[Unreleased\]/ { on = 1; next } on && /^## \[/ { exit }
    on && index($0, "<!-- " m ": ") == 1 { sub("<!-- " m ": ", ""); sub(" -->.*", ""); print; exit }' "$changelog"
}

now=$(hash_headers)
case ${1:-} in
"") echo "$now" ;;
--check)
  [[ -f $changelog ]] || { echo "FAILED: $repo/$changelog is missing" >&2; exit 1; }
  rec=$(recorded)
  if [[ -z $rec ]]; then
    echo "FAILED: $changelog: expected a line '<!-- $marker: HEX -->' under '## [Unreleased]', found none." >&2
    echo "Hint: run scripts/header-hash.sh --update (it writes the line)." >&2
    exit 1
  fi
  if [[ $rec != "$now" ]]; then
    echo "FAILED: the public headers (*/include/train/**/*.h, $(headers | wc -l) files) changed since $changelog recorded them:" >&2
    echo "expected sha256 $rec (recorded under [Unreleased]), found $now." >&2
    echo "Hint: say what changed for users under '## [Unreleased]' in $changelog (Added/Changed/Removed/Fixed, with a" >&2
    echo "**Migration:** line where their code must change), then record the headers: scripts/header-hash.sh --update" >&2
    echo "(after a merge of branches that each changed headers, that one command is all it takes)." >&2
    exit 1
  fi
  echo "public headers: sha256 $now, as CHANGELOG.md records"
  ;;
--update)
  if [[ -n $(recorded) ]]; then
    awk -v m="$marker" -v h="$now" '/^## \[Unreleased\]/ { on = 1 } on && /^## \[/ && !/Unreleased/ { on = 0 }
      on && !done && index($0, "<!-- " m ": ") == 1 { $0 = "<!-- " m ": " h " -->"; done = 1 } { print }' \
      "$changelog" >"$changelog.tmp"
  else
    awk -v m="$marker" -v h="$now" '{ print } /^## \[Unreleased\]/ && !done { print ""; print "<!-- " m ": " h " -->"; done = 1 }' \
      "$changelog" >"$changelog.tmp"
  fi
  mv "$changelog.tmp" "$changelog"
  echo "$changelog: public headers recorded as sha256 $now"
  ;;
*)
  echo "header-hash.sh: expected no argument, --check or --update, found '$1'. Hint: see the usage at the top of $0." >&2
  exit 2
  ;;
esac
