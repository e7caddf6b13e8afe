#!/usr/bin/env bash
# The main job, end to end: set up, export the sample MLP from Python, compile
# it into a 4-stage pipeline with 8 micro-batches (verifying it against the
# original), train it for a few steps, then train it again in 2 processes
# with gpipe-launch (c10d/Gloo on 127.0.0.1), and finally split torchvision's
# DenseNet-121 into 4 stages with nothing but the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
PY=${GPIPE_PYTHON:-/usr/bin/python3}   # Debian's python3-torch lives under the system interpreter
BIN=${BUILD_DIR:-build}/cli
OUT=${OUT_DIR:-out}
mkdir -p "$OUT"

echo; echo "== 1. export a scripted nn.Sequential =="
"$PY" samples/export_mlp.py --out "$OUT/mlp.pt"

echo; echo "== 2. compile: 4 stages, 8 micro-batches, verify against the original =="
"$BIN/gpipe-compile" "$OUT/mlp.pt" -o "$OUT/mlp.gpipe" --stages 4 --chunks 8 \
  --verify --sample-input 64x512

echo; echo "== 3. train 5 steps and save the trained artifact =="
"$BIN/gpipe-run" "$OUT/mlp.gpipe" --train --steps 5 --lr 0.01 --sample-input 64x512 \
  --save "$OUT/mlp-trained.gpipe"

echo; echo "== 4. the same training in 2 processes (c10d/Gloo on 127.0.0.1): stages 0-1 on rank 0, 2-3 on rank 1 =="
"$BIN/gpipe-launch" --nproc 2 "$OUT/mlp.gpipe" --ranks 0,0,1,1 --train --steps 5 --lr 0.01 \
  --sample-input 64x512 --save "$OUT/mlp-trained-2proc.gpipe"

echo; echo "== 5. any torchvision model with the defaults: DenseNet-121 into 4 stages (units chosen for the stage count) =="
"$PY" samples/export_torchvision.py --model densenet121 --out "$OUT/densenet121.pt"
"$BIN/gpipe-compile" "$OUT/densenet121.pt" -o "$OUT/densenet121.gpipe" --stages 4 --chunks 2 \
  --verify --sample-input 2x3x64x64
