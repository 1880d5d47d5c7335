#!/usr/bin/env bash
# Takes docs/tensorboard.png: serves a --tensorboard folder with the venv's TensorBoard on a port
# the OS picks and photographs its scalars page with headless Chromium (Debian's chromium).
# usage: scripts/tensorboard_screenshot.sh LOGDIR OUT.png [WIDTHxHEIGHT [TAG_REGEX]]
# TAG_REGEX picks the charts (TensorBoard's tag filter, e.g. 'loss|accuracy'); smoothing is off.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
logdir=${1:?usage: $0 LOGDIR OUT.png [WIDTHxHEIGHT]} out=${2:?usage: $0 LOGDIR OUT.png [WIDTHxHEIGHT]}
size=${3:-1400x1000}
tags=$("${TRAIN_PYTHON:-$repo/.venv/bin/python}" -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "${4:-}")
py=${TRAIN_PYTHON:-$repo/.venv/bin/python}
browser=$(command -v chromium || command -v chromium-browser || true)
if [[ -z $browser ]]; then
  echo "tensorboard_screenshot: expected Debian's chromium on PATH, found none. Hint: apt-get install chromium" >&2
  exit 1
fi
"$py" -c 'import tensorboard' 2>/dev/null || {
  echo "tensorboard_screenshot: expected tensorboard in $py, found none. Hint: scripts/setup.sh installs it" >&2
  exit 1
}
port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
tmp=$(mktemp -d)
"$py" -m tensorboard.main --logdir "$logdir" --host 127.0.0.1 --port "$port" --reload_interval 1 >"$tmp/tb.log" 2>&1 &
tb=$!
trap 'kill $tb 2>/dev/null; wait $tb 2>/dev/null; rm -rf "$tmp"' EXIT
# Wait for the event: TensorBoard serving the run's scalar tags (polling, 60 s at most).
for _ in $(seq 600); do
  if "$py" - "$port" <<'EOF' 2>/dev/null; then break; fi
import json, sys, urllib.request
tags = json.load(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/data/plugin/scalars/tags", timeout=1))
sys.exit(0 if any(tags.values()) else 1)
EOF
  kill -0 $tb 2>/dev/null || { echo "tensorboard_screenshot: tensorboard exited:" >&2; cat "$tmp/tb.log" >&2; exit 1; }
  sleep 0.1
done
# Headless Chromium: the time-series page, given virtual time to fetch and draw the charts; SVG
# charts (forceSVG), as headless Chromium without a GPU draws no WebGL lines.
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$tmp/profile" \
  --window-size="${size/x/,}" --virtual-time-budget=60000 --run-all-compositor-stages-before-draw --screenshot="$out" \
  "http://127.0.0.1:$port/?darkMode=false&forceSVG=true&tagFilter=$tags&smoothing=0#timeseries" >"$tmp/chromium.log" 2>&1 || {
  echo "tensorboard_screenshot: chromium failed:" >&2
  cat "$tmp/chromium.log" >&2
  exit 1
}
echo "tensorboard_screenshot: wrote $out ($size) of $logdir"
