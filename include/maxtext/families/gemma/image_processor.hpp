// families/gemma/image_processor.hpp: Gemma 3's image preprocessing, as MaxText (multimodal/processor_gemma3.py
// preprocess_mm_data_gemma3) and Hugging Face (Gemma3ImageProcessor) do it: one picture to 896 x 896 RGB values in
// [-1, 1], HWC, float32, the input of the vision tower (families/gemma/vision.hpp); Hugging Face's pan-and-scan
// (gemma3_pan_and_scan: an elongated picture's crops, each then preprocessed as a picture, and the prompt text that
// introduces them).
//
//   MaxText (Gemma3ImageProcessing::maxtext, the default): Pillow resize to 896 x 896 with BILINEAR, or LANCZOS when
//     the picture is wider or taller than 896; then (x - 127.5) / 127.5 clipped to [-1, 1]. (MaxText computes in f64
//     and stores f32: equal to f32 arithmetic for every byte value, tests/fixtures/images/manifest.json.)
//   Hugging Face (Gemma3ImageProcessing::hf): Pillow resize with BILINEAR always; rescale f32(f64(x) * (1/255)),
//     then normalise (r - 0.5f) / 0.5f in f32. The two differ by up to 6e-8 per value (and by the filter for large
//     pictures).
//   llama.cpp (Gemma3ImageProcessing::llamacpp, as llama-mtmd-cli prepares a picture for a Gemma 3 mmproj file):
//     the aspect ratio kept, llama.cpp's own bilinear resize (truncated to bytes, no antialiasing) to fit S x S,
//     pasted on black at the centre, then (x / 255 - 0.5) / 0.5 in f32 (llamacpp_resize_pad).
// The MaxText and Hugging Face resizes are io::resize_image, byte for byte Pillow's.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/io/image.hpp"
#include "maxtext/io/image_resize.hpp"

