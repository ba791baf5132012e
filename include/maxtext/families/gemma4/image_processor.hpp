// families/gemma4/image_processor.hpp: Gemma 4's image preprocessing and image prompt: one picture to [h, w, 3]
// float32 in [0, 1], the input of the vision encoder (families/gemma4/vision.hpp), and the token ids that stand for it.
//
//   MaxText's processor (multimodal/processor_gemma4.py preprocess_mm_data_gemma4): every picture resized to one fixed
//     size (672 x 960, H x W: image_size_for_vit) by Pillow's BICUBIC, then float32(v) / 255 in float32 (the default);
//   Hugging Face's (Gemma4ImageProcessor, `--image-preprocess hf`): the aspect ratio kept, the largest size of whole
//     (patch x pooling)-pixel windows within max_soft_tokens x pooling^2 patches (get_aspect_ratio_preserving_size),
//     Pillow's BICUBIC (none when the size is already right), then float32(v * (1/255) in double).
//   Both resizes are io::resize_image's, byte for byte Pillow's.
// The prompt: each picture's marker (<|image|>, MaxText's placeholder, which is also the image token) becomes
// <|image> (begin), one image token per soft token, <image|> (end) (add_extra_tokens_for_images_gemma4). The soft tokens
// take the image tokens' places; in the decoder a picture's tokens see each other (MaxText's bidirectional mask).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/io/image.hpp"
#include "maxtext/io/image_resize.hpp"

