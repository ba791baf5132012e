// layers/context.hpp: what a layer's forward pass receives besides its parameters: the backend, a scratch arena,
// the step (token layout, positions, cache indices, segment ids), its slice of the KV cache, and the capture of
// named intermediates (MaxText's `sow`).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "maxtext/backend/ops.hpp"
#include "maxtext/comm/communicator.hpp"
#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/matrix.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/core/tensor.hpp"

namespace maxtext::layers {

/// Token layout of one forward pass: B rows of T tokens, flattened to B*T activation rows (row-major).
struct StepInfo {
  std::int64_t batch = 0;   ///< B
  std::int64_t length = 0;  ///< T
  std::vector<std::int32_t> start;                    ///< host [B]: cache index of each row's first token
  View<const std::int32_t, 1> positions;              ///< [B*T]: rotary / position-embedding positions
  View<const std::int32_t, 1> q_start;                ///< [B]: = start, in backend memory
  View<const std::int32_t, 1> kv_len;                 ///< [B]: keys valid once this step is written
  View<const std::int32_t, 2> segment_ids;            ///< [B, T] or empty
  View<const std::int32_t, 2> kv_segment_ids;         ///< [B, S] segment ids of the cache, or empty
  std::vector<std::int32_t> host_positions;           ///< host copy of `positions` [B*T], or empty (layers that
                                                      ///< need positions on the host then read them back)
  std::vector<std::int32_t> valid;                    ///< host [B]: valid (not right-padding) tokens per row; empty = T
  View<const std::int32_t, 1> valid_len;              ///< [B]: = valid, in backend memory (empty = all T valid)
  View<const std::int32_t, 2> bidir_begin;            ///< [B, T] or empty: the cache range [begin, end) of the picture
  View<const std::int32_t, 2> bidir_end;              ///< a query belongs to, which it sees whole (AttentionMask)
  /// host [3, B*T]: MRoPE's temporal, height and width positions (use_mrope; a picture's tokens), or empty: every
  /// layer takes `positions` (for MRoPE all three rows equal to them)
  std::vector<std::int32_t> mrope_positions;
  std::int64_t tokens() const { return batch * length; }
};

/// The buffers one layer keeps in the KV cache, each [B, S, width] (e.g. keys [B, S, K*H] and values), and the
/// per-sequence states of recurrent layers (Gated DeltaNet: recurrent and conv state), each f32 [B, width].
/// state_tokens[b] counts the tokens the states of slot b summarise: a recurrent state cannot be rewound, so a
/// layer checks it against the cache length a step starts from.
template <class A>
struct LayerCache {
  std::vector<Tensor<A, 3>> buffers;
  std::vector<Tensor<float, 2>> states;
  std::vector<std::int32_t> state_tokens;
  std::vector<std::int32_t> history;  ///< host ids a layer keeps per sequence (Engram: its last N-1 compressed tokens)
};

/// The cache slot type of a layer under policy P: buffers of P::cache_t.
template <class P>
using CacheFor = LayerCache<typename P::cache_t>;

/// What the decoder hands every layer of one forward pass besides the residual stream, as MaxText's decoder loop
/// threads it through (decoders.py _apply_gemma4_small_layers): per-layer inputs made once from the tokens (Gemma 4
/// small's PLE: layer i reads columns [i*width, (i+1)*width)), and the cache of every layer, so that a layer can
/// attend over keys and values an earlier layer of the same step wrote (cross-layer KV sharing); and the step's
/// token ids with the model's Engram hashing (deepseek.py's decoder_input_tokens and NgramHashMapping).
class EngramHashing;  // layers/engram.hpp

template <class A, class KV = A>
struct DecoderState {
  View<const A, 2> per_layer_inputs;  ///< [B*T, num_layers * width], or empty
  std::int64_t per_layer_width = 0;
  LayerCache<KV>* caches = nullptr;   ///< the model's per-layer caches, in layer order
  std::size_t num_caches = 0;
  /// A pipeline stage's model (Config::pipeline) holds some layers: caches[local_cache[l]] is decoder layer l's cache,
  /// -1 for a layer another stage holds; empty: caches[l].
  std::span<const std::int32_t> local_cache;
  std::span<const std::int32_t> tokens;          ///< host [B*T]: this step's token ids (Engram hashes them)
  const EngramHashing* engram = nullptr;         ///< the model's Engram token table and hashing, or none

