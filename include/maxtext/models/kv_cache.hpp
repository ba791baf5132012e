// models/kv_cache.hpp: the KV cache of a whole model: per layer the buffers its attention declares (keys and values,
// or MLA's latent + rotary key), one row per sequence slot, plus per-slot lengths and segment ids.
// Spec attention.md §5 (semantics), kept as one contiguous cache per slot (see layers/attention_op.hpp).
// A cache is move-only: its buffers are shared handles, so a copy would share the keys and values but keep its own
// lengths, and the two would overwrite each other's rows. clone() makes an independent copy (to fork a sequence).
// A paged cache (the constructor taking PagingOptions; models/paged_memory.hpp) spends memory only on the pages its
// sequences wrote, shares pages between sequences (share_prefix, clone) and copies a shared page when it is written.
#pragma once

#include <algorithm>
#include <memory>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "maxtext/backend/ops.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/models/paged_memory.hpp"
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
    make_layers(be, specs, states, [&](std::size_t, std::int64_t w) {
      return Tensor<cache_type, 3>(Shape<3>{batch, capacity, w}, be.memory());
    });
  }
  /// A paged cache: as above, but the key/value buffers take memory a page of `paging.tokens_per_page` tokens at a
  /// time from a pool of `paging.pages` pages (models/paged_memory.hpp); `capacity` is rounded up to whole pages.
  /// Host memory only (the CPU and reference backends; refused on others).
  KVCache(const B& be, std::int64_t batch, std::int64_t capacity, const std::vector<layers::CacheSpec>& specs,
          const std::vector<layers::StateSpec>& states, const PagingOptions& paging) {
    MAXTEXT_CHECK(be.memory()->host_accessible(), UnsupportedError, "[KVCache] a paged cache (attention: paged) needs "
                  "host memory (the CPU and reference backends); this backend's cache is device memory");
    MAXTEXT_CHECK(batch > 0 && capacity > 0, ArgumentError, "[KVCache] batch and capacity must be > 0, found ", batch,
                  " and ", capacity);
    MAXTEXT_CHECK(paging.tokens_per_page >= 0 && paging.pages >= 0, ConfigError, "[KVCache] pagedattn_tokens_per_page (",
                  paging.tokens_per_page, ") and pagedattn_num_pages (", paging.pages, ") must be >= 0 (0: automatic)");
    std::vector<std::int64_t> row_bytes;
    for (const auto& spec : specs) {
      for (std::int64_t w : spec) {
        if (w > 0) row_bytes.push_back(w * static_cast<std::int64_t>(sizeof(cache_type)));
      }
    }
    if (row_bytes.size() != [&] { std::size_t n = 0; for (const auto& sp : specs) n += sp.size(); return n; }() ||
        row_bytes.empty()) {  // nothing to page (no attention layers, or an empty buffer): an ordinary cache
      *this = KVCache(be, batch, capacity, specs, states);
      return;
    }
    const std::int64_t q = detail::page_quantum(row_bytes), nbuf = static_cast<std::int64_t>(row_bytes.size());
    const std::int64_t limit = detail::max_map_count() / 2;
    // A mapping per buffer for each page of each sequence, and as many unmapped gaps between them, at worst.
    auto mappings = [&](std::int64_t tpp) { return 2 * batch * ((capacity + tpp - 1) / tpp) * nbuf; };
    std::int64_t tpp = paging.tokens_per_page;
    if (tpp > 0) {
      MAXTEXT_CHECK(tpp % q == 0, ConfigError, "[KVCache] pagedattn_tokens_per_page = ", tpp, ": a page of every cache "
                    "buffer must be whole system pages (", detail::system_page_bytes(), " bytes), so tokens per page must "
                    "be a multiple of ", q, " for this model's cache; the nearest valid value is ",
                    std::max<std::int64_t>(q, (tpp + q / 2) / q * q));
      MAXTEXT_CHECK(mappings(tpp) <= limit, ConfigError, "[KVCache] pagedattn_tokens_per_page = ", tpp, ": ", batch,
                    " sequences of ", capacity, " tokens in pages that small could need ", mappings(tpp),
                    " memory mappings, more than half the process's limit (vm.max_map_count ", limit * 2,
                    "); use larger pages");
    } else {
      tpp = (32 + q - 1) / q * q;
      while (mappings(tpp) > limit && tpp < capacity) tpp *= 2;
    }
    capacity = (capacity + tpp - 1) / tpp * tpp;
    const std::int64_t per_seq = capacity / tpp, pages = paging.pages > 0 ? paging.pages : batch * per_seq;
    std::vector<std::int64_t> page_bytes;
    for (auto rb : row_bytes) page_bytes.push_back(rb * tpp);
    auto pool = std::make_shared<detail::PagePool>(std::move(page_bytes), pages);
    paged_ = std::make_shared<detail::PagedRegion>(pool, row_bytes, batch, capacity, tpp);
    batch_ = batch;
    capacity_ = capacity;
    lengths_.assign(static_cast<std::size_t>(batch), 0);
    make_layers(be, specs, states, [&](std::size_t k, std::int64_t w) {
      return Tensor<cache_type, 3>(View<cache_type, 3>(reinterpret_cast<cache_type*>(paged_->base(k)), {batch, capacity, w}),
                                   paged_, true);
    });
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
    if (paged_) {  // a new region over the same pool, each sequence sharing its pages (copied when written)
      std::vector<std::int64_t> row_bytes;
      for (const auto& l : layers_) {
        for (const auto& b : l.buffers) row_bytes.push_back(b.dim(2) * static_cast<std::int64_t>(sizeof(cache_type)));
      }
      c.paged_ = std::make_shared<detail::PagedRegion>(paged_->pool(), row_bytes, batch_, capacity_, paged_->tokens_per_page());
      for (std::int64_t b = 0; b < batch_; ++b) c.paged_->share(*paged_, paged_first_ + b, b, lengths_[static_cast<std::size_t>(b)]);
      std::size_t k = 0;
      for (std::size_t l = 0; l < layers_.size(); ++l) {
        for (const auto& b : layers_[l].buffers) {
          View<cache_type, 3> v(reinterpret_cast<cache_type*>(c.paged_->base(k++)), b.shape());
          c.layers_[l].buffers.emplace_back(v, c.paged_, true);
        }
      }
    }
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      if (!paged_) {
        for (const auto& b : layers_[l].buffers) c.layers_[l].buffers.push_back(copy(b));
      }
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
    v.paged_ = paged_;
    v.paged_first_ = paged_first_ + first;
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
    if (v.has_segments_ && !has_segments_) mark_all_segments(be, first, n);
    std::copy(v.lengths_.begin(), v.lengths_.end(), lengths_.begin() + first);
  }

  std::int64_t batch() const { return batch_; }
  std::int64_t capacity() const { return capacity_; }
  /// Tokens stored in slot b.
  std::int32_t length(std::int64_t b) const { return lengths_.at(static_cast<std::size_t>(b)); }
  const std::vector<std::int32_t>& lengths() const { return lengths_; }
  /// Slot b holds its first n tokens. A paged cache gives back its pages at n = 0; pages wholly past n > 0 stay with
  /// the slot (it will likely write there again: a rollback, a new turn) until the pool has no free page left.
  void set_length(std::int64_t b, std::int32_t n) {
    MAXTEXT_CHECK(n >= 0 && n <= capacity_, ArgumentError, "[KVCache] length ", n, " outside [0, ", capacity_, "]");
    lengths_.at(static_cast<std::size_t>(b)) = n;
    if (paged_) {
      paged_->set_keep(paged_first_ + b, n);
      if (n == 0) paged_->clear(paged_first_ + b, 0);
    }
  }
  /// Tokens [from, to) of slot b are about to be written (by a forward pass, import_slot): a paged cache maps pages
  /// for them, copying shared ones. Nothing to do for an ordinary cache.
  void prepare_write(std::int64_t b, std::int64_t from, std::int64_t to) {
    MAXTEXT_CHECK(b >= 0 && b < batch_ && from >= 0 && to <= capacity_, ArgumentError, "[KVCache] slot ", b, " tokens [",
                  from, ", ", to, ") outside [0, ", batch_, ") and [0, ", capacity_, "]");
    if (paged_) paged_->prepare_write(paged_first_ + b, from, to);
  }
  /// Whether the cache is paged, and what its pool holds.
  bool paged() const { return static_cast<bool>(paged_); }
  PagingStats paging_stats() const {
    if (!paged_) return {};
    PagingStats s = paged_->pool()->stats();
    s.tokens_per_page = paged_->tokens_per_page();
    return s;
  }
  /// Pages slot b maps (0 for an ordinary cache).
  std::int64_t pages_of(std::int64_t b) const { return paged_ ? paged_->pages_of(paged_first_ + b) : 0; }

  /// Whether share_prefix can take n tokens of slot src: any n, unless some layer keeps per-sequence states or
  /// histories, which summarise the whole sequence (then n must be its length).
  bool can_share(std::int64_t src, std::int64_t n) const {
    if (n == length(src)) return true;
    for (const auto& l : layers_) {
      if (!l.states.empty() || !l.history.empty()) return false;
    }
    return true;
  }
  /// Slot `dst` of this cache becomes the first n tokens of slot `src` of cache `from` (this cache or another of the
  /// same model): a paged cache of the same pool shares the pages (copied when either writes them), otherwise the
  /// rows are copied. Whatever dst held is dropped. Caches whose layers keep per-sequence states (Gated DeltaNet) or
  /// histories (Engram) can share only a whole sequence (n = from.length(src)): a state summarises all its tokens.
  void share_prefix(const B& be, const KVCache& from, std::int64_t src, std::int64_t dst, std::int64_t n) {
    MAXTEXT_CHECK(src >= 0 && src < from.batch_ && dst >= 0 && dst < batch_, ArgumentError, "[KVCache] share_prefix: "
                  "slots ", src, " -> ", dst, " outside [0, ", from.batch_, ") and [0, ", batch_, ")");
    const std::int32_t have = from.length(src);
    MAXTEXT_CHECK(n >= 0 && n <= have && n <= capacity_, ArgumentError, "[KVCache] share_prefix: ", n, " tokens of a "
                  "slot holding ", have, " (capacity ", capacity_, ")");
    MAXTEXT_CHECK(from.layers_.size() == layers_.size(), ArgumentError, "[KVCache] share_prefix: a cache of ",
                  from.layers_.size(), " layers into one of ", layers_.size());
    bool stateful = false;
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const auto &a = from.layers_[l], &c = layers_[l];
      MAXTEXT_CHECK(a.buffers.size() == c.buffers.size() && a.states.size() == c.states.size(), ArgumentError,
                    "[KVCache] share_prefix: layer ", l, " holds other buffers or states");
      for (std::size_t i = 0; i < a.buffers.size(); ++i) {
        MAXTEXT_CHECK(a.buffers[i].dim(2) == c.buffers[i].dim(2), ArgumentError, "[KVCache] share_prefix: layer ", l,
                      " buffer ", i, " is ", a.buffers[i].dim(2), " wide here, ", c.buffers[i].dim(2), " there");
      }
      stateful = stateful || !a.states.empty() || !a.history.empty();
    }
    MAXTEXT_CHECK(!stateful || n == have, UnsupportedError, "[KVCache] share_prefix: this model's layers keep "
                  "per-sequence states (Gated DeltaNet, Engram), which summarise all ", have, " tokens of the slot; "
                  "only the whole sequence can be shared, not ", n, " tokens");
    if (&from == this && src == dst) {
      set_length(dst, static_cast<std::int32_t>(n));
      return;
    }
    if (paged_ && from.paged_ && paged_->pool() == from.paged_->pool()) {
      paged_->share(*from.paged_, from.paged_first_ + src, paged_first_ + dst, n);
    } else {
      set_length(dst, 0);
      prepare_write(dst, 0, n);
      for (std::size_t l = 0; l < layers_.size() && n > 0; ++l) {
        for (std::size_t i = 0; i < layers_[l].buffers.size(); ++i) {
          const auto &a = from.layers_[l].buffers[i], &c = layers_[l].buffers[i];
          const std::int64_t w = a.dim(2);
          be.copy(c.data() + dst * capacity_ * w, a.data() + src * from.capacity_ * w,
                  static_cast<std::size_t>(n * w) * sizeof(cache_type), CopyKind::device_to_device);
        }
      }
    }
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const auto& a = from.layers_[l];
      auto& c = layers_[l];
      for (std::size_t i = 0; i < a.states.size(); ++i) {
        const std::int64_t w = a.states[i].dim(1);
        be.copy(c.states[i].data() + dst * w, a.states[i].data() + src * w, static_cast<std::size_t>(w) * sizeof(float),
                CopyKind::device_to_device);
      }
      if (!a.state_tokens.empty()) c.state_tokens[static_cast<std::size_t>(dst)] = a.state_tokens[static_cast<std::size_t>(src)];
      if (!a.history.empty()) {
        const auto w = static_cast<std::int64_t>(a.history.size()) / from.batch_;
        if (static_cast<std::int64_t>(c.history.size()) != batch_ * w) c.history.assign(static_cast<std::size_t>(batch_ * w), a.history.front());
        std::copy(a.history.begin() + src * w, a.history.begin() + (src + 1) * w, c.history.begin() + dst * w);
      }
    }
    if (from.has_segments_ || has_segments_) {
      if (!has_segments_) mark_all_segments(be);
      std::vector<std::int32_t> ids(static_cast<std::size_t>(n), 1);
      if (from.has_segments_ && n > 0) {
        be.copy(ids.data(), from.segment_.data() + src * from.capacity_, ids.size() * sizeof(std::int32_t),
                CopyKind::device_to_host);
        be.synchronize();
      }
      if (n > 0) {
        be.copy(segment_.data() + dst * capacity_, ids.data(), ids.size() * sizeof(std::int32_t), CopyKind::host_to_device);
      }
    }
    be.synchronize();
    lengths_[static_cast<std::size_t>(dst)] = static_cast<std::int32_t>(n);
    if (paged_) paged_->set_keep(paged_first_ + dst, n);
  }
  /// Forget slot b (a new sequence starts there); the others keep their contents.
  void reset(std::int64_t b) { set_length(b, 0); }
  void reset() {
    for (std::int64_t b = 0; b < batch_; ++b) set_length(b, 0);
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
    prepare_write(b, 0, n);
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
  /// Bytes held by the key/value buffers (a paged cache: its pool's pages in use) and the recurrent states.
  std::int64_t bytes() const {
    std::int64_t n = paged_ ? paging_stats().bytes_used() : 0;
    for (const auto& l : layers_) {
      for (const auto& b : l.buffers) n += paged_ ? 0 : b.size() * static_cast<std::int64_t>(sizeof(typename P::cache_t));
      for (const auto& s : l.states) n += s.size() * static_cast<std::int64_t>(sizeof(float));
    }
    return n;
  }

 private:
  /// Layers of buffers (`buffer(k, width)` makes the k-th, counting over all layers), per-sequence states and
  /// segment ids, for batch_ slots of capacity_ tokens.
  template <class MakeBuffer>
  void make_layers(const B& be, const std::vector<layers::CacheSpec>& specs, const std::vector<layers::StateSpec>& states,
                   MakeBuffer buffer) {
    MAXTEXT_CHECK(states.empty() || states.size() == specs.size(), ArgumentError, "[KVCache] ", states.size(),
                  " state specs for ", specs.size(), " layers");
    layers_.resize(specs.size());
    std::size_t k = 0;
    for (std::size_t l = 0; l < specs.size(); ++l) {
      for (std::int64_t w : specs[l]) layers_[l].buffers.push_back(buffer(k++, w));
      if (states.empty()) continue;
      for (std::int64_t w : states[l]) {
        layers_[l].states.emplace_back(Shape<2>{batch_, w}, be.memory());
        recurrent_ = true;
      }
      if (!states[l].empty()) layers_[l].state_tokens.assign(static_cast<std::size_t>(batch_), 0);
    }
    segment_ = Tensor<std::int32_t, 2>({batch_, capacity_}, be.memory());
  }
  /// The cache starts keeping segment ids: the cached tokens of its slots (but [skip, skip + n), whose ids are set
  /// already) were written without any, so they are real tokens (1) of one sequence.
  void mark_all_segments(const B& be, std::int64_t skip = 0, std::int64_t n = 0) {
    for (std::int64_t b = 0; b < batch_; ++b) {
      const std::int32_t len = lengths_[static_cast<std::size_t>(b)];
      if ((b >= skip && b < skip + n) || len == 0) continue;
      const std::vector<std::int32_t> ones(static_cast<std::size_t>(len), 1);
      be.copy(segment_.data() + b * capacity_, ones.data(), ones.size() * sizeof(std::int32_t), CopyKind::host_to_device);
    }
    be.synchronize();
    has_segments_ = true;
  }
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
  std::shared_ptr<detail::PagedRegion> paged_;  ///< a paged cache's memory (shared with its row views), or none
  std::int64_t paged_first_ = 0;                ///< a row view's first slot in paged_
};

}  // namespace maxtext::models
