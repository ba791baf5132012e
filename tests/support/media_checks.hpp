// tests/support/media_checks.hpp: the media merge (ForwardOptions::media_mask / media_embeddings) on a model whose
// layer type takes media but has no tower here (Gemma 4, Llama 4): rows equal to the model's own token embeddings must
// give the plain forward's logits wherever the merge cannot change attention (a one-token picture sees only itself;
// a causal merge never changes the mask), and a bidirectional picture of several tokens must change the logits of its
// earlier tokens (they now see the later ones) and of nothing before it.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "maxtext/core/tensor.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/models/transformer.hpp"

namespace maxtext::test {

template <class Model>
void check_media_merge(Model& m, const Tensor<std::int32_t, 2>& tokens, bool bidirectional, const std::string& what) {
  const std::int64_t T = tokens.dim(1);
  REQUIRE(T >= 7);
  Tensor<std::int32_t, 2> one({1, T});
  for (std::int64_t t = 0; t < T; ++t) one(0, t) = tokens(0, t);
  layers::Capture cap({m.embed_name()});
  models::ForwardOptions plain_fo;
  plain_fo.capture = &cap;
  const Tensor<float, 3> plain = m.forward(one, plain_fo);
  const AnyTensor& emb = cap.at(m.embed_name());  // [1, T, D] the token lookup, before any merge
  const std::int64_t D = emb.shape.back(), V = plain.dim(2);
  const auto merged = [&](const std::vector<std::int64_t>& marked) {
    Tensor<std::int32_t, 2> mask({1, T});
    for (std::int64_t t = 0; t < T; ++t) mask(0, t) = 0;
    Tensor<float, 2> rows({static_cast<std::int64_t>(marked.size()), D});
    for (std::size_t k = 0; k < marked.size(); ++k) {
      mask(0, marked[k]) = 1;
      for (std::int64_t d = 0; d < D; ++d) {
        rows(static_cast<std::int64_t>(k), d) = static_cast<float>(emb.element(marked[k] * D + d));
      }
    }
    models::ForwardOptions fo;
    fo.media_mask = &mask;
    fo.media_embeddings = &rows;
    return m.forward(one, fo);
  };
  const auto same_from = [&](const Tensor<float, 3>& l, std::int64_t t0, std::int64_t t1) {
    std::int64_t differ = 0;
    for (std::int64_t t = t0; t < t1; ++t) {
      for (std::int64_t v = 0; v < V; ++v) differ += l(0, t, v) != plain(0, t, v) ? 1 : 0;
    }
    return differ;
  };
  INFO(what);
  // Single-token pictures: the same logits, bit for bit.
  CHECK(same_from(merged({1, 4}), 0, T) == 0);
  // A three-token picture at 2..4: causal, nothing changes; bidirectional, tokens 2 and 3 see the later ones.
  const Tensor<float, 3> run = merged({2, 3, 4});
  if (bidirectional) {
    CHECK(same_from(run, 0, 2) == 0);
    CHECK(same_from(run, 2, 3) > 0);
  } else {
    CHECK(same_from(run, 0, T) == 0);
  }
}

}  // namespace maxtext::test
