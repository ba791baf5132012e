// tools/cli_chat.cpp: `maxtext chat` (a conversation through the model's chat template, the KV cache kept between
// turns) and `maxtext template` (the rendered chat prompt).
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "cli_args.hpp"
#include "cli_generate_options.hpp"
#include "cli_spec.hpp"
#include "cmd_chat.hpp"
#include "cmd_template.hpp"
#include "cmd_tokenize.hpp"
#include "maxtext/comm/communicator.hpp"
#include "maxtext/comm/mesh.hpp"
#include "maxtext/models/parallel.hpp"
#include "maxtext/models/any_model.hpp"

namespace maxtext::cli {

int cmd_chat(const Args& a) {
  MAXTEXT_CHECK(a.has("weights") || a.has("tokenizer"), ArgumentError, "chat needs --weights (and a tokenizer)");
  const Config cfg = make_config(a);
  const auto tk = open_cli_tokenizer(a.get("weights"), a.get("tokenizer"), cfg.vocab_size);
  ChatOptions co;
  co.gen = generate_options(a, cfg, 256);
  add_eos_stops(co.gen, a, *tk, cfg);
  co.system = a.get("system");
  co.render = find_chat_renderer(a.get("weights"), a.get("tokenizer"));
  if (co.render) co.encode = [&tk](const std::string& text) { return tk->encode(text, false); };
  co.capacity = a.integer("ctx-size", std::min<std::int64_t>(cfg.max_target_length, 4096));
  co.interactive = ::isatty(STDIN_FILENO) != 0;
  MAXTEXT_CHECK(co.capacity > 0, ArgumentError, "--ctx-size must be > 0");
  // Pictures (--image): encoded once; each marker a message writes (<start_of_image>, or llama.cpp's <__media__>)
  // takes the next one, and the whole conversation's pictures go with it to the session on every turn.
  std::unique_ptr<PromptPictures> pictures;
  if (has_media(a)) {
    pictures = open_prompt_pictures(a, cfg);
    // With --pan-and-scan on, each marker becomes the text for its picture and the picture's crops; a message's
    // first marker takes the picture after the previous messages' ones.
    co.user_text = [&a, &pictures, next = std::size_t{0}](std::string text) mutable {
      return with_image_markers(a, std::move(text), pictures.get(), &next);
    };
    co.pictures = [&pictures](std::vector<std::int32_t>& ids, Tensor<std::int32_t, 2>& mask, Tensor<float, 2>& rows,
                              Tensor<std::int32_t, 2>& positions) {
      PromptImages p = pictures->expand(ids, false);
      ids = std::move(p.ids);
      mask = std::move(p.mask);
      rows = std::move(p.embeddings);
      positions = std::move(p.positions);
    };
    if (a.all.count("image") != 0) {
      std::cerr << "note: " << pictures->count() << " picture(s): write " << image_marker_text(a)
                << " (or <__media__>) in a message where each goes, in order\n";
    }
    if (a.all.count("audio") != 0) {
      std::cerr << "note: " << a.all.at("audio").size() << " sound clip(s): write <|audio_start|><|audio_pad|><|audio_end|>"
                << (a.all.count("image") == 0 ? " (or <__media__>)" : "") << " in a message where each goes, in order\n";
    }
  }
  check_media_options(a);
  const auto sc = open_spec(a, cfg, co.capacity + a.integer("draft-max", 4) + 1);
  co.drafter = sc->function();
  co.mtp = sc->kind == "mtp";  // the session's own MTP layers, their caches kept beside its cache
  co.spec = sc->options;
  co.session_file = a.get("session");
  if (a.has("session")) {
    MAXTEXT_CHECK(!co.session_file.empty(), ArgumentError, "--session needs a file name, found an empty one");
    const auto dir = std::filesystem::absolute(co.session_file).parent_path();
    MAXTEXT_CHECK(std::filesystem::is_directory(dir), ArgumentError, "--session ", co.session_file, ": the directory ",
                  dir.string(), " does not exist (the conversation is saved there after every turn)");
  }
  // Under mpirun (a model split across ranks): rank 0 reads the lines and hands each to the others, so that every
  // rank runs the same turns; only rank 0 prints (cli_dist.cpp).
  if (comm::Communicator* w = world(); w != nullptr && w->size() > 1) {
    if (!co.session_file.empty()) {
      // Each rank holds its own slice of the conversation's cache, so each keeps its own file, FILE.rank<r>-of-<n>
      // (checked against the rank's share of the model when loaded); the ranks restore together or not at all.
      // Pipeline stages add their layers, so that a file saved under one layout is not read under another.
      const std::string base = co.session_file;
      co.session_file += ".rank" + std::to_string(w->rank()) + "-of-" + std::to_string(w->size());
      if (const comm::Mesh mesh = comm::Mesh::from_config(cfg, w->size()); mesh.pipeline > 1) {
        const int stage = mesh.coords(w->rank()).pipeline;
        std::string label = models::pipeline_layers_label(models::pipeline_parallel_config(cfg, stage, mesh.pipeline),
                                                          stage);
        std::replace(label.begin(), label.end(), ' ', '_');
        label.erase(std::remove(label.begin(), label.end(), ','), label.end());
        co.session_file += "." + label;  // FILE.rank0-of-2.layers_0-2
      }
      const std::uint8_t have = std::filesystem::exists(co.session_file) ? 1 : 0;
      std::vector<std::uint8_t> all(static_cast<std::size_t>(w->size()));
      w->all_gather(&have, 1, all.data(), "chat --session: which ranks hold their file");
      std::string missing;
      int held = 0;
      for (std::size_t r = 0; r < all.size(); ++r) {
        held += all[r];
        if (all[r] == 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      MAXTEXT_CHECK(held == 0 || missing.empty(), IoError, "chat --session ", base, " under mpirun: rank(s) ", missing,
                    " have no file ", base, ".rank<r>-of-", w->size(), "[.layers_...] while the others do (the ranks restore a "
                    "conversation together or not at all)");
    }
    MAXTEXT_CHECK(!pictures, UnsupportedError, "chat --image under mpirun: not yet (run the pictures in one process)");
    co.interactive = co.interactive && w->rank() == 0;
    co.read_line = [w](std::string& line) {
      constexpr std::uint64_t kEnd = ~std::uint64_t{0};
      std::uint64_t n = kEnd;
      if (w->rank() == 0 && std::getline(std::cin, line)) n = line.size();
      w->broadcast(&n, sizeof n, 0, "chat: the next line's length");
      if (n == kEnd) return false;
      line.resize(static_cast<std::size_t>(n));
      if (n > 0) w->broadcast(line.data(), static_cast<std::size_t>(n), 0, "chat: the next line");
      return true;
    };
  }
  MAXTEXT_CHECK(co.session_file.empty() || !pictures, UnsupportedError,
                "chat --session with --image: not yet (a restored conversation's pictures would have to be given "
                "again in the same order); save sessions with pictures through the library (Session::save)");
  const auto model = open_model(cfg, a);
  return run_chat(*model, *tk, co, std::cin, std::cout, std::cerr);
}

int cmd_template(const Args& a) {
  MAXTEXT_CHECK(a.has("tokenizer") && a.has("messages"), ArgumentError,
                "template needs --tokenizer PATH and --messages FILE.json");
  return run_template(a.get("tokenizer"), a.get("messages"), a.get("add-generation-prompt", "on"), a.get("tools"));
}

}  // namespace maxtext::cli
