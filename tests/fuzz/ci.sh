#!/usr/bin/env bash
# tests/fuzz/ci.sh: the CI fuzzing step: build the libFuzzer harnesses with clang (ASan + UBSan) in build-fuzz-ci and
# run each for FUZZ_SECONDS (default 30) on its seeds (a fresh corpus: CI keeps none). Exits non-zero on a finding
# (the input is in build-fuzz-ci/fuzz-work/artifacts/<harness>/). Needs clang and libclang-rt-14-dev
# (scripts/setup.sh --tests). FUZZ_BUILD_JOBS sets ninja's -j (default 1).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz-ci}
start=$(date +%s)
rm -rf "$build/fuzz-work"
"$here/run.sh" -t "${FUZZ_SECONDS:-30}" -b "$build" "$@"
echo "fuzz ci: $(( $(date +%s) - start )) s in all"
