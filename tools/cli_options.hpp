// tools/cli_options.hpp: which options each `maxtext` command reads, and the check that refuses the rest by name
// before a command runs. An option the program does not know is refused with the nearest one it does ("did you mean
// --max-new-tokens?"); an option that another command reads, but not this one, is refused as unused by this command;
// so are key=value config overrides for the commands that build no config, and an option given twice (except
// --stop and --image). The table here is the one list: a command that starts reading an option adds it here, and the tests
// (tests/tools/test_cli_options.cpp) run every command's documented options through the check.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "cli_args.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/nearest.hpp"

namespace maxtext::cli {

/// A command, the options it reads (without "--") and whether it takes key=value config overrides.
struct CommandOptions {
  std::string name;
  std::vector<std::string> options;
  bool overrides = true;
};

/// Every command of the program with the options its code reads (cli_models.cpp, cli_text.cpp, cli_chat.cpp,
/// cmd_compare.hpp, cli_generate_options.hpp).
inline const std::vector<CommandOptions>& command_options() {
  static const std::vector<CommandOptions> table = [] {
    // make_config (--config, or --weights' own config) and open_model.
    const std::vector<std::string> model = {"config",  "weights",          "tokenizer", "weight-type",
                                            "threads", "int8-activations", "kv-type",   "seed"};
    // generate_options / add_eos_stops (generate, chat).
    const std::vector<std::string> sampling = {"max-new-tokens",    "temperature",      "top-k",       "top-p",
                                               "min-p",             "repeat-penalty",   "logit-bias",  "stop",
                                               "frequency-penalty", "presence-penalty", "seed"};
    auto join = [](std::vector<std::string> a, const std::vector<std::string>& b) {
      for (const auto& s : b) {
        if (std::find(a.begin(), a.end(), s) == a.end()) a.push_back(s);
      }
      return a;
    };
    // encode_prompt_images (cli_vision.cpp): pictures merged into the prompt.
    const std::vector<std::string> images = {"image", "image-preprocess", "image-embeddings-out", "mmproj",
                                             "audio", "audio-form", "audio-embeddings-out"};
    return std::vector<CommandOptions>{
        {"logits", join(join(model, {"tokens", "out", "incremental", "mtp", "mtp-hidden"}), images), true},
        // open_model without loading: neither --seed nor the tokenizer is read.
        {"info", {"config", "weights", "weight-type", "threads", "int8-activations", "kv-type"}, true},
        {"generate",
         join(join(join(model, sampling), {"tokens", "prompt", "spec", "draft", "draft-max", "draft-int8-activations",
                                           "mtp-hidden", "grammar",
                                           "grammar-file", "json-schema", "json-schema-file", "pan-and-scan"}),
              images),
         true},
        {"chat", join(join(join(model, sampling), {"system", "ctx-size", "spec", "draft", "draft-max", "draft-int8-activations",
                                                   "mtp-hidden", "session", "pan-and-scan"}), images),
         true},
        // Sampling comes with each request; --max-new-tokens caps requests that give no max_tokens.
        {"serve",
         join(model, {"host", "port", "parallel", "queue", "ctx-size", "max-new-tokens", "alias", "api-key",
                      "api-key-file", "max-body", "mmproj", "image-preprocess", "batch-rows", "prefill-chunk",
                      "prefill-rows"}),
         true},
        {"vision", {"weights", "mmproj", "image", "image-preprocess", "pan-and-scan", "out", "threads"}, false},
        {"audio", {"weights", "audio", "audio-form", "out", "features-out", "threads"}, false},
        {"tokenize", {"weights", "tokenizer", "text", "text-file", "add-special"}, false},
        {"detokenize", {"weights", "tokenizer", "ids", "skip-special"}, false},
        {"template", {"tokenizer", "messages", "add-generation-prompt", "tools"}, false},
        {"compare",
         {"config", "weights", "reference", "map", "tokens", "names", "threads", "weight-type", "seed", "layer",
          "layer-index", "input", "prefix", "segment-ids", "positions", "rtol", "atol", "scaled-tol", "max-kl-div",
          "top-k", "json"},
         true},
    };
  }();
  return table;
}

/// The command names, in the table's order.
inline std::vector<std::string> command_names() {
  std::vector<std::string> names;
  for (const auto& c : command_options()) names.push_back(c.name);
  return names;
}

/// The options of `command`, or nullptr for a command the program does not have.
inline const CommandOptions* find_command(const std::string& command) {
  for (const auto& c : command_options()) {
    if (c.name == command) return &c;
  }
  return nullptr;
}

/// Throws ArgumentError naming the first option (or override) of `a` that its command does not read; an unknown
/// command is refused with the nearest command name.
inline void check_options(const Args& a) {
  const CommandOptions* cmd = find_command(a.command);
  if (cmd == nullptr) {
    const std::string near = nearest_name(a.command, command_names());
    MAXTEXT_THROW(ArgumentError, "unknown command '", a.command, "'",
                  near.empty() ? std::string() : " (did you mean '" + near + "'?)", "; see maxtext --help");
  }
  auto takes = [&](const std::string& o) {
    return std::find(cmd->options.begin(), cmd->options.end(), o) != cmd->options.end();
  };
  std::string list;
  for (const auto& o : cmd->options) list += (list.empty() ? "--" : ", --") + o;
  for (const auto& [key, values] : a.all) {
    if (!takes(key)) {
      std::vector<std::string> every;
      for (const auto& c : command_options()) {
        for (const auto& o : c.options) {
          if (std::find(every.begin(), every.end(), o) == every.end()) every.push_back(o);
        }
      }
      const bool elsewhere = std::find(every.begin(), every.end(), key) != every.end();
      if (elsewhere) {
        MAXTEXT_THROW(ArgumentError, a.command, ": option --", key, " is not used by this command (it reads ", list,
                      ")");
      }
      // The nearest among this command's options first, then among every command's.
      std::string near = nearest_name(key, cmd->options);
      if (near.empty()) near = nearest_name(key, every);
      MAXTEXT_THROW(ArgumentError, a.command, ": unknown option --", key,
                    near.empty() ? std::string(" (") : " (did you mean --" + near + "?; ", "it reads ", list, ")");
    }
    MAXTEXT_CHECK(values.size() == 1 || key == "stop" || key == "image" || key == "audio", ArgumentError, a.command,
                  ": option --", key, " given ", values.size(), " times (only --stop, --image and --audio repeat)");
  }
  MAXTEXT_CHECK(cmd->overrides || a.overrides.empty(), ArgumentError, a.command,
                " takes no key=value config overrides (found '", a.overrides.empty() ? "" : a.overrides.front(), "')");
}

}  // namespace maxtext::cli
