#!/usr/bin/env bash
# The torchgpipe paper's ablation on the U-Net sample: the full runtime, then
# with one component switched off at a time, interleaved in one gpipe-bench run.
#   bench/ablation.sh [BATCH] [IMAGE] [STAGES] [CHUNKS]    default: 16 64 4 8
# Components and how each is switched off:
#   one thread per stage/device  -> +one-worker   (every stage on one worker, as PyTorch's Pipe on CPU)
#   threads shared by the stages -> +thread-per-stage (with more CPU stages than cores, every
#                                   stage's thread runs instead of cores / threads-per-stage)
#   direct skip routing          -> +pass-through (skips relayed through every stage between)
#   copy streams                 -> CUDA only: bench/gpu.sh (on CPU a boundary moves no data)
#   fork/join ordering           -> has no switch: backward is an explicit clock schedule
#                                   (ARCHITECTURE.md), the order torchgpipe's phony edges enforce
# Not part of ctest: it takes minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
BATCH=${1:-16}; IMAGE=${2:-64}; STAGES=${3:-4}; CHUNKS=${4:-8}
PY=${GPIPE_PYTHON:-/usr/bin/python3}
BIN=${BUILD_DIR:-build}
OUT=${OUT_DIR:-out/bench}
mkdir -p "$OUT"
"$PY" samples/export_unet.py --out "$OUT/unet.pt" >/dev/null
base="${STAGES}x${CHUNKS}:except_last"
"$BIN/bench/gpipe-bench" "$OUT/unet.pt" --sample-input "${BATCH}x3x${IMAGE}x${IMAGE}" --steps "${STEPS:-6}" \
  --configs "$base,$base+one-worker,$base+thread-per-stage,$base+pass-through,$base+one-worker+pass-through" \
  | tee "$OUT/ablation.txt"
