// tools/cli_vision.cpp: `maxtext vision`: pictures through a Gemma 3 checkpoint's vision tower (docs/vision.md):
// PNG / JPEG files decoded and preprocessed as MaxText's (or Hugging Face's) processor does, encoded by
// layers::Gemma3VisionEncoder into the text model's embedding space; the soft tokens [n, 256, emb_dim] go to --out.
// encode_prompt_images does the same for `generate` / `logits` --image: the prompt's markers expanded, the soft
// tokens merged into the decoder (ForwardOptions::media_mask).
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_args.hpp"
#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/families/gemma/image_processor.hpp"
#include "maxtext/families/gemma/vision.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/image.hpp"
#include "maxtext/io/npy.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/io/weights.hpp"
#include "maxtext/models/layer_runner.hpp"
#include "maxtext/tokenizer/tokenizer.hpp"

namespace maxtext::cli {

namespace {

/// config.json of a Hugging Face checkpoint: in the directory, or beside the file / index.
std::string hf_config_path(const std::string& weights, const char* what) {
  namespace fs = std::filesystem;
  const fs::path p(weights);
  const fs::path cfg = fs::is_directory(p) ? p / "config.json" : p.parent_path() / "config.json";
  MAXTEXT_CHECK(fs::exists(cfg), ArgumentError, what, ": no config.json at ", cfg.string(),
                " (--weights: a Hugging Face Gemma3ForConditionalGeneration directory, safetensors file or index)");
  return cfg.string();
}

/// Whether --weights is (or sits beside) a Hugging Face config.json.
bool has_hf_config(const std::string& weights) {
  namespace fs = std::filesystem;
  const fs::path p(weights);
  return fs::exists(fs::is_directory(p) ? p / "config.json" : p.parent_path() / "config.json");
}

/// A Gemma 3 checkpoint's config.json (model_type gemma3: the multimodal one).
nlohmann::json read_gemma3_config(const std::string& cfg_path, const char* what) {
  nlohmann::json j;
  std::ifstream f(cfg_path);
  MAXTEXT_CHECK(f.good(), IoError, what, ": cannot read ", cfg_path);
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    MAXTEXT_THROW(IoError, what, ": ", cfg_path, ": not JSON (", e.what(), ")");
  }
  const std::string type = j.is_object() && j.contains("model_type") && j["model_type"].is_string()
                               ? j["model_type"].get<std::string>() : std::string();
  MAXTEXT_CHECK(type == "gemma3", UnsupportedError, what, ": ", cfg_path, " has model_type '", type,
                "'; the vision towers implemented are Gemma 3's (model_type gemma3, Gemma3ForConditionalGeneration)");
  return j;
}

/// The image token ids of a Gemma 3 config.json (boi_token_index, eoi_token_index, image_token_index,
/// mm_tokens_per_image; Gemma3Config's defaults where absent). "\n\n" is MaxText's constant 108.
io::Gemma3ImageTokens gemma3_image_tokens(const nlohmann::json& j, const std::string& where) {
  io::Gemma3ImageTokens t;
  const auto get = [&](const char* key, auto& out) {
    if (!j.contains(key) || j[key].is_null()) return;
    MAXTEXT_CHECK(j[key].is_number_integer() && j[key].get<std::int64_t>() >= 0, IoError, where, ": ", key,
                  ": expected a token id, found ", j[key].dump());
    out = static_cast<std::remove_reference_t<decltype(out)>>(j[key].get<std::int64_t>());
  };
  get("boi_token_index", t.begin);
  get("eoi_token_index", t.end);
  get("image_token_index", t.soft);
  get("mm_tokens_per_image", t.per_image);
  return t;
}

using VisionPolicy = Policy<cpu::Backend, float>;

/// The pictures of --image, decoded and preprocessed (--image-preprocess), through the tower of --mmproj (a
/// llama.cpp mmproj GGUF) or, without it, of the Hugging Face checkpoint (config.json `j`): soft tokens
/// [n, tokens per picture, emb_dim].
Tensor<float, 3> encode_images(const Args& a, const nlohmann::json& j, const std::string& cfg_path,
                               const std::vector<std::string>& images, double* load_s, double* encode_s) {
  const io::Gemma3ImageProcessing how = io::parse_gemma3_image_processing(a.get("image-preprocess", "maxtext"));
  cpu::Options opt;
  opt.threads = static_cast<int>(a.integer("threads", 0));
  MAXTEXT_CHECK(opt.threads >= 0, ArgumentError, "--threads must be >= 0, found ", opt.threads);
  cpu::Backend be(opt);
  const auto t0 = std::chrono::steady_clock::now();
  layers::Gemma3VisionConfig vc;
  io::TensorMap weights;
  if (a.has("mmproj")) {
    io::Gemma3Mmproj m = io::gemma3_vision_from_mmproj(io::read_gguf(a.get("mmproj")));
    vc = m.config;
    weights = std::move(m.tensors);
  } else {
    vc = layers::Gemma3VisionConfig::from_hf(j, cfg_path);
    weights = io::gemma3_vision_from_hf(io::read_safetensors_any(io::detail::resolve_weights_path(a.get("weights"))), vc);
  }
  const layers::Gemma3VisionEncoder<VisionPolicy> tower(vc);
  const auto params = models::load_layer_params<VisionPolicy>(tower, weights, be);
  const auto t1 = std::chrono::steady_clock::now();
  const std::int64_t n = static_cast<std::int64_t>(images.size()), S = vc.image_size;
  Tensor<float, 4> pixels({n, S, S, 3});
  for (std::int64_t i = 0; i < n; ++i) {
    const io::Image img = io::read_image(images[static_cast<std::size_t>(i)]);
    const Tensor<float, 3> x = io::gemma3_preprocess(img, S, how);
    std::copy(x.data(), x.data() + x.size(), &pixels(i, 0, 0, 0));
  }
  Tensor<float, 3> tokens = tower.encode(be, params, pixels);
  const auto t2 = std::chrono::steady_clock::now();
  if (load_s) *load_s = std::chrono::duration<double>(t1 - t0).count();
  if (encode_s) *encode_s = std::chrono::duration<double>(t2 - t1).count();
  return tokens;
}

}  // namespace

