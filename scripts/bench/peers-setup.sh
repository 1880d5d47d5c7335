#!/usr/bin/env bash
# Installs the Python peers of the loader and image benchmarks (scripts/bench/loader_peers.py,
# image_peers.py) into .venv, pinned: benchmark-only, never a dependency of libtrain. torchvision
# goes in with --no-deps, so that it keeps .venv's torch (scripts/setup.sh installs torch first).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
py=${PYTHON:-$repo/.venv/bin/python}
if ! "$py" -c 'import torch' 2>/dev/null; then
  echo "peers-setup: $py: expected a Python with torch, found none." >&2
  echo "Hint: run scripts/setup.sh first (it makes .venv with torch), or set PYTHON=/path/to/python." >&2
  exit 1
fi
torch_version=$("$py" -c 'import torch; print(torch.__version__.split("+")[0])')
if [ "$torch_version" != 2.11.0 ]; then
  echo "peers-setup: torchvision 0.26.0 is built for torch 2.11.0, found torch $torch_version in $py." >&2
  echo "Hint: install torch 2.11.0 (scripts/setup.sh), or pick the torchvision release of your torch." >&2
  exit 1
fi
pip=("$py" -m pip install -q --disable-pip-version-check)
# torchdata's only hard requirement besides torch (already here) is requests; spdl brings spdl_io and
# spdl_core; webdataset braceexpand and pyyaml; scikit-image the photographs image_peers.py cuts.
"${pip[@]}" "torchdata==0.11.0" "spdl==0.8.0" "webdataset==1.0.2" "scikit-image==0.26.0" "pillow==13.0.0" numpy
"${pip[@]}" --no-deps "torchvision==0.26.0"
"$py" - <<'PY'
import importlib
for m in ["torch", "torchvision", "torchdata", "spdl", "webdataset", "skimage", "PIL", "numpy"]:
    mod = importlib.import_module(m)
    print(f"peers-setup: {m} {getattr(mod, '__version__', '?')}")
PY
