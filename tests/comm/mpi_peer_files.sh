#!/usr/bin/env bash
# Every llama.cpp peer file (tests/fixtures/llamacpp/*/model.gguf: random-weight F32 GGUF files of each architecture
# llama.cpp and this library share, written with llama.cpp's gguf-py) split by `mpirun -n 2 maxtext logits` under each
# layout: by heads (ici_tensor_parallelism=2), by experts (ici_expert_parallelism=2) and by layers
# (ici_pipeline_parallelism=2), the last 4 tokens decoded one at a time (--incremental), against one process's full
# forward, within 1e-4 + 1e-5 |x| (the bound of tests/comm/mpi_cli.sh: the same f32 terms summed in another order, and
# a decode step against the full forward); the replica check on (MAXTEXT_COMM_CHECK=1). What a layout does not split
# must be refused by name, as listed below; anything else that fails, fails the test.
#
# Usage: mpi_peer_files.sh MAXTEXT_BINARY PEER_DIR. Exit 77 (skipped) without mpirun or python3 + numpy.
set -uo pipefail
bin=$1
peer=$2
py=/usr/bin/python3
command -v mpirun >/dev/null || { echo "skipped: no mpirun (apt-get install openmpi-bin libopenmpi-dev)"; exit 77; }
[ -x "$py" ] && "$py" -c "import numpy" 2>/dev/null || { echo "skipped: no /usr/bin/python3 with numpy"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1
export MAXTEXT_COMM_CHECK=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAILED: $*"; fail=1; }

# The refusals each layout owes: "family layout" -> a phrase of the message.
declare -A refused=(
  ["deepseek2 pipeline"]="MTP layers are not split across pipeline stages"  # its file carries a next-n (MTP) layer
  ["qwen35moe tensor"]="is not split across ranks yet"                     # Gated DeltaNet
  ["qwen3next tensor"]="is not split across ranks yet"
  ["qwen35moe_mtp tensor"]="is not split across ranks yet"
  ["qwen35moe_mtp pipeline"]="MTP layers are not split across pipeline stages"
  ["qwen3next_mtp tensor"]="is not split across ranks yet"
  ["qwen3next_mtp pipeline"]="MTP layers are not split across pipeline stages"
)
moe=" deepseek2 deepseek2_lite gemma4_moe gpt-oss llama4 qwen35moe qwen35moe_mtp qwen3moe qwen3next qwen3next_mtp "

checked=0
for d in "$peer"/*/; do
  name=$(basename "$d")
  f="$d/model.gguf"
  [ -f "$f" ] || continue
  toks=$("$py" -c "import numpy as np, sys; print(','.join(str(int(x)) for x in np.load(sys.argv[1]).ravel()))" \
           "$d/tokens.npy")
  timeout 120 "$bin" logits --weights "$f" --tokens "$toks" --threads 1 --out "$tmp/one.npy" >"$tmp/log" 2>&1 ||
    { bad "$name: one process: $(tail -2 "$tmp/log")"; continue; }
  for layout in tensor expert pipeline; do
    want=${refused["$name $layout"]:-}
    [[ $layout == expert && $moe != *" $name "* ]] && want="has no experts to split"
    out=$(timeout 120 mpirun -n 2 "$bin" logits --weights "$f" --tokens "$toks" --threads 1 --incremental 4 \
            --out "$tmp/split.npy" "ici_${layout}_parallelism=2" 2>&1)
    rc=$?
    if [[ -n $want ]]; then
      if [[ $rc -eq 0 ]]; then
        bad "$name, $layout: ran; expected a refusal naming '$want'"
      elif ! grep -q "$want" <<<"$out"; then
        bad "$name, $layout: expected a refusal naming '$want', got: $(tail -3 <<<"$out")"
      else
        echo "$name, $layout: refused by name ($want)"
      fi
      continue
    fi
    [[ $rc -eq 0 ]] || { bad "$name, $layout: $(tail -3 <<<"$out")"; continue; }
    "$py" - "$tmp/one.npy" "$tmp/split.npy" "$name, $layout" <<'PY' || bad "$name, $layout: logits differ from one process"
import sys, numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
assert a.shape == b.shape, (a.shape, b.shape)
d = np.abs(a - b)
print(f"{sys.argv[3]} x 2 vs one process: max abs {d.max():.3g} (logits up to {np.abs(a).max():.3g})")
assert np.all(d <= 1e-4 + 1e-5 * np.abs(a)), d.max()
PY
    checked=$((checked + 1))
  done
done
[[ $checked -ge 20 ]] || bad "only $checked split runs were checked (the peer files under $peer?)"
[[ $fail -eq 0 ]] && echo "mpi_peer_files: $checked split runs match one process"
exit $fail
