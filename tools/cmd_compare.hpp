// tools/cmd_compare.hpp: `maxtext compare`: run a model (or one layer) on the reference's input, capture every
// activation the reference dump names, and print where and by how much the two differ (testing/reference_check.hpp).
// Included by tools/maxtext.cpp; `Args` is its parsed command line (has/get/integer/number/overrides).
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/io/tensor_files.hpp"
#include "maxtext/io/weights.hpp"
#include "maxtext/io/yaml_config.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/gpt3.hpp"
#include "maxtext/models/layer_runner.hpp"
#include "maxtext/models/registry.hpp"
#include "maxtext/models/transformer.hpp"
#include "maxtext/testing/reference_check.hpp"

namespace maxtext_cli {

/// Usage lines, spliced into the `maxtext` usage text (a string literal).
#define MAXTEXT_COMPARE_USAGE \
  "  compare   --config CFG [--weights FILE] --reference REF [--map NAMES] --tokens 1,2,3[/...]|tokens.npy\n" \
  "            [--rtol R] [--atol A | --scaled-tol S] [--max-kl-div X] [--top-k K] [--names maxtext|hf] [--json OUT]\n" \
  "            run the model on the tokens, capture every activation REF names (.npz, a directory of .npy, .npy or\n" \
  "            .safetensors; NAMES maps their names to ours: lines `their_name our_name`, `name -` ignores), print\n" \
  "            max abs/rel error and the worst element per tensor in forward order; exit 1 if any tensor fails\n" \
  "  compare   --layer KIND --config CFG --weights FILE [--prefix P] --input x.npy|NAME --reference REF [...]\n" \
  "            the same for one layer run on a given input. KIND: decoder (the config's decoder layer; or the\n" \
  "            decoder_block name, e.g. gpt3), moe (second layer kind, DeepSeek), gpt3_attention, gpt3_layernorm.\n" \
  "            Names are relative to the layer (`out` = its output) unless --prefix P loads P.* from the weights\n" \
  "            and names everything P, P.self_attention, ...; --segment-ids/--positions FILE.npy|NAME optional\n"

namespace compare_detail {

using namespace maxtext;

template <class T>
struct PolicyOf;
template <TensorPolicy P, template <class> class L, template <class> class M>
struct PolicyOf<models::Transformer<P, L, M>> {
  using type = P;
};

/// Gpt3MultiHeadAttention as a stand-alone "layer" (x -> attention(x), no residual).
template <TensorPolicy P>
class Gpt3AttentionLayer {
 public:
  using A = typename P::act_t;
  using Params = typename layers::Gpt3MultiHeadAttention<P>::Params;
  Gpt3AttentionLayer(const Config& c, std::string name) : attn_(c, std::move(name)) {}
  layers::CacheSpec cache_spec() const { return attn_.cache_spec(); }
  template <class V>
  void visit(V& v, Params& p) const {
    attn_.visit(v, p);
  }
  void forward(const layers::Context<P>& ctx, const Params& p, layers::LayerCache<A>& cache, View<A, 2> x) const {
    ScratchScope scope(ctx.scratch);
    View<A, 2> y = ctx.scratch.template alloc<A, 2>({x.dim(0), x.dim(1)});
    attn_.forward(ctx, p, View<const A, 2>(x), cache, y);
    ctx.be.copy(View<const A, 2>(y), x);
  }

 private:
  layers::Gpt3MultiHeadAttention<P> attn_;
};

/// Gpt3LayerNorm (eps normalization_layer_epsilon; a bias when the weights have one) as a stand-alone "layer".
template <TensorPolicy P>
class Gpt3LayerNormLayer {
 public:
  using A = typename P::act_t;
  using Params = typename layers::Gpt3LayerNorm<P>::Params;
  Gpt3LayerNormLayer(const Config& c, bool bias)
      : ln_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon), bias}) {}
  layers::CacheSpec cache_spec() const { return {}; }
  template <class V>
  void visit(V& v, Params& p) const {
    ln_.visit(v, p);
  }
  void forward(const layers::Context<P>& ctx, const Params& p, layers::LayerCache<A>&, View<A, 2> x) const {
    ln_.forward(ctx, p, View<const A, 2>(x), x);
  }

 private:
  layers::Gpt3LayerNorm<P> ln_;
};

inline bool is_file(const std::string& s) { return std::filesystem::is_regular_file(s); }

/// A tensor given on the command line: FILE.npy, FILE:NAME, or a NAME inside the reference.
inline AnyTensor tensor_arg(const std::string& what, const std::string& spec, const io::TensorMap& reference) {
  if (is_file(spec) || spec.find(':') != std::string::npos) return io::read_tensor(spec);
  MAXTEXT_CHECK(reference.has(spec), ArgumentError, "--", what, ": '", spec,
                "' is neither a file, FILE:NAME, nor a tensor of the reference");
  return reference.at(spec);
}

