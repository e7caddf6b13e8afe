#!/usr/bin/env bash
# Our schedules against PyTorch's own torch.distributed.pipelining, side by
# side: the MLP of bench/schedules.sh (8 blocks, hidden 1024, 33 layers), the
# same stage split (what gpipe-compile chose, read from gpipe-inspect and given
# to bench/pipelining_peer.py), the same micro-batches, 4 processes on this
# machine talking Gloo over 127.0.0.1, one intra-op thread per process, the
# loss `sum` (each micro-batch's output.sum(), unscaled) and SGD, checkpoint
# never. Schedules: gpipe, 1f1b (4 stages), interleaved-1f1b (8 stages, 2 per
# rank: --ranks 0,1,2,3,0,1,2,3) and zb-h1 (4 stages; PyTorch's
# ScheduleInterleavedZeroBubble with one stage per rank).
#   bench/schedules_peer.sh [BATCH] [MICRO_BATCHES...]   (default 256 8 16)
# Env: STEPS (5), BUILD_DIR (build-torch2: built against the venv's LibTorch),
# GPIPE_PYTHON (.venv-torch2/bin/python), EXPORT_PYTHON (GPIPE_PYTHON; the torch
# that writes the .pt must be one BUILD_DIR's LibTorch reads), OUT_DIR (out/bench),
# ONE_PROCESS_FALLBACK (1: when our 4-rank run fails, also time ours in one
# process, 4 worker threads, and mark that row's numbers with *).
# Throughput: samples/s = batch / step time on rank 0, median of steps 2..STEPS
# on both sides. Memory, per rank, max over the 4 ranks: our activation MiB
# (gpipe-run --report-memory, the last step: CPU tensors the stage tasks
# allocate); peak RSS (ours: /usr/bin/time's max RSS of each gpipe-run, via a
# gpipe-run wrapper next to a copy of gpipe-launch; PyTorch: ru_maxrss), and
# that minus the bare runtime's (ours: gpipe-run --help's max RSS; PyTorch:
# ru_maxrss right after import torch). Logs: OUT_DIR/peer/logs.
# Not part of ctest; about a minute per micro-batch count on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
BATCH=${1:-256}; shift 1 2>/dev/null || true
MICRO_BATCHES=${*:-8 16}
STEPS=${STEPS:-5}
NPROC=4
PY=${GPIPE_PYTHON:-.venv-torch2/bin/python}
EXPORT_PY=${EXPORT_PYTHON:-$PY}
BIN=${BUILD_DIR:-build-torch2}/cli
OUT=${OUT_DIR:-out/bench}/peer
FALLBACK=${ONE_PROCESS_FALLBACK:-1}
mkdir -p "$OUT/logs" "$OUT/wrap"

# gpipe-launch starts the gpipe-run next to its own executable: a copy of it
# beside a wrapper that runs the real gpipe-run under /usr/bin/time.
LAUNCH="$BIN/gpipe-launch"; RSS_NOTE="n/a (no /usr/bin/time)"
if [ -x /usr/bin/time ]; then
  cp -f "$BIN/gpipe-launch" "$OUT/wrap/gpipe-launch"
  printf '#!/bin/sh\nexec /usr/bin/time -f "peak RSS %%M KiB" "%s" "$@"\n' "$(cd "$BIN" && pwd)/gpipe-run" \
    > "$OUT/wrap/gpipe-run"
  chmod +x "$OUT/wrap/gpipe-run"
  LAUNCH="$OUT/wrap/gpipe-launch"; RSS_NOTE=""
  OURS_BASE=$(/usr/bin/time -f "%M" "$BIN/gpipe-run" --help 2>&1 >/dev/null | tail -1)
  OURS_BASE=$(awk -v k="$OURS_BASE" 'BEGIN { printf "%.1f", k / 1024 }')
fi

"$EXPORT_PY" samples/export_mlp.py --out "$OUT/mlp_peer.pt" --blocks 8 --in-features 256 --hidden 1024 \
  --out-features 256 >/dev/null 2>&1
