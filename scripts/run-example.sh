#!/usr/bin/env bash
# The main job: install dependencies, build, then generate. With the trained stories260K model beside the checkout
# (../shared/models/stories260K, or $MAXTEXT_MODELS_DIR/stories260K): prompt text -> a story, then its tokens and
# tokens/s. Without it: prefill + decode with a seeded small Llama-2-architecture model (tokens and tokens/s). Then, with the
# Qwen3 tokenizer beside the checkout (../shared/models/tokenizers/qwen3): a two-turn `maxtext chat` through its
# byte-level BPE tokenizer.json and Jinja chat template, on a seeded random model of the Qwen3 architecture (the
# answers are noise (an untied random head, so that they are not one repeated token); the tokenizer, template,
# streaming, KV-cache reuse and speed are real).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Only the program this job runs (the tests and benchmarks are the test command's), with only the models it runs:
# the llama2 (stories260K, or the seeded fallback) and qwen3 (the chat) blocks in float32. Every other block / weight
# type is then refused by name; scripts/test.sh (or -DMAXTEXT_BLOCKS=all -DMAXTEXT_BLOCK_POLICIES=all) builds them all.
# `maxtext compare` is left out too (-DMAXTEXT_CLI_COMPARE=OFF: the CLI's longest unit; the program refuses it by name),
# and so are `maxtext serve` (-DMAXTEXT_CLI_SERVE=OFF), `maxtext vision` (-DMAXTEXT_CLI_VISION=OFF) and `maxtext audio`
# (-DMAXTEXT_CLI_AUDIO=OFF), which this job does not run (scripts/test.sh turns them on again in the same folder). The blocks compile at the build type's level (-O3; the test command's build, in the same folder, uses -O1).
TARGETS=maxtext_cli bash scripts/build.sh -DMAXTEXT_BUILD_TESTS=OFF -DMAXTEXT_BUILD_BENCH=OFF -DMAXTEXT_BUILD_EXAMPLES=OFF \
  -DMAXTEXT_BUILD_TOOLS=ON -DMAXTEXT_BUILD_PYTHON=OFF -DMAXTEXT_BLOCKS="llama2;qwen3" -DMAXTEXT_BLOCK_POLICIES=f32 -DMAXTEXT_BLOCKS_OPT= \
  -DMAXTEXT_CLI_COMPARE=OFF -DMAXTEXT_CLI_SERVE=OFF -DMAXTEXT_CLI_VISION=OFF -DMAXTEXT_CLI_AUDIO=OFF
MODELS=${MAXTEXT_MODELS_DIR:-../shared/models}
if [ -f "$MODELS/stories260K/stories260K.bin" ] && [ -f "$MODELS/stories260K/tok512.bin" ]; then
  ./build/tools/maxtext generate --weights "$MODELS/stories260K/stories260K.bin" \
    --tokenizer "$MODELS/stories260K/tok512.bin" --prompt "${PROMPT:-Once upon a time}" --max-new-tokens 200
else
  echo "(stories260K not found under $MODELS: running a seeded small Llama-2-architecture model instead)"
  ./build/tools/maxtext generate --config configs/models/llama2-7b.yml base_num_decoder_layers=2 base_emb_dim=256 \
    base_num_query_heads=4 base_num_kv_heads=4 head_dim=64 base_mlp_dim=768 dtype=float32 --tokens 1,2,3,4,5,6,7,8 \
    --max-new-tokens 32 --seed 0
fi
TOK=$MODELS/tokenizers/qwen3
if [ -f "$TOK/tokenizer.json" ] && [ -f "$TOK/tokenizer_config.json" ]; then
  echo
  echo "== maxtext chat: Qwen3's tokenizer.json + chat template, seeded random Qwen3-architecture model =="
  printf '%s\n' "${CHAT1:-Hello! Who are you?}" "${CHAT2:-Tell me a story.}" |
    ./build/tools/maxtext chat --config configs/models/qwen3-0.6b.yml base_num_decoder_layers=4 base_emb_dim=256 \
      base_num_query_heads=4 base_num_kv_heads=2 head_dim=64 base_mlp_dim=768 dtype=float32 logits_via_embedding=false --seed 7 \
      --tokenizer "$TOK" --system "You are a helpful assistant." --temperature 0.8 --top-k 40 --max-new-tokens 32
fi