  /// Layer i's columns of per_layer_inputs [B*T, width].
  View<const A, 2> per_layer_input(std::int64_t i) const {
    const std::int64_t w = per_layer_width;
    MAXTEXT_CHECK(!per_layer_inputs.empty() && w > 0 && (i + 1) * w <= per_layer_inputs.dim(1), ArgumentError,
                  "[decoder] no per-layer input for layer ", i);
    return View<const A, 2>(per_layer_inputs.data() + i * w, {per_layer_inputs.dim(0), w},
                            {per_layer_inputs.stride(0), 1});
  }
  /// The cache of layer l (an earlier layer's, for KV sharing).
  LayerCache<KV>& cache(std::int64_t l) const {
    if (!local_cache.empty()) {
      MAXTEXT_CHECK(l >= 0 && static_cast<std::size_t>(l) < local_cache.size() && local_cache[static_cast<std::size_t>(l)] >= 0,
                    UnsupportedError, "[decoder] the cache of layer ", l, " is held by another pipeline stage");
      l = local_cache[static_cast<std::size_t>(l)];
    }
    MAXTEXT_CHECK(caches != nullptr && l >= 0 && static_cast<std::size_t>(l) < num_caches, ArgumentError,
                  "[decoder] no cache of layer ", l, " in this forward pass (", num_caches, " layers)");
    return caches[l];
  }
};

/// Width of each per-token cache buffer a layer needs (empty: no cache).
using CacheSpec = std::vector<std::int64_t>;
/// Width of each per-sequence state a recurrent layer keeps (f32; empty: none).
using StateSpec = std::vector<std::int64_t>;
/// The per-sequence states a layer keeps: its state_spec() (Gated DeltaNet layers), or none.
template <class L>
StateSpec state_spec_of(const L& layer) {
  if constexpr (requires { layer.state_spec(); }) {
    return layer.state_spec();
  } else {
    return {};
  }
}

/// Join a capture name and a sub-module name: ("decoder.layers_3", "mlp") -> "decoder.layers_3.mlp"; an empty
/// prefix gives the leaf alone (names relative to a layer run on its own).
inline std::string join_name(std::string_view prefix, std::string_view leaf) {
  std::string s(prefix);
  if (!s.empty() && !leaf.empty()) s.push_back('.');
  s.append(leaf);
  return s;
}

/// Named intermediates requested by the caller (MaxText's sow / Flax capture_intermediates). A name is a module
/// path in the naming scheme of the loaded weights and stands for that module's output; a decoder layer's own name
/// stands for the residual stream after it. Zero cost when no Capture is attached to the forward pass; a layer checks
/// `wants(name)` (a set lookup) only when one is. Values are copied to host as f32; `order()` lists the captured
/// names in the order the forward pass produced them.
class Capture {
 public:
  Capture() = default;
  explicit Capture(std::vector<std::string> names) {
    for (auto& n : names) request(std::move(n));
  }
  void request(std::string name) { wanted_.insert(std::move(name)); }
  /// Capture every name a layer offers.
  void request_all() { all_ = true; }
  bool wants_all() const { return all_; }
  /// Whether `name` is requested. The empty name never is.
  bool wants(std::string_view name) const { return !name.empty() && (all_ || wanted_.find(name) != wanted_.end()); }
  const std::set<std::string, std::less<>>& requested() const { return wanted_; }

  void put(const std::string& name, AnyTensor host_f32) {
    if (results_.count(name) == 0) order_.push_back(name);
    results_[name] = std::move(host_f32);
  }
  const std::map<std::string, AnyTensor>& results() const { return results_; }
  std::map<std::string, AnyTensor>& results() { return results_; }
  /// Captured names in production (forward) order.
  const std::vector<std::string>& order() const { return order_; }
  bool has(const std::string& name) const { return results_.count(name) != 0; }
  const AnyTensor& at(const std::string& name) const {
    auto it = results_.find(name);
    MAXTEXT_CHECK(it != results_.end(), ArgumentError, "[capture] '", name, "' was not captured");
    return it->second;
  }
  void clear_results() {
    results_.clear();
    order_.clear();
  }

 private:
  std::set<std::string, std::less<>> wanted_;
  bool all_ = false;
  std::map<std::string, AnyTensor> results_;
  std::vector<std::string> order_;
};

/// Copy rows src [n, w] into rows [at, at + n) of sequence b of a cache buffer buf [B, S, w], rounded to the cache
/// type if it differs (AttentionOp's keys and values, DeepSeek-V4's compressor buffers). Pointer arithmetic only:
/// the cache may live in device memory, which the host may not dereference.
template <class Be, class A, class KV>
void put_cache_rows(const Be& be, View<const A, 2> src, std::int64_t b, std::int64_t at, View<KV, 3> buf) {
  if (src.dim(0) <= 0) return;
  View<KV, 2> dst(buf.data() + b * buf.stride(0) + at * buf.stride(1), {src.dim(0), src.dim(1)}, {buf.stride(1), 1});
  if constexpr (std::is_same_v<KV, A>) {
    be.copy(src, dst);
  } else {
    be.convert(src, dst);
  }
}

/// Everything a layer's forward needs besides its parameters.
template <TensorPolicy P>
struct Context {
  using B = typename P::backend;
  using A = typename P::act_t;