std::string image_marker_text(const Args&) { return "<start_of_image>"; }

namespace {

class Gemma3Pictures final : public PromptPictures {
 public:
  Gemma3Pictures(const Args& a, const Config& cfg) {
    const auto images = a.all.count("image") ? a.all.at("image") : std::vector<std::string>{};
    MAXTEXT_CHECK(!images.empty(), ArgumentError, a.command, ": no --image given");
    MAXTEXT_CHECK(a.has("weights"), ArgumentError, a.command, " --image needs --weights (a Hugging Face Gemma 3 "
                  "checkpoint with its vision tower, or a text model with --mmproj)");
    // The image token ids: from a Gemma3ForConditionalGeneration config.json, else (a GGUF text model with
    // --mmproj) from the tokenizer's vocabulary.
    std::string cfg_path;
    nlohmann::json j;
    if (!a.has("mmproj") || has_hf_config(a.get("weights"))) {
      cfg_path = hf_config_path(a.get("weights"), "--image");
      j = read_gemma3_config(cfg_path, "--image");
      ids_ = gemma3_image_tokens(j, cfg_path);
    } else {
      const auto tk = tokenizer::load_tokenizer(a.get("weights"), a.get("tokenizer"), cfg.vocab_size);
      const auto id = [&](const char* text) {
        const auto v = tk->token_to_id(text);
        MAXTEXT_CHECK(v.has_value(), ArgumentError, "--image: the tokenizer of ", a.get("weights"), " has no token ",
                      text, " (a Gemma 3 vocabulary has it)");
        return *v;
      };
      ids_.begin = id("<start_of_image>");
      ids_.end = id("<end_of_image>");
      ids_.soft = id("<image_soft_token>");
      ids_.double_newline = tk->token_to_id("\n\n").value_or(ids_.double_newline);
    }
    MAXTEXT_CHECK(ids_.soft < cfg.vocab_size && ids_.begin < cfg.vocab_size && ids_.end < cfg.vocab_size &&
                      ids_.double_newline < cfg.vocab_size,
                  ArgumentError, "--image: ", cfg_path, ": image token ids (", ids_.begin, ", ", ids_.end, ", ",
                  ids_.soft, ") outside the vocabulary of ", cfg.vocab_size);
    double load_s = 0.0, encode_s = 0.0;
    tokens_ = encode_images(a, j, cfg_path, images, &load_s, &encode_s);
    if (a.has("mmproj")) ids_.per_image = tokens_.dim(1);
    MAXTEXT_CHECK(tokens_.dim(1) == ids_.per_image && tokens_.dim(2) == cfg.emb_dim, ArgumentError,
                  "--image: the tower gives [", tokens_.dim(1), ", ", tokens_.dim(2), "] per picture; the prompt holds ",
                  ids_.per_image, " soft tokens of the text model's emb_dim ", cfg.emb_dim);
    if (a.has("image-embeddings-out")) io::write_npy(a.get("image-embeddings-out"), AnyTensor::from(tokens_));
    std::fprintf(stderr, "images: %zu picture(s) encoded to %lld soft tokens each in %.2f s (tower loaded in %.2f s)\n",
                 images.size(), static_cast<long long>(ids_.per_image), encode_s, load_s);
  }
  std::int64_t count() const override { return tokens_.dim(0); }
  PromptImages expand(const std::vector<std::int32_t>& prompt, bool all) const override {
    std::int64_t k = 0;
    for (const std::int32_t id : prompt) k += id == ids_.begin ? 1 : 0;
    MAXTEXT_CHECK(k <= count() && (!all || k == count()), ArgumentError, "[image] the prompt has ", k,
                  " <start_of_image> marker(s) for ", count(), " picture(s): one marker per picture");
    const io::Gemma3ImagePrompt p = io::gemma3_expand_image_tokens(prompt, k, ids_);
    PromptImages out;
    const std::int64_t T = static_cast<std::int64_t>(p.ids.size()), per = tokens_.dim(1) * tokens_.dim(2);
    out.ids = p.ids;
    out.mask = Tensor<std::int32_t, 2>({1, T});
    for (std::int64_t t = 0; t < T; ++t) out.mask(0, t) = p.ids[static_cast<std::size_t>(t)] == ids_.soft ? 1 : 0;
    out.embeddings = Tensor<float, 2>({k * tokens_.dim(1), tokens_.dim(2)});
    std::copy(tokens_.data(), tokens_.data() + k * per, out.embeddings.data());
    return out;
  }

