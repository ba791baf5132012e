// tools/cli_vision.cpp: `maxtext vision`: pictures through a Gemma 3 checkpoint's vision tower, a Llama 4
// checkpoint's vision model or a Gemma 4 checkpoint's vision encoder (docs/vision.md): PNG / JPEG files decoded and preprocessed as MaxText's (or, for Gemma 3,
// Hugging Face's or llama.cpp's) processor does, encoded by layers::Gemma3VisionEncoder / layers::Llama4VisionEncoder
// into the text model's embedding space; the soft tokens ([n, 256, emb_dim]; Llama 4: [tiles, 144, emb_dim]) go to
// --out (Gemma 4: [soft tokens of all pictures, emb_dim]). The family is the checkpoint's config.json model_type
// (gemma3, gemma4 or llama4), or the mmproj file's projector.
// open_prompt_pictures does the same for `generate` / `logits` / `chat` --image (the prompt's markers expanded, the
// soft tokens merged into the decoder: ForwardOptions::media_mask), open_picture_tower for `serve` (a request's
// pictures). --pan-and-scan on (vision, generate, chat): each picture followed by its crops (io::gemma3_pan_and_scan),
// and the prompt's text introducing them as Hugging Face's Gemma3Processor does (with_pan_and_scan, from the crops the
// pictures were cut into: each file is decoded once). The tower and
// the prompts' expansion are the library's (families/gemma/pictures.hpp, families/llama4/pictures.hpp,
// families/gemma4/pictures.hpp).
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_args.hpp"
#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/families/gemma/pictures.hpp"
#include "maxtext/families/gemma4/pictures.hpp"
#include "maxtext/families/llama4/pictures.hpp"
#include "maxtext/families/qwen/pictures.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/image.hpp"
#include "maxtext/io/mmproj.hpp"
#include "maxtext/io/npy.hpp"
#include "maxtext/tokenizer/tokenizer.hpp"

