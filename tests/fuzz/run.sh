#!/usr/bin/env bash
# tests/fuzz/run.sh: build the libFuzzer harnesses (clang, ASan + UBSan) and run each for a set time on its corpus.
#   tests/fuzz/run.sh [-t SECONDS] [-n RUNS] [-b BUILD_DIR] [-w WORK_DIR] [-j JOBS] [--no-build] [HARNESS...]
#     -t  seconds per harness (default 60)            -b  build directory (default build-fuzz)
#     -n  stop a harness after this many executions (libFuzzer -runs; default: only the time limit)
#     -w  corpora, artifacts and logs (default build-fuzz/fuzz-work; corpora grow from run to run)
#     -j  libFuzzer -jobs/-workers per harness (default 1)   HARNESS: gguf, npz, ... (default: all that were built)
# Seeds: make_fuzz_seeds (synthetic) plus copies of small real files from tests/fixtures and ../shared (or
# $MAXTEXT_SHARED_DIR). Limits per input: 1 s ($FUZZ_TIMEOUT), 1 GiB RSS, 1 GiB per allocation. libFuzzer's timeout
# is wall-clock time: on a loaded machine a timeout input is run again alone and counts only if it needs >= 1 s of CPU. Prints executions, coverage and
# findings per harness; exits 1 when a harness found a crash, leak, timeout or oversized allocation (its input is in
# WORK_DIR/artifacts/<harness>/; add it under tests/fuzz/regressions/<harness>/ once the reader is fixed).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
secs=60 runs=-1 build="$root/build-fuzz" work="" jobs=1 do_build=1 only=()
while (($#)); do
  case "$1" in
    -t) secs=$2; shift 2 ;;
    -n) runs=$2; shift 2 ;;
    -b) build=$(realpath -m "$2"); shift 2 ;;
    -w) work=$(realpath -m "$2"); shift 2 ;;
    -j) jobs=$2; shift 2 ;;
    --no-build) do_build=0; shift ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) only+=("$1"); shift ;;
  esac
