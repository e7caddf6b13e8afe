#!/usr/bin/env bash
# Installs every Debian 12 package gpipe-cpp needs and builds it into build/.
# Idempotent: apt runs only when a package is missing; the build is incremental.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  g++ cmake ninja-build ccache
  libtorch-dev python3-torch python3-torchvision   # LibTorch 1.13 + the export side
  libopenblas0-pthread                             # 35x faster GEMM than the reference BLAS
  libgloo-dev                                      # c10d Gloo headers (multi-process stages)
  libboost-program-options-dev libboost-filesystem-dev  # gpipe-launch (Boost.Process)
  nlohmann-json3-dev libgtest-dev
  unzip graphviz                                   # gpipe-inspect --svg
  python3-sklearn fortunes-min                     # real data: the digits images, fortune texts
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

[ "${GPIPE_SETUP_BUILD:-1}" = 1 ] || exit 0   # setup_torch2.sh: the packages only
BUILD_DIR=${BUILD_DIR:-build}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
echo "setup: building in $BUILD_DIR"
cmake --build "$BUILD_DIR" -j "$(nproc)"
