// families/qwen/image_processor.hpp: the image side of the Qwen3-VL / Qwen3-Omni / Qwen3.5 processors: one picture to
// the vision encoder's patches (families/qwen/vision.hpp), pixel_values [gh * gw, C * tp * p * p] and its grid.
//
//   smart_resize(h, w, f, min_pixels, max_pixels): each side rounded to a multiple of f (halves to even, as Python's
//     round), then scaled down (floor) or up (ceil) by sqrt of the area ratio when the area leaves
//     [min_pixels, max_pixels]; an aspect ratio above 200 is refused;
//   Hugging Face's processor (Qwen2VLImageProcessor, the released Qwen3.5 / Qwen3-VL settings: patch 16, merge 2,
//     65536 .. 16777216 pixels; `--image-preprocess hf`): one Pillow BICUBIC resize to smart_resize(H, W, 32, ...),
//     values (v / 255 - 0.5) / 0.5 in double, stored as float32;
//   MaxText's (processor_qwen3_omni.py pre_process_qwen3_image, the default): two BICUBIC resizes, to
//     smart_resize(H, W, 28, 3136, 12845056) and then to smart_resize(h1, w1, 32, 3136, 12845056), values
//     (v - 127.5) / 127.5 in float32;
//   patches: the picture as one frame repeated over the temporal patch (grid_t = 1), cut into p x p patches in
//     merge-window order (the m x m windows row-major, a window's patches row-major), each patch's values in (channel,
//     frame, row, column) order.
// Both resizes are io::resize_image's, byte for byte Pillow's.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>
#include <utility>

#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/io/image.hpp"
#include "maxtext/io/image_resize.hpp"

namespace maxtext::io {

enum class Qwen3ImageProcessing { maxtext, hf };

/// "maxtext" or "hf" (refused by name otherwise).
inline Qwen3ImageProcessing parse_qwen3_image_processing(std::string_view name) {
  if (name == "maxtext") return Qwen3ImageProcessing::maxtext;
  if (name == "hf") return Qwen3ImageProcessing::hf;
  throw ArgumentError(str("[qwen3 image] unknown image preprocessing '", name,
                          "': expected maxtext (MaxText's two resizes, the default) or hf (Hugging Face's one); "
                          "llamacpp is not implemented for Qwen3"));
}

/// (height, width) as the processors' smart_resize computes them: multiples of `factor`, the area within
/// [min_pixels, max_pixels], the aspect ratio kept as far as that allows.
inline std::pair<std::int64_t, std::int64_t> qwen3_smart_resize(std::int64_t height, std::int64_t width, std::int64_t factor,
                                                                 std::int64_t min_pixels, std::int64_t max_pixels) {
  MAXTEXT_CHECK(height > 0 && width > 0 && factor > 0 && min_pixels <= max_pixels, ArgumentError, "[qwen3 image] picture ",
                width, " x ", height, ", factor ", factor, ", pixels [", min_pixels, ", ", max_pixels, "]: invalid");
  const double h = static_cast<double>(height), w = static_cast<double>(width), f = static_cast<double>(factor);
  MAXTEXT_CHECK(std::max(h, w) / std::min(h, w) <= 200.0, ArgumentError, "[qwen3 image] a ", width, " x ", height,
                " picture's aspect ratio is above 200 (the processor refuses it)");
  std::int64_t hb = static_cast<std::int64_t>(std::nearbyint(h / f)) * factor;  // halves to even, as Python's round
  std::int64_t wb = static_cast<std::int64_t>(std::nearbyint(w / f)) * factor;
  if (hb * wb > max_pixels) {
    const double beta = std::sqrt(h * w / static_cast<double>(max_pixels));
    hb = std::max(factor, static_cast<std::int64_t>(std::floor(h / beta / f)) * factor);
    wb = std::max(factor, static_cast<std::int64_t>(std::floor(w / beta / f)) * factor);
  } else if (hb * wb < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / (h * w));
    hb = static_cast<std::int64_t>(std::ceil(h * beta / f)) * factor;
    wb = static_cast<std::int64_t>(std::ceil(w * beta / f)) * factor;
  }
  return {hb, wb};
}