for s in 4 8; do
  "$BIN/gpipe-compile" "$OUT/mlp_peer.pt" -o "$OUT/mlp_peer$s.gpipe" --stages "$s" --chunks 8 >/dev/null
done
# Layers per stage as gpipe-compile split them ("stage N ... units 0,1,2,...").
split_of() {
  "$BIN/gpipe-inspect" "$1" | awk '/^stage [0-9]+ .* units / { n = split($NF, u, ","); s = s (s ? "," : "") n }
    END { print s }'
}
SPLIT4=$(split_of "$OUT/mlp_peer4.gpipe"); SPLIT8=$(split_of "$OUT/mlp_peer8.gpipe")

max_of() { sort -g | tail -1 | grep . || echo -; }  # "-" when there is nothing
mib_max() { { grep -oE 'peak RSS [0-9]+ KiB' || true; } | awk '{ printf "%.1f\n", $3 / 1024 }' | max_of; }
# The most telling line of a failed run's log (stdin), else its exit status ($1).
first_error() {
  local log; log=$(cat)
  for pattern in '\] FAILED: ' '^(\[rank [0-9]+\] )?gpipe-run: error' 'terminate called' 'what\(\)' \
      '^[A-Za-z.]*(Error|Exception): ' 'exited with|killed'; do
    if grep -m1 -E "$pattern" <<<"$log"; then return; fi
  done
  echo "exit status $1, no error line"
}

torch_version=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)
echo "MLP (8 blocks, hidden 1024), batch $BATCH, $NPROC processes (Gloo, 1 thread each), loss sum, SGD," \
  "checkpoint never, median of steps 2..$STEPS"
echo "ours: $BIN (gpipe-launch); torch: $torch_version torch.distributed.pipelining (torchrun);" \
  "layers per stage $SPLIT4 (4 stages), $SPLIT8 (8 stages)"
printf '%-3s %-17s %10s %10s %7s %9s %10s %10s %10s %10s %10s\n' M schedule "ours s/s" "torch s/s" \
  ours/t "ours act" "ours RSS" "torch RSS" "ours +RSS" "torch +RSS" "t train+"
