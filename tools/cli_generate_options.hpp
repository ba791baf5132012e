// tools/cli_generate_options.hpp: the sampling and stop options that `maxtext generate` and `maxtext chat` share.
#pragma once

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "cli_args.hpp"
#include "maxtext/io/generation_config.hpp"
#include "maxtext/models/generate.hpp"
#include "maxtext/tokenizer/tokenizer.hpp"

namespace maxtext::cli {

/// C escapes \n, \t, \r, \\ in a --stop value.
inline std::string unescape(const std::string& s) {
  std::string o;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      const char c = s[++i];
      o += c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
    } else {
      o += s[i];
    }
  }
  return o;
}

/// The sampling and stop options shared by generate and chat.
inline models::GenerateOptions generate_options(const Args& a, const Config& cfg, std::int64_t default_max_new) {
  models::GenerateOptions go;
  go.max_new_tokens = a.integer("max-new-tokens", default_max_new);
  auto& sp = go.sampling;
  sp.temperature = static_cast<float>(a.number("temperature", 0.0));
  sp.top_k = a.integer("top-k", 0);
  sp.top_p = static_cast<float>(a.number("top-p", 1.0));
  sp.min_p = static_cast<float>(a.number("min-p", 0.0));
  sp.repetition_penalty = static_cast<float>(a.number("repeat-penalty", 1.0));
  sp.frequency_penalty = static_cast<float>(a.number("frequency-penalty", 0.0));
  sp.presence_penalty = static_cast<float>(a.number("presence-penalty", 0.0));
  sp.seed = static_cast<std::uint64_t>(a.integer("seed", cfg.init_weights_seed));
  if (a.has("logit-bias")) {
    std::stringstream ss(a.get("logit-bias"));
    std::string item;
    while (std::getline(ss, item, ',')) {
      const auto eq = item.find('=');
      std::size_t p1 = 0, p2 = 0;
      long long id = -1;
      double b = 0;
      try {
        id = std::stoll(item.substr(0, eq), &p1);
        b = std::stod(item.substr(eq + 1), &p2);
      } catch (const std::exception&) {
        p1 = 0;
      }
      MAXTEXT_CHECK(eq != std::string::npos && p1 == eq && p2 == item.size() - eq - 1 && id >= 0 && id < cfg.vocab_size,
                    ArgumentError, "--logit-bias: expected ID=BIAS with ID in [0, ", cfg.vocab_size, "), found '", item,
                    "'");
      sp.logit_bias.emplace_back(static_cast<std::int32_t>(id), static_cast<float>(b));
    }
  }
  sp.validate();
  if (a.all.count("stop")) {
    for (const auto& s : a.all.at("stop")) {
      MAXTEXT_CHECK(!s.empty(), ArgumentError, "--stop: empty string");
      go.stop_strings.push_back(unescape(s));
    }
  }
  return go;
}

/// Stop token set for text generation: the tokenizer's EOS and the ids the weights' files declare.
inline void add_eos_stops(models::GenerateOptions& go, const Args& a, const tokenizer::Tokenizer& tk,
                          const Config& cfg) {
  std::vector<std::int32_t> ids = io::read_eos_token_ids(a.get("weights"));
  for (auto id : tk.eos_ids()) ids.push_back(id);
  for (auto id : ids) {
    if (id < cfg.vocab_size && std::find(go.stop_tokens.begin(), go.stop_tokens.end(), id) == go.stop_tokens.end()) {
      go.stop_tokens.push_back(id);
    }
  }
}

}  // namespace maxtext::cli
