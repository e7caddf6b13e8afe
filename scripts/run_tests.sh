#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (GoogleTest through CTest).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)"
