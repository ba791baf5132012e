// models/kv_cache.hpp: the KV cache of a whole model: per layer the buffers its attention declares (keys and values,
// or MLA's latent + rotary key), one row per sequence slot, plus per-slot lengths and segment ids.
// Spec attention.md §5 (semantics), kept as one contiguous cache per slot (see layers/attention_op.hpp).
// A cache is move-only: its buffers are shared handles, so a copy would share the keys and values but keep its own
// lengths, and the two would overwrite each other's rows. clone() makes an independent copy (to fork a sequence).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "maxtext/backend/ops.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/layers/context.hpp"

namespace maxtext::models {

template <TensorPolicy P>
class KVCache {
 public:
  using B = typename P::backend;
  using A = typename P::act_t;

  KVCache() = default;
  /// `batch` slots of `capacity` tokens; `specs[l]` lists the per-token widths of layer l's buffers and
  /// `states[l]` (when given) the widths of its per-sequence recurrent states (f32).
  KVCache(const B& be, std::int64_t batch, std::int64_t capacity, const std::vector<layers::CacheSpec>& specs,
          const std::vector<layers::StateSpec>& states = {})
      : batch_(batch), capacity_(capacity), lengths_(static_cast<std::size_t>(batch), 0) {
    MAXTEXT_CHECK(batch > 0 && capacity > 0, ArgumentError, "[KVCache] batch and capacity must be > 0, found ", batch,
                  " and ", capacity);
    MAXTEXT_CHECK(states.empty() || states.size() == specs.size(), ArgumentError, "[KVCache] ", states.size(),
                  " state specs for ", specs.size(), " layers");
    layers_.resize(specs.size());
    for (std::size_t l = 0; l < specs.size(); ++l) {
      for (std::int64_t w : specs[l]) layers_[l].buffers.emplace_back(Shape<3>{batch, capacity, w}, be.memory());
      if (states.empty()) continue;
      for (std::int64_t w : states[l]) {
        layers_[l].states.emplace_back(Shape<2>{batch, w}, be.memory());
        recurrent_ = true;
      }
      if (!states[l].empty()) layers_[l].state_tokens.assign(static_cast<std::size_t>(batch), 0);
    }
    segment_ = Tensor<std::int32_t, 2>({batch, capacity}, be.memory());
  }

  KVCache(const KVCache&) = delete;
  KVCache& operator=(const KVCache&) = delete;
  KVCache(KVCache&&) noexcept = default;
  KVCache& operator=(KVCache&&) noexcept = default;
  ~KVCache() = default;

  /// A deep copy on backend `be` (the one that made this cache): new buffers and states holding this cache's
  /// contents, with its lengths and segment ids; the two then advance independently.
  KVCache clone(const B& be) const {
    KVCache c;
    c.batch_ = batch_;
    c.capacity_ = capacity_;
    c.lengths_ = lengths_;
    c.has_segments_ = has_segments_;
    c.recurrent_ = recurrent_;
    auto copy = [&](const auto& src) {
      using T = std::decay_t<decltype(src)>;
      T dst(src.shape(), be.memory());
      if (src.size() > 0) {
        be.copy(dst.data(), src.data(), static_cast<std::size_t>(src.size()) * sizeof(*src.data()),
                CopyKind::device_to_device);
      }
      return dst;
    };
    c.layers_.resize(layers_.size());
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      for (const auto& b : layers_[l].buffers) c.layers_[l].buffers.push_back(copy(b));
      for (const auto& st : layers_[l].states) c.layers_[l].states.push_back(copy(st));
      c.layers_[l].state_tokens = layers_[l].state_tokens;
      c.layers_[l].history = layers_[l].history;
    }
    c.segment_ = copy(segment_);
    be.synchronize();
    return c;
  }