/// How a picture becomes the encoder's patches.
struct Qwen3Preprocess {
  Qwen3ImageProcessing how = Qwen3ImageProcessing::maxtext;
  std::int64_t patch = 16, temporal_patch = 2, merge = 2;
  std::int64_t min_pixels = 65536, max_pixels = 16777216;  ///< Hugging Face's (Qwen3.5's preprocessor_config.json)
};

/// A picture as the encoder takes it.
struct Qwen3Patches {
  Tensor<float, 2> pixel_values;  ///< [gh * gw, 3 * tp * p * p], merge-window order
  std::int64_t t = 1, h = 0, w = 0;  ///< the grid in patches
  std::int64_t height = 0, width = 0;  ///< the resized picture's size in pixels
};

/// The processor's patches of `img`.
inline Qwen3Patches qwen3_preprocess(const Image& img, const Qwen3Preprocess& o = {}) {
  MAXTEXT_CHECK(o.patch > 0 && o.temporal_patch > 0 && o.merge > 0 && o.patch * o.merge <= 4096, ArgumentError,
                "[qwen3 image] patch ", o.patch, ", temporal patch ", o.temporal_patch, ", merge ", o.merge, ": invalid");
  const std::int64_t f = o.patch * o.merge;
  Image r;
  if (o.how == Qwen3ImageProcessing::hf) {
    const auto [h, w] = qwen3_smart_resize(img.height, img.width, f, o.min_pixels, o.max_pixels);
    r = (h == img.height && w == img.width) ? img : resize_image(img, w, h, ResizeFilter::bicubic);
  } else {
    constexpr std::int64_t lo = 4 * 28 * 28, hi = 16384 * 28 * 28;  // processor_qwen3_omni.py MIN_PIXELS, MAX_PIXELS
    const auto [h1, w1] = qwen3_smart_resize(img.height, img.width, 28, lo, hi);
    const Image r1 = (h1 == img.height && w1 == img.width) ? img : resize_image(img, w1, h1, ResizeFilter::bicubic);
    const auto [h2, w2] = qwen3_smart_resize(h1, w1, f, lo, hi);
    r = (h2 == h1 && w2 == w1) ? r1 : resize_image(r1, w2, h2, ResizeFilter::bicubic);
  }
  float lut[256];
  for (int v = 0; v < 256; ++v) {
    lut[v] = o.how == Qwen3ImageProcessing::hf
                 ? static_cast<float>((static_cast<double>(v) / 255.0 - 0.5) / 0.5)
                 : (static_cast<float>(v) - 127.5f) / 127.5f;
  }
  Qwen3Patches out;
  out.height = r.height;
  out.width = r.width;
  out.h = r.height / o.patch;
  out.w = r.width / o.patch;
  const std::int64_t p = o.patch, tp = o.temporal_patch, m = o.merge, K = 3 * tp * p * p, T = out.h * out.w;
  out.pixel_values = Tensor<float, 2>({T, K});
  for (std::int64_t s = 0; s < T; ++s) {
    const std::int64_t win = s / (m * m), in = s % (m * m), mw = out.w / m;
    const std::int64_t row = (win / mw) * m + in / m, col = (win % mw) * m + in % m;
    float* dst = &out.pixel_values(s, 0);
    for (std::int64_t c = 0; c < 3; ++c) {
      for (std::int64_t fr = 0; fr < tp; ++fr) {
        for (std::int64_t y = 0; y < p; ++y) {
          for (std::int64_t x = 0; x < p; ++x) dst[((c * tp + fr) * p + y) * p + x] = lut[r.at(row * p + y, col * p + x, c)];
        }
      }
    }
  }
  return out;
}

}  // namespace maxtext::io
