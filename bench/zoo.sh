#!/usr/bin/env bash
# The torchvision zoo sweep: script every classification, segmentation and
# detection model (bench/zoo_export.py), then compile each classification and
# segmentation model that scripted into S stages x 2 micro-batches and verify
# it against the original on its smallest working input.
#   bench/zoo.sh [OUT_DIR] [STAGES...]   (default out/zoo, stage counts 2 4)
#   env: ONLY=resnet18,vit_b_16  only these models
#        REEXPORT=1              export again even if OUT_DIR/models.tsv exists
#        BUILD_DIR=build         where cli/gpipe-compile is
#        VERIFY=0                compile only (no --verify): a fast sweep of the compiler's passes
#        KEEP=1                  keep the compiled NAME.sS.gpipe files (by default each
#                                is deleted once checked: the whole zoo is ~25 GB per stage count)
# Writes OUT_DIR/logs/NAME.sS.log per compile, and the table as OUT_DIR/zoo.tsv
# and OUT_DIR/zoo.md. A report: exits 0 however many models fail. Not part of
# ctest: the whole zoo takes hours on a small machine.
set -euo pipefail
OUT=$(realpath -m "${1:-$(dirname "$0")/../out/zoo}")   # relative to the caller's directory
shift || true
STAGES=("$@"); [ ${#STAGES[@]} -gt 0 ] || STAGES=(2 4)
cd "$(dirname "$0")/.."
PY=${GPIPE_PYTHON:-/usr/bin/python3}
COMPILE=${BUILD_DIR:-build}/cli/gpipe-compile
ONLY=${ONLY:-}
TIMEOUT=${TIMEOUT:-1800}   # seconds per compile
VERIFY_FLAG=--verify; [ "${VERIFY:-1}" != 0 ] || VERIFY_FLAG=
[ -x "$COMPILE" ] || { echo "zoo.sh: $COMPILE not found; build first: ./scripts/setup.sh" >&2; exit 1; }
mkdir -p "$OUT/logs"
TSV=$OUT/models.tsv

# ONLY as a set; selected NAME is true when ONLY is empty or names NAME.
declare -A only=()
for name in ${ONLY//,/ }; do only[$name]=1; done
selected() { [ -z "$ONLY" ] || [ -n "${only[$1]:-}" ]; }

# Export: everything (or ONLY) when there is no models.tsv or REEXPORT is set;
# otherwise only the ONLY models that models.tsv does not list yet.
if [ ! -f "$TSV" ] || [ -n "${REEXPORT:-}" ]; then
  "$PY" bench/zoo_export.py --out "$OUT" ${ONLY:+--only "$ONLY"}
elif [ -n "$ONLY" ]; then
  missing=$(for name in "${!only[@]}"; do
              awk -F'\t' -v n="$name" '$1 == n { f = 1 } END { exit !f }' "$TSV" || echo "$name"
            done | paste -sd,)
  [ -z "$missing" ] || "$PY" bench/zoo_export.py --out "$OUT" --only "$missing"
fi

# The models to compile: kind, status ok, selected; fields name, kind, input.
runs=()
while IFS=$'\t' read -r name kind status input _; do
  [ "$status" = ok ] || continue
  [ "$kind" = classification ] || [ "$kind" = segmentation ] || continue
  if selected "$name"; then runs+=("$name"$'\t'"$kind"$'\t'"$input"); fi
done < <(tail -n +2 "$TSV")

# Helpers reading one compile log (progress lines end in \r); empty when absent.
lines_of()   { tr '\r' '\n' < "$1" | grep -v '^[[:space:]]*$' || true; }
units_of()   { lines_of "$1" | grep -oE 'compiled .*: [0-9]+ units -> [0-9]+ stages' | tail -1 || true; }
largest_of() { lines_of "$1" | grep -oE 'largest stage: [0-9.]+%' | tail -1 | grep -oE '[0-9.]+%' || echo -; }
verify_of()  { lines_of "$1" | grep -E '^verify: ' | tail -1 || true; }
error_of()   { lines_of "$1" | grep -E 'gpipe-compile: error: ' | tail -1 | sed -E 's/.*gpipe-compile: error: //' | cut -c1-120 || true; }

rows=()    # model kind input units stages largest verify seconds result error, tab-separated
total=${#runs[@]}; total=$((total * ${#STAGES[@]})); n=0
echo "compiling $((total / ${#STAGES[@]})) models x stages ${STAGES[*]} (chunks 2, ${VERIFY_FLAG:-no verify}, timeout ${TIMEOUT}s); logs in $OUT/logs" >&2
for run in "${runs[@]}"; do
  IFS=$'\t' read -r name kind input <<< "$run"
  for s in "${STAGES[@]}"; do
    n=$((n + 1))
    log=$OUT/logs/$name.s$s.log
    t0=$(date +%s.%N)
    if timeout "$TIMEOUT" "$COMPILE" "$OUT/$name.pt" -o "$OUT/$name.s$s.gpipe" --stages "$s" --chunks 2 \
         $VERIFY_FLAG --sample-input "$input" > "$log" 2>&1 < /dev/null; then rc=0; else rc=$?; fi
    seconds=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    [ -n "${KEEP:-}" ] || rm -f "$OUT/$name.s$s.gpipe"

    compiled=$(units_of "$log")
    units=$(echo "$compiled" | sed -nE 's/.*: ([0-9]+) units.*/\1/p'); units=${units:--}
    stages=$(echo "$compiled" | sed -nE 's/.*-> ([0-9]+) stages.*/\1/p'); stages=${stages:--}
    largest=$(largest_of "$log")
    line=$(verify_of "$log")
    # verify: the larger of the output and gradient differences; FAIL when above tolerance.
    verify=-
    if [ -n "$line" ]; then
      verify=$(echo "$line" | sed -nE 's/.*output max\|diff\| = ([^ ,]+)[^,]*, grad max\|diff\| = ([^ ]+) .*/\1 \2/p' |
               awk '{ printf "%.2e", ($1 + 0 > $2 + 0 ? $1 : $2) }')
      [[ "$line" == *" OK" ]] || verify="FAIL ${verify}"
    fi
    error=$(error_of "$log")
    if [ "$rc" -eq 0 ] && { [[ "$line" == *" OK" ]] || [ -z "$VERIFY_FLAG" ]; }; then result=pass
    elif [ "$rc" -eq 124 ]; then result=timeout; error="timed out after ${TIMEOUT}s"
    else
      result=fail
      if [ -z "$error" ]; then
        if [ "$rc" -eq 137 ]; then error="killed (out of memory?)"
        elif [ "$rc" -gt 128 ]; then error="died of signal $((rc - 128))"
        elif [ -n "$line" ]; then error="verify above tolerance"
        else error="exit $rc: $(lines_of "$log" | tail -1 | cut -c1-100)"; fi
      fi
    fi
    rows+=("$name"$'\t'"$kind"$'\t'"$input"$'\t'"$units"$'\t'"$s"$'\t'"$largest"$'\t'"$verify"$'\t'"$seconds"$'\t'"$result"$'\t'"$error")
    printf '  [%d/%d] %-30s s%-2s %-7s %7ss  %s\n' "$n" "$total" "$name" "$s" "$result" "$seconds" "$error" >&2
  done
done

# The table: stdout, zoo.tsv (every field), zoo.md.
HEAD=$'model\tkind\tinput\tunits\tstages\tlargest\tverify\tseconds\tresult\terror'
printf '%s\n' "$HEAD" "${rows[@]}" > "$OUT/zoo.tsv"
{
  echo "| model | kind | input | units | stages | largest stage | verify max diff | compile s | result | error |"
  echo "|---|---|---|---:|---:|---:|---:|---:|---|---|"
  for row in "${rows[@]}"; do echo "| ${row//|/\\|} |"; done | sed $'s/\t/ | /g'
} > "$OUT/zoo.md"
echo
printf '%-30s %-14s %-12s %5s %6s %7s %-18s %8s  %s\n' model kind input units stages largest verify seconds error
for row in "${rows[@]}"; do
  IFS=$'\t' read -r name kind input units s largest verify seconds result error <<< "$row"
  printf '%-30s %-14s %-12s %5s %6s %7s %-18s %8s  %s\n' \
    "$name" "$kind" "$input" "$units" "$s" "$largest" "$verify" "$seconds" "$error"
done

# Summary: passes per kind, what did not script, detection, the slowest compile.
summary=$(printf '%s\n' "${rows[@]}" | awk -F'\t' '
  NF { n++; k[$2]++; if ($9 == "pass") { p++; kp[$2]++ } }
  END { printf "passed %d of %d runs (classification: %d/%d, segmentation: %d/%d)",
        p, n, kp["classification"], k["classification"], kp["segmentation"], k["segmentation"] }')
echo
echo "$summary"
{ echo; echo "$summary"; } >> "$OUT/zoo.md"
echo "did not script or run forward (from models.tsv):"
none=1
while IFS=$'\t' read -r name kind status input params note; do
  if [ "$status" = ok ] || ! selected "$name"; then continue; fi
  printf '  %-38s %-14s %-14s %s\n' "$name" "$kind" "$status" "$note"; none=
done < <(tail -n +2 "$TSV")
[ -z "$none" ] || echo "  (none)"
echo "detection models (List[Tensor] images in, List[Dict] detections out): what gpipe-compile --stages 2 says"
none=1
while IFS=$'\t' read -r name kind status input params note; do
  if [ "$kind" != detection ] || ! selected "$name"; then continue; fi
  said=$status
  if [ "$status" = ok ]; then
    log=$OUT/logs/$name.s2.log
    timeout "$TIMEOUT" "$COMPILE" "$OUT/$name.pt" -o "$OUT/$name.s2.gpipe" --stages 2 > "$log" 2>&1 < /dev/null || true
    rm -f "$OUT/$name.s2.gpipe"
    said=$(error_of "$log"); said=${said:-compiled}
  fi
  printf '  %-38s %10s  %s\n' "$name" "$params" "$said"; none=
done < <(tail -n +2 "$TSV")
[ -z "$none" ] || echo "  (none selected)"
printf '%s\n' "${rows[@]}" | awk -F'\t' 'NF && (!n++ || $8 + 0 > max) { max = $8 + 0; row = $0 }
  END { if (n) { split(row, f, "\t"); printf "slowest compile: %s at %s stages, %ss (%s)\n", f[1], f[5], f[8], f[9] } }'
echo "wrote $OUT/zoo.tsv and $OUT/zoo.md"
