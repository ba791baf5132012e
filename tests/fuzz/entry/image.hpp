// tests/fuzz/entry/image.hpp: fuzz entry point for image files (io/image.hpp: PNG through libpng, JPEG through
// libjpeg-turbo; io/image_resize.hpp; Gemma 3's preprocessing). fuzz_image: the whole input is the file; limits of
// one megapixel keep each run small (the limits themselves are what a bomb must hit). A file is either refused with
// an IoError or decoded to width x height x 3 bytes; a decoded picture is resized with a filter and size taken from
// its own first bytes, preprocessed for Gemma 3 at 28 x 28, cut by pan-and-scan, letterboxed as llama.cpp does, and cut
// into Llama 4 tiles (a tile size and limit from its bytes: the canvas holds the picture's top-left, the values stay
// in [-1, 1], and the prompt holds a <|patch|> run per tile), and preprocessed for Gemma 4 at Hugging Face's
// aspect-preserving size (a budget from its bytes: whole windows within it, values in [0, 1]), and cut into Qwen3
// patches by either processor (small patches and budgets from its bytes: whole merge windows, values in [-1, 1]).
#pragma once

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "fuzz_common.hpp"
#include "maxtext/families/gemma/image_processor.hpp"
#include "maxtext/families/gemma4/image_processor.hpp"
#include "maxtext/families/qwen/image_processor.hpp"
#include "maxtext/families/llama4/image_processor.hpp"
#include "maxtext/io/image.hpp"
#include "maxtext/io/image_resize.hpp"

namespace maxtext::fuzz {

inline void fuzz_image(const std::uint8_t* data, std::size_t size) {
  io::ImageLimits lim;
  lim.max_pixels = 1 << 20;
  lim.max_side = 4096;
  io::Image img;
  try {
    img = io::decode_image({data, size}, "fuzz", lim);
  } catch (const maxtext::IoError&) {
    return;
  }
  if (img.width <= 0 || img.height <= 0 || img.width * img.height > lim.max_pixels ||
      img.rgb.size() != static_cast<std::size_t>(img.width * img.height * 3)) {
    std::abort();
  }
  const std::uint8_t a = img.rgb[0], b = img.rgb[img.rgb.size() - 1];
  const auto filter = static_cast<io::ResizeFilter>(a % 6);
  const io::Image r = io::resize_image(img, 1 + a % 37, 1 + b % 29, filter);
  if (r.width != 1 + a % 37 || r.height != 1 + b % 29) std::abort();
  const Tensor<float, 3> x = io::gemma3_preprocess(img, 28, b % 2 ? io::Gemma3ImageProcessing::hf
                                                                  : io::Gemma3ImageProcessing::maxtext);
  for (std::int64_t i = 0; i < x.size(); ++i) {
    if (!(x.data()[i] >= -1.0f && x.data()[i] <= 1.0f)) std::abort();
  }
  // Pan-and-scan with a minimum crop size from the picture's bytes: the crops tile the picture along its long side,
  // 2 .. max_num_crops of them, none narrower than the minimum.
  io::Gemma3PanAndScan pas;
  pas.min_crop_size = 1 + b % 64;
  const std::vector<io::Image> crops = io::gemma3_pan_and_scan(img, pas);
  std::int64_t covered = 0;
  for (const io::Image& c : crops) {
    if (c.width < 1 || c.height < 1 || c.rgb.size() != static_cast<std::size_t>(c.width * c.height * 3)) std::abort();
    covered += c.width * c.height;
  }
  if (!crops.empty() && (crops.size() < 2 || crops.size() > 4 || covered != img.width * img.height)) std::abort();
  // llama.cpp's letterbox at a size from the picture's bytes: refused below 2 x 2, else S x S with black outside.
  const std::int64_t S = 2 + (a ^ b) % 40;
  try {
    const io::Image l = io::llamacpp_resize_pad(img, S);
    if (l.width != S || l.height != S) std::abort();
  } catch (const maxtext::ArgumentError&) {
    if (img.width >= 2 && img.height >= 2) std::abort();
  }
  // Llama 4's tiles: at most `most` tiles of `tile` pixels, plus the global tile when there are several.
  const std::int64_t tile = 1 + a % 48, most = 1 + b % 16;
  const io::Llama4Tiles t = io::llama4_preprocess(img, tile, most);
  const std::int64_t local = t.ratio_h * t.ratio_w;
  if (local < 1 || local > most || t.tiles.dim(0) != (local > 1 ? local + 1 : 1) || t.tiles.dim(1) != tile) std::abort();
  for (std::int64_t i = 0; i < t.tiles.size(); ++i) {
    if (!(t.tiles.data()[i] >= -1.0f && t.tiles.data()[i] <= 1.0f)) std::abort();
  }
  if (t.tiles(0, 0, 0, 0) != static_cast<float>((img.at(0, 0, 0) * (1.0 / 255.0) - 0.5) / 0.5)) std::abort();
  io::Llama4ImageTokens ids;
  ids.per_tile = 1 + a % 5;
  const auto prompt = io::llama4_image_token_ids(t.ratio_h, t.ratio_w, ids);
  const std::int64_t patches = std::count(prompt.begin(), prompt.end(), ids.patch);
  if (patches != t.tiles.dim(0) * ids.per_tile) std::abort();
  // Gemma 4 at Hugging Face's size: whole patch x pooling windows, at most the budget's patches, values in [0, 1].
  io::Gemma4Preprocess g4;
  g4.how = io::Gemma4ImageProcessing::hf;
  g4.patch = 1 + a % 4;
  g4.pooling = 1 + b % 3;
  g4.max_soft_tokens = 1 + (a ^ b) % 12;
  try {
    const Tensor<float, 3> px = io::gemma4_preprocess(img, g4);
    const std::int64_t side = g4.patch * g4.pooling, h = px.dim(0), w = px.dim(1);
    if (h % side != 0 || w % side != 0 || h * w > g4.max_soft_tokens * side * side) std::abort();
    for (std::int64_t i = 0; i < px.size(); ++i) {
      if (!(px.data()[i] >= 0.0f && px.data()[i] <= 1.0f)) std::abort();
    }
  } catch (const maxtext::ArgumentError&) {
    // refused by name: a size that would vanish or exceed the budget (HF's processor raises there too)
  }
  // Qwen3's patches: whole merge windows of p x p patches, rows of 3 tp p p values in [-1, 1].
  io::Qwen3Preprocess q;
  q.how = a % 2 ? io::Qwen3ImageProcessing::hf : io::Qwen3ImageProcessing::maxtext;
  q.patch = 1 + b % 4;
  q.merge = 1 + a % 2;
  q.min_pixels = 16;
  q.max_pixels = 16 + (a ^ b) * 64;
  try {
    const io::Qwen3Patches qp = io::qwen3_preprocess(img, q);
    const std::int64_t K = 3 * q.temporal_patch * q.patch * q.patch;
    if (qp.h % q.merge != 0 || qp.w % q.merge != 0 || qp.pixel_values.dim(0) != qp.h * qp.w ||
        qp.pixel_values.dim(1) != K) {
      std::abort();
    }
    for (std::int64_t i = 0; i < qp.pixel_values.size(); ++i) {
      if (!(qp.pixel_values.data()[i] >= -1.0f && qp.pixel_values.data()[i] <= 1.0f)) std::abort();
    }
  } catch (const maxtext::ArgumentError&) {
    // refused by name: an aspect ratio above 200 (the processor raises there too)
  }
}

}  // namespace maxtext::fuzz
