// models/parallel.hpp: one model split over the ranks of a communicator by heads and MLP columns
// (Megatron-style tensor parallelism, MaxText's `tensor` mesh axis; docs/distributed.md).
//
// Each rank builds the same model type from tensor_parallel_config (its share of query heads, kv heads and MLP
// columns) and loads rank_slice of the whole model's tensors: views narrowed on the one axis where the
// rank's parameter is smaller, so each rank copies only its slice out of the mapped file and no weight byte passes
// through the communicator. Column-parallel products (q, k, v, wi) need nothing more; the row-parallel ones
// (attention out, MLP wo) sum their partial products over the ranks in f32 (DenseGeneral::forward_reduced): two
// all-reduces of [tokens, emb_dim] per layer. An untied output head is split by vocabulary: each rank computes V / N
// logits and one all-gather hands every rank all of them, the same bytes. Embeddings, norms and a head tied to the
// embedding table are replicated; a forward pass then hands every rank rank 0's logits (one broadcast), so all ranks
// sample alike.
//
// GQA groups stay whole: each rank takes num_query_heads / N query heads and num_kv_heads / N kv heads, or, with fewer
// kv heads than ranks, the one kv head its query heads read (kv heads replicated).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "maxtext/comm/communicator.hpp"
#include "maxtext/comm/mesh.hpp"
#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/decoder_blocks.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/io/convert.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::models {

/// The decoder blocks tensor parallelism splits (core/decoder_blocks.hpp, MAXTEXT_TENSOR_PARALLEL_BLOCKS).
inline const std::vector<std::string>& tensor_parallel_blocks() {
#define MAXTEXT_TP_NAME(name) #name,
  static const std::vector<std::string> list = {MAXTEXT_TENSOR_PARALLEL_BLOCKS(MAXTEXT_TP_NAME)};
#undef MAXTEXT_TP_NAME
  return list;
}

