#!/usr/bin/env bash
# Our schedules against PyTorch's own torch.distributed.pipelining, side by
# side in one run. Same on both sides: the LibTorch (BUILD_DIR is built
# against the venv's torch, which runs the peer), the model (the MLP of
# bench/schedules.sh: 8 blocks, hidden 1024, 33 layers, with and without its
# Dropout(0.1)), the stage split (gpipe-compile's, read from gpipe-inspect and
# given to bench/pipelining_peer.py), the micro-batches, the loss (the mean
# squared error against the same random target, each micro-batch's share),
# SGD at --lr 0.001 (the losses stay finite: both are printed), checkpoint
# never, 4 processes over Gloo on 127.0.0.1, and one thread per process for
# everything (intra-op, OpenMP, MKL and OpenBLAS: --threads 1
# --threads-per-stage 1 and OMP/MKL/OPENBLAS_NUM_THREADS=1 for both).
# Schedules: gpipe, 1f1b (4 stages), interleaved-1f1b (8 stages, 2 per rank:
# --ranks 0,1,2,3,0,1,2,3) and zb-h1 (4 stages; PyTorch's
# ScheduleInterleavedZeroBubble with one stage per rank).
#   bench/schedules_peer.sh [BATCH] [MICRO_BATCHES...]   (default 256 8 32 64)
# Env: STEPS (8), ROUNDS (1: A-B-B-A rounds, ours-torch-torch-ours), BUILD_DIR
# (build-torch2), GPIPE_PYTHON (.venv-torch2/bin/python), DROPOUTS ("0.1 0"),
# SCHEDULES (all four), OUT_DIR (out/bench).
# Throughput: samples/s = batch / step time on rank 0, each run's median of
# steps 2..STEPS (warm-up excluded), then the median over the runs. The
# compute bound: the machine's cores (at most 4) times the samples/s of the
# same model unsplit in one process, one thread, one micro-batch; each
# side's efficiency is its rate over that bound. Memory is taken in its own
# pass (ours: --report-memory's activation MiB; both: peak RSS per rank over
# the bare runtime's), not in the timed runs. Logs: OUT_DIR/peer/logs.
# Not part of ctest; about a minute per (dropout, M) on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
BATCH=${1:-256}; shift 1 2>/dev/null || true
MICRO_BATCHES=${*:-8 32 64}
STEPS=${STEPS:-8}; ROUNDS=${ROUNDS:-1}
NPROC=4
PY=${GPIPE_PYTHON:-.venv-torch2/bin/python}
BIN=${BUILD_DIR:-build-torch2}/cli
OUT=${OUT_DIR:-out/bench}/peer
DROPOUTS=${DROPOUTS:-0.1 0}
SCHEDULES=${SCHEDULES:-gpipe 1f1b interleaved-1f1b zb-h1}
LR=0.001
# Before the pins below: GNU nproc reports OMP_NUM_THREADS when it is set.
CORES=$(nproc); [ "$CORES" -gt "$NPROC" ] && CORES=$NPROC
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
mkdir -p "$OUT/logs" "$OUT/wrap"

# gpipe-launch starts the gpipe-run next to its own executable: a copy of it
# beside a wrapper that runs the real gpipe-run under /usr/bin/time (memory pass).
cp -f "$BIN/gpipe-launch" "$OUT/wrap/gpipe-launch"
printf '#!/bin/sh\nexec /usr/bin/time -f "peak RSS %%M KiB" "%s" "$@"\n' "$(cd "$BIN" && pwd)/gpipe-run" >"$OUT/wrap/gpipe-run"
chmod +x "$OUT/wrap/gpipe-run"
OURS_BASE=$(/usr/bin/time -f "%M" "$BIN/gpipe-run" --help 2>&1 >/dev/null | tail -1)
OURS_BASE=$(awk -v k="$OURS_BASE" 'BEGIN { printf "%.1f", k / 1024 }')

split_of() {  # layers per stage as gpipe-compile split them
  "$BIN/gpipe-inspect" "$1" | awk '/^stage [0-9]+ .* units / { n = split($NF, u, ","); s = s (s ? "," : "") n }
    END { print s }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-" }'; }
mib_max() { { grep -oE 'peak RSS [0-9]+ KiB' || true; } | awk '{ printf "%.1f\n", $3 / 1024 }' | sort -g | tail -1; }

torch_version=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)
echo "MLP (8 blocks, hidden 1024), batch $BATCH, $NPROC processes (Gloo, 1 thread each), loss mse, SGD lr $LR," \
  "checkpoint never; median of steps 2..$STEPS, $ROUNDS A-B-B-A round(s); machine: $CORES of $(OMP_NUM_THREADS= nproc) cores"
