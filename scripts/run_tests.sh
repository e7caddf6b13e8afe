#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (GoogleTest through CTest)
# against both LibTorch builds: Debian's 1.13 (build/, the default) and pip's
# torch 2.15 with CUDA linked (build-torch2/, whose test models include the
# Hugging Face and timm ones only torch 2.x exports). GPIPE_TORCH2=0 runs the
# 1.13 leg alone (scripts/run_tests_torch2.sh runs the 2.x leg alone).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)"
if [ "${GPIPE_TORCH2:-1}" != 0 ]; then
  echo "run_tests: the second leg, LibTorch 2.15 (pip) with CUDA linked"
  BUILD_DIR=build-torch2 ./scripts/run_tests_torch2.sh
fi