/// The config of one rank's share of `cfg` split over `ranks` tensor-parallel ranks (1: `cfg` itself). Refuses by
/// name a block tensor parallelism does not split yet, and sizes the ranks do not divide.
inline Config tensor_parallel_config(const Config& cfg, int ranks) {
  Config c = cfg;
  c.derive();
  if (ranks == 1) return c;
  MAXTEXT_CHECK(ranks > 1, ArgumentError, "[tensor parallel] expected at least one rank, found ", ranks);
  const std::string block(decoder_block_runs_as(c.decoder_block));
  bool ok = false;
  for (const auto& b : tensor_parallel_blocks()) ok = ok || b == block;
  MAXTEXT_CHECK(ok, UnsupportedError, "[tensor parallel] decoder_block '", c.decoder_block, "' is not split across ranks "
                "yet (ici_tensor_parallelism = ", ranks, "); the blocks that are: ", tensor_parallel_blocks());
  // GPT-3's fused kernel is [emb, 3, heads, head_dim]: a rank's heads are one slice of the heads axis. The other
  // blocks fuse [emb, q heads + 2 kv heads, head_dim], three pieces per rank.
  MAXTEXT_CHECK(!c.fused_qkv || block == "gpt3", UnsupportedError, "[tensor parallel] fused_qkv: the fused query/key/"
                "value kernel of decoder_block '", c.decoder_block, "' is not split across ranks (GPT-3's is)");
  MAXTEXT_CHECK(c.mhc_expansion_rate == 1 && c.engram_layers().empty(), UnsupportedError,
                "[tensor parallel] hyper-connections and Engram layers are not split across ranks");
  // Divide the base_* keys (derive() scales them again): the derived sizes then divide too.
  auto split = [&](const char* key, std::int64_t& base, std::int64_t full) {
    MAXTEXT_CHECK(full % ranks == 0 && base % ranks == 0, ConfigError, "[tensor parallel] ", key, " = ", full,
                  " is not divisible by the ", ranks, " tensor-parallel ranks");
    base /= ranks;
  };
  split("num_query_heads", c.base_num_query_heads, c.num_query_heads);
  split("mlp_dim", c.base_mlp_dim, c.mlp_dim);
  // Experts split by their hidden columns, as MaxText's `tensor` axis shards the experts' `mlp` axis (the experts
  // themselves go to `ici_expert_parallelism`); shared experts follow (shared_experts x moe_mlp_dim). Mixtral's and
  // gpt-oss's experts are mlp_dim wide (split above); these blocks build their MoE layers of moe_mlp_dim even with
  // one expert, whose output every rank then reduces: their width must be split too.
  const bool experts_of_mlp_dim = block == "mixtral" || block == "gpt_oss";
  const bool moe_even_with_one = block == "deepseek" || block == "qwen3_moe" || block == "qwen3_custom_moe" ||
                                 block == "llama4" || block == "envy";
  if (!experts_of_mlp_dim && (c.num_experts > 1 || moe_even_with_one) && c.moe_mlp_dim > 0) {
    split("moe_mlp_dim", c.base_moe_mlp_dim, c.moe_mlp_dim);
  }
  // OLMo 3's qk norm takes its statistic over all heads: each rank gathers the others' (layers::Attention), which
  // must then be the distinct heads, not copies of a replicated kv head.
  const bool all_heads_norm = c.use_qk_norm && c.model_name.rfind("olmo3", 0) == 0;
  MAXTEXT_CHECK(!all_heads_norm || c.num_kv_heads >= ranks, UnsupportedError, "[tensor parallel] num_kv_heads = ",
                c.num_kv_heads, " for ", ranks, " ranks: OLMo 3's qk norm over all heads needs the kv heads split, one or "
                "more per rank, not replicated");
  if (c.num_kv_heads >= ranks) {
    split("num_kv_heads", c.base_num_kv_heads, c.num_kv_heads);
  } else {
    MAXTEXT_CHECK(ranks % c.num_kv_heads == 0, ConfigError, "[tensor parallel] num_kv_heads = ", c.num_kv_heads,
                  ": fewer kv heads than the ", ranks, " ranks must divide them (each rank then keeps one kv head)");
    MAXTEXT_CHECK(c.global_parameter_scale == 1.0, ConfigError, "[tensor parallel] global_parameter_scale must be 1 "
                  "when kv heads are replicated, found ", c.global_parameter_scale);
    c.base_num_kv_heads = 1;
  }
  // Gemma 4's global layers read their own kv heads (global_num_kv_heads): split or kept alike, so that each rank's
  // query heads read the kv heads they read in one process.
  if (c.global_num_kv_heads > 0) {
    if (c.global_num_kv_heads >= ranks) {
      MAXTEXT_CHECK(c.global_num_kv_heads % ranks == 0, ConfigError, "[tensor parallel] global_num_kv_heads = ",
                    c.global_num_kv_heads, " is not divisible by the ", ranks, " tensor-parallel ranks");
      c.global_num_kv_heads /= ranks;
    } else {
      MAXTEXT_CHECK(ranks % c.global_num_kv_heads == 0, ConfigError, "[tensor parallel] global_num_kv_heads = ",
                    c.global_num_kv_heads, ": fewer global kv heads than the ", ranks, " ranks must divide them (each "
                    "rank then keeps one)");
      c.global_num_kv_heads = 1;
    }
  }
  // The output head by vocabulary columns (each rank V / N logits, gathered): an untied head whose vocabulary the
  // ranks divide. A head tied to the embedding table stays whole on every rank (the table is looked up whole).
  if (!c.logits_via_embedding && c.vocab_size % ranks == 0) c.head_shards = ranks;
  c.tensor_shards = ranks;
  c.derive();
  return c;
}

