#!/usr/bin/env bash
# Compiles every source that has CUDA code paths with GPIPE_WITH_CUDA on,
# against this machine's LibTorch headers (Debian's libtorch-dev ships
# c10/cuda and ATen/cuda) and the CUDA Toolkit's headers, without linking:
# catches CUDA-path compile errors on a machine with no CUDA LibTorch.
# Not a substitute for bench/gpu.sh, which builds, links and runs them on a GPU.
#   scripts/check_cuda_syntax.sh [CUDA_HOME]     default: /usr/local/cuda
set -euo pipefail
cd "$(dirname "$0")/.."
CUDA_HOME=${1:-/usr/local/cuda}
[ -f "$CUDA_HOME/include/cuda_runtime.h" ] || { echo "no CUDA headers under $CUDA_HOME/include" >&2; exit 1; }
STUB=$(mktemp -d); trap 'rm -rf "$STUB"' EXIT
# Generated at LibTorch build time and missing from a CPU-only LibTorch.
mkdir -p "$STUB/c10/cuda/impl"
echo '#define C10_CUDA_BUILD_SHARED_LIBS' > "$STUB/c10/cuda/impl/cuda_cmake_macros.h"
status=0
for f in $(grep -l 'GPIPE_WITH_CUDA\|copy_streams.h\|pipeline.h\|pipeline_run.h' runtime/*.cpp tests/runtime/*.cpp bench/*.cpp); do
  if g++ -std=c++17 -Wall -Wextra -Werror -fsyntax-only -DGPIPE_WITH_CUDA -I. -I"$STUB" \
       -isystem /usr/include/torch/csrc/api/include -isystem "$CUDA_HOME/include" "$f"; then
    echo "ok    $f"
  else
    echo "FAIL  $f"; status=1
  fi
done
exit $status
