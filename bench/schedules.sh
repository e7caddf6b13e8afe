#!/usr/bin/env bash
# Each schedule's peak activation memory and throughput, side by side in one
# run: an MLP at S stages (one CPU worker thread each), M micro-batches, in
# two checkpoint modes. Also prints each schedule's bubble at unit cost
# (gpipe-inspect's simulation), the formula the measured rates are read against.
#   bench/schedules.sh [BATCH] [STAGES] [MICRO_BATCHES...]   (default 256 4 8 16 32)
# Needs a build (scripts/setup.sh). Not part of ctest: it takes a few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
BATCH=${1:-256}; STAGES=${2:-4}; shift 2 2>/dev/null || true
MICRO_BATCHES=${*:-8 16 32}
STEPS=${STEPS:-4}
PY=${GPIPE_PYTHON:-/usr/bin/python3}
BIN=${BUILD_DIR:-build}/cli
OUT=${OUT_DIR:-out/bench}
mkdir -p "$OUT"
"$PY" samples/export_mlp.py --out "$OUT/mlp_sched.pt" --blocks 8 --in-features 256 --hidden 1024 \
  --out-features 256 >/dev/null
"$BIN/gpipe-compile" "$OUT/mlp_sched.pt" -o "$OUT/mlp_sched.gpipe" --stages "$STAGES" --chunks 8 >/dev/null
echo "MLP (8 blocks, hidden 1024), batch $BATCH, $STAGES stages, median of steps 2..$STEPS"
printf '%-4s %-18s %-12s %10s %14s %14s %12s %9s\n' M schedule checkpoint bubble "peak MiB (all)" \
  "max stage MiB" samples/s "vs gpipe"
for m in $MICRO_BATCHES; do
  for mode in never except_last; do
    declare -A peak=()
    for schedule in gpipe 1f1b interleaved-1f1b zb-h1; do
      virtual=1
      [ "$schedule" = interleaved-1f1b ] && virtual=2
      bubble=$("$BIN/gpipe-inspect" "$OUT/mlp_sched.gpipe" --schedule "$schedule" --micro-batches "$m" \
        --virtual-stages "$virtual" | sed -nE 's/^bubble fraction ([0-9.]+);.*/\1/p')
      log=$("$BIN/gpipe-run" "$OUT/mlp_sched.gpipe" --train --steps "$STEPS" --lr 0.001 --loss sum \
        --sample-input "${BATCH}x256" --chunks "$m" --checkpoint "$mode" --schedule "$schedule" \
        --virtual-stages "$virtual" --report-memory)
      mem=$(echo "$log" | grep "peak activation memory" | tail -1)
      all=$(echo "$mem" | sed -E 's/.*all stages ([0-9.]+) MiB.*/\1/')
      max_stage=$(echo "$mem" | grep -oE 'stage [0-9]+ [0-9.]+ MiB' | awk '{print $3}' | sort -g | tail -1)
      rate=$(echo "$log" | grep summary | sed -E 's/.*median ([0-9.]+) samples.*/\1/')
      peak[$schedule]=$all
      ratio=$(awk -v a="$all" -v g="${peak[gpipe]}" 'BEGIN { printf "%.2f", a / g }')
      printf '%-4s %-18s %-12s %10s %14s %14s %12s %9s\n' "$m" "$schedule" "$mode" "$bubble" "$all" \
        "$max_stage" "$rate" "$ratio"
    done
  done
done
echo "'vs gpipe': peak activation memory of all stages relative to gpipe's at the same M and mode."
