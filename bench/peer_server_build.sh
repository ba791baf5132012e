# bench/peer_server_build.sh, sourced by bench/serve and bench/vision/mtmd: llama.cpp's server-side programs built
# natively (GGML_NATIVE=ON, OpenMP) from the source node-llama-cpp bundles, into bench/.peers/llama.cpp/build-server.
#
#   peer_server_build TARGET   (llama-server, llama-mtmd-cli): prints the program's path, building it first when it
#                              is missing (npm install and the bundle's clone into bench/.peers too, when missing).
# The caller defines PEERS (bench/.peers) and log().
peer_server_build() {
  local target="$1" build="$PEERS/llama.cpp/build-server"
  if [[ ! -x "$build/bin/$target" ]]; then
    mkdir -p "$PEERS"
    if [[ ! -d "$PEERS/node_modules/node-llama-cpp" ]]; then
      log "npm install node-llama-cpp @node-llama-cpp/linux-x64 into bench/.peers"
      (cd "$PEERS" && npm install --no-audit --no-fund --ignore-scripts --silent node-llama-cpp @node-llama-cpp/linux-x64 >/dev/null)
    fi
    if [[ ! -d "$PEERS/llama.cpp" ]]; then
      git clone -q "$PEERS/node_modules/node-llama-cpp/llama/gitRelease.bundle" "$PEERS/llama.cpp" 2>/dev/null
    fi
    log "building llama.cpp's $target natively (GGML_NATIVE=ON, OpenMP; a few minutes)"
    cmake -S "$PEERS/llama.cpp" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
      -DGGML_OPENMP=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
      >"$PEERS/$target-cmake.log" 2>&1
    ninja -C "$build" -j"$(nproc)" "$target" >"$PEERS/$target-build.log" 2>&1
  fi
  echo "$build/bin/$target"
}
