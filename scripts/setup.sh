#!/usr/bin/env bash
# Installs what libtrain needs on a fresh Debian machine: Debian packages (as root) and
# torch==2.11.0 (and tensorboard, webdataset and torchvision, for tests) into .venv at the repo root.
# Re-running is quick and changes nothing.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

TORCH_VERSION=${TRAIN_TORCH_VERSION:-2.11.0}
debs=(cmake ninja-build ccache g++ pkg-config libgloo-dev libspdlog-dev libfmt-dev libgtest-dev libgmock-dev
      libcli11-dev nlohmann-json3-dev zlib1g-dev libssl-dev libturbojpeg0-dev libpng-dev
      dataset-fashion-mnist slurm-wlm munge)

missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "setup: missing Debian packages: ${missing[*]}" >&2
    echo "Hint: run as root, or: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

py=${TRAIN_PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$py" -m venv .venv
fi
have=$(.venv/bin/python -c 'import torch, numpy, matplotlib; print(torch.__version__.split("+")[0])' 2>/dev/null || true)
if [ "$have" != "$TORCH_VERSION" ]; then
  # pip's cache lives outside the repo (~/.cache/pip), so a fresh clone reinstalls from it.
  # matplotlib draws `trainctl plot` and sweep reports.
  echo "setup: pip install torch==$TORCH_VERSION numpy matplotlib into .venv (found: ${have:-none})"
  .venv/bin/python -m pip install -q --disable-pip-version-check "torch==$TORCH_VERSION" numpy matplotlib
fi
# tensorboard: the tests read train --tensorboard's event files back with its EventAccumulator.
if ! .venv/bin/python -c 'import tensorboard.backend.event_processing.event_accumulator' 2>/dev/null; then
  echo "setup: pip install tensorboard into .venv"
  .venv/bin/python -m pip install -q --disable-pip-version-check tensorboard
fi
# webdataset and torchvision: the image source tests write shards with webdataset's ShardWriter and
# list folders with torchvision's ImageFolder. torchvision with --no-deps, so that pip doesn't bring
# another torch (0.26.0 goes with torch 2.11); pillow, which it imports, is installed on its own.
if ! .venv/bin/python -c 'import webdataset' 2>/dev/null; then
  echo "setup: pip install webdataset==1.0.2 into .venv"
  .venv/bin/python -m pip install -q --disable-pip-version-check webdataset==1.0.2
fi
if ! .venv/bin/python -c 'import torchvision' 2>/dev/null; then
  echo "setup: pip install torchvision==0.26.0 (--no-deps) and pillow into .venv"
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps torchvision==0.26.0
  .venv/bin/python -m pip install -q --disable-pip-version-check pillow
fi
# scikit-image's photos (its data folder): the reduced-DCT test and the image benchmarks cut their
# JPEGs from real photographs. Only the files are used, so --no-deps (no scipy).
if ! ls .venv/lib/python3*/site-packages/skimage/data/chelsea.png >/dev/null 2>&1; then
  echo "setup: pip install scikit-image==0.26.0 (--no-deps: its photos) into .venv"
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps scikit-image==0.26.0
fi
echo "setup: ok (torch $(.venv/bin/python -c 'import torch; print(torch.__version__)' 2>/dev/null), tensorboard \
$(.venv/bin/python -c 'import tensorboard; print(tensorboard.__version__)' 2>/dev/null))"