namespace maxtext::cli {

namespace {

using VisionPolicy = Policy<cpu::Backend, float>;
using Pictures = models::Gemma3Pictures<VisionPolicy>;
using Llama4Pictures = models::Llama4Pictures<VisionPolicy>;
using Gemma4Pictures = models::Gemma4Pictures<VisionPolicy>;
using Qwen3Pictures = models::Qwen3Pictures<VisionPolicy>;

/// The projector type of --mmproj (llama.cpp's clip.projector_type or clip.vision.projector_type; "" without them).
std::string mmproj_projector(const std::string& path) {
  return io::mmproj_projector_type(io::read_gguf(path));  // memory-mapped: only the header is read here
}

enum class PictureFamily { gemma3, gemma4, llama4, qwen3 };

/// Whose pictures these are: Llama 4's for a Hugging Face Llama4ForConditionalGeneration checkpoint (config.json
/// model_type llama4) or an mmproj file of projector llama4; Gemma 4's for a Gemma4ForConditionalGeneration checkpoint
/// (model_type gemma4) or an mmproj file of projector gemma4v; everything else Gemma 3's, whose loader names what it
/// refuses.
PictureFamily picture_family(const Args& a) {
  // Asked once per message and per option check: the files are read once per program.
  static std::map<std::string, PictureFamily> known;
  const std::string key = a.get("mmproj") + "\n" + a.get("weights");
  if (const auto it = known.find(key); it != known.end()) return it->second;
  std::string type;
  if (a.has("mmproj")) {
    if (a.get("mmproj") != "none") type = mmproj_projector(a.get("mmproj"));
    if (type == "gemma4v") type = "gemma4";
  } else if (a.has("weights")) {
    if (const std::string cfg_path = models::hf_config_beside(a.get("weights")); !cfg_path.empty()) {
      std::ifstream f(cfg_path);
      const nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
      if (j.is_object() && j.contains("model_type") && j["model_type"].is_string()) type = j["model_type"];
    }
  }
  const PictureFamily f = type == "llama4"                               ? PictureFamily::llama4
                          : type == "gemma4"                             ? PictureFamily::gemma4
                          : models::is_qwen3_vision_model_type(type) ? PictureFamily::qwen3
                                                                         : PictureFamily::gemma3;
  return known[key] = f;
}
bool llama4_pictures(const Args& a) { return picture_family(a) == PictureFamily::llama4; }
bool gemma4_pictures(const Args& a) { return picture_family(a) == PictureFamily::gemma4; }
bool qwen3_pictures(const Args& a) { return picture_family(a) == PictureFamily::qwen3; }

cpu::Backend vision_backend(const Args& a) {
  cpu::Options opt;
  opt.threads = static_cast<int>(a.integer("threads", 0));
  MAXTEXT_CHECK(opt.threads >= 0, ArgumentError, "--threads must be >= 0, found ", opt.threads);
  return cpu::Backend(opt);
}

io::Gemma3ImageProcessing image_preprocess(const Args& a) {
  if (gemma4_pictures(a) || llama4_pictures(a) || qwen3_pictures(a)) return io::Gemma3ImageProcessing::maxtext;  // theirs
  return io::parse_gemma3_image_processing(a.get("image-preprocess", "maxtext"));
}

/// --pan-and-scan on|off (off by default): Hugging Face's pan-and-scan for Gemma 3 (io::gemma3_pan_and_scan).
bool pan_and_scan(const Args& a) {
  const std::string v = a.get("pan-and-scan", "off");
  MAXTEXT_CHECK(v == "on" || v == "off", ArgumentError, "--pan-and-scan: expected on or off, found '", v, "'");
  MAXTEXT_CHECK(v == "off" || !llama4_pictures(a), ArgumentError, "--pan-and-scan on: pan-and-scan is Gemma 3's; "
                "Llama 4 cuts a picture into tiles of its own");
  MAXTEXT_CHECK(v == "off" || !gemma4_pictures(a), ArgumentError, "--pan-and-scan on: pan-and-scan is Gemma 3's; "
                "Gemma 4 takes a picture at its own size (--image-preprocess hf keeps its aspect ratio)");
  MAXTEXT_CHECK(v == "off" || !qwen3_pictures(a), ArgumentError, "--pan-and-scan on: pan-and-scan is Gemma 3's; "
                "Qwen3 takes a picture at its own size");
  MAXTEXT_CHECK(v == "off" || image_preprocess(a) != io::Gemma3ImageProcessing::llamacpp, ArgumentError,
                "--pan-and-scan on: llama.cpp's preprocessing (--image-preprocess llamacpp) has no pan-and-scan; use "
                "maxtext or hf");
  return v == "on";
}

/// The pictures' files decoded; with --pan-and-scan on each followed by its crops (`crops`: how many, per file).
std::vector<io::Image> read_images(const Args& a, const std::vector<std::string>& files,
                                   std::vector<std::size_t>* crops = nullptr) {
  const bool pas = pan_and_scan(a);
  std::vector<io::Image> out;
  for (const auto& f : files) {
    out.push_back(io::read_image(f));
    std::vector<io::Image> c = pas ? io::gemma3_pan_and_scan(out.back()) : std::vector<io::Image>{};
    if (crops) crops->push_back(c.size());
    for (auto& i : c) out.push_back(std::move(i));
  }
  return out;
}

/// The tower of a text model's pictures: from --mmproj (a llama.cpp mmproj GGUF; the image token ids from the text
/// model's tokenizer, unless --weights is a Hugging Face checkpoint whose config.json gives them), or from the Hugging
/// Face Gemma 3 checkpoint of --weights.
std::unique_ptr<const Pictures> open_tower(const Args& a, const Config& cfg) {
  MAXTEXT_CHECK(a.has("weights"), ArgumentError, a.command, " with pictures needs --weights (a Hugging Face Gemma 3 "
                "checkpoint with its vision tower, or a text model with --mmproj)");
  const std::string weights = a.get("weights");
  std::unique_ptr<const Pictures> p;
  if (!a.has("mmproj")) {
    p = std::make_unique<const Pictures>(vision_backend(a), weights, image_preprocess(a));
  } else {
    io::Gemma3ImageTokens ids;
    if (const std::string cfg_path = models::hf_config_beside(weights); !cfg_path.empty()) {
      ids = models::gemma3_image_tokens(models::read_gemma3_config(cfg_path), cfg_path);
    } else {
      const auto tk = tokenizer::load_tokenizer(weights, a.get("tokenizer"), cfg.vocab_size);
      const auto id = [&](const char* text) {
        const auto v = tk->token_to_id(text);
        MAXTEXT_CHECK(v.has_value(), ArgumentError, "--mmproj: the tokenizer of ", weights, " has no token ", text,
                      " (a Gemma 3 vocabulary has it)");
        return *v;
      };
      ids.begin = id("<start_of_image>");
      ids.end = id("<end_of_image>");
      ids.soft = id("<image_soft_token>");
      ids.double_newline = tk->token_to_id("\n\n").value_or(ids.double_newline);
    }
    p = std::make_unique<const Pictures>(vision_backend(a), io::read_gguf(a.get("mmproj")), ids, image_preprocess(a));
  }
  p->check_text_model(cfg);
  return p;
}

/// The pictures of a request, decoded (PNG or JPEG).
std::vector<io::Image> decode_pictures(const std::vector<PictureFile>& pictures) {
  std::vector<io::Image> images;
  for (const auto& f : pictures) {
    const auto* b = reinterpret_cast<const std::uint8_t*>(f.bytes.data());
    images.push_back(io::decode_image(std::span<const std::uint8_t>(b, f.bytes.size()), f.name));
  }
  return images;
}

/// One line per picture (or tile) of soft tokens: its count, width, mean and rms.
void print_soft_tokens(const Tensor<float, 3>& tokens, const std::vector<std::string>& names) {
  const std::int64_t m = tokens.dim(1) * tokens.dim(2);
  for (std::int64_t i = 0; i < tokens.dim(0); ++i) {
    double s = 0.0, ss = 0.0;
    for (std::int64_t k = 0; k < m; ++k) {
      const double v = tokens.data()[i * m + k];
      s += v;
      ss += v * v;
    }
    std::printf("%s: %lld soft tokens of %lld, mean %.6g, rms %.6g\n", names[static_cast<std::size_t>(i)].c_str(),
                static_cast<long long>(tokens.dim(1)), static_cast<long long>(tokens.dim(2)), s / static_cast<double>(m),
                std::sqrt(ss / static_cast<double>(m)));
  }
}

/// A Gemma 3 model's tower for pictures that come later (serve's requests).
class Gemma3PictureTower final : public PictureTower {
 public:
  explicit Gemma3PictureTower(std::unique_ptr<const Pictures> p) : p_(std::move(p)) {}
  std::string marker() const override { return "<start_of_image>"; }
  PromptImages expand(const std::vector<std::int32_t>& prompt, const std::vector<PictureFile>& pictures) const override {
    return p_->expand(prompt, p_->encode(decode_pictures(pictures)), true);
  }

