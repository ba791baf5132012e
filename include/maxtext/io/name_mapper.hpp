// io/name_mapper.hpp: the bookkeeping every checkpoint importer of a decoder family needs when it maps a file's tensor
// names to MaxText's (families/gpt_oss/import.hpp, families/llama4/import.hpp): take a tensor by name (remembering it as used, or as
// missing), put the mapped view under its MaxText name with its provenance, check shapes, and at the end report every
// missing and every unexpected tensor at once.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::io::detail {

/// The defaults of every imported SwiGLU model's config (Llama, Qwen, Llama 4, Qwen3-Next): f32, unscanned, no
/// dropout, SiLU-gated MLP, its own output head, RoPE timescales from 1.
inline void base_llama_config(Config& c) {
  c.dtype = "float32";
  c.weight_dtype = "float32";
  c.mlp_activations = {"silu", "linear"};
  c.logits_via_embedding = false;
  c.scan_layers = false;
  c.enable_dropout = false;
  c.rope_min_timescale = 1;
}

/// AnyTensor::concat, with the parts widened to f32 when their types differ (a mixed-quantisation file may store the
/// q | k | v rows and z, or beta and alpha, in different types).
inline AnyTensor concat_any(std::vector<AnyTensor> parts, int axis, const std::string& source) {
  bool mixed = false;
  for (const auto& p : parts) mixed = mixed || p.dtype != parts.front().dtype;
  if (mixed) {
    for (auto& p : parts) {
      Tensor<float, 1> flat({p.numel()});
      for (std::int64_t i = 0; i < p.numel(); ++i) flat(i) = static_cast<float>(p.element(i));
      p = AnyTensor::from(flat, p.source).reshaped(p.shape);
    }
  }
  return AnyTensor::concat(parts, axis, source);
}

/// Name mapping with missing / unexpected tensor bookkeeping for one family (`family` names it in errors).
class NameMapper {
 public:
  NameMapper(const TensorMap& in, const Config& cfg, std::string what, std::string family)
      : in_(in), cfg_(cfg), what_(std::move(what)), family_(std::move(family)) {}

  const AnyTensor* get(const std::string& name, bool required = true) {
    auto it = in_.tensors.find(name);
    if (it == in_.tensors.end()) {
      if (required) missing_.push_back(name);
      return nullptr;
    }
    used_.insert(name);
    return &it->second;
  }
  bool has(const std::string& name) const { return in_.tensors.count(name) != 0; }
  /// Adds `t` under MaxText name `name`; with `from`, its source names the file tensor it came from.
  void put(const std::string& name, AnyTensor t, const std::string& from = "") {
    if (!from.empty()) t.source = t.source + " (" + from + " as " + name + ")";
    out_.add(name, std::move(t));
  }
  /// Tensors consumed by a helper that read `in()` directly.
  void mark_used(const std::vector<std::string>& names) { used_.insert(names.begin(), names.end()); }
  const TensorMap& in() const { return in_; }