 private:
  io::Gemma3ImageTokens ids_;
  Tensor<float, 3> tokens_;
};

}  // namespace

std::unique_ptr<PromptPictures> open_prompt_pictures(const Args& a, const Config& cfg) {
  return std::make_unique<Gemma3Pictures>(a, cfg);
}

int cmd_vision(const Args& a) {
  MAXTEXT_CHECK(a.has("weights") != a.has("mmproj"), ArgumentError, "vision needs --weights (a Hugging Face Gemma 3 "
                "checkpoint with its vision tower: config.json + safetensors) or --mmproj (a llama.cpp mmproj GGUF), "
                "one of them");
  const auto images = a.all.count("image") ? a.all.at("image") : std::vector<std::string>{};
  MAXTEXT_CHECK(!images.empty(), ArgumentError, "vision needs --image FILE (PNG or JPEG; repeat it for more)");
  std::string cfg_path;
  nlohmann::json j;
  if (!a.has("mmproj")) {
    cfg_path = hf_config_path(a.get("weights"), "vision");
    j = read_gemma3_config(cfg_path, "vision");
  }
  double load_s = 0.0, encode_s = 0.0;
  const Tensor<float, 3> tokens = encode_images(a, j, cfg_path, images, &load_s, &encode_s);
  const std::int64_t n = tokens.dim(0);
  for (std::int64_t i = 0; i < n; ++i) {
    double s = 0.0, ss = 0.0;
    const std::int64_t m = tokens.dim(1) * tokens.dim(2);
    for (std::int64_t k = 0; k < m; ++k) {
      const double v = tokens.data()[i * m + k];
      s += v;
      ss += v * v;
    }
    std::printf("%s: %lld soft tokens of %lld, mean %.6g, rms %.6g\n", images[static_cast<std::size_t>(i)].c_str(),
                static_cast<long long>(tokens.dim(1)), static_cast<long long>(tokens.dim(2)), s / static_cast<double>(m),
                std::sqrt(ss / static_cast<double>(m)));
  }
  if (a.has("out")) {
    io::write_npy(a.get("out"), AnyTensor::from(tokens));
    std::printf("wrote %s [%lld, %lld, %lld] float32\n", a.get("out").c_str(), static_cast<long long>(n),
                static_cast<long long>(tokens.dim(1)), static_cast<long long>(tokens.dim(2)));
  }
  std::fprintf(stderr, "vision: load %.2f s, preprocess + encode %.2f s (%lld pictures)\n", load_s, encode_s,
               static_cast<long long>(n));
  return 0;
}

}  // namespace maxtext::cli