/// The config of expert rank `rank`'s share of `cfg` split over `ranks` expert-parallel ranks: every MoE layer holds
/// num_experts / ranks experts (Config::expert_shard). Refuses by name a model without experts and a count the ranks
/// do not divide.
inline Config expert_parallel_config(const Config& cfg, int rank, int ranks) {
  Config c = cfg;
  c.derive();
  if (ranks == 1) return c;
  MAXTEXT_CHECK(ranks > 1 && rank >= 0 && rank < ranks, ArgumentError, "[expert parallel] rank ", rank, " of ", ranks);
  MAXTEXT_CHECK(c.num_experts > 1, UnsupportedError, "[expert parallel] ici_expert_parallelism = ", ranks,
                ": decoder_block '", c.decoder_block, "' with num_experts = ", c.num_experts, " has no experts to split "
                "(ici_tensor_parallelism splits heads and MLP columns)");
  MAXTEXT_CHECK(c.num_experts % ranks == 0, ConfigError, "[expert parallel] num_experts = ", c.num_experts,
                " is not divisible by the ", ranks, " expert-parallel ranks");
  c.expert_shard = {rank, ranks};
  return c;
}

/// The decoder layers pipeline stage `stage` holds under `c`'s layout (Config::pipeline), as runs: "layers 0-3",
/// "layers 0, 2, 4-5". Names a stage in messages and its files (a session saved under one layout is not read under
/// another).
inline std::string pipeline_layers_label(const Config& c, std::int64_t stage) {
  std::string out;
  for (std::int64_t i = 0; i < c.num_decoder_layers;) {
    if (c.pipeline_owner(i) != stage) {
      ++i;
      continue;
    }
    std::int64_t j = i;
    while (j + 1 < c.num_decoder_layers && c.pipeline_owner(j + 1) == stage) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(i) + (j > i ? "-" + std::to_string(j) : std::string());
    i = j + 1;
  }
  return "layers " + out;
}

/// The config of pipeline stage `stage`'s share of `cfg` split over `stages` stages by layers (Config::pipeline): the
/// layers dealt as MaxText's config keys say when the config sets them (num_layers_per_pipeline_stage layers per chunk,
/// num_pipeline_repeats rounds, chunk i on stage i % stages: MaxText's circular pipeline; their product with the stages
/// must be num_decoder_layers, as MaxText asserts), else one run of consecutive layers per stage (the fewest transfers
/// per step; the first L % stages stages take one layer more). pipeline_parallel_layers other than -1 / all (the rest
/// data-parallel) is refused by name.
inline Config pipeline_parallel_config(const Config& cfg, int stage, int stages) {
  Config c = cfg;
  c.derive();
  if (stages == 1) return c;
  MAXTEXT_CHECK(stages > 1 && stage >= 0 && stage < stages, ArgumentError, "[pipeline] stage ", stage, " of ", stages);
  const std::int64_t L = c.num_decoder_layers;
  MAXTEXT_CHECK(stages <= L, ConfigError, "[pipeline] ici_pipeline_parallelism = ", stages, ": more stages than the ", L,
                " decoder layers");
  // -1: unset, or MaxText's -1 ("derive it").
  auto key = [&](const char* name) { return comm::Mesh::value(c, name, -1); };
  const std::int64_t ppl = key("pipeline_parallel_layers");
  MAXTEXT_CHECK(ppl == -1 || ppl == L, UnsupportedError, "[pipeline] pipeline_parallel_layers = ", ppl, ": pipelining "
                "some of the ", L, " layers (the rest as data parallelism) is not built; -1 pipelines all of them");
  std::int64_t per = key("num_layers_per_pipeline_stage"), reps = key("num_pipeline_repeats");
  if (per > 0 || reps > 0) {
    if (per <= 0) per = L % (stages * reps) == 0 ? L / (stages * reps) : 0;
    if (reps <= 0) reps = L % (stages * per) == 0 ? L / (stages * per) : 0;
    MAXTEXT_CHECK(per > 0 && reps > 0 && stages * per * reps == L, ConfigError, "[pipeline] the ", stages,
                  " pipeline stages x num_layers_per_pipeline_stage (", key("num_layers_per_pipeline_stage"),
                  ") x num_pipeline_repeats (", key("num_pipeline_repeats"), ") must equal num_decoder_layers = ", L,
                  " (as MaxText requires; leave both unset for one run of consecutive layers per stage)");
    c.pipeline.chunk = per;
  }
  c.pipeline.stage = stage;
  c.pipeline.stages = stages;
  // Every stage must keep a recurrent state if one does: callers treat a recurrent cache differently (a session
  // rewinds it to the start, speculative decoding runs the kept rows again, batching groups its passes), and all
  // stages must make the same calls. Qwen3-Next's layers are Gated DeltaNet (a state) but every
  // inhomogeneous_layer_cycle_interval-th, full attention (families/qwen3_next/qwen3_next.hpp).
  if (std::string(decoder_block_runs_as(c.decoder_block)) == "qwen3_next") {
    const std::int64_t cycle = c.inhomogeneous_layer_cycle_interval;
    for (std::int64_t s = 0; s < stages; ++s) {
      bool state = false;
      for (std::int64_t i = 0; i < L && !state; ++i) {
        state = c.pipeline_owner(i) == s && !(cycle > 0 && (i + 1) % cycle == 0);
      }
      MAXTEXT_CHECK(state, UnsupportedError, "[pipeline] stage ", s, " of ", stages, " would hold only full-attention "
                    "layers (", pipeline_layers_label(c, s), ") while the other stages hold Gated DeltaNet layers, "
                    "whose caches roll back otherwise; choose a layout that gives every stage a Gated DeltaNet layer");
    }
  }
  return c;
}

