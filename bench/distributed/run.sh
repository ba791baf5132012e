#!/usr/bin/env bash
# bench/distributed/run.sh: `maxtext generate` split by tensor parallelism (or by pipeline stages) over 1, 2 and 4
# MPI ranks (mpirun over shared memory) on the benchmark models b (stories110M-shaped) and c (1B-class Llama) of
# bench/make_models.py, f32. Per run: prefill and decode tokens/s, the collectives' calls, bytes and seconds
# (MAXTEXT_COMM_STATS=1, rank 0), and each rank's peak resident memory (/usr/bin/time). Recorded in
# docs/distributed.md; not a gate.
#
#   bash bench/distributed/run.sh [--models b,c] [--ranks 1,2,4] [--tokens 32]
#                                 [--layout tensor|pipeline|expert|tensor-expert]
#                                 [--file model.safetensors|model-q8_0.gguf|...]
#
# Model e (qwen3-moe-8x2, a GGUF file bench/make_models.py writes: --models e --file model-f32.gguf) splits by
# heads and expert columns (tensor), by experts (expert), or both (tensor-expert: 2 tensor ranks x N/2 expert ranks).
#
# --layout pipeline splits by layers (ici_pipeline_parallelism); with --file NAME.gguf (a file bench/make_models.py
# wrote into bench/.models/KEY) the stages compute from the file's matrices as they lie (Q8_0 blocks included), which
# tensor parallelism cannot split.
#
# On the 2-core CI machine 4 ranks share 2 cores (--oversubscribe), so the 4-rank figures measure the collectives'
# overhead, not a speed-up; docs/distributed.md estimates what separate sockets or nodes would give from the bytes
# per step measured here.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
MODELS_DIR="$ROOT/bench/.models"
BUILD="$ROOT/bench/.build-distributed"
MODELS=b,c
RANKS=1,2,4
TOKENS=32
LAYOUT=tensor
FILE=model.safetensors
while [[ $# -gt 0 ]]; do
  case "$1" in
    --models) MODELS=$2; shift ;;
    --ranks) RANKS=$2; shift ;;
    --tokens) TOKENS=$2; shift ;;
    --layout) LAYOUT=$2; shift ;;
    --file) FILE=$2; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "distributed: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[[ $LAYOUT =~ ^(tensor|pipeline|expert|tensor-expert)$ ]] ||
  { echo "distributed: --layout tensor, pipeline, expert or tensor-expert, not $LAYOUT" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "distributed: needs mpirun (bash scripts/setup.sh --tests)" >&2; exit 1; }
source "$ROOT/scripts/ccache.sh"
POLICIES="f32;ggmlw"  # ggmlw: a GGUF file's matrices computed from as they lie
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release "${MAXTEXT_CCACHE_ARGS[@]}" -DMAXTEXT_BUILD_TESTS=OFF \
  -DMAXTEXT_BUILD_BENCH=OFF -DMAXTEXT_BUILD_EXAMPLES=OFF -DMAXTEXT_BUILD_PYTHON=OFF -DMAXTEXT_BLOCKS="llama2;qwen3_moe" \
  -DMAXTEXT_BLOCK_POLICIES="$POLICIES" -DMAXTEXT_CLI_COMPARE=OFF -DMAXTEXT_CLI_SERVE=OFF -DMAXTEXT_CLI_VISION=OFF \
  -DMAXTEXT_MPI=ON >/dev/null
ninja -C "$BUILD" maxtext_cli >/dev/null
BIN="$BUILD/tools/maxtext"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1
export MAXTEXT_COMM_STATS=1
cores=$(nproc)
prompt="1"
for i in $(seq 2 64); do prompt="$prompt,$((i * 37 % 31000 + 5))"; done
printf '| model | file | layout | ranks | threads/rank | prefill tok/s | decode tok/s | collectives/step | MB moved/decode step | collectives s | share of prefill+decode | peak RSS per rank (MB) |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|---|\n'
IFS=, read -r -a model_list <<<"$MODELS"
IFS=, read -r -a rank_list <<<"$RANKS"
for key in "${model_list[@]}"; do
  dir="$MODELS_DIR/$key"
  if [[ $key == e ]]; then
    [[ -f "$dir/$FILE" ]] || { echo "distributed: $dir/$FILE not found (python3 bench/make_models.py bench/.models GGUF_PY --only e)" >&2; exit 1; }
  elif [[ ! -f "$dir/model.safetensors" ]]; then
    echo "[distributed] writing model $key to $dir" >&2
    mkdir -p "$dir"
    /usr/bin/python3 - "$ROOT/bench" "$key" "$dir" <<'PY'
