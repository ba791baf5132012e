// models/layer_runner.hpp: use one layer on its own: load its parameters from a file (names relative to the layer,
// or under a prefix), run it on a host tensor [B, T, D], get the output (and captures) back as f32.
//
//   using P = maxtext::Policy<maxtext::cpu::Backend, float>;
//   maxtext::cpu::Backend be;
//   maxtext::layers::Gpt3DecoderLayer<P> layer(cfg, {3, "decoder.layers_3", "decoder.layers_3.self_attention",
//                                                    "decoder.layers_3.mlp"});
//   auto params = maxtext::models::load_layer_params<P>(layer, maxtext::io::read_safetensors("model.safetensors"), be,
//                                                       "decoder.layers_3");          // "" for a per-layer file
//   maxtext::layers::Capture cap({"decoder.layers_3.self_attention"});              // optional
//   auto y = maxtext::models::run_layer<P>(layer, params, be, maxtext::io::read_npy("x.npy"), nullptr, nullptr, &cap);
//
// Any tensor file works for the input (io/tensor_files.hpp: read_tensor("dump.npz:decoder.layers_3.input")); the
// input may be of any float dtype (converted to the policy's activation type). `maxtext compare --layer` is this
// from the command line (docs/reference-checking.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/matrix.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/params.hpp"
#include "maxtext/models/kv_cache.hpp"

namespace maxtext::models {

/// Load the parameters of `layer` from `tensors` whose names are `prefix` + the layer's MaxText parameter paths
/// (e.g. prefix "decoder.layers_3" for a whole-model checkpoint, "" for a per-layer file). Tensors outside the prefix
/// are ignored; missing or mis-shaped ones are reported.
template <TensorPolicy P, class L>
typename L::Params load_layer_params(const L& layer, const io::TensorMap& tensors, const typename P::backend& be,
                                     const std::string& prefix = "") {
  typename L::Params p;
  io::TensorMap sub;
  const std::string pre = prefix.empty() ? std::string() : prefix + ".";
  for (const auto& [name, t] : tensors.tensors) {
    if (name.compare(0, pre.size(), pre) == 0) sub.add(name.substr(pre.size()), t);
  }
  layers::ParamLoader<P> loader(sub, be, "weights " + (prefix.empty() ? std::string("(layer)") : prefix));
  layer.visit(loader, p);
  loader.finish(/*allow_unused=*/false);
  return p;
}

/// Run a decoder layer (anything with forward(ctx, params, cache, x) and cache_spec()) on x [B, T, D] as a
/// full-sequence forward with a fresh cache of T tokens. Optional segment ids [B, T] and positions [B, T] (default
/// 0..T-1); `capture` records the names the layer offers (under its LayerInfo names). Returns the output [B, T, D].
/// A layer with mHC streams (mhc_expansion_rate k) takes [B, T, k*D] or MaxText's [B, T, k, D] and returns
/// [B, T, k*D].
template <TensorPolicy P, class L>
Tensor<float, 3> run_layer(const L& layer, const typename L::Params& params, const typename P::backend& be,
                           const AnyTensor& x, const Tensor<std::int32_t, 2>* segment_ids = nullptr,
                           const Tensor<std::int32_t, 2>* positions = nullptr, layers::Capture* capture = nullptr) {
  using A = typename P::act_t;
  MAXTEXT_CHECK(x.rank() == 3 || x.rank() == 4, ShapeError,
                "[run_layer] input must be [batch, length, embed] (or [batch, length, streams, embed]), found ", x.shape);
  const std::int64_t Bn = x.shape[0], T = x.shape[1], D = x.rank() == 4 ? x.shape[2] * x.shape[3] : x.shape[2];
  Scratch scratch(be.memory());
  KVCache<P> cache(be, Bn, T, {layer.cache_spec()}, {layers::state_spec_of(layer)});
  layers::StepInfo step;
  step.batch = Bn;
  step.length = T;
  step.start.assign(static_cast<std::size_t>(Bn), 0);
  std::vector<std::int32_t> pos(static_cast<std::size_t>(Bn * T)), len(static_cast<std::size_t>(Bn), static_cast<std::int32_t>(T));
  for (std::int64_t b = 0; b < Bn; ++b) {
    for (std::int64_t t = 0; t < T; ++t) pos[static_cast<std::size_t>(b * T + t)] = positions ? (*positions)(b, t) : static_cast<std::int32_t>(t);
  }
  auto up = [&](const std::int32_t* h, std::int64_t n) {
    View<std::int32_t, 1> d = scratch.alloc<std::int32_t, 1>({n});
    be.copy(d.data(), h, static_cast<std::size_t>(n) * 4, CopyKind::host_to_device);
    return d;
  };
  step.positions = up(pos.data(), Bn * T);
  step.q_start = up(step.start.data(), Bn);
  step.kv_len = up(len.data(), Bn);
  step.host_positions = pos;
  if (segment_ids) {
    MAXTEXT_CHECK(segment_ids->dim(0) == Bn && segment_ids->dim(1) == T, ShapeError, "[run_layer] segment_ids ",
                  segment_ids->shape(), " for input [", Bn, ",", T, "]");
    View<const std::int32_t, 1> s = up(segment_ids->data(), Bn * T);
    step.segment_ids = View<const std::int32_t, 2>(s.data(), {Bn, T});
    step.kv_segment_ids = step.segment_ids;
  }
  Tensor<A, 2> xh = x.to<A, 2>({Bn * T, D});
  View<A, 2> xd = scratch.alloc<A, 2>({Bn * T, D});
  be.copy(xd.data(), xh.data(), static_cast<std::size_t>(xh.size()) * sizeof(A), CopyKind::host_to_device);
  layers::Context<P> ctx{be, scratch, step, capture};
  layer.forward(ctx, params, cache.layer(0), xd);
  Tensor<A, 2> yh({Bn * T, D});
  be.copy(yh.data(), xd.data(), static_cast<std::size_t>(yh.size()) * sizeof(A), CopyKind::device_to_host);
  be.synchronize();
  Tensor<float, 3> y({Bn, T, D});
  for (std::int64_t i = 0; i < y.size(); ++i) y.data()[i] = to_float(yh.data()[i]);
  return y;
}

}  // namespace maxtext::models
