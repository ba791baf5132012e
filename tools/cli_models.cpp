// tools/cli_models.cpp: configs and models for the `maxtext` commands (make_config, open_model) and `logits` / `info`.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "cli_args.hpp"
#include "cli_common.hpp"
#include "cli_spec.hpp"  // mtp_hidden_option
#include "cmd_tokenize.hpp"  // config_from_weights
#include "maxtext/comm/mesh.hpp"
#include "maxtext/core/config_keys.hpp"
#include "maxtext/core/mapped_pages.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/io/npy.hpp"
#include "maxtext/io/yaml_config.hpp"
#include "maxtext/models/any_model.hpp"
#include "maxtext/models/split_model.hpp"
#include "maxtext/models/parallel.hpp"
#include "maxtext/models/weight_choice.hpp"
#include "maxtext/tokenizer/compressed_tokenizer.hpp"
#include "maxtext/tokenizer/hf_tokenizer.hpp"
#include "maxtext/tokenizer/tokenizer.hpp"
#include "maxtext_blocks_built.hpp"  // the models, compiled per decoder block in maxtext_blocks (tools/blocks/)

namespace maxtext::cli {

namespace {
comm::Communicator* g_world = nullptr;  // set by join_world (cli_dist.cpp) for the process's lifetime
}  // namespace
comm::Communicator* world() { return g_world; }
void set_world(comm::Communicator* c) { g_world = c; }

// Every key read, refused by name, or inert (core/config_keys.hpp): io::load_config checks a YAML config and its
// overrides; the configs of weights files and config.json are checked here.
Config make_config(const Args& a) {
  if (!a.has("config") && a.has("weights")) {
    Config c = cli::config_from_weights(a.get("weights"), a.overrides);
    check_config_keys(c);
    return c;
  }
  const std::string path = a.get("config");
  if (io::ends_with(path, ".json")) {  // a Hugging Face config.json
    Config c = io::config_from_hf_file(path);
    for (const auto& o : a.overrides) io::apply_override(c, o);
    c.derive();
    c.validate();
    check_config_keys(c);
    return c;
  }
  return io::load_config(path, a.overrides, io::config_search_dirs({default_config_dir()}));
}

namespace {

/// Without --weight-type, a file's matrices are stored as they are (io::LoadedWeights::file_weight_type): a GGUF
/// file's read where they lie ("ggml"), another file's F16, BF16 or Q8_0 ones in that type; the same values as
/// widened float32 in a half or a quarter of the memory (a matrix the importer rescales rounds once to that type). Widening is the explicit `--weight-type float32`, and the fallback when this
/// program did not compile the file's type for the block.
std::string weight_type_of_file(const Config& cfg, const io::LoadedWeights& w) {
  const std::string kept = models::keep_file_weight_type(cfg, w.file_weight_type);
  if (!kept.empty()) {
    std::cerr << "maxtext: weights kept as " << kept << ", the file's type (--weight-type float32 widens them)\n";
  } else if (!w.file_weight_type.empty() && cfg.dtype_canonical() == "float32") {
    std::cerr << "maxtext: decoder_block '" << cfg.decoder_block << "' with " << w.file_weight_type
              << " weights is not compiled into this program: widening the file's weights to float32\n";
  }
  return kept;
}

}  // namespace

std::unique_ptr<models::AnyModel> open_model(const Config& cfg, const Args& a, bool load, const char* int8_option) {
  const std::string i8 = a.get("int8-activations", "off");
  MAXTEXT_CHECK(i8 == "on" || i8 == "off" || i8 == "auto", ArgumentError, int8_option,
                ": expected on, off or auto (on where the weights are Q8_0 or a GGUF file's blocks), found '", i8, "'");
  models::AnyModelOptions o;
  o.weight_type = a.get("weight-type");
  o.threads = static_cast<int>(a.integer("threads", 0));
  o.int8_activations = i8 == "on";
  o.kv_type = a.get("kv-type");  // "" = the activations' type; float16 (GGUF weights); the rest is refused by name
  // The ranks mpirun started (docs/distributed.md): the mesh keys say how they split the model; alone, a mesh of
  // more than one rank is refused by name.
  comm::Communicator* const w_comm = world();
  const comm::Mesh mesh = models::split_mesh(cfg, w_comm);
  const bool split = mesh.size() > 1;
  std::optional<io::LoadedWeights> w;
  if (load && a.has("weights")) {
    // A GGUF file's matrices (blocks such as Q4_K or Q8_0, F32, F16, BF16) are computed from as they lie in the
    // mapped file unless --weight-type says otherwise. A model split by heads or experts takes its slices of decoded
    // matrices; pipeline stages keep their layers' matrices whole, as they lie.
    w = io::load_weights(a.get("weights"), cfg,
                         (!split || models::split_keeps_matrices_whole(mesh)) &&
                             models::read_matrices_in_place(cfg, a.get("weight-type")),
                         /*populate=*/!split);
    if (!a.has("weight-type")) o.weight_type = weight_type_of_file(cfg, *w);
  }
  // Where check_int8_activations takes them: Q8_0 weights, or a GGUF file's blocks.
  const bool blocks = o.weight_type == "q8_0" || (o.weight_type == "ggml" && w && io::has_block_matrices(w->tensors));
  if (i8 == "auto") {
    o.int8_activations = blocks;
    if (blocks) std::cerr << "maxtext: " << a.get("weights", "the model") << ": 8-bit activations on (auto)\n";
  }
  // A draft model (--draft-int8-activations) has no --weight-type of its own to suggest.
  MAXTEXT_CHECK(std::string_view(int8_option) == "--int8-activations" || !o.int8_activations || blocks, ArgumentError,
                int8_option, " on: ", a.get("weights", "the model"), " holds no Q8_0 or block-quantised matrix (its "
                "rows are always multiplied exactly); use auto or off");
  models::check_int8_activations(o.int8_activations, o.weight_type, w ? &w->tensors : nullptr, a.get("weights"),
                                 "--int8-activations on", "--weight-type q8_0");
  if (split) {
    // Each rank builds its share (heads, kv heads, MLP columns; or experts) and reads its slices of the same files
    // (models/split_model.hpp); --seed: every rank initialises the whole model alike and keeps its slices.
    MAXTEXT_CHECK(load, UnsupportedError, "[mesh] this command runs in one process");
    std::optional<io::TensorMap> full;
    const auto names = w && w->naming == io::WeightNaming::hf ? models::NameScheme::hf : models::NameScheme::maxtext;
    if (w) full = std::move(w->tensors);
    w.reset();
    auto model = models::make_split_any_model(cfg, o, *w_comm, std::move(full), names,
                                              static_cast<std::uint64_t>(a.integer("seed", cfg.init_weights_seed)),
                                              MAXTEXT_BLOCKS_BUILT);
    if (const char* chk = std::getenv("MAXTEXT_COMM_CHECK"); chk != nullptr && std::string(chk) == "1") {
      model->set_replica_check(true);  // debug: the replicated residual stream compared across ranks after every layer
    }
    return model;
  }
  auto model = models::make_built_any_model(cfg, o, MAXTEXT_BLOCKS_BUILT);
  if (!load) return model;
  if (w) {
    if (w->naming == io::WeightNaming::hf) model->set_name_scheme(models::NameScheme::hf);
    model->load(w->tensors);
    w.reset();    // the importer's temporaries (folded or re-paired matrices) go now,
    trim_heap();  // and the heap they took back to the system (core/mapped_pages.hpp)
  } else {
    model->init(static_cast<std::uint64_t>(a.integer("seed", cfg.init_weights_seed)));
  }
  if (model->needs_engram_vocab()) {
    // deepseek.py builds Engram's hashing from the Hugging Face tokenizer (CompressedTokenizer, pad_token_id).
    const auto tk = tokenizer::load_tokenizer(a.get("weights"), a.get("tokenizer"), cfg.vocab_size);
    const auto* hf = dynamic_cast<const tokenizer::HfTokenizer*>(tk.get());
    MAXTEXT_CHECK(hf != nullptr, ArgumentError, "engram_layers: the Engram layers hash a Hugging Face tokenizer's "
                  "canonical tokens; give --tokenizer tokenizer.json (or a directory holding one)");
    MAXTEXT_CHECK(hf->pad() >= 0, ArgumentError, "engram_layers: the tokenizer has no pad_token in its "
                  "tokenizer_config.json (MaxText's NgramHashMapping requires pad_token_id)");
    tokenizer::CompressedTokenTable t = tokenizer::compressed_token_table(*hf);
    model->set_engram_vocab(std::move(t.lookup), t.size, hf->pad());
  }
  return model;
}

namespace {
/// `logits --mtp K`: MaxText's whole-sequence pass with its MTP block; MTP layer K's logits, where row t predicts
/// token t + K + 1 from the hidden state at t and the K tokens after it (the last K rows read MaxText's padding id 0).
int write_mtp_logits(const Args& a, const Config& cfg, const std::vector<std::vector<std::int32_t>>& rows, bool other) {
  MAXTEXT_CHECK(!other, ArgumentError, "--mtp runs the whole sequence at once: not with --image or --incremental");
  const std::int64_t k = a.integer("mtp", 1);
  MAXTEXT_CHECK(k >= 1 && k <= cfg.mtp_num_layers, ArgumentError, "--mtp ", k, ": the model has ", cfg.mtp_num_layers,
                " MTP layers (mtp_num_layers), numbered from 1");
  const auto Bn = static_cast<std::int64_t>(rows.size()), T = static_cast<std::int64_t>(rows[0].size());
  Tensor<std::int32_t, 2> tok({Bn, T});
  for (std::int64_t b = 0; b < Bn; ++b) {
    for (std::int64_t t = 0; t < T; ++t) tok(b, t) = rows[static_cast<std::size_t>(b)][static_cast<std::size_t>(t)];
  }
  const auto model = open_model(cfg, a);
  const auto all = model->forward_with_mtp(tok, mtp_hidden_option(a));
  if (!output_rank()) return 0;  // split: rank 0 writes
  io::write_npy(a.get("out"), all.at(static_cast<std::size_t>(k)));
  std::cout << "wrote " << a.get("out") << " [" << Bn << ", " << T << ", " << cfg.vocab_size << "] f32 (MTP layer " << k
            << ")\n";
  return 0;
}
}  // namespace

int cmd_logits(const Args& a) {
  MAXTEXT_CHECK(a.has("tokens"), ArgumentError, "logits needs --tokens");
  MAXTEXT_CHECK(a.has("out"), ArgumentError, "logits needs --out FILE.npy");
  const Config cfg = make_config(a);
  auto rows = cli::parse_token_rows(a.get("tokens"));
  // Pictures (--image): the markers of the one row expanded, the soft tokens merged at the first pass.
  const bool images = has_media(a);
  check_media_options(a);
  PromptImages media;
  if (images) {
    MAXTEXT_CHECK(rows.size() == 1, ArgumentError, "--image: one row of --tokens at a time, found ", rows.size());
    media = encode_prompt_images(a, cfg, rows[0]);
    rows[0] = media.ids;
  }
  const auto T = static_cast<std::int64_t>(rows[0].size()), Bn = static_cast<std::int64_t>(rows.size());
  for (const auto& r : rows) {
    MAXTEXT_CHECK(static_cast<std::int64_t>(r.size()) == T, ArgumentError, "--tokens: every row must have the same length");
  }
  const std::int64_t inc = a.integer("incremental", 0);
  MAXTEXT_CHECK(inc >= 0 && inc < T, ArgumentError, "--incremental must be in [0, ", T, "), found ", inc);
  if (a.has("mtp")) return write_mtp_logits(a, cfg, rows, images || inc > 0);
  MAXTEXT_CHECK(!a.has("mtp-hidden"), ArgumentError, "--mtp-hidden needs --mtp K");
  if (images) {
    for (std::int64_t t = T - inc; t < T; ++t) {
      MAXTEXT_CHECK(media.mask(0, t) == 0, ArgumentError, "--incremental ", inc, ": the last ", inc,
                    " tokens, decoded one at a time, hold a picture's soft tokens (a picture is prefilled whole)");
    }
  }
  const auto model = open_model(cfg, a);
  const auto cache = model->new_cache(Bn, T);
  Tensor<float, 3> out({Bn, T, cfg.vocab_size});
  auto run = [&](std::int64_t t0, std::int64_t len) {
    Tensor<std::int32_t, 2> tok({Bn, len});
    for (std::int64_t b = 0; b < Bn; ++b) {
      for (std::int64_t t = 0; t < len; ++t) tok(b, t) = rows[static_cast<std::size_t>(b)][static_cast<std::size_t>(t0 + t)];
    }
    models::ForwardRequest r;
    r.tokens = &tok;
    r.cache = cache.get();
    Tensor<std::int32_t, 2> mask;
    if (images && t0 == 0) {  // the first pass holds every picture (checked above)
      mask = Tensor<std::int32_t, 2>({1, len});
      for (std::int64_t t = 0; t < len; ++t) mask(0, t) = media.mask(0, t);
      r.media_mask = &mask;
      r.media_embeddings = &media.embeddings;
    }
    Tensor<std::int32_t, 3> pos3;  // MRoPE's 3-D positions of these tokens (Qwen pictures)
    if (images && !media.positions.empty()) {
      pos3 = Tensor<std::int32_t, 3>({3, 1, len});
      for (std::int64_t q = 0; q < 3; ++q) {
        for (std::int64_t t = 0; t < len; ++t) pos3(q, 0, t) = media.positions(q, t0 + t);
      }
      r.mrope_positions = &pos3;
    }
    const Tensor<float, 3> l = model->forward(r);
    for (std::int64_t b = 0; b < Bn; ++b) {
      for (std::int64_t t = 0; t < len; ++t) {
        std::copy(&l(b, t, 0), &l(b, t, 0) + cfg.vocab_size, &out(b, t0 + t, 0));
      }
    }
  };
  run(0, T - inc);
  for (std::int64_t t = T - inc; t < T; ++t) run(t, 1);
  if (!output_rank()) return 0;  // split: rank 0 writes
  io::write_npy(a.get("out"), out);
  std::cout << "wrote " << a.get("out") << " [" << Bn << ", " << T << ", " << cfg.vocab_size << "] f32\n";
  return 0;
}

int cmd_info(const Args& a) {
  const Config cfg = make_config(a);
  const auto model = open_model(cfg, a, false);
  std::cout << "decoder_block " << cfg.decoder_block << ", dtype " << cfg.dtype_canonical() << "\n"
            << "emb_dim " << cfg.emb_dim << ", heads " << cfg.num_query_heads << "/" << cfg.num_kv_heads
            << ", head_dim " << cfg.head_dim << ", mlp_dim " << cfg.mlp_dim << ", layers " << cfg.num_decoder_layers
            << ", vocab " << cfg.vocab_size << "\n"
            << "parameters " << model->num_params() << "\n";
  return 0;
}

}  // namespace maxtext::cli
