// tools/cli_spec.hpp: the options of speculative decoding that `maxtext generate` and `maxtext chat` share.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cli_args.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/models/any_model.hpp"
#include "maxtext/models/speculative.hpp"

namespace maxtext::cli {

/// --spec lookup|draft|mtp, --draft FILE, --draft-max K (generate, chat; cli_text.cpp): the drafter they choose and
/// the draft model it owns. Checked before anything is generated; `capacity`: the draft model's cache.
struct SpecChoice {
  std::string kind;  ///< lookup, draft, mtp; empty: no speculative decoding
  models::SpeculativeOptions options;
  std::unique_ptr<models::AnyModel> draft_model;
  std::unique_ptr<models::AnyModelDrafter> draft;
  models::PromptLookupDrafter lookup;
  /// The drafter as a function (lookup, draft; empty for mtp, which the model runs itself). Refers to this object.
  models::DraftFn function();
};
std::unique_ptr<SpecChoice> open_spec(const Args& a, const Config& cfg, std::int64_t draft_capacity);

/// --mtp-hidden raw|normed (logits --mtp, generate --spec mtp): the hidden state the MTP layers read (models::MtpHidden;
/// raw, MaxText's, by default; normed as llama.cpp's and vLLM's MTP graphs).
inline models::MtpHidden mtp_hidden_option(const Args& a) {
  const std::string v = a.get("mtp-hidden", "raw");
  MAXTEXT_CHECK(v == "raw" || v == "normed", ArgumentError, "--mtp-hidden: expected raw (MaxText's: the hidden state "
                "as the layer before leaves it) or normed (llama.cpp's: through the final norm), found '", v, "'");
  return v == "normed" ? models::MtpHidden::normed : models::MtpHidden::raw;
}

}  // namespace maxtext::cli