 private:
  std::unique_ptr<const Pictures> p_;
};

/// The pictures of --image, read and encoded once.
class Gemma3Pictures final : public PromptPictures {
 public:
  Gemma3Pictures(const Args& a, const Config& cfg) {
    const auto images = a.all.count("image") ? a.all.at("image") : std::vector<std::string>{};
    MAXTEXT_CHECK(!images.empty(), ArgumentError, a.command, ": no --image given");
    p_ = open_tower(a, cfg);
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::size_t> crops;
    soft_ = p_->encode(read_images(a, images, &crops));
    if (pan_and_scan(a)) crops_ = crops;
    const double encode_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (a.has("image-embeddings-out")) io::write_npy(a.get("image-embeddings-out"), AnyTensor::from(soft_));
    std::size_t n_crops = 0;
    for (std::size_t c : crops) n_crops += c;
    std::fprintf(stderr, "images: %zu picture(s)%s encoded to %lld soft tokens each in %.2f s (tower loaded in %.2f s)\n",
                 images.size(), pan_and_scan(a) ? (" and " + std::to_string(n_crops) + " pan-and-scan crop(s)").c_str() : "",
                 static_cast<long long>(soft_.dim(1)), encode_s, p_->load_seconds());
  }
  std::int64_t count() const override { return soft_.dim(0); }
  PromptImages expand(const std::vector<std::int32_t>& prompt, bool all) const override {
    return p_->expand(prompt, soft_, all);
  }
  std::vector<std::size_t> crops() const override { return crops_; }

