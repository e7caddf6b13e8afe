#!/usr/bin/env bash
# Builds the manifest fuzzer with clang (libFuzzer + ASan + UBSan) and runs it.
#   tests/fuzz/run_fuzz.sh [SECONDS]   (default 60)
# Crashes are written to tests/fuzz/crashes/; add each, fixed, as a regression
# test in tests/runtime/test_manifest.cpp.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_TO_RUN=${1:-60}
OUT=${FUZZ_BUILD:-build-fuzz}
mkdir -p "$OUT" tests/fuzz/crashes
clang++ -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize=vptr \
  -D_GLIBCXX_USE_CXX11_ABI=1 -I. tests/fuzz/fuzz_manifest.cpp runtime/manifest.cpp runtime/checkpoint_mode.cpp \
  -lc10 -o "$OUT/fuzz_manifest"
mkdir -p "$OUT/corpus"
cp -n tests/fuzz/corpus/* "$OUT/corpus/" 2>/dev/null || true
"$OUT/fuzz_manifest" "$OUT/corpus" -max_total_time="$SECONDS_TO_RUN" -max_len=4096 \
  -artifact_prefix=tests/fuzz/crashes/ -print_final_stats=1
