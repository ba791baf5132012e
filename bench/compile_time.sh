#!/usr/bin/env bash
# Compile time of a header-only library is a feature: this measures, one job at a time,
#   1. the probe: one translation unit that includes maxtext/maxtext.hpp and instantiates one model (Llama f32), and
#   2. every translation unit of the `maxtext` program, from Ninja's own log of a clean -j1 build of it.
# Usage: bash bench/compile_time.sh [build-dir]   (default build-compile; configured here, Release as scripts/build.sh)
# BLOCKS / POLICIES (default all / all) choose the CLI's model units (MAXTEXT_BLOCKS / MAXTEXT_BLOCK_POLICIES); e.g.
# BLOCKS=llama2 POLICIES=f32 for a quick run (the CLI's own units do not depend on them).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build-compile}
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMAXTEXT_WERROR=ON -DMAXTEXT_BUILD_TESTS=OFF \
  -DMAXTEXT_BUILD_EXAMPLES=OFF -DMAXTEXT_BUILD_BENCH=ON -DMAXTEXT_BUILD_TOOLS=ON -DMAXTEXT_BUILD_PYTHON=OFF \
  -DMAXTEXT_BLOCKS="${BLOCKS:-all}" -DMAXTEXT_BLOCK_POLICIES="${POLICIES:-all}" >/dev/null
rm -f "$B/.ninja_log"
ninja -C "$B" -t clean maxtext_compile_probe maxtext_cli >/dev/null
ninja -C "$B" -j1 maxtext_compile_probe maxtext_cli >/dev/null
echo "translation unit                                  seconds (g++ $(g++ -dumpversion), -O3 -march=native, -j1)"
# .ninja_log v5: start_ms end_ms mtime output hash; object files only.
awk -F'\t' '!/^#/ && $4 ~ /\.o$/ { printf "%-50s %7.1f\n", $4, ($2 - $1) / 1000.0 }' "$B/.ninja_log" | sort -k2 -nr
