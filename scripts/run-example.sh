#!/usr/bin/env bash
# The main job: install dependencies, build, then generate. With the trained stories260K model beside the checkout
# (../shared/models/stories260K, or $MAXTEXT_MODELS_DIR/stories260K): prompt text -> a story, then its tokens and
# tokens/s. Without it: prefill + decode with the seeded GPT-3 example model (tokens and tokens/s).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Only the program this job runs (the tests and benchmarks are the test command's).
TARGETS=maxtext_cli bash scripts/build.sh -DMAXTEXT_BUILD_TESTS=OFF -DMAXTEXT_BUILD_BENCH=OFF -DMAXTEXT_BUILD_EXAMPLES=OFF \
  -DMAXTEXT_BUILD_TOOLS=ON
MODELS=${MAXTEXT_MODELS_DIR:-../shared/models}
if [ -f "$MODELS/stories260K/stories260K.bin" ] && [ -f "$MODELS/stories260K/tok512.bin" ]; then
  ./build/tools/maxtext generate --weights "$MODELS/stories260K/stories260K.bin" \
    --tokenizer "$MODELS/stories260K/tok512.bin" --prompt "${PROMPT:-Once upon a time}" --max-new-tokens 200
else
  echo "(stories260K not found under $MODELS: running the seeded GPT-3 example instead)"
  ./build/tools/maxtext generate --config configs/models/gpt3-52k.yml dtype=float32 --tokens 1,2,3,4,5,6,7,8 \
    --max-new-tokens 32 --seed 0
fi
