// layers/vision_step.hpp: the forward-pass layout of a vision tower's encoder (families/*/vision.hpp): n pictures or
// tiles of T rows each, every row seeing all rows of its own sequence and nothing else (no cache, no causal term),
// and host integers uploaded into the backend's memory from the pass's scratch.
#pragma once

#include <cstdint>
#include <vector>

#include "maxtext/backend/ops.hpp"
#include "maxtext/core/matrix.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/layers/context.hpp"

namespace maxtext::layers {

/// `host` copied into `be`'s memory, allocated from `scratch`.
template <class B>
View<const std::int32_t, 1> upload_ints(const B& be, Scratch& scratch, const std::vector<std::int32_t>& host) {
  View<std::int32_t, 1> d = scratch.alloc<std::int32_t, 1>({static_cast<std::int64_t>(host.size())});
  be.copy(d.data(), host.data(), host.size() * sizeof(std::int32_t), CopyKind::host_to_device);
  return View<const std::int32_t, 1>(d);
}

/// The step and the attention mask of n sequences of T rows that each attend to the whole of their own sequence.
struct WholeSequences {
  StepInfo step;
  AttentionMask mask;
};

template <class B>
WholeSequences whole_sequences(const B& be, Scratch& scratch, std::int64_t n, std::int64_t T) {
  WholeSequences w;
  w.step.batch = n;
  w.step.length = T;
  w.step.start.assign(static_cast<std::size_t>(n), 0);
  w.step.q_start = upload_ints(be, scratch, std::vector<std::int32_t>(static_cast<std::size_t>(n), 0));
  w.step.kv_len = upload_ints(be, scratch, std::vector<std::int32_t>(static_cast<std::size_t>(n), static_cast<std::int32_t>(T)));
  w.mask.q_start = w.step.q_start;
  w.mask.kv_len = w.step.kv_len;
  w.mask.causal = false;
  return w;
}

}  // namespace maxtext::layers