 private:
  std::unique_ptr<const Pictures> p_;
  Tensor<float, 3> soft_;
  std::vector<std::size_t> crops_;  ///< per --image file, with --pan-and-scan on
};

/// Llama 4's vision model for --weights (a Hugging Face Llama4ForConditionalGeneration checkpoint) or --mmproj
/// (llama.cpp's file of it, beside any Llama 4 text model): the image ids of config.json, the other markers
/// (<|image|>, the tile separators; all of them with --mmproj) from the text model's tokenizer (--tokenizer, the GGUF
/// vocabulary, or tokenizer.json beside the checkpoint) when it has them, MaxText's ids otherwise. Only MaxText's
/// preprocessing is implemented for Llama 4.
std::unique_ptr<const Llama4Pictures> open_llama4(const Args& a, const Config& cfg) {
  const std::string how = a.get("image-preprocess", "maxtext");
  MAXTEXT_CHECK(how == "maxtext", ArgumentError, "--image-preprocess ", how, ": Llama 4's pictures are preprocessed as "
                "MaxText's processor does (maxtext); Hugging Face's resizing and llama.cpp's are not implemented for it");
  io::Llama4ImageTokens ids;
  const std::string weights = a.get("weights");
  const std::string cfg_path = weights.empty() ? std::string() : models::hf_config_beside(weights);
  const bool tokenizer = a.has("tokenizer") || (a.has("mmproj") && !weights.empty()) ||
                         (!cfg_path.empty() &&
                          std::filesystem::exists(std::filesystem::path(cfg_path).parent_path() / "tokenizer.json"));
  if (cfg.vocab_size > 0 && tokenizer) {
    const auto tk = tokenizer::load_tokenizer(weights, a.get("tokenizer"), cfg.vocab_size);
    // Beside an mmproj file the tokenizer is the only source of the ids: each must be in it.
    const auto set = [&](const char* text, std::int32_t& out) {
      if (const auto v = tk->token_to_id(text)) {
        out = *v;
      } else {
        MAXTEXT_CHECK(!a.has("mmproj"), ArgumentError, "--mmproj: the tokenizer of ", weights, " has no token ", text,
                      " (a Llama 4 vocabulary has it)");
      }
    };
    set("<|image_start|>", ids.begin);
    set("<|image_end|>", ids.end);
    set("<|image|>", ids.image);
    set("<|patch|>", ids.patch);
    set("<|tile_x_separator|>", ids.tile_x);
    set("<|tile_y_separator|>", ids.tile_y);
  }
  auto p = a.has("mmproj") ? std::make_unique<const Llama4Pictures>(vision_backend(a), io::read_gguf(a.get("mmproj")), ids)
                           : std::make_unique<const Llama4Pictures>(vision_backend(a), weights, ids);
  if (cfg.vocab_size > 0) p->check_text_model(cfg);
  return p;
}

/// A Llama 4 model's vision model for pictures that come later (serve's requests).
class Llama4PictureTower final : public PictureTower {
 public:
  explicit Llama4PictureTower(std::unique_ptr<const Llama4Pictures> p) : p_(std::move(p)) {}
  std::string marker() const override { return "<|image|>"; }
  PromptImages expand(const std::vector<std::int32_t>& prompt, const std::vector<PictureFile>& pictures) const override {
    return p_->expand(prompt, p_->encode(decode_pictures(pictures)), true);
  }

 private:
  std::unique_ptr<const Llama4Pictures> p_;
};

/// The pictures of --image for a Llama 4 model, cut into tiles and encoded once.
class Llama4PromptPictures final : public PromptPictures {
 public:
  Llama4PromptPictures(const Args& a, const Config& cfg) {
    const auto images = a.all.count("image") ? a.all.at("image") : std::vector<std::string>{};
    MAXTEXT_CHECK(!images.empty(), ArgumentError, a.command, ": no --image given");
    p_ = open_llama4(a, cfg);
    const auto t0 = std::chrono::steady_clock::now();
    pics_ = p_->encode(read_images(a, images));
    const double encode_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (a.has("image-embeddings-out")) io::write_npy(a.get("image-embeddings-out"), AnyTensor::from(pics_.tokens));
    std::fprintf(stderr, "images: %zu picture(s) cut into %lld tile(s) of %lld soft tokens, encoded in %.2f s (vision "
                 "model loaded in %.2f s)\n", images.size(), static_cast<long long>(pics_.tokens.dim(0)),
                 static_cast<long long>(pics_.tokens.dim(1)), encode_s, p_->load_seconds());
  }
  std::int64_t count() const override { return pics_.count(); }
  PromptImages expand(const std::vector<std::int32_t>& prompt, bool all) const override {
    return p_->expand(prompt, pics_, all);
  }

