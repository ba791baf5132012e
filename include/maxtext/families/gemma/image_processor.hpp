// families/gemma/image_processor.hpp: Gemma 3's image preprocessing, as MaxText (multimodal/processor_gemma3.py
// preprocess_mm_data_gemma3) and Hugging Face (Gemma3ImageProcessor, without pan-and-scan) do it: one picture to
// 896 x 896 RGB values in [-1, 1], HWC, float32, the input of the vision tower (families/gemma/vision.hpp).
//
//   MaxText (Gemma3ImageProcessing::maxtext, the default): Pillow resize to 896 x 896 with BILINEAR, or LANCZOS when
//     the picture is wider or taller than 896; then (x - 127.5) / 127.5 clipped to [-1, 1]. (MaxText computes in f64
//     and stores f32: equal to f32 arithmetic for every byte value, tests/fixtures/images/manifest.json.)
//   Hugging Face (Gemma3ImageProcessing::hf): Pillow resize with BILINEAR always; rescale f32(f64(x) * (1/255)),
//     then normalise (r - 0.5f) / 0.5f in f32. The two differ by up to 6e-8 per value (and by the filter for large
//     pictures).
// The resize is io::resize_image, byte for byte Pillow's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/io/image.hpp"
#include "maxtext/io/image_resize.hpp"

namespace maxtext::io {

enum class Gemma3ImageProcessing { maxtext, hf };

/// "maxtext" or "hf" (refused by name otherwise).
inline Gemma3ImageProcessing parse_gemma3_image_processing(std::string_view name) {
  if (name == "maxtext") return Gemma3ImageProcessing::maxtext;
  if (name == "hf" || name == "huggingface") return Gemma3ImageProcessing::hf;
  throw ArgumentError(str("[image] unknown Gemma 3 image preprocessing '", name, "': expected maxtext or hf"));
}

/// The pixels the processor resizes to (896 x 896 for every released Gemma 3).
inline Image gemma3_resize(const Image& img, std::int64_t size = 896,
                           Gemma3ImageProcessing how = Gemma3ImageProcessing::maxtext) {
  const bool larger = img.width > size || img.height > size;
  const ResizeFilter f = (how == Gemma3ImageProcessing::maxtext && larger) ? ResizeFilter::lanczos : ResizeFilter::bilinear;
  return resize_image(img, size, size, f);
}

/// One picture as the vision tower's input: [size, size, 3] float32 in [-1, 1].
inline Tensor<float, 3> gemma3_preprocess(const Image& img, std::int64_t size = 896,
                                          Gemma3ImageProcessing how = Gemma3ImageProcessing::maxtext) {
  const Image r = gemma3_resize(img, size, how);
  Tensor<float, 3> out({size, size, 3});
  float lut[256];
  for (int v = 0; v < 256; ++v) {
    if (how == Gemma3ImageProcessing::maxtext) {
      const float x = (static_cast<float>(v) - 127.5f) / 127.5f;
      lut[v] = x < -1.0f ? -1.0f : (x > 1.0f ? 1.0f : x);
    } else {
      const float rescaled = static_cast<float>(static_cast<double>(v) * (1.0 / 255.0));
      lut[v] = (rescaled - 0.5f) / 0.5f;
    }
  }
  for (std::size_t i = 0; i < r.rgb.size(); ++i) out.data()[i] = lut[r.rgb[i]];
  return out;
}

/// Gemma 3's image token ids (its tokenizer's added tokens; MaxText's processor_gemma3.py constants).
struct Gemma3ImageTokens {
  std::int32_t begin = 255999;        ///< <start_of_image>
  std::int32_t end = 256000;          ///< <end_of_image>
  std::int32_t soft = 262144;         ///< <image_soft_token>, the placeholder the vision tokens replace
  std::int32_t double_newline = 108;  ///< "\n\n"
  std::int64_t per_image = 256;       ///< soft tokens per picture (mm_tokens_per_image)
};

/// A prompt with each picture's placeholders, and where they are.
struct Gemma3ImagePrompt {
  std::vector<std::int32_t> ids;
  std::vector<std::int64_t> soft_starts;  ///< index in `ids` of each picture's first soft token, in order
};

/// Each <start_of_image> of a tokenised prompt expanded to "\n\n<start_of_image>" + per_image x <image_soft_token> +
/// "<end_of_image>\n\n" (MaxText's add_extra_tokens_for_images_gemma3; the same ids as Hugging Face's Gemma3Processor
/// writes as text and tokenises). `images`: the pictures given, which must match the markers in number.
inline Gemma3ImagePrompt gemma3_expand_image_tokens(const std::vector<std::int32_t>& ids, std::int64_t images,
                                                    const Gemma3ImageTokens& t = {}) {
  Gemma3ImagePrompt out;
  std::int64_t markers = 0;
  for (const std::int32_t id : ids) {
    MAXTEXT_CHECK(id != t.soft, ArgumentError, "[image] the prompt already holds an <image_soft_token> (id ", t.soft,
                  "): write one <start_of_image> per picture, the placeholders are added here");
    if (id != t.begin) {
      out.ids.push_back(id);
      continue;
    }
    ++markers;
    out.ids.push_back(t.double_newline);
    out.ids.push_back(t.begin);
    out.soft_starts.push_back(static_cast<std::int64_t>(out.ids.size()));
    out.ids.insert(out.ids.end(), static_cast<std::size_t>(t.per_image), t.soft);
    out.ids.push_back(t.end);
    out.ids.push_back(t.double_newline);
  }
  MAXTEXT_CHECK(markers == images, ArgumentError, "[image] the prompt has ", markers, " <start_of_image> marker(s) for ",
                images, " picture(s): one marker per picture");
  return out;
}

}  // namespace maxtext::io
