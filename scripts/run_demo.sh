#!/usr/bin/env bash
# The main job, end to end: set up, export the sample MLP from Python, compile
# it into a 4-stage pipeline with 8 micro-batches (verifying it against the
# original), train it for a few steps, then train it again in 2 processes
# with gpipe-launch (c10d/Gloo on 127.0.0.1), split torchvision's DenseNet-121
# into 4 stages with nothing but the defaults, and finally train the MLP on a
# data file with Adam and evaluation, stop, and resume the run.
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

echo; echo "== 6. train on a data file (.npy, memory-mapped): 2 epochs with Adam, warm-up and evaluation, then resume the run to 4 =="
"$PY" samples/make_dataset.py --out "$OUT/blobs" --examples 2000 --features 512 --classes 10
TRAIN=(--train --data "$OUT/blobs" --eval-fraction 0.1 --batch-size 64 --optimizer adam --lr 1e-3
       --warmup-steps 5 --eval-every 29 --log-every 10 --save "$OUT/mlp-blobs.gpipe")
"$BIN/gpipe-run" "$OUT/mlp.gpipe" "${TRAIN[@]}" --steps 58
"$BIN/gpipe-run" "$OUT/mlp-blobs.gpipe" --resume "${TRAIN[@]}" --steps 116