 private:
  std::unique_ptr<const Llama4Pictures> p_;
  models::Llama4EncodedPictures pics_;
};

/// maxtext vision for a Llama 4 checkpoint: each picture's tiles (row-major, then the global tile).
int vision_llama4(const Args& a, const std::vector<std::string>& images) {
  Config none;
  none.vocab_size = 0;  // no text model: the ids are config.json's and MaxText's
  const auto p = open_llama4(a, none);
  const auto t0 = std::chrono::steady_clock::now();
  const models::Llama4EncodedPictures pics = p->encode(read_images(a, images));
  const double encode_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<std::string> names;
  for (std::size_t f = 0; f < images.size(); ++f) {
    const auto [rows, cols] = pics.grids[f];
    for (std::int64_t t = 0; t < pics.tiles[f]; ++t) {
      names.push_back(images[f] + (pics.tiles[f] == 1 ? std::string(" (1 tile)")
                                   : t < rows * cols ? " (tile " + std::to_string(t / cols + 1) + "," +
                                                           std::to_string(t % cols + 1) + " of " + std::to_string(rows) +
                                                           "x" + std::to_string(cols) + ")"
                                                     : std::string(" (global tile)")));
    }
  }
  print_soft_tokens(pics.tokens, names);
  if (a.has("out")) {
    io::write_npy(a.get("out"), AnyTensor::from(pics.tokens));
    std::printf("wrote %s [%lld, %lld, %lld] float32\n", a.get("out").c_str(), static_cast<long long>(pics.tokens.dim(0)),
                static_cast<long long>(pics.tokens.dim(1)), static_cast<long long>(pics.tokens.dim(2)));
  }
  std::fprintf(stderr, "vision: load %.2f s, preprocess + encode %.2f s (%zu pictures, %lld tiles)\n", p->load_seconds(),
               encode_s, images.size(), static_cast<long long>(pics.tokens.dim(0)));
  return 0;
}

/// Gemma 4's vision encoder for --weights (a Hugging Face Gemma4ForConditionalGeneration checkpoint) or --mmproj
/// (llama.cpp's gemma4v file, beside a Gemma 4 text model: the image token ids from config.json beside --weights, or
/// else the text model's tokenizer; Gemma 4's defaults for `maxtext vision` alone); MaxText's preprocessing or
/// Hugging Face's (--image-preprocess maxtext|hf).
std::unique_ptr<const Gemma4Pictures> open_gemma4(const Args& a, const Config& cfg) {
  const io::Gemma4ImageProcessing how = io::parse_gemma4_image_processing(a.get("image-preprocess", "maxtext"));
  std::unique_ptr<const Gemma4Pictures> p;
  if (!a.has("mmproj")) {
    MAXTEXT_CHECK(a.has("weights"), ArgumentError, a.command, " with pictures needs --weights (a Hugging Face Gemma 4 "
                  "checkpoint with its vision encoder) or --mmproj");
    p = std::make_unique<const Gemma4Pictures>(vision_backend(a), a.get("weights"), how);
  } else {
    io::Gemma4ImageTokens ids;
    const std::string weights = a.get("weights");
    if (const std::string cfg_path = weights.empty() ? std::string() : models::hf_config_beside(weights);
        !cfg_path.empty()) {
      ids = models::gemma4_image_tokens(models::read_gemma4_config(cfg_path), cfg_path);
    } else if (cfg.vocab_size > 0) {
      const auto tk = tokenizer::load_tokenizer(weights, a.get("tokenizer"), cfg.vocab_size);
      const auto id = [&](const char* text) {
        const auto v = tk->token_to_id(text);
        MAXTEXT_CHECK(v.has_value(), ArgumentError, "--mmproj: the tokenizer of ", weights, " has no token ", text,
                      " (a Gemma 4 vocabulary has it)");
        return *v;
      };
      ids.begin = id("<|image>");
      ids.end = id("<image|>");
      ids.image = id("<|image|>");
    }
    p = std::make_unique<const Gemma4Pictures>(vision_backend(a), io::read_gguf(a.get("mmproj")), ids, how);
  }
  if (cfg.vocab_size > 0) p->check_text_model(cfg);
  return p;
}

/// A Gemma 4 model's vision encoder for pictures that come later (serve's requests).
class Gemma4PictureTower final : public PictureTower {
 public:
  explicit Gemma4PictureTower(std::unique_ptr<const Gemma4Pictures> p) : p_(std::move(p)) {}
  std::string marker() const override { return "<|image|>"; }
  PromptImages expand(const std::vector<std::int32_t>& prompt, const std::vector<PictureFile>& pictures) const override {
    return p_->expand(prompt, p_->encode(decode_pictures(pictures)), true);
  }

