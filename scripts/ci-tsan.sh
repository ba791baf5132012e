#!/usr/bin/env bash
# scripts/ci-tsan.sh: the thread-safety tests (tests/models/test_concurrency.cpp: concurrent models, one model shared
# by threads, cancellation from another thread, shared tokenizer and chat template) under ThreadSanitizer, clang++ 14
# at -O1. Only that test program is built (in build-tsan); any data race TSan reports fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-tsan}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS_RELEASE=-O1 -DMAXTEXT_SANITIZE=thread -DMAXTEXT_WERROR=ON -DMAXTEXT_BUILD_BENCH=OFF \
  -DMAXTEXT_BUILD_EXAMPLES=OFF -DMAXTEXT_BUILD_PYTHON=OFF -DMAXTEXT_BACKEND_VARIANT_TESTS=OFF \
  -DMAXTEXT_FAMILY_FIXTURE_TESTS=OFF >/dev/null
ninja -C "$BUILD_DIR" test_concurrency
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}" "$BUILD_DIR/tests/test_concurrency"