/// Integer [B, T] from a tensor of any integer dtype, [T] or [B, T].
inline Tensor<std::int32_t, 2> int_rows(const std::string& what, const AnyTensor& t) {
  MAXTEXT_CHECK(t.rank() == 1 || t.rank() == 2, ArgumentError, "--", what, ": expected [T] or [B, T], found ", t.describe());
  MAXTEXT_CHECK(dtype_is_int(t.dtype), ArgumentError, "--", what, ": expected integers, found ", t.describe());
  const std::int64_t B = t.rank() == 2 ? t.shape[0] : 1, T = t.shape.back();
  return t.to<std::int32_t, 2>({B, T});
}

/// --tokens: "1,2,3/4,5,6" (rows separated by '/'), FILE.npy, FILE:NAME or a reference tensor name.
inline Tensor<std::int32_t, 2> parse_tokens_arg(const std::string& s, const io::TensorMap& reference) {
  const bool listy = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) || c == ',' || c == '/' || c == ' ';
  });
  if (!listy) return int_rows("tokens", tensor_arg("tokens", s, reference));
  std::vector<std::vector<std::int32_t>> rows(1);
  std::string cur;
  auto flush = [&]() {
    if (cur.empty()) return;
    MAXTEXT_CHECK(cur.size() <= 10 && std::stoll(cur) <= 0x7fffffff, ArgumentError, "--tokens: '", cur,
                  "' is not a token id");
    rows.back().push_back(static_cast<std::int32_t>(std::stoll(cur)));
    cur.clear();
  };
  for (char c : s) {
    if (c == ',' || c == ' ') {
      flush();
    } else if (c == '/') {
      flush();
      rows.emplace_back();
    } else {
      cur.push_back(c);
    }
  }
  flush();
  const std::size_t T = rows[0].size();
  for (const auto& r : rows) {
    MAXTEXT_CHECK(!r.empty() && r.size() == T, ArgumentError, "--tokens: every row must be non-empty and of equal length");
  }
  Tensor<std::int32_t, 2> t({static_cast<std::int64_t>(rows.size()), static_cast<std::int64_t>(T)});
  for (std::size_t b = 0; b < rows.size(); ++b) {
    for (std::size_t i = 0; i < T; ++i) t(static_cast<std::int64_t>(b), static_cast<std::int64_t>(i)) = rows[b][i];
  }
  return t;
}

/// Trailing digits of a prefix ("decoder.layers_3" -> 3), or 0.
inline std::int64_t trailing_index(const std::string& s) {
  std::size_t e = s.size();
  while (e > 0 && std::isdigit(static_cast<unsigned char>(s[e - 1]))) --e;
  return e < s.size() ? std::stoll(s.substr(e)) : 0;
}

template <class Args>
testing::CheckOptions check_options(const Args& a) {
  testing::CheckOptions o;
  o.tol.rtol = a.number("rtol", 1e-4);
  o.tol.atol = a.number("atol", 1e-5);
  o.scaled_tol = a.number("scaled-tol", 0.0);
  o.max_kl_div = a.number("max-kl-div", -1.0);
  o.top_k = static_cast<int>(a.integer("top-k", 10));
  MAXTEXT_CHECK(o.tol.rtol >= 0 && o.tol.atol >= 0 && o.scaled_tol >= 0, ArgumentError,
                "--rtol, --atol and --scaled-tol must be >= 0");
  MAXTEXT_CHECK(!(a.has("scaled-tol") && (a.has("rtol") || a.has("atol"))), ArgumentError,
                "--scaled-tol replaces --rtol/--atol: give one criterion");
  MAXTEXT_CHECK(o.top_k >= 1, ArgumentError, "--top-k must be >= 1, found ", o.top_k);
  if (a.has("max-kl-div")) MAXTEXT_CHECK(o.max_kl_div >= 0, ArgumentError, "--max-kl-div must be >= 0");
  return o;
}

