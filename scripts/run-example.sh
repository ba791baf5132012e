#!/usr/bin/env bash
# The main job: install dependencies, build, then prefill + decode with the example model, printing tokens and tokens/s.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
./build/tools/maxtext generate --config configs/models/gpt3-52k.yml dtype=float32 --tokens 1,2,3,4,5,6,7,8 \
  --max-new-tokens 32 --seed 0
