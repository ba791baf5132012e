#!/usr/bin/env bash
# The test command: install dependencies, build everything, run every test (CTest prints the summary last).
# The decoder block units compile at -O1 here (MAXTEXT_BLOCKS_OPT; the kernels stay at -O3): the tests run tiny models,
# and it saves about 40% of those units' compile time on a cold build (docs/build.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
bash scripts/build.sh -DMAXTEXT_BUILD_TESTS=ON -DMAXTEXT_BUILD_TOOLS=ON -DMAXTEXT_BUILD_BENCH=ON -DMAXTEXT_BUILD_EXAMPLES=ON \
  -DMAXTEXT_BUILD_PYTHON=ON -DMAXTEXT_BLOCKS=all -DMAXTEXT_BLOCK_POLICIES=all -DMAXTEXT_CLI_COMPARE=ON -DMAXTEXT_CLI_SERVE=ON \
  -DMAXTEXT_BLOCKS_OPT=-O1
cd "${BUILD_DIR:-build}" && ctest --output-on-failure -j "${JOBS:-$(nproc)}"