namespace maxtext::io {

enum class Gemma4ImageProcessing { maxtext, hf };

/// "maxtext" or "hf" (refused by name otherwise; llama.cpp's own Gemma 4 preprocessing is not implemented).
inline Gemma4ImageProcessing parse_gemma4_image_processing(std::string_view name) {
  if (name == "maxtext") return Gemma4ImageProcessing::maxtext;
  if (name == "hf") return Gemma4ImageProcessing::hf;
  throw ArgumentError(str("[gemma4 image] unknown image preprocessing '", name,
                          "': expected maxtext (MaxText's fixed size, the default) or hf (Hugging Face's "
                          "aspect-preserving size); llamacpp is not implemented for Gemma 4"));
}

/// Hugging Face's target size (height, width) for a picture of `height` x `width` (get_aspect_ratio_preserving_size):
/// the ideal scale sqrt(max_patches p^2 / (h w)), each side cut down to whole windows of p k pixels; a side that
/// would vanish gets one window and the other floor(long / short) windows (at most max_patches / k^2).
inline std::pair<std::int64_t, std::int64_t> gemma4_hf_target_size(std::int64_t height, std::int64_t width,
                                                                     std::int64_t patch, std::int64_t max_patches,
                                                                     std::int64_t pooling) {
  MAXTEXT_CHECK(height > 0 && width > 0 && patch > 0 && max_patches > 0 && pooling > 0, ArgumentError,
                "[gemma4 image] picture ", width, " x ", height, ", patch ", patch, ", max patches ", max_patches,
                ", pooling ", pooling, ": all must be > 0");
  const double factor = std::sqrt(static_cast<double>(max_patches * patch * patch) /
                                  (static_cast<double>(height) * static_cast<double>(width)));
  const std::int64_t side = pooling * patch;
  std::int64_t th = static_cast<std::int64_t>(std::floor(factor * static_cast<double>(height) / static_cast<double>(side))) * side;
  std::int64_t tw = static_cast<std::int64_t>(std::floor(factor * static_cast<double>(width) / static_cast<double>(side))) * side;
  MAXTEXT_CHECK(th > 0 || tw > 0, ArgumentError, "[gemma4 image] a ", width, " x ", height, " picture would be resized to "
                "0 x 0 (windows of ", side, " pixels)");
  const std::int64_t longest = (max_patches / (pooling * pooling)) * side;
  if (th == 0) {
    th = side;
    tw = std::min((width / height) * side, longest);
  } else if (tw == 0) {
    tw = side;
    th = std::min((height / width) * side, longest);
  }
  MAXTEXT_CHECK(th * tw <= max_patches * patch * patch, ArgumentError, "[gemma4 image] resizing ", width, " x ", height,
                " to ", tw, " x ", th, " exceeds ", max_patches, " patches of ", patch);
  return {th, tw};
}

/// How a picture becomes the encoder's input.
struct Gemma4Preprocess {
  Gemma4ImageProcessing how = Gemma4ImageProcessing::maxtext;
  std::int64_t height = 672, width = 960;  ///< MaxText's fixed size
  std::int64_t patch = 16, pooling = 3;
  std::int64_t max_soft_tokens = 280;  ///< Hugging Face's budget (70, 140, 280, 560 or 1120 in its processor)
};

/// The size (height, width) `img` is resized to.
inline std::pair<std::int64_t, std::int64_t> gemma4_target_size(const Image& img, const Gemma4Preprocess& o) {
  if (o.how == Gemma4ImageProcessing::maxtext) return {o.height, o.width};
  return gemma4_hf_target_size(img.height, img.width, o.patch, o.max_soft_tokens * o.pooling * o.pooling, o.pooling);
}

/// One picture as the vision encoder's input: [h, w, 3] float32 in [0, 1].
inline Tensor<float, 3> gemma4_preprocess(const Image& img, const Gemma4Preprocess& o = {}) {
  const auto [h, w] = gemma4_target_size(img, o);
  const Image r = (h == img.height && w == img.width) ? img : resize_image(img, w, h, ResizeFilter::bicubic);
  Tensor<float, 3> out({h, w, 3});
  float lut[256];
  for (int v = 0; v < 256; ++v) {
    lut[v] = o.how == Gemma4ImageProcessing::maxtext ? static_cast<float>(v) / 255.0f
                                                      : static_cast<float>(static_cast<double>(v) * (1.0 / 255.0));
  }
  for (std::size_t i = 0; i < r.rgb.size(); ++i) out.data()[i] = lut[r.rgb[i]];
  return out;
}

/// Gemma 4's image token ids (Gemma4Config's defaults; MaxText's processor_gemma4.py constants).
struct Gemma4ImageTokens {
  std::int32_t begin = 255999;  ///< <|image>  (boi_token_id)
  std::int32_t end = 258882;    ///< <image|>  (eoi_token_id)
  std::int32_t image = 258880;  ///< <|image|> (image_token_id): the marker, and the placeholder of each soft token
};

/// A prompt with each picture's placeholders, and where they are.
struct Gemma4ImagePrompt {
  std::vector<std::int32_t> ids;
  std::vector<std::int64_t> soft_starts;  ///< index in `ids` of each picture's first soft token, in order
};

/// Each <|image|> of a tokenised prompt expanded to <|image> + tokens[i] x <|image|> + <image|>
/// (MaxText's add_extra_tokens_for_images_gemma4), marker i taking picture i; `tokens`: each picture's soft tokens,
/// which must match the markers in number.
inline Gemma4ImagePrompt gemma4_expand_image_tokens(const std::vector<std::int32_t>& ids,
                                                    const std::vector<std::int64_t>& tokens,
                                                    const Gemma4ImageTokens& t = {}) {
  Gemma4ImagePrompt out;
  std::size_t markers = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int32_t id = ids[i];
    MAXTEXT_CHECK(id != t.begin && id != t.end, ArgumentError, "[image] the prompt already holds an image ",
                  id == t.begin ? "begin" : "end", " token (id ", id,
                  "): write one <|image|> per picture, the rest is added here");
    if (id != t.image) {
      out.ids.push_back(id);
      continue;
    }
    MAXTEXT_CHECK(markers < tokens.size(), ArgumentError, "[image] the prompt has more <|image|> markers than the ",
                  tokens.size(), " picture(s): one marker per picture");
    const std::int64_t n = tokens[markers++];
    MAXTEXT_CHECK(n > 0, ArgumentError, "[image] picture ", markers, " has ", n, " soft tokens");
    out.ids.push_back(t.begin);
    out.soft_starts.push_back(static_cast<std::int64_t>(out.ids.size()));
    out.ids.insert(out.ids.end(), static_cast<std::size_t>(n), t.image);
    out.ids.push_back(t.end);
  }
  MAXTEXT_CHECK(markers == tokens.size(), ArgumentError, "[image] the prompt has ", markers, " <|image|> marker(s) for ",
                tokens.size(), " picture(s): one marker per picture");
  return out;
}

}  // namespace maxtext::io
