#!/usr/bin/env bash
# Peak activation memory and step time of each checkpoint mode, side by side.
#   bench/memory_modes.sh [BATCH] [IMAGE] [STAGES] [CHUNKS]   (default 64 224 4 8: ResNet-50 as in issue 4)
# Needs a build (scripts/setup.sh). Not part of ctest: it takes minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
BATCH=${1:-64}; IMAGE=${2:-224}; STAGES=${3:-4}; CHUNKS=${4:-8}; STEPS=${STEPS:-3}
PY=${GPIPE_PYTHON:-/usr/bin/python3}
BIN=${BUILD_DIR:-build}/cli
OUT=${OUT_DIR:-out/bench}
mkdir -p "$OUT"
[ -f "$OUT/resnet50.pt" ] || "$PY" samples/export_resnet.py --out "$OUT/resnet50.pt" >/dev/null
"$BIN/gpipe-compile" "$OUT/resnet50.pt" -o "$OUT/resnet50.gpipe" --stages "$STAGES" --chunks "$CHUNKS" >/dev/null
echo "ResNet-50, batch $BATCH, ${IMAGE}x${IMAGE}, $STAGES stages, $CHUNKS chunks, median of steps 2..$STEPS"
printf '%-12s %14s %14s %12s\n' mode "peak MiB (all)" "max stage MiB" "samples/s"
declare -A total
for mode in never except_last always; do
  log=$("$BIN/gpipe-run" "$OUT/resnet50.gpipe" --train --steps "$STEPS" --lr 0.001 --loss sum \
        --sample-input "${BATCH}x3x${IMAGE}x${IMAGE}" --checkpoint "$mode" --report-memory)
  # Memory of the last step (steady state: gradients already allocated).
  mem=$(echo "$log" | grep "peak activation memory" | tail -1)
  all=$(echo "$mem" | sed -E 's/.*all stages ([0-9.]+) MiB.*/\1/')
  max_stage=$(echo "$mem" | grep -oE 'stage [0-9]+ [0-9.]+ MiB' | awk '{print $3}' | sort -g | tail -1)
  rate=$(echo "$log" | grep summary | sed -E 's/.*median ([0-9.]+) samples.*/\1/')
  total[$mode]=$all
  printf '%-12s %14s %14s %12s\n' "$mode" "$all" "$max_stage" "$rate"
done
awk -v a="${total[always]}" -v e="${total[except_last]}" -v n="${total[never]}" \
  'BEGIN { printf "always/never = %.2f, except_last/never = %.2f\n", a / n, e / n }'