echo "ours: $BIN (gpipe-launch); torch: $torch_version torch.distributed.pipelining (torchrun)"
for dropout in $DROPOUTS; do
  tag=d${dropout/./}
  "$PY" samples/export_mlp.py --out "$OUT/mlp_$tag.pt" --blocks 8 --in-features 256 --hidden 1024 \
    --out-features 256 --dropout "$dropout" >/dev/null 2>&1
  for s in 1 4 8; do
    "$BIN/gpipe-compile" "$OUT/mlp_$tag.pt" -o "$OUT/mlp_${tag}_$s.gpipe" --stages "$s" --chunks 8 >/dev/null
  done
  split4=$(split_of "$OUT/mlp_${tag}_4.gpipe"); split8=$(split_of "$OUT/mlp_${tag}_8.gpipe")
  one=$("$BIN/gpipe-run" "$OUT/mlp_${tag}_1.gpipe" --train --steps "$STEPS" --lr "$LR" --loss mse \
    --sample-input "${BATCH}x256" --chunks 1 --checkpoint never --threads 1 --threads-per-stage 1 |
    sed -nE 's/^summary:.*median ([0-9.]+) samples.*/\1/p')
  bound=$(awk -v r="$one" -v c="$CORES" 'BEGIN { printf "%.1f", r * c }')
  echo
  echo "dropout $dropout: layers per stage $split4 (4 stages), $split8 (8 stages); compute bound $bound samples/s" \
    "($CORES cores x $one samples/s unsplit, one thread, one micro-batch)"
  printf '%-3s %-17s %9s %9s %7s %8s %8s %11s %11s %9s %9s %9s\n' M schedule "ours s/s" "torch s/s" ours/t \
    "ours eff" "torch eff" "ours loss" "torch loss" "ours act" "ours +RSS" "torch +RSS"
  for m in $MICRO_BATCHES; do
    for schedule in $SCHEDULES; do
      virtual=1; art="$OUT/mlp_${tag}_4.gpipe"; split=$split4; ranks=()
      if [ "$schedule" = interleaved-1f1b ]; then
        virtual=2; art="$OUT/mlp_${tag}_8.gpipe"; split=$split8; ranks=(--ranks "0,1,2,3,0,1,2,3")
      fi
      run_opts=(--train --steps "$STEPS" --lr "$LR" --loss mse --sample-input "${BATCH}x256" --chunks "$m"
        --checkpoint never --schedule "$schedule" --virtual-stages "$virtual" --threads 1 --threads-per-stage 1)
      log="$OUT/logs/$tag-$schedule-M$m"
      ours_run() {
        if "$BIN/gpipe-launch" --nproc "$NPROC" --grace-s 5 "$art" "${run_opts[@]}" "${ranks[@]}" >"$log-ours.log" 2>&1; then
          sed -nE 's/^\[rank 0\] summary:.*median ([0-9.]+) samples.*/\1/p' "$log-ours.log"
        else
          echo "failed: $tag M=$m ours $schedule: $(grep -m1 'error' "$log-ours.log" || echo 'no error line')" >&2
        fi
      }
      torch_run() {
        if "$PY" -m torch.distributed.run --standalone --nproc-per-node "$NPROC" bench/pipelining_peer.py \
          --schedule "$schedule" --batch "$BATCH" --micro-batches "$m" --steps "$STEPS" --virtual-stages "$virtual" \
          --split "$split" --dropout "$dropout" --lr "$LR" >"$log-torch.log" 2>&1 || grep -q '^summary' "$log-torch.log"; then
          sed -nE 's/^summary:.*median ([0-9.]+) samples.*/\1/p' "$log-torch.log"
        else
          echo "failed: $tag M=$m torch $schedule: $(grep -m1 -E 'FAILED|Error' "$log-torch.log" || echo 'no error line')" >&2
        fi
      }
      ours=(); torch=()
      for ((r = 0; r < ROUNDS; r++)); do
        ours+=("$(ours_run)"); torch+=("$(torch_run)"); torch+=("$(torch_run)"); ours+=("$(ours_run)")
      done
      o=$(printf '%s\n' "${ours[@]}" | grep . | median); t=$(printf '%s\n' "${torch[@]}" | grep . | median)
      o_loss=$(sed -nE 's/^\[rank 0\] step [0-9]+\/[0-9]+ +loss ([-0-9.e+]+).*/\1/p' "$log-ours.log" | tail -1)
      t_loss=$(sed -nE 's/^\[loss\] step [0-9]+\/[0-9]+ +loss ([-0-9.e+]+).*/\1/p' "$log-torch.log" | tail -1)
      # Memory, in a pass of its own.
      "$OUT/wrap/gpipe-launch" --nproc "$NPROC" --grace-s 5 "$art" "${run_opts[@]}" "${ranks[@]}" \
        --report-memory >"$log-ours-mem.log" 2>&1 || true
      o_act=$({ grep 'peak activation memory' "$log-ours-mem.log" || true; } |
        sed -E 's/^\[rank ([0-9]+)\].*all stages ([0-9.]+) MiB.*/\1 \2/' | awk '{ last[$1] = $2 } END { for (r in last) print last[r] }' |
        sort -g | tail -1)
      o_rss=$(mib_max <"$log-ours-mem.log")
      o_above=$(awk -v a="${o_rss:-0}" -v b="$OURS_BASE" 'BEGIN { if (a > 0) printf "%.1f", a - b; else print "-" }')
      t_above=$(sed -nE 's/^summary:.*RSS above runtime max ([0-9.]+) MiB.*/\1/p' "$log-torch.log")
      printf '%-3s %-17s %9s %9s %7s %8s %8s %11s %11s %9s %9s %9s\n' "$m" "$schedule" "$o" "$t" "$(ratio "$o" "$t")" \
        "$(ratio "$o" "$bound")" "$(ratio "$t" "$bound")" "${o_loss:--}" "${t_loss:--}" "${o_act:--}" "$o_above" "${t_above:--}"
    done
  done
done
echo
echo "s/s: samples/s (rank 0); ours/t: their ratio; eff: rate / compute bound; loss: the last step's (both finite);" \
  "memory pass, MiB, max over ranks: 'ours act' activations (--report-memory), '+RSS' peak RSS above the bare" \
  "runtime (ours: gpipe-run --help $OURS_BASE MiB; torch: after import torch)"