namespace maxtext::io {

enum class Gemma3ImageProcessing { maxtext, hf, llamacpp };

/// "maxtext", "hf" or "llamacpp" (refused by name otherwise).
inline Gemma3ImageProcessing parse_gemma3_image_processing(std::string_view name) {
  if (name == "maxtext") return Gemma3ImageProcessing::maxtext;
  if (name == "hf" || name == "huggingface") return Gemma3ImageProcessing::hf;
  if (name == "llamacpp" || name == "llama.cpp") return Gemma3ImageProcessing::llamacpp;
  throw ArgumentError(str("[image] unknown Gemma 3 image preprocessing '", name, "': expected maxtext, hf or llamacpp"));
}

namespace detail {
/// llama.cpp's lerp, s + (e - s) * t, each operation rounded to f32: the product goes through memory so that no
/// compiler fuses it into a multiply-add (which changes a truncated byte now and then).
inline float llamacpp_lerp(float s, float e, float t) {
  volatile float p = (e - s) * t;
  return s + p;
}
}  // namespace detail

/// llama.cpp's picture preparation for Gemma 3 (tools/mtmd/mtmd-image.cpp at 0309b28f: the fixed-size
/// preprocessor's img_tool::resize with RESIZE_ALGO_BILINEAR and padding): a size x size picture is kept; any other
/// is scaled by min(size / w, size / h) (f32) to ceil(w * scale) x ceil(h * scale) (at most size) with llama.cpp's
/// bilinear resize (source x = (w - 1) / new_w * x, the left neighbour clamped to w - 2, interpolated in f32 and
/// truncated to a byte, no antialiasing) and pasted on a black size x size canvas at ((size - new_w) / 2,
/// (size - new_h) / 2). Pictures smaller than 2 x 2 are refused (llama.cpp asserts). Byte for byte the re-statement
/// tests/reference/llamacpp_image_preprocess.py.
inline Image llamacpp_resize_pad(const Image& img, std::int64_t size) {
  MAXTEXT_CHECK(size > 0, ArgumentError, "[image] llama.cpp resize: target size must be > 0, found ", size);
  if (img.width == size && img.height == size) return img;
  const std::int64_t w = img.width, h = img.height;
  MAXTEXT_CHECK(w >= 2 && h >= 2, ArgumentError, "[image] llama.cpp's bilinear resize needs at least 2 x 2 pixels, found ",
                w, " x ", h);
  const float sw = static_cast<float>(size) / static_cast<float>(w), sh = static_cast<float>(size) / static_cast<float>(h);
  const float scale = sh < sw ? sh : sw;
  const std::int64_t nw = std::min<std::int64_t>(static_cast<std::int64_t>(std::ceil(static_cast<float>(w) * scale)), size);
  const std::int64_t nh = std::min<std::int64_t>(static_cast<std::int64_t>(std::ceil(static_cast<float>(h) * scale)), size);
  Image out(size, size);  // black
  const std::int64_t ox = (size - nw) / 2, oy = (size - nh) / 2;
  const float xr = static_cast<float>(w - 1) / static_cast<float>(nw), yr = static_cast<float>(h - 1) / static_cast<float>(nh);
  for (std::int64_t y = 0; y < nh; ++y) {
    const float py = yr * static_cast<float>(y);
    const std::int64_t y0 = std::min<std::int64_t>(static_cast<std::int64_t>(py), h - 2);
    const float ty = py - static_cast<float>(y0);
    for (std::int64_t x = 0; x < nw; ++x) {
      const float px = xr * static_cast<float>(x);
      const std::int64_t x0 = std::min<std::int64_t>(static_cast<std::int64_t>(px), w - 2);
      const float tx = px - static_cast<float>(x0);
      for (int c = 0; c < 3; ++c) {
        const float top = detail::llamacpp_lerp(img.at(y0, x0, c), img.at(y0, x0 + 1, c), tx);
        const float bottom = detail::llamacpp_lerp(img.at(y0 + 1, x0, c), img.at(y0 + 1, x0 + 1, c), tx);
        out.at(oy + y, ox + x, c) = static_cast<std::uint8_t>(detail::llamacpp_lerp(top, bottom, ty));
      }
    }
  }
  return out;
}

/// The pixels the processor resizes to (896 x 896 for every released Gemma 3).
inline Image gemma3_resize(const Image& img, std::int64_t size = 896,
                           Gemma3ImageProcessing how = Gemma3ImageProcessing::maxtext) {
  if (how == Gemma3ImageProcessing::llamacpp) return llamacpp_resize_pad(img, size);
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
    } else if (how == Gemma3ImageProcessing::llamacpp) {  // mtmd-image.cpp img_u8_to_f32, mean = std = 0.5
      lut[v] = (static_cast<float>(v) / 255.0f - 0.5f) / 0.5f;
    } else {
      const float rescaled = static_cast<float>(static_cast<double>(v) * (1.0 / 255.0));
      lut[v] = (rescaled - 0.5f) / 0.5f;
    }
  }
  for (std::size_t i = 0; i < r.rgb.size(); ++i) out.data()[i] = lut[r.rgb[i]];
  return out;
}

/// Pan-and-scan (Hugging Face's Gemma3ImageProcessor with do_pan_and_scan; the defaults are Gemma 3's
/// preprocessor_config.json): an elongated picture is also given to the tower as 2 .. max_num_crops crops side by side
/// along its long side, each preprocessed like a picture of its own.
struct Gemma3PanAndScan {
  std::int64_t min_crop_size = 256;    ///< pan_and_scan_min_crop_size: no crop narrower than this
  std::int64_t max_num_crops = 4;      ///< pan_and_scan_max_num_crops
  double min_ratio_to_activate = 1.2;  ///< pan_and_scan_min_ratio_to_activate: long side / short side
};