/// Print the report (and the JSON file); exit status 0 when every compared tensor passed, 1 otherwise.
template <class Args>
int finish(const Args& a, const layers::Capture& cap, const io::TensorMap& reference, const testing::NameMap& map,
           const std::string& header) {
  const testing::CheckOptions opt = check_options(a);
  const testing::CheckResult r = testing::check_against_reference(cap, reference, map, opt);
  std::cout << header << testing::format_report(r, opt);
  if (a.has("json")) {
    nlohmann::json j;
    j["pass"] = r.pass();
    j["first_failure"] = r.first_failure >= 0 ? nlohmann::json(r.rows[static_cast<std::size_t>(r.first_failure)].ours) : nlohmann::json();
    j["not_produced"] = r.not_produced;
    for (const auto& row : r.rows) {
      nlohmann::json e{{"reference", row.theirs}, {"ours", row.ours}, {"shape", row.shape}, {"pass", row.pass},
                       {"note", row.note}};
      if (row.comparable) {
        e["max_abs"] = row.report.max_abs;
        e["max_rel"] = row.report.max_rel;
        e["outside"] = row.report.outside;
        e["count"] = row.report.count;
        if (row.report.worst >= 0) {
          e["worst"] = {{"index", row.report.unravel(row.report.worst)}, {"ours", row.report.worst_actual},
                        {"reference", row.report.worst_expected}};
        }
      }
      if (row.logits) {
        e["kl"] = row.logits->kl;
        e["kl_max"] = row.logits->kl_max;
        e["kl_mean"] = row.logits->kl_mean;
        e["top_k"] = row.logits->k;
        e["top_k_overlap"] = row.logits->overlap;
        e["top1_agree"] = row.logits->top1_agree;
      }
      j["tensors"].push_back(e);
    }
    std::ofstream f(a.get("json"));
    MAXTEXT_CHECK(f.good(), IoError, "--json: cannot write ", a.get("json"));
    f << j.dump(1) << "\n";
  }
  MAXTEXT_CHECK(!r.rows.empty(), ArgumentError, "compare: none of the reference's ", reference.tensors.size(),
                " tensors matched a captured activation; pass --map to translate their names (see "
                "docs/reference-checking.md)");
  return r.pass() ? 0 : 1;
}

inline models::NameScheme scheme_arg(const std::string& s, models::NameScheme dflt) {
  if (s.empty()) return dflt;
  if (s == "maxtext") return models::NameScheme::maxtext;
  if (s == "hf") return models::NameScheme::hf;
  MAXTEXT_THROW(ArgumentError, "--names: expected maxtext or hf, found '", s, "'");
}

template <class Args, class Model>
int run_model(const Args& a, const Config& cfg, const io::TensorMap& reference, const testing::NameMap& map) {
  MAXTEXT_CHECK(a.has("tokens"), ArgumentError, "compare needs --tokens (or --layer KIND with --input)");
  const Tensor<std::int32_t, 2> tokens = parse_tokens_arg(a.get("tokens"), reference);
  cpu::Backend be(cpu::Options{static_cast<int>(a.integer("threads", 0))});
  models::NameScheme scheme = models::NameScheme::maxtext;
  std::optional<io::LoadedWeights> w;
  if (a.has("weights")) {
    w = io::load_weights(a.get("weights"), cfg);
    if (w->naming == io::WeightNaming::hf) scheme = models::NameScheme::hf;
  }
  scheme = scheme_arg(a.get("names"), scheme);
  Model model(cfg, std::move(be), scheme);
  if (w) {
    model.load(w->tensors);
  } else {
    model.init(static_cast<std::uint64_t>(a.integer("seed", cfg.init_weights_seed)));
  }
  layers::Capture cap(testing::wanted_names(reference, map));
  models::ForwardOptions fo;
  fo.capture = &cap;
  Tensor<std::int32_t, 2> seg, pos;
  if (a.has("segment-ids")) {
    seg = int_rows("segment-ids", tensor_arg("segment-ids", a.get("segment-ids"), reference));
    fo.segment_ids = &seg;
  }
  if (a.has("positions")) {
    pos = int_rows("positions", tensor_arg("positions", a.get("positions"), reference));
    fo.positions = &pos;
  }
  (void)model.forward(tokens, fo);
  const std::string header = str("model: decoder_block ", cfg.decoder_block, ", dtype ", cfg.dtype_canonical(), ", ",
                                 cfg.num_decoder_layers, " layers; tokens [", tokens.dim(0), ", ", tokens.dim(1),
                                 "]; names: ", scheme == models::NameScheme::hf ? "hf" : "maxtext", "\n");
  return finish(a, cap, reference, map, header);
}