  std::int64_t batch() const { return batch_; }
  std::int64_t capacity() const { return capacity_; }
  /// Tokens stored in slot b.
  std::int32_t length(std::int64_t b) const { return lengths_.at(static_cast<std::size_t>(b)); }
  const std::vector<std::int32_t>& lengths() const { return lengths_; }
  void set_length(std::int64_t b, std::int32_t n) {
    MAXTEXT_CHECK(n >= 0 && n <= capacity_, ArgumentError, "[KVCache] length ", n, " outside [0, ", capacity_, "]");
    lengths_.at(static_cast<std::size_t>(b)) = n;
  }
  /// Forget slot b (a new sequence starts there); the others keep their contents.
  void reset(std::int64_t b) { set_length(b, 0); }
  void reset() {
    for (auto& l : lengths_) l = 0;
    has_segments_ = false;
  }
  layers::CacheFor<P>& layer(std::size_t l) { return layers_.at(l); }
  /// The per-layer caches in layer order (num_layers() of them).
  layers::CacheFor<P>* layer_data() { return layers_.data(); }
  std::size_t num_layers() const { return layers_.size(); }
  /// Segment ids [B, S] of the cached tokens (meaningful once has_segments()).
  const Tensor<std::int32_t, 2>& segments() const { return segment_; }
  bool has_segments() const { return has_segments_; }
  void mark_segments() { has_segments_ = true; }
  /// Whether some layer keeps a recurrent state (Gated DeltaNet): such a cache can continue a sequence or restart
  /// it (length 0), but not go back to an earlier length (models::Session then runs the conversation again).
  bool recurrent() const { return recurrent_; }
  /// What set_length cannot take back: every layer's per-sequence states (Gated DeltaNet's recurrent and conv states,
  /// Engram's conv state), the tokens they summarise and the layers' host histories.
  struct States {
    std::vector<std::vector<Tensor<float, 2>>> states;
    std::vector<std::vector<std::int32_t>> state_tokens, history;
  };
  /// A copy of the states (on backend `be`, the one that made this cache).
  States save_states(const B& be) const {
    States s;
    for (const auto& l : layers_) {
      s.states.emplace_back();
      for (const auto& t : l.states) {
        Tensor<float, 2> c(t.shape(), be.memory());
        if (t.size() > 0) {
          be.copy(c.data(), t.data(), static_cast<std::size_t>(t.size()) * sizeof(float), CopyKind::device_to_device);
        }
        s.states.back().push_back(std::move(c));
      }
      s.state_tokens.push_back(l.state_tokens);
      s.history.push_back(l.history);
    }
    be.synchronize();
    return s;
  }
  /// Put states saved by save_states back (with set_length, a recurrent cache goes back to where they were saved).
  void restore_states(const B& be, const States& s) {
    MAXTEXT_CHECK(s.states.size() == layers_.size(), ArgumentError, "[KVCache] restore_states: states of ",
                  s.states.size(), " layers for a cache of ", layers_.size());
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      auto& dst = layers_[l].states;
      MAXTEXT_CHECK(s.states[l].size() == dst.size(), ArgumentError, "[KVCache] restore_states: layer ", l,
                    " holds ", dst.size(), " states, the copy ", s.states[l].size());
      for (std::size_t i = 0; i < dst.size(); ++i) {
        MAXTEXT_CHECK(s.states[l][i].shape() == dst[i].shape(), ArgumentError, "[KVCache] restore_states: layer ", l,
                      " state ", i, " has another shape");
        if (dst[i].size() > 0) {
          be.copy(dst[i].data(), s.states[l][i].data(), static_cast<std::size_t>(dst[i].size()) * sizeof(float),
                  CopyKind::device_to_device);
        }
      }
      layers_[l].state_tokens = s.state_tokens[l];
      layers_[l].history = s.history[l];
    }
    be.synchronize();
  }
  /// Bytes held by the key/value buffers and the recurrent states.
  std::int64_t bytes() const {
    std::int64_t n = 0;
    for (const auto& l : layers_) {
      for (const auto& b : l.buffers) n += b.size() * static_cast<std::int64_t>(sizeof(typename P::cache_t));
      for (const auto& s : l.states) n += s.size() * static_cast<std::int64_t>(sizeof(float));
    }
    return n;
  }

 private:
  std::int64_t batch_ = 0, capacity_ = 0;
  std::vector<std::int32_t> lengths_;
  std::vector<layers::CacheFor<P>> layers_;
  Tensor<std::int32_t, 2> segment_;
  bool has_segments_ = false;
  bool recurrent_ = false;
};

}  // namespace maxtext::models