 private:
  std::unique_ptr<const Gemma4Pictures> p_;
};

/// The pictures of --image for a Gemma 4 model, encoded once.
class Gemma4PromptPictures final : public PromptPictures {
 public:
  Gemma4PromptPictures(const Args& a, const Config& cfg) {
    const auto images = a.all.count("image") ? a.all.at("image") : std::vector<std::string>{};
    MAXTEXT_CHECK(!images.empty(), ArgumentError, a.command, ": no --image given");
    p_ = open_gemma4(a, cfg);
    const auto t0 = std::chrono::steady_clock::now();
    pics_ = p_->encode(read_images(a, images));
    const double encode_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (a.has("image-embeddings-out")) io::write_npy(a.get("image-embeddings-out"), AnyTensor::from(pics_.rows));
    std::fprintf(stderr, "images: %zu picture(s) encoded to %lld soft tokens in %.2f s (vision encoder loaded in %.2f s)\n",
                 images.size(), static_cast<long long>(pics_.rows.dim(0)), encode_s, p_->load_seconds());
  }
  std::int64_t count() const override { return pics_.count(); }
  PromptImages expand(const std::vector<std::int32_t>& prompt, bool all) const override {
    return p_->expand(prompt, pics_, all);
  }

 private:
  std::unique_ptr<const Gemma4Pictures> p_;
  models::Gemma4EncodedPictures pics_;
};

/// maxtext vision for a Gemma 4 checkpoint: each picture's soft tokens (rows picture after picture: [tokens, emb_dim]).
int vision_gemma4(const Args& a, const std::vector<std::string>& images) {
  Config none;
  none.vocab_size = 0;  // no text model
  const auto p = open_gemma4(a, none);
  const auto t0 = std::chrono::steady_clock::now();
  const models::Gemma4EncodedPictures pics = p->encode(read_images(a, images));
  const double encode_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::int64_t E = pics.rows.dim(1);
  std::int64_t at = 0;
  for (std::size_t f = 0; f < images.size(); ++f) {
    const std::int64_t n = pics.tokens[f];
    const Tensor<float, 3> one = [&] {
      Tensor<float, 3> t({1, n, E});
      std::copy(pics.rows.data() + at * E, pics.rows.data() + (at + n) * E, t.data());
      return t;
    }();
    print_soft_tokens(one, {images[f]});
    at += n;
  }
  if (a.has("out")) {
    io::write_npy(a.get("out"), AnyTensor::from(pics.rows));
    std::printf("wrote %s [%lld, %lld] float32 (the pictures' soft tokens in order)\n", a.get("out").c_str(),
                static_cast<long long>(pics.rows.dim(0)), static_cast<long long>(E));
  }
  std::fprintf(stderr, "vision: load %.2f s, preprocess + encode %.2f s (%zu pictures)\n", p->load_seconds(), encode_s,
               images.size());
  return 0;
}

/// The Qwen3 vision encoder of --weights (a Hugging Face Qwen3.5 / Qwen3-VL / Qwen3-Omni checkpoint; llama.cpp's files
/// are not read), with MaxText's or Hugging Face's preprocessing (--image-preprocess maxtext|hf).
std::unique_ptr<const Qwen3Pictures> open_qwen3(const Args& a) {
  MAXTEXT_CHECK(!a.has("mmproj"), ArgumentError, "--mmproj: llama.cpp's Qwen3 vision files are not read; give the Hugging "
                "Face checkpoint as --weights");
  MAXTEXT_CHECK(a.has("weights"), ArgumentError, a.command, " with pictures needs --weights (a Hugging Face Qwen3.5, "
                "Qwen3-VL or Qwen3-Omni checkpoint with its vision encoder)");
  return std::make_unique<const Qwen3Pictures>(vision_backend(a), a.get("weights"),
                                               io::parse_qwen3_image_processing(a.get("image-preprocess", "maxtext")));
}

/// The pictures' soft tokens, picture after picture: [tokens of all, out_hidden_size] (the --out / --image-embeddings-out
/// file).
Tensor<float, 2> qwen3_soft_tokens(const std::vector<Qwen3Pictures::Output>& outs, std::int64_t width) {
  std::int64_t n = 0;
  for (const auto& o : outs) n += o.tokens.dim(0);
  Tensor<float, 2> rows({n, width});
  float* at = rows.data();
  for (const auto& o : outs) at = std::copy(o.tokens.data(), o.tokens.data() + o.tokens.size(), at);
  return rows;
}

/// The pictures of --image for a Qwen3.5 / Qwen3-VL / Qwen3-Omni model, encoded once; each prompt's <|image_pad|>
/// markers expanded with MRoPE's 3-D positions (models::Qwen3Pictures::expand).
class Qwen3PromptPictures final : public PromptPictures {
 public:
  Qwen3PromptPictures(const Args& a, const Config& cfg) {
    const auto images = a.all.count("image") ? a.all.at("image") : std::vector<std::string>{};
    MAXTEXT_CHECK(!images.empty(), ArgumentError, a.command, ": no --image given");
    p_ = open_qwen3(a);
    p_->check_text_model(cfg);
    const auto t0 = std::chrono::steady_clock::now();
    pics_ = p_->encode(read_images(a, images));
    const double encode_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const Tensor<float, 2> rows = qwen3_soft_tokens(pics_, p_->config().out_hidden_size);
    if (a.has("image-embeddings-out")) io::write_npy(a.get("image-embeddings-out"), AnyTensor::from(rows));
    std::fprintf(stderr, "images: %zu picture(s) encoded to %lld soft tokens in %.2f s (vision encoder loaded in %.2f s)\n",
                 images.size(), static_cast<long long>(rows.dim(0)), encode_s, p_->load_seconds());
  }
  std::int64_t count() const override { return static_cast<std::int64_t>(pics_.size()); }
  PromptImages expand(const std::vector<std::int32_t>& prompt, bool all) const override {
    return p_->expand(prompt, pics_, all);
  }

