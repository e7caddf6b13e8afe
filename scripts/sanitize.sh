#!/usr/bin/env bash
# Builds the whole suite under sanitizers and runs it (docs/errors.md,
# "Sanitizers and fuzzing"):
#   scripts/sanitize.sh [address|thread|all]   (default all)
# address: ASan + UBSan in build-asan/ (leak checks off: LibTorch 1.13's own
# allocations at exit would drown ours); thread: TSan in build-tsan/, with
# tests/sanitize/tsan.supp. Each prints its build and test times; any report
# fails the test that triggered it (halt_on_error), so green means clean.
# Run scripts/setup.sh first (it installs what the normal build needs).
set -euo pipefail
cd "$(dirname "$0")/.."
WHICH=${1:-all}
JOBS=$(nproc)

run_leg() {  # NAME BUILD_DIR SANITIZERS BUILD_TYPE
  local name=$1 dir=$2 sanitizers=$3 type=$4 start
  start=$(date +%s)
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="$type" -DGPIPE_SANITIZE="$sanitizers" >/dev/null
  cmake --build "$dir" -j"$JOBS"
  local built=$(( $(date +%s) - start ))
  start=$(date +%s)
  local status=0
  ctest --test-dir "$dir" --output-on-failure -j"$JOBS" || status=$?
  echo "sanitize: $name built in ${built} s, suite ran in $(( $(date +%s) - start )) s, exit $status"
  return "$status"
}

status=0
if [ "$WHICH" = address ] || [ "$WHICH" = all ]; then
  ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    run_leg "ASan+UBSan" build-asan address,undefined RelWithDebInfo || status=1
fi
if [ "$WHICH" = thread ] || [ "$WHICH" = all ]; then
  TSAN_OPTIONS="suppressions=$PWD/tests/sanitize/tsan.supp second_deadlock_stack=1 halt_on_error=1" \
    run_leg "TSan" build-tsan thread RelWithDebInfo || status=1
fi
case "$WHICH" in address|thread|all) ;; *)
  echo "sanitize.sh: unknown '$WHICH'; use address, thread or all" >&2; exit 2 ;;
esac
exit "$status"