done
work=${work:-$build/fuzz-work}
shared=${MAXTEXT_SHARED_DIR:-$root/../shared}
# The harnesses of path-taking readers write each input to a file under $TMPDIR: a tmpfs makes that ~25x faster.
if [ -z "${FUZZ_TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then FUZZ_TMPDIR=/dev/shm; fi
export TMPDIR=${FUZZ_TMPDIR:-${TMPDIR:-/tmp}}
if ((do_build)); then
  if [ ! -f "$build/CMakeCache.txt" ]; then
    MAXTEXT_CCACHE_ARGS=()
    # shellcheck source=../../scripts/ccache.sh
    cd "$root" && source scripts/ccache.sh && cd - >/dev/null
    cmake -S "$root" -B "$build" -G Ninja "${MAXTEXT_CCACHE_ARGS[@]}" -DCMAKE_CXX_COMPILER="${CXX_FUZZ:-clang++}" \
      -DCMAKE_BUILD_TYPE= -DCMAKE_CXX_FLAGS="-O1" -DMAXTEXT_BUILD_FUZZERS=ON -DMAXTEXT_BUILD_TESTS=OFF \
      -DMAXTEXT_BUILD_TOOLS=OFF -DMAXTEXT_BUILD_EXAMPLES=OFF -DMAXTEXT_BUILD_BENCH=OFF -DMAXTEXT_BUILD_PYTHON=OFF \
      >/dev/null || exit 2
  fi
  nice -n 5 ninja -C "$build" -j "${FUZZ_BUILD_JOBS:-1}" maxtext_fuzzers || exit 2
fi
bin="$build/tests/fuzz"
if ((${#only[@]} == 0)); then
  for f in "$bin"/fuzz_*; do [ -x "$f" ] && only+=("$(basename "$f" | sed 's/^fuzz_//')"); done
fi

# ---- seeds ----
seeds="$work/seeds"
rm -rf "$seeds"
"$bin/make_fuzz_seeds" "$seeds" || exit 2
copy() {  # copy TARGET FILE...: small (<= 64 KiB) existing files only
  local t=$1; shift
  mkdir -p "$seeds/$t"
  for f in "$@"; do
    [ -f "$f" ] && [ "$(stat -c %s "$f")" -le 65536 ] && cp "$f" "$seeds/$t/$(echo "$f" | sed 's|.*/\([^/]*/[^/]*\)$|\1|; s|/|_|g')"
  done
  return 0
}
copy npy "$root"/tests/fixtures/npz/*.npy "$root"/tests/fixtures/hf_tiny/*/tokens.npy
copy npz "$root"/tests/fixtures/npz/*.npz
copy safetensors "$root"/tests/fixtures/hf_tiny/*/sharded/*.safetensors
copy safetensors_index "$root"/tests/fixtures/hf_tiny/*/sharded/model.safetensors.index.json
copy hf_config "$root"/tests/fixtures/hf_tiny/*/config.json "$root"/tests/fixtures/hf_tiny/*/sharded/config.json
copy hf_tokenizer "$root"/tests/fixtures/tokenizers/synth_*.tokenizer.json
copy yaml_config "$root"/configs/models/*.yml
copy image "$root"/tests/fixtures/images/*.png "$root"/tests/fixtures/images/*.jpg
copy audio "$root"/tests/fixtures/qwen3_omni_audio/*.wav
copy llama2c_tokenizer "$shared"/models/stories260K/tok512.bin
copy gguf "$shared"/models/*/*.gguf  # (the real GGUFs exceed 64 KiB: skipped; the synthetic ones cover the format)
# Chat templates: every template string in the shared tokenizer configs and the committed template fixtures.
python3 - "$seeds/chat_template" "$shared"/models/tokenizers/*/tokenizer_config.json "$root"/tests/fixtures/chat_templates/*.json <<'PY' || true
import hashlib, json, os, sys
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
def walk(v):
    if isinstance(v, dict):
        for k, x in v.items():
            if k in ("chat_template", "template", "source") and isinstance(x, str) and "{" in x:
                yield x
            yield from walk(x)
    elif isinstance(v, list):
        for x in v:
            yield from walk(x)
for path in sys.argv[2:]:
    try:
        doc = json.load(open(path))
    except Exception:
        continue
    for t in walk(doc):
        name = hashlib.sha1(t.encode()).hexdigest()[:12] + ".jinja"
        open(os.path.join(out, name), "w").write(t)
PY

# ---- run ----
found=0
printf '%-20s %10s %6s %8s %8s %8s %s\n' harness execs secs exec/s cov ft result
for t in "${only[@]}"; do
  exe="$bin/fuzz_$t"
  [ -x "$exe" ] || { echo "$t: not built ($exe)"; found=1; continue; }
  corpus="$work/corpus/$t" art="$work/artifacts/$t" log="$work/logs/$t.log"
  mkdir -p "$corpus" "$art" "$work/logs" "$seeds/$t"
  dict=()
  [ -f "$here/dict/$t.dict" ] && dict=(-dict="$here/dict/$t.dict")
  par=()
  ((jobs > 1)) && par=(-jobs="$jobs" -workers="$jobs")
  t_start=$(date +%s)
  (cd "$work" && nice -n 5 "$exe" "$corpus" "$seeds/$t" "${dict[@]}" "${par[@]}" -max_total_time="$secs" -runs="$runs" \
    -timeout="${FUZZ_TIMEOUT:-1}" -rss_limit_mb=1024 -malloc_limit_mb=1024 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$art/" >"$log" 2>&1)
  rc=$?
  took=$(( $(date +%s) - t_start ))
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | awk '{s+=$2} END {print s+0}')
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | tail -1 | awk '{print $2+0}')
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2}')
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | awk '{print $2}')
  result=ok
  for a in "$art"/timeout-*; do  # wall-clock timeouts: keep only inputs that need >= 1 s of CPU when run alone
    [ -f "$a" ] || continue
    /usr/bin/time -f '%U %S' -o "$work/cpu.txt" "$exe" -runs=1 "$a" >/dev/null 2>&1
    cpu=$(awk '{print $1 + $2}' "$work/cpu.txt")
    if awk -v c="$cpu" 'BEGIN {exit !(c < 1)}'; then
      mkdir -p "$work/wall-timeouts/$t" && mv "$a" "$work/wall-timeouts/$t/"
      result="ok (stopped early: a wall-clock timeout that needs only ${cpu} s CPU, kept in $work/wall-timeouts/$t)"
      ((rc == 70)) && rc=0
    fi
  done
  if ((rc != 0)) || ls "$art" | grep -q .; then
    result="FINDING (rc $rc): $(grep -m1 -o 'ERROR: [A-Za-z]*: [^(]*\|==[0-9]*== ERROR: [^ ]* [^ ]*\|SUMMARY: .*' "$log" | head -1) -> $art"
    found=1
  fi
  printf '%-20s %10s %6s %8s %8s %8s %s\n' "$t" "$execs" "$took" "$rate" "${cov:-?}" "${ft:-?}" "$result"
done
exit $found