/// Pipeline stage's views of the whole model's `full` tensors: those its parameters name (`shapes`, the stage
/// model's param_shapes), and those the whole model's parameters (`whole`) do not name, which the loader then
/// reports. Views only; a block-quantised matrix is kept whole, as it lies in the file.
inline io::TensorMap stage_tensors(const io::TensorMap& full,
                                   const std::map<std::string, std::vector<std::int64_t>>& shapes,
                                   const std::map<std::string, std::vector<std::int64_t>>& whole) {
  io::TensorMap out;
  out.metadata = full.metadata;
  for (const auto& [name, t] : full.tensors) {
    if (shapes.count(name) != 0 || whole.count(name) == 0) out.add(name, t);
  }
  return out;
}

/// Rank `rank`'s views of the whole model's `full` tensors, for a model made from tensor_parallel_config(cfg, ranks)
/// or expert_parallel_config(cfg, rank, ranks) whose parameters take `shapes` (AnyModel::param_shapes). A parameter of the whole model's shape is shared; one that
/// is smaller on exactly one axis takes this rank's slice of it (heads, columns; a kv head for several ranks when
/// there are fewer kv heads than ranks). Tensors no parameter names pass through (the loader reports them). Views
/// only: nothing is copied here.
inline io::TensorMap rank_slice(const io::TensorMap& full,
                                           const std::map<std::string, std::vector<std::int64_t>>& shapes, int rank,
                                           int ranks) {
  MAXTEXT_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, ArgumentError, "[tensor parallel] rank ", rank, " of ", ranks);
  io::TensorMap out;
  out.metadata = full.metadata;
  for (const auto& [name, t] : full.tensors) {
    const auto it = shapes.find(name);
    if (it == shapes.end() || it->second == t.shape) {
      out.add(name, t);
      continue;
    }
    const std::vector<std::int64_t>& want = it->second;
    MAXTEXT_CHECK(want.size() == t.shape.size(), ShapeError, "[tensor parallel] ", name, ": the rank's parameter is ",
                  want, ", the file's tensor ", t.shape);
    int axis = -1;
    for (std::size_t a = 0; a < want.size(); ++a) {
      if (want[a] == t.shape[a]) continue;
      MAXTEXT_CHECK(axis < 0, ShapeError, "[tensor parallel] ", name, ": the rank's parameter ", want,
                    " differs from the file's tensor ", t.shape, " on more than one axis");
      axis = static_cast<int>(a);
    }
    const auto u = static_cast<std::size_t>(axis);
    const std::int64_t n = t.shape[u], w = want[u];
    std::int64_t begin = 0;
    if (w * ranks == n) {
      begin = rank * w;  // this rank's heads or columns
    } else if (w == 1 && n < ranks && ranks % n == 0) {
      begin = rank * n / ranks;  // fewer kv heads than ranks: the one this rank's query heads read
    } else {
      MAXTEXT_THROW(ShapeError, "[tensor parallel] ", name, ": axis ", axis, " of the file's tensor ", t.shape,
                    " does not split into ", ranks, " slices of ", w);
    }
    MAXTEXT_CHECK(t.dtype != DType::ggml, UnsupportedError, "[tensor parallel] ", name, ": a GGUF block-quantised tensor ",
                  "(", t.describe(), ") is not split across ranks yet (it is decoded to f32 or --weight-type first)");
    out.add(name, t.narrow(axis, begin, w));  // a block-quantised axis narrows only at block boundaries (refused)
  }
  return out;
}

