#!/usr/bin/env bash
# Balance by time, then measure how even the stages really are.
#   bench/balance.sh [STAGES]     (default 4) on ResNet-50 (16x3x128x128) and the GPT sample (16x128 tokens)
# The compiler profiles every unit and picks the optimal cuts; the chosen
# pipeline is then run with one micro-batch (tasks never overlap) and traced,
# and the per-stage times are read back from the trace.
set -euo pipefail
cd "$(dirname "$0")/.."
STAGES=${1:-4}
PY=${GPIPE_PYTHON:-/usr/bin/python3}
BIN=${BUILD_DIR:-build}/cli
OUT=${OUT_DIR:-out/bench}
mkdir -p "$OUT"
[ -f "$OUT/resnet50.pt" ] || "$PY" samples/export_resnet.py --out "$OUT/resnet50.pt" >/dev/null
[ -f "$OUT/gpt.pt" ] || "$PY" samples/export_transformer.py --out "$OUT/gpt.pt" --layers 8 >/dev/null

run() {  # name model input depth
  echo "== $1: --stages $STAGES --balance-by time --unit-depth $4 --sample-input $3"
  "$BIN/gpipe-compile" "$2" -o "$OUT/$1.gpipe" --stages "$STAGES" --unit-depth "$4" --balance-by time \
    --sample-input "$3" --profile-steps 5 2>/dev/null | grep -E "^  [0-9]|balance by|calibrated"
  "$BIN/gpipe-run" "$OUT/$1.gpipe" --train --steps 6 --lr 0.0001 --loss sum --chunks 1 --checkpoint never \
    --sample-input "$3" --trace "$OUT/$1.trace.json" >/dev/null
  "$PY" bench/stage_times.py "$OUT/$1.trace.json"
}
run resnet50 "$OUT/resnet50.pt" 16x3x128x128 "${DEPTH:-3}"
[ -n "${ONLY_RESNET:-}" ] || run gpt "$OUT/gpt.pt" 16x128:int64:1000 "${DEPTH:-3}"
