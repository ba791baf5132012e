#!/usr/bin/env bash
# Install the Debian packages maxtext-cpp needs (run as root, or with sudo available). Safe to re-run.
set -euo pipefail
pkgs=(cmake ninja-build g++ clang libeigen3-dev libxsimd-dev xtl-dev catch2 nlohmann-json3-dev libyaml-cpp-dev
      libbenchmark-dev zlib1g-dev libomp-dev libsentencepiece-dev python3-torch python3-numpy libopenblas0
      libonig-dev libutf8proc-dev pkg-config)
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
