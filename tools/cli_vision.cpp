// tools/cli_vision.cpp: `maxtext vision`: pictures through a Gemma 3 checkpoint's vision tower (docs/vision.md):
// PNG / JPEG files decoded and preprocessed as MaxText's (or Hugging Face's) processor does, encoded by
// layers::Gemma3VisionEncoder into the text model's embedding space; the soft tokens [n, 256, emb_dim] go to --out.
// The merge of those tokens into the decoder (generate / chat with --image) is not implemented yet.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_args.hpp"
#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/families/gemma/image_processor.hpp"
#include "maxtext/families/gemma/vision.hpp"
#include "maxtext/io/image.hpp"
#include "maxtext/io/npy.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/io/weights.hpp"
#include "maxtext/models/layer_runner.hpp"

namespace maxtext::cli {

namespace {

/// config.json of a Hugging Face checkpoint: in the directory, or beside the file / index.
std::string hf_config_path(const std::string& weights) {
  namespace fs = std::filesystem;
  const fs::path p(weights);
  const fs::path cfg = fs::is_directory(p) ? p / "config.json" : p.parent_path() / "config.json";
  MAXTEXT_CHECK(fs::exists(cfg), ArgumentError, "vision: no config.json at ", cfg.string(),
                " (--weights: a Hugging Face Gemma3ForConditionalGeneration directory, safetensors file or index)");
  return cfg.string();
}

}  // namespace

int cmd_vision(const Args& a) {
  MAXTEXT_CHECK(a.has("weights"), ArgumentError, "vision needs --weights (a Hugging Face Gemma 3 checkpoint with its "
                "vision tower: config.json + safetensors)");
  const auto images = a.all.count("image") ? a.all.at("image") : std::vector<std::string>{};
  MAXTEXT_CHECK(!images.empty(), ArgumentError, "vision needs --image FILE (PNG or JPEG; repeat it for more)");
  const io::Gemma3ImageProcessing how = io::parse_gemma3_image_processing(a.get("image-preprocess", "maxtext"));
  const std::string cfg_path = hf_config_path(a.get("weights"));
  nlohmann::json j;
  {
    std::ifstream f(cfg_path);
    MAXTEXT_CHECK(f.good(), IoError, "vision: cannot read ", cfg_path);
    try {
      j = nlohmann::json::parse(f);
    } catch (const nlohmann::json::exception& e) {
      MAXTEXT_THROW(IoError, "vision: ", cfg_path, ": not JSON (", e.what(), ")");
    }
  }
  const std::string type = j.is_object() && j.contains("model_type") && j["model_type"].is_string()
                               ? j["model_type"].get<std::string>() : std::string();
  MAXTEXT_CHECK(type == "gemma3", UnsupportedError, "vision: ", cfg_path, " has model_type '", type,
                "'; the vision towers implemented are Gemma 3's (model_type gemma3, Gemma3ForConditionalGeneration)");
  const layers::Gemma3VisionConfig vc = layers::Gemma3VisionConfig::from_hf(j, cfg_path);

  using P = Policy<cpu::Backend, float>;
  cpu::Options opt;
  opt.threads = static_cast<int>(a.integer("threads", 0));
  MAXTEXT_CHECK(opt.threads >= 0, ArgumentError, "--threads must be >= 0, found ", opt.threads);
  cpu::Backend be(opt);
  const auto t0 = std::chrono::steady_clock::now();
  const layers::Gemma3VisionEncoder<P> tower(vc);
  const auto params =
      models::load_layer_params<P>(tower, io::gemma3_vision_from_hf(io::read_safetensors_any(io::detail::resolve_weights_path(a.get("weights"))), vc), be);
  const auto t1 = std::chrono::steady_clock::now();

  const std::int64_t n = static_cast<std::int64_t>(images.size()), S = vc.image_size;
  Tensor<float, 4> pixels({n, S, S, 3});
  for (std::int64_t i = 0; i < n; ++i) {
    const io::Image img = io::read_image(images[static_cast<std::size_t>(i)]);
    const Tensor<float, 3> x = io::gemma3_preprocess(img, S, how);
    std::copy(x.data(), x.data() + x.size(), &pixels(i, 0, 0, 0));
  }
  const auto t2 = std::chrono::steady_clock::now();
  const Tensor<float, 3> tokens = tower.encode(be, params, pixels);
  const auto t3 = std::chrono::steady_clock::now();
  const auto secs = [](auto d) { return std::chrono::duration<double>(d).count(); };
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
  std::fprintf(stderr, "vision: load %.2f s, preprocess %.2f s, encode %.2f s (%lld pictures, %lld patches each)\n",
               secs(t1 - t0), secs(t2 - t1), secs(t3 - t2), static_cast<long long>(n),
               static_cast<long long>(vc.num_patches()));
  return 0;
}

}  // namespace maxtext::cli
