#!/usr/bin/env bash
# Pack the CUDA test programs, example and benchmark for a GPU machine that has a driver and the CUDA runtime but
# not this project's build dependencies (a rented GPU box, a container image with nvcc and PyTorch only).
#
#   bash scripts/pack-cuda-tests.sh [OUT_DIR=.cuda-pack]     # here: builds build-cuda (scripts/ci-cuda.sh's build)
#   bash OUT_DIR/run.sh                                      # there, from the root of a copy of this checkout
#
# OUT_DIR gets: programs.tar.xz (the stripped programs under build-cuda/, where they find the checkout's fixtures
# and configs relative to themselves), lib/ (the shared libraries they need that are not the C/C++ runtime or CUDA's:
# yaml-cpp today; NCCL, 200 MB, is the GPU machine's own: its toolkit's or PyTorch's libnccl.so.2), shared/reference
# (the GPT-3 and DeepSeek reference cases a few tests read from ../shared) and run.sh. run.sh unpacks the programs
# into the checkout's build-cuda/, runs each test program with the test spec
# CTest registers it with (tests/cuda/CMakeLists.txt: the family programs leave out the op cases that hand host
# tensors to the backend), then the example and bench_cuda, and prints one line per program and a summary; it exits
# non-zero when a program fails. Nothing here is needed on a machine that can run scripts/ci-cuda.sh itself.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-.cuda-pack}
BUILD_DIR=${CUDA_BUILD_DIR:-build-cuda}
SHARED=${MAXTEXT_SHARED_DIR:-../shared}

# The build ci-cuda.sh makes (its ctest run skips every test here, without a GPU).
CUDA_BUILD_DIR="$BUILD_DIR" bash scripts/ci-cuda.sh >/dev/null
[ -x "$BUILD_DIR/tests/cuda/test_cuda_ops" ] || { echo "pack-cuda-tests: no CUDA build in $BUILD_DIR (no nvcc?)"; exit 1; }

rm -rf "$OUT" && mkdir -p "$OUT/lib" "$OUT/stage/$BUILD_DIR/tests/cuda" "$OUT/stage/$BUILD_DIR/bench" \
  "$OUT/stage/$BUILD_DIR/examples"
progs=()
for p in "$BUILD_DIR"/tests/cuda/test_cuda_* "$BUILD_DIR/bench/bench_cuda" "$BUILD_DIR/examples/example_cuda_gpt3"; do
  [ -x "$p" ] && [ -f "$p" ] || continue
  cp "$p" "$OUT/stage/$p" && strip "$OUT/stage/$p"
  progs+=("$p")
done
# Shared libraries beyond glibc, libstdc++/libgcc and CUDA's own (the GPU machine has those).
for p in "${progs[@]}"; do ldd "$p"; done | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libcudart|libcublas|libcublasLt|libcuda|libnccl)\.so' |
  while read -r lib; do cp -L "$lib" "$OUT/lib/"; done
# xz -9e: about 13% smaller than tar -J's default (the pack travels beside the checkout to machines with size limits).
tar -C "$OUT/stage" -cf - "$BUILD_DIR" | xz -9e -T0 > "$OUT/programs.tar.xz" && rm -rf "$OUT/stage"
if [ -d "$SHARED/reference" ]; then mkdir -p "$OUT/shared" && cp -r "$SHARED/reference" "$OUT/shared/"; fi

# The test specs, read from tests/cuda/CMakeLists.txt so that run.sh runs what CTest would.
family_spec=$(sed -n 's/^set(_maxtext_cuda_family_spec "\(.*\)")$/\1/p' tests/cuda/CMakeLists.txt)
family_list=$(perl -0ne 'print $1 if /^foreach\(t ([^)]*)\)/m' tests/cuda/CMakeLists.txt | tr -s ' \n' '  ')
[ -n "$family_spec" ] && [ -n "$family_list" ] || { echo "pack-cuda-tests: could not read tests/cuda/CMakeLists.txt"; exit 1; }

cat > "$OUT/run.sh" <<EOF
#!/usr/bin/env bash
# Written by scripts/pack-cuda-tests.sh: run from the root of a copy of the checkout the pack was made from.
set -uo pipefail
PACK=\$(cd "\$(dirname "\$0")" && pwd)
export LD_LIBRARY_PATH="\$PACK/lib:/usr/local/cuda/lib64:\${LD_LIBRARY_PATH:-}"
# NCCL (test_cuda_nccl): beside the toolkit, or the copy PyTorch's wheels bring.
nccl=\$(find /usr/local/cuda*/lib* /usr/lib /opt -name libnccl.so.2 2>/dev/null | head -n 1)
[ -n "\$nccl" ] && export LD_LIBRARY_PATH="\$LD_LIBRARY_PATH:\$(dirname "\$nccl")"
[ -d "\$PACK/shared" ] && export MAXTEXT_SHARED_DIR="\${MAXTEXT_SHARED_DIR:-\$PACK/shared}"
tar -xJf "\$PACK/programs.tar.xz"
family=" $family_list "
failed=0 skipped=0
for p in $BUILD_DIR/tests/cuda/test_cuda_*; do
  [ -x "\$p" ] && [ -f "\$p" ] || continue
  name=\${p##*/test_cuda_}
  spec=()
  case "\$family" in *" \$name "*) spec=("$family_spec") ;; esac
  log=\$(mktemp)
  "\$p" "\${spec[@]}" > "\$log" 2>&1
  rc=\$?
  printf '%-36s rc=%-3s %s\n' "\${p##*/}" "\$rc" "\$(grep -E '^(All tests passed|test cases:|SKIPPED)' "\$log" | tail -n 1)"
  if [ "\$rc" -eq 77 ]; then skipped=\$((skipped + 1))
  elif [ "\$rc" -ne 0 ]; then failed=\$((failed + 1)); grep -v '^\$' "\$log" | tail -n 60; fi
  rm -f "\$log"
done
for cmd in "$BUILD_DIR/examples/example_cuda_gpt3" "$BUILD_DIR/bench/bench_cuda 1024 8 16 1 512 128"; do
  [ -x "\${cmd%% *}" ] || continue
  \$cmd 2>&1 | tail -n 2
  rc=\${PIPESTATUS[0]}
  if [ "\$rc" -eq 77 ]; then skipped=\$((skipped + 1)); elif [ "\$rc" -ne 0 ]; then failed=\$((failed + 1)); fi
done
echo "pack-cuda-tests: \$failed program(s) failed, \$skipped skipped (no usable GPU when > 0)"
[ "\$failed" -eq 0 ] && [ "\$skipped" -eq 0 ]
EOF
chmod +x "$OUT/run.sh"
echo "pack-cuda-tests: $OUT ($(du -sh "$OUT" | cut -f1)): ${#progs[@]} programs; run 'bash $OUT/run.sh' from the checkout's root"
