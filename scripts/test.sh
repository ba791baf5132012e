#!/usr/bin/env bash
# The test command: install dependencies, build, run every test (CTest prints the summary last).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
cd "${BUILD_DIR:-build}" && ctest --output-on-failure -j "${JOBS:-$(nproc)}"
