#!/usr/bin/env bash
# CI's CUDA job: configure a separate build (build-cuda) with nvcc for sm_80 and sm_90, build every CUDA test,
# example and benchmark (target maxtext_cuda_all), and run them. Without a GPU the CUDA tests report themselves
# skipped (exit 77, CTest "Skipped") and the example / benchmark print SKIPPED and exit 77; with one they run.
# Without a CUDA toolkit the job says so and succeeds (nothing to compile).
set -euo pipefail
cd "$(dirname "$0")/.."
# nvcc by its real path: CMake derives the toolkit's include directories from the path it is given, and ccache
# hashes them, so /usr/local/cuda/bin/nvcc and /usr/local/cuda-13.0/bin/nvcc (the same file) would not share cached
# objects. CI's environment names the versioned path; resolving both keeps one set of objects for every caller.
NVCC=$(readlink -f "${CUDACXX:-/usr/local/cuda/bin/nvcc}" 2>/dev/null || true)
ARCHS=${MAXTEXT_CUDA_ARCHS:-80;90}
BUILD_DIR=${CUDA_BUILD_DIR:-build-cuda}
if [ -z "$NVCC" ] || [ ! -x "$NVCC" ]; then
  echo "ci-cuda: no nvcc at ${CUDACXX:-/usr/local/cuda/bin/nvcc} (set CUDACXX): nothing to compile"
  exit 0
fi
"$NVCC" --version | tail -n 2
source scripts/ccache.sh
cmake -S . -B "$BUILD_DIR" -G Ninja "${MAXTEXT_CCACHE_ARGS[@]}" -DCMAKE_BUILD_TYPE=Release -DMAXTEXT_WERROR=ON -DMAXTEXT_CUDA=ON \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" >/dev/null
cmake --build "$BUILD_DIR" --target maxtext_cuda_all -j "${JOBS:-$(nproc)}"
# Every CUDA binary carries code for each requested architecture (when cuobjdump is installed to tell).
CUOBJDUMP="$(dirname "$NVCC")/cuobjdump"
if [ -x "$CUOBJDUMP" ]; then
  for exe in "$BUILD_DIR"/tests/cuda/test_cuda_ops "$BUILD_DIR"/examples/example_cuda_gpt3 "$BUILD_DIR"/bench/bench_cuda; do
    [ -x "$exe" ] || continue
    for a in ${ARCHS//;/ }; do
      "$CUOBJDUMP" --list-elf "$exe" | grep -q "sm_$a" || { echo "ci-cuda: $exe has no sm_$a code"; exit 1; }
    done
  done
fi
(cd "$BUILD_DIR" && ctest -L cuda --output-on-failure -j "${JOBS:-$(nproc)}" > ctest-cuda.log) ||
  { cat "$BUILD_DIR/ctest-cuda.log"; exit 1; }
grep -E "tests passed" "$BUILD_DIR/ctest-cuda.log"
echo "ci-cuda: $(grep -c '(Skipped)' "$BUILD_DIR/ctest-cuda.log" || true) CUDA test(s) skipped (no usable GPU when > 0)"
run_skippable() {
  local rc=0
  "$@" || rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then echo "ci-cuda: $* failed ($rc)"; exit 1; fi
}
[ -x "$BUILD_DIR/examples/example_cuda_gpt3" ] && run_skippable "$BUILD_DIR/examples/example_cuda_gpt3"
[ -x "$BUILD_DIR/bench/bench_cuda" ] && run_skippable "$BUILD_DIR/bench/bench_cuda" 256 2 4 1 64 16
exit 0