failures=(); fallback_used=0
for m in $MICRO_BATCHES; do
  for schedule in gpipe 1f1b interleaved-1f1b zb-h1; do
    virtual=1; art="$OUT/mlp_peer4.gpipe"; split=$SPLIT4; ranks=()
    if [ "$schedule" = interleaved-1f1b ]; then
      virtual=2; art="$OUT/mlp_peer8.gpipe"; split=$SPLIT8; ranks=(--ranks "0,1,2,3,0,1,2,3")
    fi
    run_opts=(--train --steps "$STEPS" --lr 0.001 --loss sum --sample-input "${BATCH}x256" --chunks "$m"
      --checkpoint never --schedule "$schedule" --virtual-stages "$virtual" --threads 1 --threads-per-stage 1
      --report-memory)
    # Ours, 4 ranks.
    ours_log="$OUT/logs/ours-$schedule-M$m.log"; mark=""
    if "$LAUNCH" --nproc "$NPROC" --grace-s 5 "$art" "${run_opts[@]}" "${ranks[@]}" >"$ours_log" 2>&1; then
      o_rate=$(grep '^\[rank 0\] summary' "$ours_log" | sed -E 's/.*median ([0-9.]+) samples.*/\1/')
      # Each rank's last "peak activation memory" line: its stages' total.
      o_act=$({ grep 'peak activation memory' "$ours_log" || true; } | sed -E 's/^\[rank ([0-9]+)\].*all stages ([0-9.]+) MiB.*/\1 \2/' |
        awk '{ last[$1] = $2 } END { for (r in last) print last[r] }' | max_of)
      o_rss=$(mib_max <"$ours_log")
    else
      rc=$?
      failures+=("M=$m ours $schedule ($NPROC ranks): $(first_error $rc <"$ours_log")")
      o_rate=FAIL; o_act=-; o_rss=-
      if [ "$FALLBACK" = 1 ]; then
        one_log="$OUT/logs/ours1proc-$schedule-M$m.log"
        if /usr/bin/time -f "peak RSS %M KiB" "$BIN/gpipe-run" "$art" "${run_opts[@]}" >"$one_log" 2>&1; then
          mark="*"; fallback_used=1
          o_rate="$(grep '^summary' "$one_log" | sed -E 's/.*median ([0-9.]+) samples.*/\1/')*"
          o_act="$({ grep 'peak activation memory' "$one_log" || true; } | tail -1 |
            { grep -oE 'stage [0-9]+ [0-9.]+ MiB' || true; } | awk '{ print $3 }' | max_of)*"
          o_rss="$(mib_max <"$one_log")*"
        else
          rc=$?
          failures+=("M=$m ours $schedule (1 process): $(first_error $rc <"$one_log")")
        fi
      fi
    fi
    # PyTorch, 4 ranks.
    torch_log="$OUT/logs/torch-$schedule-M$m.log"
    rc=0
    "$PY" -m torch.distributed.run --standalone --nproc-per-node "$NPROC" bench/pipelining_peer.py \
      --schedule "$schedule" --batch "$BATCH" --micro-batches "$m" --steps "$STEPS" --virtual-stages "$virtual" \
      --split "$split" >"$torch_log" 2>&1 || rc=$?
    if grep -q '^summary' "$torch_log"; then  # measured, even if a rank died afterwards (reported below)
      [ "$rc" = 0 ] || failures+=("M=$m torch $schedule, after its summary: $(first_error $rc <"$torch_log")")
      summary=$(grep '^summary' "$torch_log")
      t_rate=$(echo "$summary" | sed -E 's/.*median ([0-9.]+) samples.*/\1/')
      t_rss=$(echo "$summary" | sed -E 's/.*peak RSS max ([0-9.]+) MiB.*/\1/')
      t_above=$(echo "$summary" | sed -E 's/.*RSS above runtime max ([0-9.]+) MiB.*/\1/')
      t_growth=$(echo "$summary" | sed -E 's/.*RSS growth in training max (-?[0-9.]+) MiB.*/\1/')
    else
      failures+=("M=$m torch $schedule: $(first_error $rc <"$torch_log")")
      t_rate=FAIL; t_rss=-; t_above=-; t_growth=-
    fi
    ratio=$(awk -v a="${o_rate%\*}" -v b="$t_rate" \
      'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-" }')$mark
    o_above=-
    if [ -n "${OURS_BASE:-}" ] && [ "${o_rss%\*}" != - ]; then
      o_above=$(awk -v a="${o_rss%\*}" -v b="$OURS_BASE" 'BEGIN { printf "%.1f", a - b }')$mark
    fi
    printf '%-3s %-17s %10s %10s %7s %9s %10s %10s %10s %10s %10s\n' "$m" "$schedule" "$o_rate" "$t_rate" \
      "$ratio" "$o_act" "${o_rss}" "$t_rss" "$o_above" "$t_above" "$t_growth"
  done
done
echo "s/s: samples/s, rank 0, median of steps 2..$STEPS; ours/t: their ratio. MiB, max over ranks:" \
  "'ours act' activation memory (--report-memory, last step); 'RSS' peak resident set of a rank's" \
  "process; '+RSS' that minus the bare runtime's (ours: gpipe-run --help ${OURS_BASE:-?} MiB; torch:" \
  "after import torch); 't train+' torch's peak RSS rise across the training steps. $RSS_NOTE"
if [ "$fallback_used" = 1 ]; then
  echo "* ours in one process (4 worker threads, 1 intra-op thread each) because the $NPROC-rank run failed;" \
    "its act/RSS are the whole process's (all stages)."
fi
if [ "${#failures[@]}" -gt 0 ]; then
  echo "failures (logs in $OUT/logs):"
  printf '  %s\n' "${failures[@]}"
fi