  const B& be;
  Scratch& scratch;
  const StepInfo& step;
  Capture* capture = nullptr;
  /// Set by models::Transformer for its layers (a layer run on its own has none).
  const DecoderState<A, typename P::cache_t>* decoder = nullptr;
  /// The tensor-parallel group the model is split over (models::Transformer::set_communicator), or none: a layer's
  /// row-parallel products (attention out, MLP wo) then sum their partial results over it (all_reduce).
  comm::Communicator* comm = nullptr;
  /// The expert-parallel group (Config::expert_shard): a MoE layer holding a share of the experts sums its output
  /// over it; none when every rank holds every expert.
  comm::Communicator* expert_comm = nullptr;
  /// The decoder layer running now (its capture name), for the messages of a collective that fails.
  const std::string* where = nullptr;

  /// Whether this forward pass is split by heads and columns over more than one rank.
  bool split() const { return comm != nullptr && comm->size() > 1; }
  /// Sum f32 rows [n, w] (contiguous) over the tensor-parallel ranks, in place; rows the host cannot address go through
  /// a host copy unless the communicator takes device memory (NCCL). `what` names the sub-module in failure messages.
  void all_reduce(View<float, 2> rows, std::string_view what) const { reduce_over(comm, rows, what); }
  /// The same over the expert-parallel ranks (RoutedMoE).
  void expert_all_reduce(View<float, 2> rows, std::string_view what) const {
    MAXTEXT_CHECK(expert_comm != nullptr, ArgumentError, "[comm] ", what, ": this layer holds a share of the experts, "
                  "but the forward pass has no expert-parallel group (Transformer::set_comm_groups)");
    reduce_over(expert_comm, rows, what);
  }
  void reduce_over(comm::Communicator* c, View<float, 2> rows, std::string_view what) const {
    if (c == nullptr || c->size() <= 1 || rows.dim(0) == 0) return;
    MAXTEXT_CHECK(rows.stride(0) == rows.dim(1) && rows.stride(1) == 1, ArgumentError, "[comm] ", what,
                  ": all_reduce needs contiguous rows");
    const auto n = static_cast<std::size_t>(rows.dim(0) * rows.dim(1));
    const std::string name = where ? join_name(*where, what) : std::string(what);
    if (be.memory()->host_accessible() || c->device_memory()) {
      if (!be.memory()->host_accessible()) be.synchronize();  // the communicator's own stream reads the rows
      c->all_reduce_sum(rows.data(), n, name);
      return;
    }
    std::vector<float> host(n);
    be.synchronize();
    be.copy(host.data(), rows.data(), n * sizeof(float), CopyKind::device_to_host);
    be.synchronize();
    c->all_reduce_sum(host.data(), n, name);
    be.copy(rows.data(), host.data(), n * sizeof(float), CopyKind::host_to_device);
  }

  bool capturing(std::string_view name) const { return capture != nullptr && capture->wants(name); }

  /// Record activation rows [B*T, width] under `name` as [B, T, width] (or a caller-given shape).
  template <class T>
  void sow(const std::string& name, View<const T, 2> rows, std::vector<std::int64_t> shape = {}) const {
    if (!capturing(name)) return;
    if (shape.empty()) shape = {step.batch, step.length, rows.dim(1)};
    Tensor<T, 2> host({rows.dim(0), rows.dim(1)});
    be.synchronize();
    for (std::int64_t r = 0; r < rows.dim(0); ++r) {
      be.copy(&host(r, 0), rows[r].data(), static_cast<std::size_t>(rows.dim(1)) * sizeof(T), CopyKind::device_to_host);
    }
    be.synchronize();
    Tensor<float, 2> f({rows.dim(0), rows.dim(1)});
    for (std::int64_t i = 0; i < f.size(); ++i) f.data()[i] = to_float(host.data()[i]);
    capture->put(name, AnyTensor::from(f, name).reshaped(std::move(shape)));
  }
  /// Record a sub-module output under join_name(prefix, leaf). The name is built only when a Capture is attached.
  template <class T>
  void sow(std::string_view prefix, std::string_view leaf, View<const T, 2> rows, std::vector<std::int64_t> shape = {}) const {
    if (capture == nullptr) return;
    sow(join_name(prefix, leaf), rows, std::move(shape));
  }

  /// The step's positions [B*T] on the host: StepInfo's host copy when the model keeps one, otherwise read back
  /// from backend memory into `buf` (layers that check positions on the host: Attention, MLA, DeepSeek-V4).
  const std::vector<std::int32_t>& host_positions(std::vector<std::int32_t>& buf) const {
    if (static_cast<std::int64_t>(step.host_positions.size()) == step.tokens()) return step.host_positions;
    MAXTEXT_CHECK(step.positions.dim(0) == step.tokens(), ArgumentError, "[step] ", step.positions.dim(0),
                  " positions for ", step.tokens(), " tokens");
    buf.resize(static_cast<std::size_t>(step.tokens()));
    be.synchronize();
    be.copy(buf.data(), step.positions.data(), buf.size() * sizeof(std::int32_t), CopyKind::device_to_host);
    be.synchronize();
    return buf;
  }
};

}  // namespace maxtext::layers
