// tests/support/attention_mask.hpp: the AttentionMask of an attention test case, built the same way by the CPU
// kernel, backend-op and CUDA tests.
#pragma once

#include <cstdint>

#include "maxtext/backend/ops.hpp"
#include "maxtext/core/tensor.hpp"

namespace maxtext::test {

/// The mask terms a test case chooses; segment ids are used only with `segments`.
struct MaskTerms {
  bool segments = false;
  bool causal = true;
  std::int64_t window = 0;
  std::int64_t chunk = 0;
};

inline AttentionMask attention_mask(View<const std::int32_t, 1> q_start, View<const std::int32_t, 1> kv_len,
                                    View<const std::int32_t, 2> q_segment, View<const std::int32_t, 2> kv_segment,
                                    const MaskTerms& t) {
  AttentionMask m;
  m.q_start = q_start;
  m.kv_len = kv_len;
  if (t.segments) {
    m.q_segment = q_segment;
    m.kv_segment = kv_segment;
  }
  m.causal = t.causal;
  m.sliding_window = t.window;
  m.chunk = t.chunk;
  return m;
}

}  // namespace maxtext::test
