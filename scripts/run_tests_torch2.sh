#!/usr/bin/env bash
# The test suite against the second LibTorch (pip torch 2.15.0, CUDA linked;
# CUDA tests skip without a GPU): sets up .venv-torch2 and build-torch2
# (scripts/setup_torch2.sh), then GoogleTest through CTest. The test models
# are exported by that torch, so some use operators LibTorch 1.13 lacks
# (aten::scaled_dot_product_attention in the transformer and ViT), and they
# include the Hugging Face transformers and timm models. scripts/run_tests.sh
# runs this after the 1.13 leg.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup_torch2.sh
ctest --test-dir "${BUILD_DIR:-build-torch2}" --output-on-failure -j "$(nproc)"
