#!/usr/bin/env bash
# Side by side on one machine: plain TorchScript training in C++, gpipe-cpp
# configurations (interleaved in one process by gpipe-bench), and PyTorch's
# Pipe (the upstreamed torchgpipe) on the same model split the same way.
#   bench/compare.sh [BATCH] [CONFIGS]   default: 256 "1x1:never,2x8:never,2x8:except_last,4x8:never"
set -euo pipefail
cd "$(dirname "$0")/.."
BATCH=${1:-256}
CONFIGS=${2:-1x1:never,2x8:never,2x8:except_last,4x8:never}
PY=${GPIPE_PYTHON:-/usr/bin/python3}
BIN=${BUILD_DIR:-build}
OUT=${OUT_DIR:-out/bench}
mkdir -p "$OUT"
"$PY" samples/export_mlp.py --out "$OUT/mlp6.pt" --blocks 6 --in-features 512 --hidden 1024 --out-features 512 >/dev/null

"$BIN/bench/gpipe-bench" "$OUT/mlp6.pt" --sample-input "${BATCH}x512" --configs "$CONFIGS" --steps 10 | tee "$OUT/compare.txt"
echo
echo "PyTorch Pipe (one worker thread for all CPU partitions), same splits:"
for config in ${CONFIGS//,/ }; do
  stages=${config%%x*}; rest=${config#*x}; chunks=${rest%%:*}; mode=${rest#*:}
  [ "$stages" -gt 1 ] || continue
  pipe=$("$PY" bench/pipe_baseline.py "$OUT/mlp6.pt" --batch "$BATCH" --features 512 \
         --stages "$stages" --chunks "$chunks" --checkpoint "$mode" | sed -E 's/pipe: ([0-9.]+).*/\1/')
  ours=$(grep -E "^gpipe $config " "$OUT/compare.txt" | awk '{print $3}')
  awk -v c="$config" -v p="$pipe" -v o="$ours" 'BEGIN { printf "  %-16s Pipe %8.1f samples/s   gpipe-cpp %8.1f   gpipe/Pipe %.2fx\n", c, p, o, o / p }'
done