  /// A file's [out, in] matrix as MaxText [in, out] (view).
  void dense(const std::string& from, const std::string& to) {
    if (const AnyTensor* t = get(from)) {
      check(*t, 2, from);
      put(to, t->permuted({1, 0}), from);
    }
  }
  /// llama.cpp's stacked expert matrices [E, out, in] -> MaxText's [E, in, out] (view).
  void experts(const AnyTensor& t, const std::string& from, const std::string& to, std::int64_t out, std::int64_t in) {
    shape(t, {cfg_.num_experts, out, in}, from);
    put(to, t.permuted({0, 2, 1}), from);
  }
  void same(const std::string& from, const std::string& to) {
    if (const AnyTensor* t = get(from)) put(to, *t, from);
  }
  /// llama.cpp's routed experts of GGUF block `blk` ("blk.3."), [E, out, in] each: the fused ffn_gate_up_exps
  /// [E, 2F, D] (gate rows first) or ffn_gate_exps / ffn_up_exps, then ffn_down_exps, as MaxText's `to` + wi_0, wi_1
  /// and wo (views). F is the expert's hidden size.
  void gguf_routed_experts(const std::string& blk, const std::string& to, std::int64_t F) {
    const std::int64_t D = cfg_.emb_dim;
    if (const std::string fused = blk + "ffn_gate_up_exps.weight"; has(fused)) {
      const AnyTensor* t = get(fused);
      shape(*t, {cfg_.num_experts, 2 * F, D}, fused);
      put(to + "wi_0", t->narrow(1, 0, F).permuted({0, 2, 1}), fused);
      put(to + "wi_1", t->narrow(1, F, F).permuted({0, 2, 1}), fused);
    } else {
      if (const AnyTensor* t = get(blk + "ffn_gate_exps.weight")) experts(*t, blk + "ffn_gate_exps.weight", to + "wi_0", F, D);
      if (const AnyTensor* t = get(blk + "ffn_up_exps.weight")) experts(*t, blk + "ffn_up_exps.weight", to + "wi_1", F, D);
    }
    if (const AnyTensor* t = get(blk + "ffn_down_exps.weight")) experts(*t, blk + "ffn_down_exps.weight", to + "wo", D, F);
  }
  /// q/k/v [heads*H, D] -> [D, heads, H]; bias [heads*H] -> [heads, H]. H is `head_dim` when > 0 (a layer with its
  /// own head size), else the config's.
  void head_proj(const std::string& from, const std::string& to, std::int64_t heads, bool bias, std::int64_t head_dim = 0) {
    const std::int64_t H = head_dim > 0 ? head_dim : cfg_.head_dim, D = cfg_.emb_dim;
    if (const AnyTensor* t = get(from + ".weight")) {
      shape(*t, {heads * H, D}, from + ".weight");
      put(to + ".kernel", t->reshaped({heads, H, D}).permuted({2, 0, 1}), from + ".weight");
    }
    if (!bias) return;
    if (const AnyTensor* t = get(from + ".bias")) {
      shape(*t, {heads * H}, from + ".bias");
      put(to + ".bias", t->reshaped({heads, H}), from + ".bias");
    }
  }
  /// o_proj [D, N*H] -> out.kernel [N, H, D]; bias [D]. H as in head_proj.
  void out_proj(const std::string& from, const std::string& to, bool bias, std::int64_t head_dim = 0) {
    const std::int64_t N = cfg_.num_query_heads, H = head_dim > 0 ? head_dim : cfg_.head_dim, D = cfg_.emb_dim;
    if (const AnyTensor* t = get(from + ".weight")) {
      shape(*t, {D, N * H}, from + ".weight");
      put(to + ".kernel", t->reshaped({D, N, H}).permuted({1, 2, 0}), from + ".weight");
    }
    if (bias) same(from + ".bias", to + ".bias");
  }

  void check(const AnyTensor& t, int rank, const std::string& name) const {
    MAXTEXT_CHECK(t.rank() == rank, ShapeError, "[", what_, "] ", name, ": expected rank ", rank, ", found ", t.describe());
  }
  void shape(const AnyTensor& t, const std::vector<std::int64_t>& want, const std::string& name) const {
    MAXTEXT_CHECK(t.shape == want, ShapeError, "[", what_, "] ", name, ": expected shape ", want, ", found ", t.describe());
  }
  /// A contiguous float copy when `t` is a strided view (reshape needs contiguous data).
  static AnyTensor contiguous(const AnyTensor& t) {
    if (t.is_contiguous()) return t;
    std::vector<std::int64_t> shape = t.shape;
    Tensor<float, 1> flat({t.numel()});
    for (std::int64_t i = 0; i < t.numel(); ++i) flat(i) = static_cast<float>(t.element(i));
    return AnyTensor::from(flat, t.source).reshaped(shape);
  }

  /// The mapped tensors; an IoError listing every missing tensor and every unused one whose name does not start
  /// with one of `ignorable_prefixes`.
  TensorMap finish(const std::vector<std::string>& ignorable_prefixes = {}) {
    std::string msg;
    std::size_t problems = missing_.size();
    for (const auto& m : missing_) msg += "\n  missing tensor " + m;
    for (const auto& [name, t] : in_.tensors) {
      if (used_.count(name) != 0) continue;
      bool ignore = false;
      for (const auto& p : ignorable_prefixes) ignore = ignore || name.rfind(p, 0) == 0;
      if (!ignore) {
        msg += "\n  unexpected tensor " + name + " " + t.describe();
        ++problems;
      }
    }
    MAXTEXT_CHECK(msg.empty(), IoError, "[", what_, "] ", problems, " problem(s) mapping ", family_,
                  " tensors to MaxText names:", msg);
    out_.metadata = in_.metadata;
    return std::move(out_);
  }

  const Config& cfg() const { return cfg_; }
  const std::string& what() const { return what_; }

 private:
  const TensorMap& in_;
  const Config& cfg_;
  std::string what_, family_;
  std::set<std::string> used_;
  std::vector<std::string> missing_;
  TensorMap out_;
};

}  // namespace maxtext::io::detail
