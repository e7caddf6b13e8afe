#!/usr/bin/env bash
# Peak activation memory and samples/s of every recomputation policy, side by
# side in one run: never, selective (keep products with a weight, recompute
# the rest), budget (gpipe-compile --activation-budget: the products that fit
# a per-stage, per-micro-batch budget), except_last and always, on the GPT
# sample, ResNet-50 and the U-Net; and the budget's measured keep against it.
#   bench/recompute.sh            (STEPS=3: median of steps 2..3; ONLY=gpt|resnet50|unet)
# Needs a build (scripts/setup.sh). Not part of ctest: it takes minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-3}
PY=${GPIPE_PYTHON:-/usr/bin/python3}
BIN=${BUILD_DIR:-build}/cli
OUT=${OUT_DIR:-out/bench}
mkdir -p "$OUT"

# run_model NAME EXPORT_COMMAND SAMPLE_INPUT STAGES CHUNKS BUDGET_MIB
run_model() {
  local name=$1 export=$2 input=$3 stages=$4 chunks=$5 budget=$6
  [ -z "${ONLY:-}" ] || [ "$ONLY" = "$name" ] || return 0
  [ -f "$OUT/$name.pt" ] || eval "$export --out $OUT/$name.pt" >/dev/null
  "$BIN/gpipe-compile" "$OUT/$name.pt" -o "$OUT/$name-recompute.gpipe" --stages "$stages" \
    --chunks "$chunks" --sample-input "$input" >/dev/null
  "$BIN/gpipe-compile" "$OUT/$name.pt" -o "$OUT/$name-budget.gpipe" --stages "$stages" \
    --chunks "$chunks" --sample-input "$input" --activation-budget "$budget" >/dev/null
  echo "$name, input $input, $stages stages x $chunks micro-batches, median of steps 2..$STEPS; budget $budget MiB"
  printf '  %-12s %14s %9s %16s %11s %9s\n' mode "peak MiB (all)" "vs never" "kept/mb MiB (max)" "samples/s" "vs never"
  local never_mem="" never_rate="" budget_kept=""
  for mode in never selective budget except_last always; do
    local log mem all rate kept artifact=$OUT/$name-recompute.gpipe
    [ "$mode" != budget ] || artifact=$OUT/$name-budget.gpipe
    log=$("$BIN/gpipe-run" "$artifact" --train --steps "$STEPS" --lr 1e-7 --loss sum \
          --sample-input "$input" --checkpoint "$mode" --report-memory)
    mem=$(echo "$log" | grep "peak activation memory" | tail -1)  # steady state
    all=$(echo "$mem" | sed -E 's/.*all stages ([0-9.]+) MiB.*/\1/')
    # the largest stage's keep per micro-batch, forward to backward
    kept=$(echo "$log" | grep "kept per micro-batch" | tail -1 | grep -oE '[0-9.]+ MiB' |
           sed 's/ MiB//' | sort -g | tail -1)
    rate=$(echo "$log" | grep summary | sed -E 's/.*median ([0-9.]+) samples.*/\1/')
    [ -n "$never_mem" ] || { never_mem=$all; never_rate=$rate; }
    [ "$mode" != budget ] || budget_kept=$kept
    printf '  %-12s %14s %9s %16s %11s %9s\n' "$mode" "$all" \
      "$(awk -v a="$all" -v n="$never_mem" 'BEGIN { printf "%.2fx", a / n }')" "$kept" "$rate" \
      "$(awk -v a="$rate" -v n="$never_rate" 'BEGIN { printf "%.2fx", a / n }')"
  done
  echo "  budget: the largest stage keeps $budget_kept MiB per micro-batch against $budget MiB" \
       "($(awk -v a="$budget_kept" -v b="$budget" 'BEGIN { printf "%.2fx", a / b }') of the budget)"
}

run_model gpt "$PY samples/export_transformer.py --layers 8 --dropout 0.1" 32x128:int64:1000 4 8 3
run_model resnet50 "$PY samples/export_resnet.py" 32x3x160x160 4 8 ${RESNET_BUDGET:-20}
run_model unet "$PY samples/export_unet.py" 16x3x64x64 3 8 ${UNET_BUDGET:-1.2}
