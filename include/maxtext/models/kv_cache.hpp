// models/kv_cache.hpp: the KV cache of a whole model: per layer the buffers its attention declares (keys and values,
// or MLA's latent + rotary key), one row per sequence slot, plus per-slot lengths and segment ids.
// Spec attention.md §5 (semantics), kept as one contiguous cache per slot (see layers/attention_op.hpp).
// A cache is move-only: its buffers are shared handles, so a copy would share the keys and values but keep its own
// lengths, and the two would overwrite each other's rows. clone() makes an independent copy (to fork a sequence).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "maxtext/backend/ops.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/models/session_file.hpp"

namespace maxtext::models {

template <TensorPolicy P>
class KVCache {
 public:
  using B = typename P::backend;
  using A = typename P::act_t;
  using cache_type = typename P::cache_t;

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

  /// Slots [first, first + n) as a cache of n slots over the same memory: its buffers, states and segment ids alias
  /// this cache's rows, and it starts with copies of their host state (lengths, state tokens, histories). A forward
  /// pass over it writes only those slots; put_rows(first, view) then brings the host state back. Which is how a pass
  /// runs over some of the conversations one cache holds (ForwardOptions::first_slot). The view must not outlive
  /// this cache's use: it shares the buffers, not the lengths.
  KVCache rows(std::int64_t first, std::int64_t n) const {
    MAXTEXT_CHECK(first >= 0 && n > 0 && first + n <= batch_, ArgumentError, "[KVCache] rows [", first, ", ", first + n,
                  ") outside the cache's ", batch_, " slots");
    KVCache v;
    v.batch_ = n;
    v.capacity_ = capacity_;
    v.lengths_.assign(lengths_.begin() + first, lengths_.begin() + first + n);
    v.has_segments_ = has_segments_;
    v.recurrent_ = recurrent_;
    v.layers_.resize(layers_.size());
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const auto& src = layers_[l];
      auto& dst = v.layers_[l];
      for (const auto& b : src.buffers) dst.buffers.emplace_back(b.view().narrow(0, first, n), b.holder(), b.host_accessible());
      for (const auto& s : src.states) dst.states.emplace_back(s.view().narrow(0, first, n), s.holder(), s.host_accessible());
      if (!src.state_tokens.empty()) {
        dst.state_tokens.assign(src.state_tokens.begin() + first, src.state_tokens.begin() + first + n);
      }
      if (!src.history.empty()) {  // B * w ids per layer (Engram: each row's last N-1 compressed tokens)
        const auto w = static_cast<std::int64_t>(src.history.size()) / batch_;
        dst.history.assign(src.history.begin() + first * w, src.history.begin() + (first + n) * w);
      }
    }
    v.segment_ = Tensor<std::int32_t, 2>(segment_.view().narrow(0, first, n), segment_.holder(), segment_.host_accessible());
    return v;
  }
  /// The host state of a view made by rows(first, n), after its forward passes, back into slots [first, first + n).
  void put_rows(const B& be, std::int64_t first, const KVCache& v) {
    const std::int64_t n = v.batch_;
    MAXTEXT_CHECK(first >= 0 && n > 0 && first + n <= batch_ && v.layers_.size() == layers_.size(), ArgumentError,
                  "[KVCache] put_rows: a view of ", n, " slots and ", v.layers_.size(), " layers at slot ", first,
                  " does not fit a cache of ", batch_, " slots and ", layers_.size(), " layers");
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const auto& src = v.layers_[l];
      auto& dst = layers_[l];
      if (!src.state_tokens.empty()) std::copy(src.state_tokens.begin(), src.state_tokens.end(), dst.state_tokens.begin() + first);
      if (src.history.empty()) continue;
      const auto w = static_cast<std::int64_t>(src.history.size()) / n;
      if (static_cast<std::int64_t>(dst.history.size()) != batch_ * w) {
        // The view's layer started its history; the other rows have none yet, so they hold no tokens (a row starting
        // at length 0 sets its own).
        for (std::int64_t b = 0; b < batch_; ++b) {
          MAXTEXT_CHECK((b >= first && b < first + n) || lengths_[static_cast<std::size_t>(b)] == 0, ArgumentError,
                        "[KVCache] put_rows: layer ", l, " has no history for slot ", b, ", which holds ",
                        lengths_[static_cast<std::size_t>(b)], " tokens");
        }
        dst.history.assign(static_cast<std::size_t>(batch_ * w), src.history.front());
      }
      std::copy(src.history.begin(), src.history.end(), dst.history.begin() + first * w);
    }
    if (v.has_segments_ && !has_segments_) {
      // The other slots' cached tokens were written without segment ids: they are real tokens (1) of one sequence.
      for (std::int64_t b = 0; b < batch_; ++b) {
        const std::int32_t len = lengths_[static_cast<std::size_t>(b)];
        if ((b >= first && b < first + n) || len == 0) continue;
        const std::vector<std::int32_t> ones(static_cast<std::size_t>(len), 1);
        be.copy(segment_.data() + b * capacity_, ones.data(), ones.size() * sizeof(std::int32_t),
                CopyKind::host_to_device);
      }
      be.synchronize();
      has_segments_ = true;
    }
    std::copy(v.lengths_.begin(), v.lengths_.end(), lengths_.begin() + first);
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
  /// The width of each layer's buffers and states (session files compare them: session_file::Layout).
  void widths(std::vector<std::vector<std::int64_t>>& buffers, std::vector<std::vector<std::int64_t>>& states) const {
    buffers.assign(layers_.size(), {});
    states.assign(layers_.size(), {});
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      for (const auto& b : layers_[l].buffers) buffers[l].push_back(b.dim(2));
      for (const auto& s : layers_[l].states) states[l].push_back(s.dim(1));
    }
  }
  /// Slot b's first n tokens on the host (a session file's data): every layer's buffer rows [n, width] as bytes of
  /// the cache type, its states, the tokens they summarise and its history; and the slot's segment ids.
  std::vector<session_file::LayerData> export_slot(const B& be, std::int64_t b, std::int64_t n,
                                                   std::vector<std::int32_t>* segments = nullptr) const {
    check_slot(b, n);
    using C = typename P::cache_t;
    std::vector<session_file::LayerData> out(layers_.size());
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const auto& src = layers_[l];
      auto& d = out[l];
      for (const auto& buf : src.buffers) {
        const std::int64_t w = buf.dim(2);
        d.buffers.emplace_back(static_cast<std::size_t>(n * w) * sizeof(C));
        if (n > 0) {
          be.copy(d.buffers.back().data(), buf.data() + b * capacity_ * w, d.buffers.back().size(),
                  CopyKind::device_to_host);
        }
      }
      for (const auto& st : src.states) {
        const std::int64_t w = st.dim(1);
        d.states.emplace_back(static_cast<std::size_t>(w));
        be.copy(d.states.back().data(), st.data() + b * w, static_cast<std::size_t>(w) * sizeof(float),
                CopyKind::device_to_host);
      }
      if (!src.state_tokens.empty()) d.state_tokens = src.state_tokens[static_cast<std::size_t>(b)];
      d.history = src.history;
    }
    if (segments) {
      segments->assign(static_cast<std::size_t>(has_segments_ ? n : 0), 1);
      if (has_segments_ && n > 0) {
        be.copy(segments->data(), segment_.data() + b * capacity_, static_cast<std::size_t>(n) * sizeof(std::int32_t),
                CopyKind::device_to_host);
      }
    }
    be.synchronize();
    return out;
  }
  /// Puts export_slot's data back into slot b, which then holds n tokens (the data must match this cache's widths:
  /// session_file::decode checked them).
  void import_slot(const B& be, std::int64_t b, std::int64_t n, const std::vector<session_file::LayerData>& data,
                   const std::vector<std::int32_t>* segments = nullptr) {
    check_slot(b, n);
    using C = typename P::cache_t;
    MAXTEXT_CHECK(data.size() == layers_.size(), ArgumentError, "[KVCache] import_slot: data of ", data.size(),
                  " layers for a cache of ", layers_.size());
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      auto& dst = layers_[l];
      const auto& d = data[l];
      MAXTEXT_CHECK(d.buffers.size() == dst.buffers.size() && d.states.size() == dst.states.size(), ArgumentError,
                    "[KVCache] import_slot: layer ", l, " has other buffers or states");
      for (std::size_t i = 0; i < dst.buffers.size(); ++i) {
        const std::int64_t w = dst.buffers[i].dim(2);
        MAXTEXT_CHECK(d.buffers[i].size() == static_cast<std::size_t>(n * w) * sizeof(C), ArgumentError,
                      "[KVCache] import_slot: layer ", l, " buffer ", i, " holds ", d.buffers[i].size(), " bytes");
        if (n > 0) {
          be.copy(dst.buffers[i].data() + b * capacity_ * w, d.buffers[i].data(), d.buffers[i].size(),
                  CopyKind::host_to_device);
        }
      }
      for (std::size_t i = 0; i < dst.states.size(); ++i) {
        const std::int64_t w = dst.states[i].dim(1);
        MAXTEXT_CHECK(static_cast<std::int64_t>(d.states[i].size()) == w, ArgumentError, "[KVCache] import_slot: layer ",
                      l, " state ", i, " has ", d.states[i].size(), " values for ", w);
        be.copy(dst.states[i].data() + b * w, d.states[i].data(), static_cast<std::size_t>(w) * sizeof(float),
                CopyKind::host_to_device);
      }
      if (!dst.state_tokens.empty()) dst.state_tokens[static_cast<std::size_t>(b)] = d.state_tokens;
      dst.history = d.history;
    }
    if (segments && !segments->empty()) {
      MAXTEXT_CHECK(static_cast<std::int64_t>(segments->size()) == n, ArgumentError, "[KVCache] import_slot: ",
                    segments->size(), " segment ids for ", n, " tokens");
      be.copy(segment_.data() + b * capacity_, segments->data(), static_cast<std::size_t>(n) * sizeof(std::int32_t),
              CopyKind::host_to_device);
      has_segments_ = true;
    }
    be.synchronize();
    set_length(b, static_cast<std::int32_t>(n));
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
  void check_slot(std::int64_t b, std::int64_t n) const {
    MAXTEXT_CHECK(b >= 0 && b < batch_ && n >= 0 && n <= capacity_, ArgumentError, "[KVCache] slot ", b, " and ", n,
                  " tokens outside [0, ", batch_, ") and [0, ", capacity_, "]");
  }
  std::int64_t batch_ = 0, capacity_ = 0;
  std::vector<std::int32_t> lengths_;
  std::vector<layers::CacheFor<P>> layers_;
  Tensor<std::int32_t, 2> segment_;
  bool has_segments_ = false;
  bool recurrent_ = false;
};

}  // namespace maxtext::models
