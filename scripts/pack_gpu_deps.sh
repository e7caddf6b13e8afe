#!/usr/bin/env bash
# Packs the build dependencies that a bare GPU machine lacks (Boost's
# program_options/filesystem/process/asio, GoogleTest, nlohmann/json, gloo's
# headers) from this Debian machine into a relocatable prefix, so that
# bench/gpu.sh can build gpipe-cpp there against that machine's own CUDA torch:
#   scripts/pack_gpu_deps.sh [DIR]      default DIR: .gpu-deps (git-ignored)
#   GPIPE_DEPS_PREFIX=DIR/usr bench/gpu.sh
# Only the Boost headers that gpipe-cpp's sources reach are copied (found with
# g++ -M under C++17 and C++20), which keeps the prefix small enough to send.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-.gpu-deps}
ARCH=$(gcc -print-multiarch)
LIB=/usr/lib/$ARCH
PREFIX="$DIR/usr"
rm -rf "$DIR"
mkdir -p "$PREFIX/include" "$PREFIX/lib/$ARCH/cmake" "$PREFIX/share/cmake"

# Every Boost header the sources include, and everything those include.
probe=$(mktemp --suffix=.cpp)
trap 'rm -f "$probe"' EXIT
grep -rhoE '#include <boost/[^>]*>' --include=*.cpp --include=*.h cli compiler runtime passes tests bench samples |
  sort -u >"$probe"
for std in c++17 c++20; do
  g++ -std=$std -M -w "$probe" -o - | tr ' \\' '\n\n' | grep '^/usr/include/boost/'
done | sort -u | while read -r header; do
  mkdir -p "$PREFIX/include/$(dirname "${header#/usr/include/}")"
  cp "$header" "$PREFIX/include/${header#/usr/include/}"
done
# Boost.Config picks its compiler and standard-library headers by macro; take them all.
cp -r /usr/include/boost/config "$PREFIX/include/boost/"

cp -r /usr/include/gtest /usr/include/gmock /usr/include/nlohmann /usr/include/gloo "$PREFIX/include/"
for name in boost_program_options boost_filesystem libgtest libgmock; do
  cp -P "$LIB"/lib${name#lib}.* "$PREFIX/lib/$ARCH/" 2>/dev/null || true
done
cp -P "$LIB"/libgtest*.a "$LIB"/libgmock*.a "$PREFIX/lib/$ARCH/"
for pkg in Boost-* BoostDetectToolset-* boost_headers-* boost_program_options-* boost_filesystem-* \
  boost_system-* GTest; do
  cp -r "$LIB"/cmake/$pkg "$PREFIX/lib/$ARCH/cmake/"
done
cp -r /usr/share/cmake/nlohmann_json "$PREFIX/share/cmake/"
# libboost_filesystem/program_options are shared libraries built by Debian's
# gcc 12; a newer libstdc++ on the GPU machine runs them.
echo "pack_gpu_deps.sh: $(du -sh "$DIR" | cut -f1) in $DIR ($(find "$DIR" -type f | wc -l) files)"
