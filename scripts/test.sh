#!/usr/bin/env bash
# The test command: install dependencies, build everything, run every test (CTest prints the summary last).
# The decoder block units and the layer / model test units compile at -O1 here (MAXTEXT_BLOCKS_OPT,
# MAXTEXT_MODEL_TESTS_OPT): the tests run tiny models, and -O1 takes about 60% of the -O3 compile time on a cold build.
# The kernels, the backend's operation tests and two end-to-end model tests stay at -O3 (docs/build.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
bash scripts/build.sh -DMAXTEXT_BUILD_TESTS=ON -DMAXTEXT_BUILD_TOOLS=ON -DMAXTEXT_BUILD_BENCH=ON -DMAXTEXT_BUILD_EXAMPLES=ON \
  -DMAXTEXT_BUILD_PYTHON=ON -DMAXTEXT_BLOCKS=all -DMAXTEXT_BLOCK_POLICIES=all -DMAXTEXT_CLI_COMPARE=ON -DMAXTEXT_CLI_SERVE=ON \
  -DMAXTEXT_CLI_VISION=ON -DMAXTEXT_CLI_AUDIO=ON \
  -DMAXTEXT_BLOCKS_OPT=-O1 -DMAXTEXT_MODEL_TESTS_OPT=-O1
cd "${BUILD_DIR:-build}" && ctest --output-on-failure -j "${JOBS:-$(nproc)}"
