#!/usr/bin/env bash
# Install the Debian packages maxtext-cpp needs (run as root, or with sudo available). Safe to re-run.
#   bash scripts/setup.sh          what the library, the `maxtext` program and the examples need
#   bash scripts/setup.sh --tests  that plus what the tests, benchmarks and reference scripts need
set -euo pipefail
pkgs=(cmake ninja-build g++ libeigen3-dev libxsimd-dev xtl-dev nlohmann-json3-dev libyaml-cpp-dev zlib1g-dev libomp-dev
      libsentencepiece-dev libonig-dev libutf8proc-dev pkg-config ccache libcpp-httplib-dev
      libpng-dev libjpeg62-turbo-dev libsndfile1-dev libsoxr-dev)
if [ "${1:-}" = "--tests" ]; then
  pkgs+=(clang libclang-rt-14-dev catch2 libbenchmark-dev python3-torch python3-numpy python3-pytest python3-dev pybind11-dev libopenblas0
        python3-pil libopenmpi-dev openmpi-bin)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The test clients of `maxtext serve` that no one here wrote: the official `openai` npm package, at the version
# tests/server/package-lock.json pins (from the npm registry; without Node.js or the registry the test is skipped).
if [ "${1:-}" = "--tests" ]; then
  clients="$(cd "$(dirname "$0")/.." && pwd)/tests/server"
  want=$(sed -n 's/.*"openai": "\([0-9.]*\)".*/\1/p' "$clients/package.json" 2>/dev/null | head -1 || true)
  have=$(sed -n 's/.*"version": "\([0-9.]*\)".*/\1/p' "$clients/node_modules/openai/package.json" 2>/dev/null | head -1 || true)
  if [ -n "$want" ] && [ "$want" != "$have" ]; then
    if command -v npm >/dev/null 2>&1; then
      (cd "$clients" && npm ci --no-audit --no-fund --silent) ||
        echo "setup: npm ci in tests/server failed: the openai client test will be skipped"
    else
      echo "setup: no npm (Node.js): the openai client test of maxtext serve will be skipped"
    fi
  fi
fi