/// The crops pan-and-scan cuts from `img`, left to right (landscape or square) or top to bottom (portrait); none when
/// the long side is less than min_ratio_to_activate times the short one, or when a crop would be narrower than
/// min_crop_size. As Gemma3ImageProcessor.pan_and_scan computes them: n = round-half-up(long / short), at most
/// floor(long / min_crop_size), then clamped to [2, max_num_crops]; crops of ceil(side / n) pixels, the last one cut
/// at the picture's edge.
inline std::vector<Image> gemma3_pan_and_scan(const Image& img, const Gemma3PanAndScan& o = {}) {
  MAXTEXT_CHECK(o.min_crop_size > 0 && o.max_num_crops >= 1 && o.min_ratio_to_activate > 0.0, ArgumentError,
                "[image] pan-and-scan: min_crop_size and max_num_crops must be >= 1 and min_ratio_to_activate > 0, "
                "found ", o.min_crop_size, ", ", o.max_num_crops, " and ", o.min_ratio_to_activate);
  const std::int64_t w = img.width, h = img.height;
  if (w <= 0 || h <= 0) return {};
  const bool landscape = w >= h;
  const std::int64_t long_side = landscape ? w : h, short_side = landscape ? h : w;
  const double ratio = static_cast<double>(long_side) / static_cast<double>(short_side);
  if (ratio < o.min_ratio_to_activate) return {};
  std::int64_t n = static_cast<std::int64_t>(std::floor(ratio + 0.5));
  n = std::min(n, long_side / o.min_crop_size);
  n = std::min(o.max_num_crops, std::max<std::int64_t>(2, n));
  const std::int64_t nw = landscape ? n : 1, nh = landscape ? 1 : n;
  const std::int64_t cw = (w + nw - 1) / nw, ch = (h + nh - 1) / nh;
  if (std::min(cw, ch) < o.min_crop_size) return {};
  std::vector<Image> crops;
  for (std::int64_t i = 0; i < nh; ++i) {
    for (std::int64_t j = 0; j < nw; ++j) {
      const std::int64_t x0 = j * cw, y0 = i * ch, x1 = std::min(w, x0 + cw), y1 = std::min(h, y0 + ch);
      if (x1 <= x0 || y1 <= y0) continue;  // a crop past the edge would be empty: none is cut
      Image c(x1 - x0, y1 - y0);
      for (std::int64_t y = y0; y < y1; ++y) {
        std::copy_n(img.rgb.begin() + static_cast<std::ptrdiff_t>((y * w + x0) * 3), (x1 - x0) * 3,
                    c.rgb.begin() + static_cast<std::ptrdiff_t>((y - y0) * c.width * 3));
      }
      crops.push_back(std::move(c));
    }
  }
  return crops;
}

/// The text Hugging Face's Gemma3Processor writes where a picture with `crops` crops was marked: "Here is the
/// original image <marker> and here are some crops to help you see better <marker> <marker> ..." (one marker for the
/// picture, then one per crop); the marker itself when there are no crops.
inline std::string gemma3_pan_and_scan_text(std::size_t crops, std::string_view marker = "<start_of_image>") {
  if (crops == 0) return std::string(marker);
  std::string s = "Here is the original image " + std::string(marker) + " and here are some crops to help you see better ";
  for (std::size_t k = 0; k < crops; ++k) s += (k ? " " : "") + std::string(marker);
  return s;
}

/// `text` with its k-th `marker` replaced by gemma3_pan_and_scan_text(crops[k]) (markers past crops.size() stay).
inline std::string gemma3_pan_and_scan_prompt(const std::string& text, const std::vector<std::size_t>& crops,
                                              std::string_view marker = "<start_of_image>") {
  MAXTEXT_CHECK(!marker.empty(), ArgumentError, "[image] pan-and-scan: empty picture marker");
  std::string out;
  std::size_t from = 0, k = 0;
  for (std::size_t at = text.find(marker); at != std::string::npos; at = text.find(marker, from)) {
    out.append(text, from, at - from);
    out += k < crops.size() ? gemma3_pan_and_scan_text(crops[k], marker) : std::string(marker);
    from = at + marker.size();
    ++k;
  }
  out.append(text, from, std::string::npos);
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