 private:
  std::unique_ptr<const Qwen3Pictures> p_;
  std::vector<Qwen3Pictures::Output> pics_;
};

/// maxtext vision for a Qwen3.5 / Qwen3-VL / Qwen3-Omni checkpoint: each picture's soft tokens (the projector's
/// merged tokens; rows picture after picture: [tokens, out_hidden_size]).
int vision_qwen3(const Args& a, const std::vector<std::string>& images) {
  const auto pp = open_qwen3(a);
  const Qwen3Pictures& p = *pp;
  const auto t0 = std::chrono::steady_clock::now();
  const auto outs = p.encode(read_images(a, images));
  const double encode_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::int64_t E = p.config().out_hidden_size;
  for (std::size_t f = 0; f < outs.size(); ++f) {
    const Tensor<float, 2>& t = outs[f].tokens;
    Tensor<float, 3> one({1, t.dim(0), E});
    std::copy(t.data(), t.data() + t.size(), one.data());
    print_soft_tokens(one, {images[f]});
  }
  if (a.has("out")) {
    const Tensor<float, 2> rows = qwen3_soft_tokens(outs, E);
    io::write_npy(a.get("out"), AnyTensor::from(rows));
    std::printf("wrote %s [%lld, %lld] float32 (the pictures' soft tokens in order)\n", a.get("out").c_str(),
                static_cast<long long>(rows.dim(0)), static_cast<long long>(E));
  }
  std::fprintf(stderr, "vision: load %.2f s, preprocess + encode %.2f s (%zu pictures)\n", p.load_seconds(), encode_s,
               images.size());
  return 0;
}

}  // namespace

std::string image_marker_text(const Args& a) {
  if (a.all.count("image") == 0 && a.all.count("audio") != 0) return "<|audio_start|><|audio_pad|><|audio_end|>";
  if (qwen3_pictures(a)) return "<|vision_start|><|image_pad|><|vision_end|>";
  return llama4_pictures(a) || gemma4_pictures(a) ? "<|image|>" : "<start_of_image>";
}

std::string with_pan_and_scan(const Args& a, std::string text, const std::vector<std::size_t>& crops) {
  return io::gemma3_pan_and_scan_prompt(text, crops, image_marker_text(a));
}

namespace {
std::unique_ptr<PromptPictures> open_pictures_only(const Args& a, const Config& cfg) {
  if (qwen3_pictures(a)) return std::make_unique<Qwen3PromptPictures>(a, cfg);
  if (llama4_pictures(a)) return std::make_unique<Llama4PromptPictures>(a, cfg);
  if (gemma4_pictures(a)) return std::make_unique<Gemma4PromptPictures>(a, cfg);
  return std::make_unique<Gemma3Pictures>(a, cfg);
}
}  // namespace

std::unique_ptr<PromptPictures> open_prompt_pictures(const Args& a, const Config& cfg) {
  if (a.all.count("audio") != 0) {
    return with_prompt_sounds(a, cfg, a.all.count("image") != 0 ? open_pictures_only(a, cfg) : nullptr);
  }
  return open_pictures_only(a, cfg);
}

std::unique_ptr<PictureTower> open_picture_tower(const Args& a, const Config& cfg) {
  if (a.get("mmproj") == "none") return nullptr;
  if (llama4_pictures(a)) return std::make_unique<Llama4PictureTower>(open_llama4(a, cfg));
  if (gemma4_pictures(a)) return std::make_unique<Gemma4PictureTower>(open_gemma4(a, cfg));
  if (qwen3_pictures(a)) return nullptr;  // the server's batched passes take no 3-D positions: served as text only
  if (!a.has("mmproj")) {  // a Hugging Face Gemma 3 checkpoint brings its tower
    const std::string cfg_path = a.has("weights") ? models::hf_config_beside(a.get("weights")) : std::string();
    if (cfg_path.empty()) return nullptr;
    std::ifstream f(cfg_path);
    const nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
    const bool gemma3 = j.is_object() && j.contains("model_type") && j["model_type"] == "gemma3";
    if (!gemma3 || !j.contains("vision_config")) return nullptr;
  }
  return std::make_unique<Gemma3PictureTower>(open_tower(a, cfg));
}

int cmd_vision(const Args& a) {
  MAXTEXT_CHECK(a.has("weights") != a.has("mmproj"), ArgumentError, "vision needs --weights (a Hugging Face Gemma 3, Gemma 4 "
                "or Llama 4 checkpoint with its vision tower: config.json + safetensors) or --mmproj (a llama.cpp "
                "mmproj GGUF), one of them");
  const auto images = a.all.count("image") ? a.all.at("image") : std::vector<std::string>{};
  MAXTEXT_CHECK(!images.empty(), ArgumentError, "vision needs --image FILE (PNG or JPEG; repeat it for more)");
  if (llama4_pictures(a)) return vision_llama4(a, images);
  if (gemma4_pictures(a)) return vision_gemma4(a, images);
  if (qwen3_pictures(a)) return vision_qwen3(a, images);
  const Pictures tower = a.has("mmproj")
                             ? Pictures(vision_backend(a), io::read_gguf(a.get("mmproj")), {}, image_preprocess(a))
                             : Pictures(vision_backend(a), a.get("weights"), image_preprocess(a));
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::size_t> crops;
  const Tensor<float, 3> tokens = tower.encode(read_images(a, images, &crops));
  std::vector<std::string> names;  // each picture, then its crops
  for (std::size_t f = 0; f < images.size(); ++f) {
    names.push_back(images[f]);
    for (std::size_t k = 0; k < crops[f]; ++k) names.push_back(images[f] + " (crop " + std::to_string(k + 1) + ")");
  }
  const double encode_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::int64_t n = tokens.dim(0);
  print_soft_tokens(tokens, names);
  if (a.has("out")) {
    io::write_npy(a.get("out"), AnyTensor::from(tokens));
    std::printf("wrote %s [%lld, %lld, %lld] float32\n", a.get("out").c_str(), static_cast<long long>(n),
                static_cast<long long>(tokens.dim(1)), static_cast<long long>(tokens.dim(2)));
  }
  std::fprintf(stderr, "vision: load %.2f s, preprocess + encode %.2f s (%lld pictures)\n", tower.load_seconds(),
               encode_s, static_cast<long long>(n));
  return 0;
}

}  // namespace maxtext::cli
