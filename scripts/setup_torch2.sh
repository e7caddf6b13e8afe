#!/usr/bin/env bash
# The second LibTorch: pip's torch 2.15.0 (a CUDA 13 wheel; it runs without a
# GPU) in the project-local virtual environment .venv-torch2, and gpipe-cpp
# built against it in build-torch2, with the CUDA code paths on and linked.
# Debian's packages (GoogleTest, Boost, gloo headers, ...) come from setup.sh.
#   scripts/setup_torch2.sh          env: VENV, BUILD_DIR
# Why 2.15.0: the newest torch on PyPI (Dec 2026); torch.jit.script/trace
# still export (with a FutureWarning) and its LibTorch loads TorchScript.
# README, "LibTorch versions", lists every version tried.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_VERSION=2.15.0
TORCHVISION_VERSION=0.29.2   # the newest; it needs torch >= 2.14
TRANSFORMERS_VERSION=5.25.0  # the newest; models traced (samples/export_transformers.py)
TIMM_VERSION=1.0.31          # the newest; models scripted (samples/export_timm.py)
VENV=${VENV:-.venv-torch2}
BUILD_DIR=${BUILD_DIR:-build-torch2}

GPIPE_SETUP_BUILD=0 ./scripts/setup.sh   # the Debian packages only
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup_torch2: creating $VENV"
  python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import torch, torchvision, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
  echo "setup_torch2: installing torch $TORCH_VERSION and torchvision $TORCHVISION_VERSION into $VENV (about 3 GB)"
  "$VENV/bin/pip" install -q --disable-pip-version-check "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION"
fi
if ! "$VENV/bin/python" -c "import transformers, timm, sys; sys.exit(transformers.__version__ != '$TRANSFORMERS_VERSION' or timm.__version__ != '$TIMM_VERSION')" 2>/dev/null; then
  echo "setup_torch2: installing transformers $TRANSFORMERS_VERSION and timm $TIMM_VERSION into $VENV (for the Hugging Face and timm models)"
  "$VENV/bin/pip" install -q --disable-pip-version-check "transformers==$TRANSFORMERS_VERSION" "timm==$TIMM_VERSION"
fi
PREFIX=$("$VENV/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  # The torch root too: without it TorchConfig's find_library prefers Debian's libtorch.so.
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_PREFIX_PATH="$PREFIX;$PREFIX/../.." -DGPIPE_PYTHON="$PWD/$VENV/bin/python" >/dev/null
fi
echo "setup_torch2: building in $BUILD_DIR against LibTorch $TORCH_VERSION"
cmake --build "$BUILD_DIR" -j "$(nproc)"