import os, sys
sys.path.insert(0, sys.argv[1])
import make_models as mm
key, d = sys.argv[2], sys.argv[3]
s = dict(mm.SHAPES[key])
m = mm.seeded(s, seed={"b": 110, "c": 1000}[key])
mm.write_safetensors(os.path.join(d, "model.safetensors"), mm.maxtext_tensors(m, s))
PY
  fi
  eval "$(/usr/bin/python3 -c "
import sys; sys.path.insert(0, '$ROOT/bench'); import make_models as mm
s = mm.SHAPES['$key']
print(f\"D={s['dim']} L={s['layers']} N={s['heads']} K={s['kv_heads']} F={s['hidden']} V={s['vocab']}\")")"
  [[ $key == e ]] || cat >"$dir/config.yml" <<YML
decoder_block: llama2
base_emb_dim: $D
base_num_query_heads: $N
base_num_kv_heads: $K
base_mlp_dim: $F
base_num_decoder_layers: $L
head_dim: $((D / N))
vocab_size: $V
dtype: float32
weight_dtype: float32
normalization_layer_epsilon: 1.0e-5
max_target_length: 256
YML
  for n in "${rank_list[@]}"; do
    t=$((cores / n)); ((t >= 1)) || t=1
    log="$BUILD/run-$key-$LAYOUT-$n.log"
    [[ -f "$dir/$FILE" ]] || { echo "distributed: $dir/$FILE not found (bench/make_models.py writes the GGUF files)" >&2; exit 1; }
    cfg=(--config "$dir/config.yml")
    [[ $FILE == *.gguf ]] && cfg=(max_target_length=256)  # a GGUF file carries its config
    case $LAYOUT in
      tensor-expert) mesh=(ici_tensor_parallelism=2 ici_expert_parallelism=$((n / 2)) ici_fsdp_parallelism=1) ;;
      *) mesh=(ici_${LAYOUT}_parallelism="$n") ;;
    esac
    ((n > 1)) || mesh=()
    mpirun -n "$n" /usr/bin/time -f "peak_rss_kb %M" "$BIN" generate "${cfg[@]}" \
      --weights "$dir/$FILE" --tokens "$prompt" --max-new-tokens "$TOKENS" --temperature 0 --threads "$t" \
      "${mesh[@]}" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
    /usr/bin/python3 - "$log" "$key" "$n" "$t" "$L" "$D" "$LAYOUT" "$FILE" "$V" <<'PY'
import re, sys
log, key, n, t, L, D = open(sys.argv[1]).read(), sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
layout, file, V = sys.argv[7], sys.argv[8], int(sys.argv[9])
pre = re.search(r"prefill: (\d+) tokens in ([\d.]+) ms \(([\d.]+) tokens/s\)", log)
dec = re.search(r"decode: (\d+) steps in ([\d.]+) ms \(([\d.]+) tokens/s\)", log)
rss = [int(x) / 1024 for x in re.findall(r"peak_rss_kb (\d+)", log)]
coll = {m[0]: (int(m[1]), float(m[2]), float(m[3])) for m in re.findall(r"collectives: (\w+)\s+(\d+) calls\s+([\d.]+) MB\s+([\d.]+) s", log)}
ms = float(pre[2]) + float(dec[2])
steps = 1 + int(dec[1])
ops = [o for o in coll if o != "all_gather"] if n > 1 else []  # all_gather: the fingerprint check at loading
calls = sum(coll[o][0] for o in ops)
cs = sum(coll[o][2] for o in ops)
share = f"{100 * cs * 1000 / ms:.1f}%" if n > 1 else "-"
# Rank 0's bytes per decode step: tensor, 2 all-reduces of one [1, D] f32 row per layer; pipeline, one [1, D] row
# through each of the n - 1 stage boundaries and the [1, V] logits broadcast from the last stage.
# expert: 1 all-reduce per MoE layer (every layer of model e); tensor-expert: 3 per layer (attention, the MoE over the
# expert ranks then the tensor ranks).
per_layer = {"tensor": 2, "expert": 1, "tensor-expert": 3}
moved = 0 if n == 1 else (per_layer[layout] * L * D * 4 if layout in per_layer else ((n - 1) * D + V) * 4)
print(f"| {key} | {file} | {layout} | {n} | {t} | {float(pre[3]):.0f} | {float(dec[3]):.1f} | {calls / steps:.0f} | "
      f"{moved / 1e6:.3f} | {cs:.3f} | {share} | {' / '.join(f'{r:.0f}' for r in sorted(rss))} |")
PY
  done
done
