#!/usr/bin/env bash
# For a machine with an NVIDIA GPU and a CUDA build of PyTorch 2.x (pip torch
# ships a CUDA LibTorch): builds gpipe-cpp against it, which turns on the CUDA
# code paths (GPIPE_WITH_CUDA), runs the test suite, and benchmarks plain vs
# pipelined training with S virtual stages on one GPU. Not run in CI.
#   bench/gpu.sh [BATCH] [CONFIGS]     default: 1024 "1x1:never,2x8:never,4x8:never,4x8:except_last"
# Prints everything it measured; results go to out/gpu/. On a machine without
# Boost, GoogleTest, nlohmann/json or gloo's headers, pack them here with
# scripts/pack_gpu_deps.sh and point GPIPE_DEPS_PREFIX at the packed prefix.
set -euo pipefail
cd "$(dirname "$0")/.."
BATCH=${1:-1024}
CONFIGS=${2:-1x1:never,2x8:never,4x8:never,4x8:except_last}
PY=${GPU_PYTHON:-python3}
OUT=${OUT_DIR:-out/gpu}
BUILD=${GPU_BUILD_DIR:-build-cuda}
DEPS=${GPIPE_DEPS_PREFIX:+;$(realpath "$GPIPE_DEPS_PREFIX")}
mkdir -p "$OUT"

if ! PREFIX=$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null); then
  echo "gpu.sh: '$PY' has no torch; set GPU_PYTHON to a python with a CUDA build of torch 2.x" >&2
  exit 1
fi
"$PY" -c 'import torch; assert torch.cuda.is_available(), "no CUDA device visible"; print("torch", torch.__version__, "CUDA", torch.version.cuda, torch.cuda.get_device_name(0))'
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

# Torch's CMake config sets the C++ ABI flag of the LibTorch it describes; Debian's
# Boost is built with the C++11 ABI, so the two must agree.
ABI=$("$PY" -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
if [ "$ABI" != 1 ]; then
  echo "gpu.sh: this torch uses the pre-C++11 ABI, Debian's Boost the C++11 one; they cannot be linked" >&2
  echo "together. Use a torch built with the C++11 ABI (pip wheels from 2.7 on, or LibTorch's cxx11-abi zip)." >&2
  exit 1
fi
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PREFIX$DEPS" \
  -DGPIPE_PYTHON="$(command -v "$PY")" >"$OUT/cmake.txt" 2>&1 || { tail -40 "$OUT/cmake.txt"; exit 1; }
grep -E 'CUDA paths|Torch' "$OUT/cmake.txt"
SECONDS=0
cmake --build "$BUILD" -j"$(nproc)" >"$OUT/build.txt" 2>&1 || { grep -E -A5 'error|FAILED' "$OUT/build.txt" | head -60; exit 1; }
echo "built in ${SECONDS}s; $(grep -c 'warning:' "$OUT/build.txt") compiler warnings"
# A failing test is a result to read, not a reason to skip the benchmarks.
ctest --test-dir "$BUILD" -j"$(nproc)" --timeout 120 --output-on-failure >"$OUT/ctest.txt" 2>&1 || true
grep -E 'tests passed|Failed|\*\*\*|Not Run' "$OUT/ctest.txt" | tail -30
echo "== copy streams (these CUDA tests are skipped on a CPU machine; here they must run) =="
"$BUILD/tests/gpipe_tests" --gtest_filter='CopyStreams.*' 2>&1 | tee "$OUT/copy_streams.txt" | grep -E 'OK|FAILED|SKIPPED|PASSED' || true

MODELS="$BUILD/gpu_models"
mkdir -p "$MODELS"
"$PY" samples/export_mlp.py --out "$MODELS/mlp6.pt" --blocks 6 --in-features 512 --hidden 1024 --out-features 512 >/dev/null
"$PY" samples/export_resnet.py --out "$MODELS/resnet50.pt" >/dev/null
echo
echo "== MLP, batch $BATCH, all stages on cuda:0 (one worker thread for the device) =="
"$BUILD/bench/gpipe-bench" "$MODELS/mlp6.pt" --device cuda:0 --sample-input "${BATCH}x512" --configs "$CONFIGS" --steps 20 \
  | tee "$OUT/mlp.txt"
echo
echo "== ResNet-50, batch 64 at 224x224, cuda:0 =="
"$BUILD/bench/gpipe-bench" "$MODELS/resnet50.pt" --device cuda:0 --sample-input 64x3x224x224 \
  --configs 1x1:never,2x8:except_last,4x8:except_last --steps 5 | tee "$OUT/resnet50.txt"
echo
echo "note: on CUDA the task times behind 'bound eff.' are host-side launch times, and 'peak MiB'"
echo "counts CPU tensors only; use gpipe-run --trace with nvidia-smi / nsys for device timings."
