#!/usr/bin/env bash
# The runtime's own cost per task: a tiny MLP (8 x Linear(16, 16) + ReLU,
# batch 64) whose kernels take a few microseconds, so a step's wall time is
# mostly the executor's. With and without a Dropout(0.1) after each ReLU,
# side by side in one run, alternating A-B-B-A, in one process: 4 stages (one
# worker thread each, one intra-op thread each), M micro-batches, checkpoint
# never, the 1f1b schedule. Prints the median samples/s of each and the wall
# time per task, step time / (2 x stages x M) (every (stage, micro-batch) is
# one F and one B), and dropout's ratio.
#   bench/runtime_cost.sh [MICRO_BATCHES...]   (default 8 64)
# Env: BUILD_DIR (build), GPIPE_PYTHON (/usr/bin/python3: the torch that reads
# BUILD_DIR's models), STEPS (30), ROUNDS (3: A-B-B-A rounds), SCHEDULE (1f1b).
# Not part of ctest; about a minute on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
MICRO_BATCHES=${*:-8 64}
BIN=${BUILD_DIR:-build}/cli
PY=${GPIPE_PYTHON:-/usr/bin/python3}
STEPS=${STEPS:-30}; ROUNDS=${ROUNDS:-3}; SCHEDULE=${SCHEDULE:-1f1b}
OUT=${OUT_DIR:-out/bench}/runtime_cost
mkdir -p "$OUT"
"$PY" - "$OUT" <<'EOF' 2>/dev/null
import sys, torch
from torch import nn
for p in (0.0, 0.1):
    torch.manual_seed(0)
    layers = []
    for _ in range(8):
        layers += [nn.Linear(16, 16), nn.ReLU()] + ([nn.Dropout(p)] if p else [])
    torch.jit.script(nn.Sequential(*layers)).save(f"{sys.argv[1]}/tiny{int(p * 10)}.pt")
EOF
for d in 0 1; do
  "$BIN/gpipe-compile" "$OUT/tiny$d.pt" -o "$OUT/tiny$d.gpipe" --stages 4 --chunks 8 --checkpoint never >/dev/null
done
rate() {  # artifact, micro-batches -> median samples/s
  "$BIN/gpipe-run" "$1" --train --steps "$STEPS" --lr 1e-9 --sample-input 64x16 --chunks "$2" \
    --schedule "$SCHEDULE" --threads 1 --threads-per-stage 1 | sed -nE 's/^summary:.*median ([0-9.]+) samples.*/\1/p'
}
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
us_per_task() { awk -v r="$1" -v m="$2" 'BEGIN { printf "%.1f", 64 / r / (2 * 4 * m) * 1e6 }'; }
echo "tiny MLP (8 x Linear(16,16)+ReLU), batch 64, 4 stages, $SCHEDULE, checkpoint never, 1 thread per stage;" \
  "median over $ROUNDS A-B-B-A rounds of each run's median of steps 2..$STEPS"
printf '%-4s %16s %16s %14s %14s %14s\n' M "plain s/s" "dropout s/s" "plain us/task" "dropout us/task" "dropout/plain"
for m in $MICRO_BATCHES; do
  plain=(); drop=()
  for ((r = 0; r < ROUNDS; r++)); do
    plain+=("$(rate "$OUT/tiny0.gpipe" "$m")"); drop+=("$(rate "$OUT/tiny1.gpipe" "$m")")
    drop+=("$(rate "$OUT/tiny1.gpipe" "$m")"); plain+=("$(rate "$OUT/tiny0.gpipe" "$m")")
  done
  p=$(printf '%s\n' "${plain[@]}" | median); q=$(printf '%s\n' "${drop[@]}" | median)
  printf '%-4s %16s %16s %14s %14s %14s\n' "$m" "$p" "$q" "$(us_per_task "$p" "$m")" "$(us_per_task "$q" "$m")" \
    "$(awk -v a="$q" -v b="$p" 'BEGIN { printf "%.2f", a / b }')"
done
