#!/usr/bin/env bash
# `maxtext` split across processes by mpirun (docs/distributed.md), on stories260K (a trained Llama) over shared memory:
#   - logits of 2 and 4 ranks (ici_tensor_parallelism) equal one process's within 1e-4 + 1e-5 |x|: the same f32 terms
#     summed in another order (per rank, then across ranks), an error of a few ulp of the largest terms (logits up
#     to ~20 here: ulp 2e-6; measured 2.4e-5); the last 6 tokens decoded one at a time (--incremental) against the
#     one-process full forward; rank 0 alone writes the file;
#   - 32 greedy tokens identical to one process's, printed once (by rank 0);
#   - a two-turn `chat` (rank 0 reads the lines and broadcasts them) printing one process's answers, once; with
#     --session, a second run's third turn printing one uninterrupted run's third answer;
#   - expert parallelism (ici_expert_parallelism) on the Qwen3-MoE fixture's Hugging Face files: logits of 2 and 4
#     ranks (its 4 experts split) equal one process's within the same bound, and by heads and expert columns
#     (ici_tensor_parallelism=2, alone, x 2 pipeline stages and x 2 expert ranks); OLMo 3's (qk norm over all heads) on 2 ranks by heads;
#   - pipeline parallelism (ici_pipeline_parallelism: each stage its layers, whole) on 2 and 3 stages (5 layers: 2 + 2
#     + 1): logits equal to one process's bit for bit, from the llama2.c file and from the GGUF file read in place;
#     MaxText's circular layout (num_layers_per_pipeline_stage=1 on 5 stages); greedy tokens and chat as above;
#   - every tensor- and expert-parallel run with MAXTEXT_COMM_CHECK=1: after each layer the residual stream, which the
#     ranks hold replicated, is hashed and compared across ranks (a difference fails the run, naming the layer;
#     pipeline stages hold different layers, and compare their logits bit for bit instead);
#   - two axes in one mesh (4 ranks): tensor 2 x pipeline 2 on stories260K (logits within the tensor bound, greedy
#     tokens, chat), expert 2 x pipeline 2 on Qwen3-MoE (logits);
#   - a mesh that does not match the ranks launched, an unused axis, a command that does not split, and ranks that
#     read another config are refused by name;
#   - a rank killed mid-step ends the whole job; a stalled rank ends it after MAXTEXT_COMM_TIMEOUT_S with the layer and
#     the collective named.
# Usage: mpi_cli.sh MAXTEXT_BINARY MODELS_DIR FIXTURES_DIR. Exit 77 (skipped) without mpirun, python3 + numpy, or
# stories260K.
set -uo pipefail
bin=$1
models=$2
fixtures=$3
py=/usr/bin/python3
command -v mpirun >/dev/null || { echo "skipped: no mpirun (apt-get install openmpi-bin libopenmpi-dev)"; exit 77; }
[ -x "$py" ] && "$py" -c "import numpy" 2>/dev/null || { echo "skipped: no /usr/bin/python3 with numpy"; exit 77; }
S=$models/stories260K
[ -f "$S/stories260K.bin" ] || { echo "skipped: $S/stories260K.bin not found"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1
export MAXTEXT_COMM_CHECK=1  # mpirun passes the environment it starts with to every rank
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAILED: $*"; fail=1; }
run() { timeout 120 "$@"; }
W=(--weights "$S/stories260K.bin" --threads 1)
toks="1,403,407,261,411,365,275,266,269,11,362,264,302,400,279,267,263,289,300,1,403"

close() {  # close ONE.npy SPLIT.npy LABEL
  "$py" - "$1" "$2" "$3" <<'PY'
import sys, numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
assert a.shape == b.shape, (a.shape, b.shape)
d = np.abs(a - b)
print(f"{sys.argv[3]} vs one process: max abs {d.max():.3g} (logits up to {np.abs(a).max():.3g})")
assert np.all(d <= 1e-4 + 1e-5 * np.abs(a)), d.max()
PY
}
split_logits() {  # split_logits LABEL ONE.npy N KEY=VALUE weights-args...
  local label=$1 one=$2 n=$3 mesh=$4
  shift 4
  local out
  out=$(run mpirun -n "$n" "$bin" logits "$@" --tokens "$toks" --incremental 6 --out "$tmp/split.npy" "$mesh" 2>&1) ||
    { bad "$label: $out"; return; }
  [ "$(grep -c '^wrote ' <<<"$out")" = 1 ] || bad "$label: expected one 'wrote' line (rank 0), found: $out"
  close "$one" "$tmp/split.npy" "$label" || bad "$label: logits differ from one process"
}
run "$bin" logits "${W[@]}" --tokens "$toks" --out "$tmp/one.npy" >/dev/null || bad "one-process logits"
for n in 2 4; do
  split_logits "stories260K, tensor x $n" "$tmp/one.npy" $n ici_tensor_parallelism=$n "${W[@]}"
done
Q=(--weights "$fixtures/qwen3_moe_model/hf" --threads 1)
toks_q="1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16"
toks_save=$toks
toks=$toks_q
run "$bin" logits "${Q[@]}" --tokens "$toks" --out "$tmp/one_moe.npy" >/dev/null || bad "one-process Qwen3-MoE logits"
for n in 2 4; do
  split_logits "Qwen3-MoE, expert x $n" "$tmp/one_moe.npy" $n ici_expert_parallelism=$n "${Q[@]}"
done
# Two axes in one mesh: each of 2 pipeline stages splits its layers' experts over its own 2 ranks.
split_logits "Qwen3-MoE, expert 2 x pipeline 2" "$tmp/one_moe.npy" 4 ici_expert_parallelism=2 "${Q[@]}" \
  ici_pipeline_parallelism=2
# The same model by heads and by every expert's hidden columns (tensor), alone and within 2 pipeline stages.
split_logits "Qwen3-MoE, tensor x 2 (experts by columns)" "$tmp/one_moe.npy" 2 ici_tensor_parallelism=2 "${Q[@]}"
split_logits "Qwen3-MoE, tensor 2 x pipeline 2" "$tmp/one_moe.npy" 4 ici_tensor_parallelism=2 "${Q[@]}" \
  ici_pipeline_parallelism=2
# Tensor x expert: heads and expert columns over 2 ranks, the 4 experts over the other 2.
split_logits "Qwen3-MoE, tensor 2 x expert 2" "$tmp/one_moe.npy" 4 ici_tensor_parallelism=2 "${Q[@]}" \
  ici_expert_parallelism=2
# OLMo 3 (qk norm over all heads: each rank gathers the other's heads) from its Hugging Face files, by heads.
O=(--weights "$fixtures/olmo3_model/hf" --threads 1)
run "$bin" logits "${O[@]}" --tokens "$toks" --out "$tmp/one_olmo.npy" >/dev/null || bad "one-process OLMo 3 logits"
split_logits "OLMo 3, tensor x 2" "$tmp/one_olmo.npy" 2 ici_tensor_parallelism=2 "${O[@]}"
toks=$toks_save

same() {  # same ONE.npy SPLIT.npy LABEL: bit for bit
  "$py" - "$1" "$2" "$3" <<'PY'
import sys, numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
assert a.shape == b.shape and np.array_equal(a, b), (a.shape, b.shape, np.abs(a - b).max() if a.shape == b.shape else None)
print(f"{sys.argv[3]}: the same bits as one process")
PY
}
pipeline_logits() {  # pipeline_logits LABEL ONE.npy N weights-args and keys...
  local label=$1 one=$2 n=$3
  shift 3
  local out
  out=$(run mpirun -n "$n" "$bin" logits "$@" --tokens "$toks" --incremental 6 --out "$tmp/pipe.npy" \
        ici_pipeline_parallelism="$n" 2>&1) || { bad "$label: $out"; return; }
  [ "$(grep -c '^wrote ' <<<"$out")" = 1 ] || bad "$label: expected one 'wrote' line (rank 0), found: $out"
  same "$one" "$tmp/pipe.npy" "$label" || bad "$label: logits differ from one process"
}
run "$bin" logits "${W[@]}" --tokens "$toks" --incremental 6 --out "$tmp/one_inc.npy" >/dev/null ||
  bad "one-process incremental logits"
for n in 2 3; do
  pipeline_logits "stories260K, pipeline x $n" "$tmp/one_inc.npy" $n "${W[@]}"
done
# Two axes in one mesh: each of 2 pipeline stages (3 + 2 layers) splits its layers by heads over its own 2 ranks
# (sub-communicators: MPI_Comm_split); within the tensor bound, since the row-parallel sums change order.
split_logits "stories260K, tensor 2 x pipeline 2" "$tmp/one.npy" 4 ici_tensor_parallelism=2 "${W[@]}" \
  ici_pipeline_parallelism=2
pipeline_logits "stories260K, MaxText's circular pipeline (1 layer per stage, 5 stages)" "$tmp/one_inc.npy" 5 "${W[@]}" \
  num_layers_per_pipeline_stage=1
WG=(--weights "$S/stories260K.gguf" --threads 1)
if [ -f "$S/stories260K.gguf" ]; then
  run "$bin" logits "${WG[@]}" --tokens "$toks" --incremental 6 --out "$tmp/one_gguf.npy" >/dev/null ||
    bad "one-process GGUF logits"
  pipeline_logits "stories260K.gguf in place, pipeline x 2" "$tmp/one_gguf.npy" 2 "${WG[@]}"
fi

G=(generate "${W[@]}" --tokenizer "$S/tok512.bin" --prompt "Once upon a time" --max-new-tokens 32 --temperature 0)
one=$(run "$bin" "${G[@]}" 2>/dev/null | grep '^tokens\[0\]') || bad "one-process generate"
for mesh in ici_tensor_parallelism=2 ici_tensor_parallelism=4 ici_pipeline_parallelism=2 ici_pipeline_parallelism=3 \
            ici_tensor_parallelism=2,ici_pipeline_parallelism=2; do
  n=${mesh#*=}
  [ "${mesh#*,}" != "$mesh" ] && n=4
  out=$(run mpirun -n $n "$bin" "${G[@]}" ${mesh//,/ } 2>/dev/null)
  [ "$(grep -c '^tokens\[0\]' <<<"$out")" = 1 ] || bad "generate, $mesh: expected one tokens line, found: $out"
  [ "$(grep '^tokens\[0\]' <<<"$out")" = "$one" ] || bad "generate, $mesh: $(grep '^tokens' <<<"$out") vs $one"
done

# chat: rank 0 reads the lines and hands each to the others; the answers, printed once, equal one process's.
printf 'Tell me a story.\nAnd then?\n' > "$tmp/chat.txt"
C=(chat "${W[@]}" --tokenizer "$S/tok512.bin" --max-new-tokens 24 --temperature 0)
one_chat=$(run "$bin" "${C[@]}" < "$tmp/chat.txt" 2>/dev/null) || bad "one-process chat"
for mesh in ici_tensor_parallelism=2 ici_tensor_parallelism=4 ici_pipeline_parallelism=2 \
            ici_tensor_parallelism=2,ici_pipeline_parallelism=2; do
  n=${mesh#*=}
  [ "${mesh#*,}" != "$mesh" ] && n=4
  out=$(run mpirun -n $n "$bin" "${C[@]}" ${mesh//,/ } < "$tmp/chat.txt" 2>/dev/null) || bad "chat, $mesh, failed: $out"
  [ "$out" = "$one_chat" ] || bad "chat, $mesh: '$out' vs one process: '$one_chat'"
done
[ -n "$one_chat" ] || bad "chat printed nothing"
# chat --session on 2 ranks: each rank keeps its slice in FILE.rank<r>-of-2 (pipeline stages: .layers_<their layers>
# added, so that another layout does not read them); a second run goes on with a third turn and prints the third
# answer of one uninterrupted run.
printf 'Tell me a story.\nAnd then?\nWho won?\n' > "$tmp/chat3.txt"
printf 'Who won?\n' > "$tmp/chat_c.txt"
one3=$(run "$bin" "${C[@]}" < "$tmp/chat3.txt" 2>/dev/null) || bad "one-process chat of three turns"
for mesh in ici_tensor_parallelism=2 ici_pipeline_parallelism=2; do
  f0=s.mxs.rank0-of-2 f1=s.mxs.rank1-of-2
  [ $mesh = ici_pipeline_parallelism=2 ] && f0=$f0.layers_0-2 f1=$f1.layers_3-4  # stories260K: 5 layers, 3 + 2
  rm -f "$tmp"/s.mxs.*
  first=$(run mpirun -n 2 "$bin" "${C[@]}" --session "$tmp/s.mxs" $mesh < "$tmp/chat.txt" 2>/dev/null) ||
    bad "chat --session, $mesh (first run)"
  { [ -f "$tmp/$f0" ] && [ -f "$tmp/$f1" ]; } || bad "chat --session, $mesh: $f0 / $f1 missing: $(ls "$tmp")"
  second=$(run mpirun -n 2 "$bin" "${C[@]}" --session "$tmp/s.mxs" $mesh < "$tmp/chat_c.txt" 2>/dev/null) ||
    bad "chat --session, $mesh (second run)"
  [ -n "$second" ] || bad "chat --session, $mesh: the second run printed nothing"
  [ "$one3" = "$first"$'\n'"$second" ] || bad "chat --session, $mesh: '$first' + '$second' vs one run: '$one3'"
done
rm -f "$tmp"/s.mxs.*
run mpirun -n 2 "$bin" "${C[@]}" --session "$tmp/s.mxs" ici_tensor_parallelism=2 < "$tmp/chat.txt" >/dev/null 2>&1 ||
  bad "chat --session on 2 ranks (for the refusal below)"
rm -f "$tmp/s.mxs.rank1-of-2"

expect_refusal() {  # expect_refusal TEXT command...
  local text=$1
  shift
  local out
  out=$(run "$@" 2>&1) && bad "expected a refusal ($text), the run passed"
  grep -qF -- "$text" <<<"$out" || bad "expected '$text' in: $out"
}
expect_refusal "the ici_*_parallelism keys multiply to 2, but 4 ranks per slice were launched" \
  mpirun -n 4 "$bin" logits "${W[@]}" --tokens "$toks" --out "$tmp/x.npy" ici_tensor_parallelism=2 ici_fsdp_parallelism=1
expect_refusal "set ici_tensor_parallelism=2" mpirun -n 2 "$bin" logits "${W[@]}" --tokens "$toks" --out "$tmp/x.npy"
expect_refusal "launch it with mpirun -n 2" \
  "$bin" logits "${W[@]}" --tokens "$toks" --out "$tmp/x.npy" ici_tensor_parallelism=2 ici_fsdp_parallelism=1
expect_refusal "maxtext info runs in one process" mpirun -n 2 "$bin" info "${W[@]}"
expect_refusal "rank(s) 1 have no file" mpirun -n 2 "$bin" "${C[@]}" --session "$tmp/s.mxs" \
  ici_tensor_parallelism=2 < "$tmp/chat.txt"
expect_refusal "rank(s) 1 hold other weights or another config than rank 0" \
  mpirun -n 1 "$bin" logits "${W[@]}" --tokens "$toks" --out "$tmp/x.npy" ici_tensor_parallelism=2 : \
         -n 1 "$bin" logits "${W[@]}" --tokens "$toks" --out "$tmp/x.npy" ici_tensor_parallelism=2 max_target_length=128

# Faults: the job ends (no hang) with a message; timeout 120 above turns a hang into a failure.
start=$SECONDS
out=$(MAXTEXT_COMM_FAULT=kill:1:3 run mpirun -x MAXTEXT_COMM_FAULT -n 2 "$bin" "${G[@]}" ici_tensor_parallelism=2 2>&1)
rc=$?
{ [ $rc -ne 0 ] && [ $rc -ne 124 ]; } || bad "a killed rank: exit code $rc (124: the job hung)"
grep -qiE "signal 9|killed" <<<"$out" || bad "a killed rank: no word of it in: $out"
echo "killed rank: job ended in $((SECONDS - start)) s with exit code $rc"
expect_stall() {  # expect_stall LABEL STALLED_RANK MESH REGEX: the other rank's error must match REGEX
  local label=$1 stalled=$2 mesh=$3 regex=$4 start=$SECONDS out rc
  out=$(MAXTEXT_COMM_FAULT=stall:$stalled:3 MAXTEXT_COMM_TIMEOUT_S=2 run mpirun -x MAXTEXT_COMM_FAULT \
        -x MAXTEXT_COMM_TIMEOUT_S -n 2 "$bin" "${G[@]}" "$mesh" 2>&1)
  rc=$?
  { [ $rc -ne 0 ] && [ $rc -ne 124 ]; } || bad "$label: exit code $rc (124: the job hung)"
  grep -qE "$regex" <<<"$out" || bad "$label: expected the other rank to name the layer and the collective, found: $out"
  echo "$label: job ended in $((SECONDS - start)) s with exit code $rc"
}
expect_stall "a stalled rank" 1 ici_tensor_parallelism=2 \
  "rank 0 of 2\): error: \[comm\] rank 0 of 2: decoder\.layers_[0-9]+\.(attention|mlp): all_reduce_sum did not complete in 2 s"
# A stalled pipeline stage: the next stage's wait for its residual stream (or the logits) ends, naming what it waited for.
expect_stall "a stalled stage" 0 ici_pipeline_parallelism=2 \
  "rank 1 of 2\): error: \[comm\] rank 1 of 2: (decoder\.layers_[0-9]+: recv from pipeline stage 0: recv|logits: broadcast) did not complete in 2 s"
[ $fail = 0 ] && echo "mpi_cli: all checks passed"
exit $fail
