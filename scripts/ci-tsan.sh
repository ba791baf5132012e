#!/usr/bin/env bash
# scripts/ci-tsan.sh: the thread-safety tests (tests/models/test_concurrency.cpp: concurrent models, one model shared
# by threads, cancellation from another thread, shared tokenizer and chat template) under ThreadSanitizer, clang++ 14
# at -O1. Only that test program is built (in build-tsan); any data race TSan reports fails the run.
#
# clang's OpenMP runtime (libomp) is not built with TSan, so its barriers and locks are invisible to TSan, which then
# reports them as races inside libomp (in about one run in five here, and in CI's run of 9c0d660). LLVM's Archer tool
# (libarcher.so, in Debian's libomp-14-dev) tells TSan about OpenMP's synchronisation through the OMPT interface; it is
# loaded with OMP_TOOL_LIBRARIES, and TSan skips the uninstrumented runtime's own accesses
# (ignore_noninstrumented_modules). The program runs several times: races depend on timing, and one run takes 0.1 s.
# The server engine's tests (tests/server/test_server.cpp: eight threads on four slots, a full queue, cancellation)
# run too, on the one block they need (llama2, float32: the build compiles no other model), and so does tensor
# parallelism over thread ranks (tests/comm/test_tensor_parallel.cpp, its Llama-2 cases).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-tsan}
source scripts/ccache.sh
cmake -S . -B "$BUILD_DIR" -G Ninja "${MAXTEXT_CCACHE_ARGS[@]}" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS_RELEASE=-O1 -DMAXTEXT_SANITIZE=thread -DMAXTEXT_WERROR=ON -DMAXTEXT_BUILD_BENCH=OFF \
  -DMAXTEXT_BUILD_EXAMPLES=OFF -DMAXTEXT_BUILD_PYTHON=OFF -DMAXTEXT_BACKEND_VARIANT_TESTS=OFF \
  -DMAXTEXT_FAMILY_FIXTURE_TESTS=OFF -DMAXTEXT_BLOCKS=llama2 -DMAXTEXT_BLOCK_POLICIES=f32 >/dev/null
ninja -C "$BUILD_DIR" test_concurrency test_server test_tensor_parallel
archer=$(ls /usr/lib/llvm-14/lib/libarcher.so 2>/dev/null || true)
if [[ -z "$archer" ]]; then
  echo "ci-tsan.sh: /usr/lib/llvm-14/lib/libarcher.so not found (Debian package libomp-14-dev); without it TSan" \
    "reports libomp's own synchronisation as races" >&2
  exit 1
fi
RUNS=${RUNS:-10}
for ((i = 1; i <= RUNS; ++i)); do
  OMP_TOOL_LIBRARIES="$archer" \
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ignore_noninstrumented_modules=1 ${TSAN_OPTIONS:-}" \
    "$BUILD_DIR/tests/test_concurrency" >"$BUILD_DIR/test_concurrency.log" 2>&1 ||
    { cat "$BUILD_DIR/test_concurrency.log"; echo "ci-tsan.sh: run $i of $RUNS failed" >&2; exit 1; }
done
tail -n 2 "$BUILD_DIR/test_concurrency.log"
SERVER_RUNS=${SERVER_RUNS:-3}
for ((i = 1; i <= SERVER_RUNS; ++i)); do
  OMP_TOOL_LIBRARIES="$archer" \
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ignore_noninstrumented_modules=1 ${TSAN_OPTIONS:-}" \
    "$BUILD_DIR/tests/test_server" "[server]" >"$BUILD_DIR/test_server.log" 2>&1 ||
    { cat "$BUILD_DIR/test_server.log"; echo "ci-tsan.sh: test_server run $i of $SERVER_RUNS failed" >&2; exit 1; }
done
tail -n 2 "$BUILD_DIR/test_server.log"
# Tensor parallelism over thread ranks (comm/threads.hpp): Llama-2 split over 2 and 4 ranks, the counted collectives,
# a stalled and a failed rank, sub-groups (Communicator::split; tensor x pipeline counted).
for ((i = 1; i <= SERVER_RUNS; ++i)); do
  OMP_TOOL_LIBRARIES="$archer" \
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ignore_noninstrumented_modules=1 ${TSAN_OPTIONS:-}" \
    "$BUILD_DIR/tests/test_tensor_parallel" "[llama2],[faults],[mesh],Tensor parallel: two*" \
    >"$BUILD_DIR/test_tensor_parallel.log" 2>&1 ||
    { cat "$BUILD_DIR/test_tensor_parallel.log"; echo "ci-tsan.sh: test_tensor_parallel run $i failed" >&2; exit 1; }
done
tail -n 2 "$BUILD_DIR/test_tensor_parallel.log"
echo "ci-tsan.sh: $RUNS runs of test_concurrency, $SERVER_RUNS of test_server and of test_tensor_parallel under TSan" \
  "(with Archer), no race"
