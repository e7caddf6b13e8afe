#!/usr/bin/env bash
# The main job, end to end: set up, export the sample MLP from Python, compile
# it into a 4-stage pipeline with 8 micro-batches (verifying it against the
# original), train it for a few steps, then train it again in 2 processes
# with gpipe-launch (c10d/Gloo on 127.0.0.1), split torchvision's DenseNet-121
# into 4 stages with nothing but the defaults, and finally train on real data
# (no download: data that Debian packages install): a CNN on scikit-learn's
# digits (stopped and resumed), a GPT on the fortune texts, and the C++ loop.
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

echo; echo "== 6. train on real data: a CNN on scikit-learn's 1797 digit images (.npy, streamed), 4 stages =="
echo "   3 epochs with Adam and evaluation on the held-out fifth, stopped after epoch 2 and resumed (the resumed"
echo "   run ends with the weights of an uninterrupted one, bitwise); metrics to a .jsonl file, plotted to SVG"
"$PY" samples/make_dataset.py digits --out "$OUT/digits"
"$PY" samples/export_cnn.py --out "$OUT/cnn.pt"
"$BIN/gpipe-compile" "$OUT/cnn.pt" -o "$OUT/cnn.gpipe" --stages 4 --chunks 4 --verify --sample-input 64x1x8x8
DIGITS=(--train --data "$OUT/digits" --eval-fraction 0.2 --batch-size 64 --optimizer adam --lr 3e-3
        --eval-every 23 --log-every 23 --save "$OUT/cnn-digits.gpipe" --metrics-out "$OUT/digits.jsonl")
"$BIN/gpipe-run" "$OUT/cnn.gpipe" "${DIGITS[@]}" --steps 46
"$BIN/gpipe-run" "$OUT/cnn-digits.gpipe" --resume "${DIGITS[@]}" --steps 69
"$PY" scripts/plot_metrics.py "$OUT/digits.jsonl" "$OUT/digits-loss.svg"

echo; echo "== 7. a GPT (tied head) on the fortune cookie texts as byte tokens: AdamW, cosine schedule, perplexity =="
"$PY" samples/make_dataset.py fortunes --out "$OUT/fortunes"
"$PY" samples/export_transformer.py --out "$OUT/gpt-bytes.pt" --vocab 256 --dim 128 --layers 4 --context 64
"$BIN/gpipe-compile" "$OUT/gpt-bytes.pt" -o "$OUT/gpt-bytes.gpipe" --stages 4 --chunks 4 --verify \
  --sample-input 32x64:int64:256
"$BIN/gpipe-run" "$OUT/gpt-bytes.gpipe" --train --data "$OUT/fortunes/train.bin" --seq-len 64 \
  --eval-data "$OUT/fortunes/val.bin" --batch-size 32 --steps ${GPT_STEPS:-300} --optimizer adamw --lr 3e-3 \
  --lr-schedule cosine --warmup-steps 20 --clip-grad-norm 1 --eval-every 100 --log-every 50 \
  --metrics-out "$OUT/fortunes.jsonl"

echo; echo "== 8. the same from C++: samples/train_digits.cpp, torch::optim's AdamW and torch::data's loader over the pipeline =="
"${BUILD_DIR:-build}/samples/train_digits" "$OUT/cnn.gpipe" "$OUT/digits" 3
