#!/usr/bin/env bash
# Configure and build into ${BUILD_DIR:-build} (Release, warnings as errors). Extra arguments go to CMake's configure
# step; TARGETS (space-separated) limits what is built (default: everything).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
source scripts/ccache.sh
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} -DMAXTEXT_WERROR=ON \
  "${MAXTEXT_CCACHE_ARGS[@]}" "$@" >/dev/null
targets=()
for t in ${TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" "${targets[@]}"
