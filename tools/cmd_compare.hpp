// tools/cmd_compare.hpp: `maxtext compare`: run a model (or one layer) on the reference's input, capture every
// activation the reference dump names, and print where and by how much the two differ (testing/reference_check.hpp).
// Included by tools/cli_compare.cpp; `Args` is the parsed command line (cli_args.hpp) (has/get/integer/number/overrides).
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_common.hpp"
#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/io/tensor_files.hpp"
#include "maxtext/io/yaml_config.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/models/any_model.hpp"
#include "maxtext_blocks_built.hpp"
#include "maxtext/testing/reference_check.hpp"

namespace maxtext_cli {

namespace compare_detail {

using namespace maxtext;

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
  const auto rows = maxtext::cli::parse_token_rows(s);
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

/// --segment-ids / --positions, when given.
struct RowInputs {
  Tensor<std::int32_t, 2> seg, pos;
  const Tensor<std::int32_t, 2>* segp = nullptr;
  const Tensor<std::int32_t, 2>* posp = nullptr;
};
template <class Args>
void read_row_inputs(const Args& a, const io::TensorMap& reference, RowInputs& in) {
  if (a.has("segment-ids")) {
    in.seg = int_rows("segment-ids", tensor_arg("segment-ids", a.get("segment-ids"), reference));
    in.segp = &in.seg;
  }
  if (a.has("positions")) {
    in.pos = int_rows("positions", tensor_arg("positions", a.get("positions"), reference));
    in.posp = &in.pos;
  }
}

inline std::unique_ptr<models::AnyModel> make_model(const Config& cfg, int threads, models::NameScheme scheme,
                                                    const std::string& weight_type) {
  models::AnyModelOptions o;
  o.threads = threads;
  o.names = scheme;
  o.weight_type = weight_type;
  return models::make_built_any_model(cfg, o, MAXTEXT_BLOCKS_BUILT);
}

template <class Args>
int run_model(const Args& a, const Config& cfg, const io::TensorMap& reference, const testing::NameMap& map) {
  MAXTEXT_CHECK(a.has("tokens"), ArgumentError, "compare needs --tokens (or --layer KIND with --input)");
  const Tensor<std::int32_t, 2> tokens = parse_tokens_arg(a.get("tokens"), reference);
  models::NameScheme scheme = models::NameScheme::maxtext;
  std::optional<io::LoadedWeights> w;
  if (a.has("weights")) {
    w = io::load_weights(a.get("weights"), cfg);
    if (w->naming == io::WeightNaming::hf) scheme = models::NameScheme::hf;
  }
  scheme = scheme_arg(a.get("names"), scheme);
  const auto model = make_model(cfg, static_cast<int>(a.integer("threads", 0)), scheme, a.get("weight-type"));
  if (w) {
    model->load(w->tensors);
  } else {
    model->init(static_cast<std::uint64_t>(a.integer("seed", cfg.init_weights_seed)));
  }
  layers::Capture cap(testing::wanted_names(reference, map));
  RowInputs in;
  read_row_inputs(a, reference, in);
  models::ForwardRequest r;
  r.tokens = &tokens;
  r.segment_ids = in.segp;
  r.positions = in.posp;
  r.capture = &cap;
  (void)model->forward(r);
  const std::string header = str("model: decoder_block ", cfg.decoder_block, ", dtype ", cfg.dtype_canonical(), ", ",
                                 cfg.num_decoder_layers, " layers; tokens [", tokens.dim(0), ", ", tokens.dim(1),
                                 "]; names: ", scheme == models::NameScheme::hf ? "hf" : "maxtext", "\n");
  return finish(a, cap, reference, map, header);
}

template <class Args>
int run_layer_kind(const Args& a, const Config& cfg, const io::TensorMap& reference, const testing::NameMap& map) {
  MAXTEXT_CHECK(a.has("weights"), ArgumentError, "compare --layer needs --weights FILE");
  MAXTEXT_CHECK(a.has("input"), ArgumentError, "compare --layer needs --input FILE.npy|FILE:NAME|NAME");
  const io::LoadedWeights w = io::load_weights(a.get("weights"), cfg);
  const std::string kind = a.get("layer"), prefix = a.get("prefix");
  const models::NameScheme scheme =
      scheme_arg(a.get("names"), w.naming == io::WeightNaming::hf ? models::NameScheme::hf : models::NameScheme::maxtext);
  const auto model = make_model(cfg, static_cast<int>(a.integer("threads", 0)), scheme, a.get("weight-type"));
  models::LayerRequest r;
  r.x = tensor_arg("input", a.get("input"), reference);
  if (r.x.rank() == 2) r.x = r.x.reshaped({1, r.x.shape[0], r.x.shape[1]});
  MAXTEXT_CHECK(r.x.rank() == 3 && r.x.shape[2] == cfg.emb_dim, ArgumentError, "--input: expected [B, T, ", cfg.emb_dim,
                "] (emb_dim), found ", r.x.describe());
  r.weights = &w.tensors;
  r.prefix = prefix;
  r.layer_index = a.integer("layer-index", -1);
  r.kind = kind == "moe" || kind == "gpt3_attention" || kind == "gpt3_layernorm" ? kind : "decoder";
  RowInputs in;
  read_row_inputs(a, reference, in);
  r.segment_ids = in.segp;
  r.positions = in.posp;
  layers::Capture cap(testing::wanted_names(reference, map));
  r.capture = &cap;
  (void)model->run_layer(r);
  const std::string out_name = prefix.empty() ? "out" : prefix;
  const std::string header = str("layer: ", kind, prefix.empty() ? std::string() : " " + prefix, ", dtype ",
                                 cfg.dtype_canonical(), "; input ", r.x.shape, "; output '", out_name, "'\n");
  return finish(a, cap, reference, map, header);
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
  if (layer_mode) return compare_detail::run_layer_kind(a, cfg, reference, map);
  return compare_detail::run_model(a, cfg, reference, map);
}

}  // namespace maxtext_cli
