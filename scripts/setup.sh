#!/usr/bin/env bash
# Install the Debian packages maxtext-cpp needs (run as root, or with sudo available). Safe to re-run.
#   bash scripts/setup.sh          what the library, the `maxtext` program and the examples need
#   bash scripts/setup.sh --tests  that plus what the tests, benchmarks and reference scripts need
set -euo pipefail
pkgs=(cmake ninja-build g++ libeigen3-dev libxsimd-dev xtl-dev nlohmann-json3-dev libyaml-cpp-dev zlib1g-dev libomp-dev
      libsentencepiece-dev libonig-dev libutf8proc-dev pkg-config ccache)
if [ "${1:-}" = "--tests" ]; then
  pkgs+=(clang libclang-rt-14-dev catch2 libbenchmark-dev python3-torch python3-numpy python3-pytest python3-dev pybind11-dev libopenblas0)
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