template <class Args, TensorPolicy P, class L>
int run_one_layer(const Args& a, const Config& cfg, const L& layer, const io::TensorMap& weights, const std::string& prefix,
                  const io::TensorMap& reference, const testing::NameMap& map, const std::string& kind) {
  MAXTEXT_CHECK(a.has("input"), ArgumentError, "compare --layer needs --input FILE.npy|FILE:NAME|NAME");
  AnyTensor x = tensor_arg("input", a.get("input"), reference);
  if (x.rank() == 2) x = x.reshaped({1, x.shape[0], x.shape[1]});
  MAXTEXT_CHECK(x.rank() == 3 && x.shape[2] == cfg.emb_dim, ArgumentError, "--input: expected [B, T, ", cfg.emb_dim,
                "] (emb_dim), found ", x.describe());
  cpu::Backend be(cpu::Options{static_cast<int>(a.integer("threads", 0))});
  const auto params = models::load_layer_params<P>(layer, weights, be, prefix);
  Tensor<std::int32_t, 2> seg, pos;
  const Tensor<std::int32_t, 2>* segp = nullptr;
  const Tensor<std::int32_t, 2>* posp = nullptr;
  if (a.has("segment-ids")) {
    seg = int_rows("segment-ids", tensor_arg("segment-ids", a.get("segment-ids"), reference));
    segp = &seg;
  }
  if (a.has("positions")) {
    pos = int_rows("positions", tensor_arg("positions", a.get("positions"), reference));
    posp = &pos;
  }
  layers::Capture cap(testing::wanted_names(reference, map));
  const Tensor<float, 3> y = models::run_layer<P>(layer, params, be, x, segp, posp, &cap);
  const std::string out_name = prefix.empty() ? "out" : prefix;
  if (!cap.has(out_name) && cap.wants(out_name)) cap.put(out_name, AnyTensor::from(y, out_name));
  const std::string header = str("layer: ", kind, prefix.empty() ? std::string() : " " + prefix, ", dtype ",
                                 cfg.dtype_canonical(), "; input ", x.shape, "; output '", out_name, "'\n");
  return finish(a, cap, reference, map, header);
}

template <class Args, class Model>
int run_layer_kind(const Args& a, Config cfg, const io::TensorMap& reference, const testing::NameMap& map) {
  using P = typename PolicyOf<Model>::type;
  MAXTEXT_CHECK(a.has("weights"), ArgumentError, "compare --layer needs --weights FILE");
  const io::LoadedWeights w = io::load_weights(a.get("weights"), cfg);
  const std::string kind = a.get("layer"), prefix = a.get("prefix");
  const models::NameScheme scheme =
      scheme_arg(a.get("names"), w.naming == io::WeightNaming::hf ? models::NameScheme::hf : models::NameScheme::maxtext);
  layers::LayerInfo info;
  info.index = a.integer("layer-index", trailing_index(prefix));
  info.name = prefix;
  info.attention = layers::join_name(prefix, scheme == models::NameScheme::hf ? "self_attn" : "self_attention");
  if (kind == "gpt3_attention") {
    return run_one_layer<Args, P>(a, cfg, Gpt3AttentionLayer<P>(cfg, prefix), w.tensors, prefix, reference, map, kind);
  }
  if (kind == "gpt3_layernorm") {
    const bool bias = w.tensors.has(layers::join_name(prefix, "bias"));
    return run_one_layer<Args, P>(a, cfg, Gpt3LayerNormLayer<P>(cfg, bias), w.tensors, prefix, reference, map, kind);
  }
  if (kind == "moe") {
    if constexpr (Model::kTwoKinds) {
      using L = typename Model::MoeL;
      info.mlp = layers::join_name(prefix, models::detail::mlp_name<L>());
      return run_one_layer<Args, P>(a, cfg, L(cfg, info), w.tensors, prefix, reference, map, kind);
    } else {
      MAXTEXT_THROW(ArgumentError, "--layer moe: decoder_block ", cfg.decoder_block, " has one kind of layer");
    }
  }
  using L = typename Model::DenseL;
  info.mlp = layers::join_name(prefix, models::detail::mlp_name<L>());
  return run_one_layer<Args, P>(a, cfg, L(cfg, info), w.tensors, prefix, reference, map, kind);
}

}  // namespace compare_detail

/// `maxtext compare ...` (see MAXTEXT_COMPARE_USAGE). `make_config(args)` builds the Config from --config and the
/// key=value overrides the way the other commands do.
template <class Args, class MakeConfig>
int cmd_compare(const Args& args, MakeConfig&& make_config) {
  using namespace maxtext;
  Args a = args;
  MAXTEXT_CHECK(a.has("reference"), ArgumentError, "compare needs --reference FILE.npz|DIR|FILE.safetensors");
  const std::string kind = a.get("layer");
  const bool layer_mode = a.has("layer");
  if (layer_mode && kind != "decoder" && kind != "moe" && kind != "gpt3_attention" && kind != "gpt3_layernorm") {
    a.overrides.push_back("decoder_block=" + kind);  // --layer gpt3: that block's decoder layer
  }
  const Config cfg = make_config(a);
  const io::TensorMap reference = io::read_tensors(a.get("reference"));
  const testing::NameMap map = a.has("map") ? testing::NameMap::read(a.get("map")) : testing::NameMap();
  return models::with_model_type<cpu::Backend>(cfg, [&]<class Model>() {
    if (layer_mode) return compare_detail::run_layer_kind<Args, Model>(a, cfg, reference, map);
    return compare_detail::run_model<Args, Model>(a, cfg, reference, map);
  }, a.get("weight-type"));
}

}  // namespace maxtext_cli