/// A fingerprint of a model's tensors as this rank sees them before slicing: names, shapes, types and the first and
/// last eight values of each tensor (mapped files: a page or two read per tensor), and of the config the rank runs.
inline std::uint64_t model_fingerprint(const io::TensorMap& full, const Config& cfg) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a
  auto mix = [&](const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  auto mix_str = [&](const std::string& s) { mix(s.data(), s.size() + 1); };
  for (const auto& [name, t] : full.tensors) {
    mix_str(name);
    mix(t.shape.data(), t.shape.size() * sizeof(std::int64_t));
    const auto d = static_cast<int>(t.dtype);
    mix(&d, sizeof d);
    if (t.data != nullptr && t.numel() > 0) {
      const std::int64_t k = std::min<std::int64_t>(8, t.numel());
      for (std::int64_t i = 0; i < k; ++i) {  // the first and last elements, as doubles (any dtype, any strides)
        const double a = t.element(i), b = t.element(t.numel() - 1 - i);
        mix(&a, sizeof a);
        mix(&b, sizeof b);
      }
      // A mapped file faults in large folios (megabytes per value read on Linux 6.x with ext4): hand the pages back,
      // or they stay resident beside the loaded weights until the file is closed (~120 MB on model c).
      io::drop_source_pages(t);
    }
  }
  for (const char* key : {"decoder_block", "dtype", "weight_dtype", "vocab_size", "base_emb_dim", "base_num_query_heads",
                          "base_num_kv_heads", "base_mlp_dim", "base_num_decoder_layers", "head_dim", "max_target_length"}) {
    mix_str(cfg.get(key));
  }
  return h;
}

/// Refuse to start unless every rank holds the same files and config: each rank's fingerprint (model_fingerprint) is
/// gathered and compared with rank 0's; a rank that differs is named (on every rank), before the first step.
inline void check_ranks_agree(comm::Communicator& c, std::uint64_t fingerprint, std::string_view what) {
  if (c.size() <= 1) return;
  std::vector<std::uint64_t> all(static_cast<std::size_t>(c.size()));
  c.all_gather(&fingerprint, sizeof fingerprint, all.data(), what);
  std::string differ;
  for (std::size_t r = 1; r < all.size(); ++r) {
    if (all[r] != all[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  }
  MAXTEXT_CHECK(differ.empty(), CommError, "[tensor parallel] ", what, ": rank(s) ", differ, " hold other weights or "
                "another config than rank 0 (every rank must read the same files with the same settings)");
}

}  // namespace maxtext::models
