// families/llama4/image_processor.hpp: Llama 4's image preprocessing and image prompt, as MaxText does them
// (multimodal/processor_llama4.py preprocess_mm_data_llama4, get_tokens_for_this_image,
// add_extra_tokens_for_images_llama4): one picture to tiles [n, S, S, 3] in [-1, 1] (S = 336), the input of the
// vision model (families/llama4/vision.hpp), and the token ids that stand for it in a prompt.
//
//   canvas: among the tile grids of at most max_tiles tiles (find_supported_resolutions: for 16, 15, ..., 1 tiles each
//     factorisation h x w with h ascending, grouped by aspect ratio in the order the ratios first appear), the first
//     whose (h S, w S) is nearest to the picture's (height, width) in |dh| + |dw|;
//   the picture placed at the canvas's top-left without resizing (cut where larger, black where smaller), as MaxText's
//     pad_to_best_fit does (Hugging Face's processor resizes instead: not implemented here);
//   values ((x * (1/255)) - 0.5) / 0.5 in double, stored as float32 (MaxText's NumPy chain);
//   tiles row-major; when there is more than one, a global tile: the whole picture resized to S x S by Pillow's
//     BILINEAR, or LANCZOS when a side exceeds S (io::resize_image, byte for byte Pillow's), normalised the same way.
// The prompt: each <|image|> (MaxText's placeholder) becomes <|image_start|>, for each tile row the row's tiles'
// (S/p/k)^2 <|patch|> tokens separated by <|tile_x_separator|> and closed by <|tile_y_separator|> (only with more than
// one tile), <|image|>, the global tile's <|patch|> tokens, <|image_end|>. The soft tokens go where <|patch|> stands,
// tile by tile (the decoder's attention stays causal: MaxText passes Llama 4 no bidirectional mask).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/io/image.hpp"
#include "maxtext/io/image_resize.hpp"

namespace maxtext::io {

/// The canvases (height, width) in pixels a picture may be tiled to, in MaxText's order (find_supported_resolutions).
inline std::vector<std::pair<std::int64_t, std::int64_t>> llama4_supported_resolutions(std::int64_t max_tiles = 16,
                                                                                         std::int64_t tile = 336) {
  MAXTEXT_CHECK(max_tiles > 0 && max_tiles <= 256 && tile > 0 && tile <= 4096, ArgumentError, "[llama4 image] max "
                "tiles (", max_tiles, ") must be in [1, 256] and the tile size (", tile, ") in [1, 4096] (Llama 4: 16 "
                "tiles of 336)");
  std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> by_ratio;  // in the order ratios first appear
  for (std::int64_t n = max_tiles; n >= 1; --n) {
    for (std::int64_t h = 1; h <= n; ++h) {
      if (n % h != 0) continue;
      const std::int64_t w = n / h;
      bool placed = false;
      for (auto& group : by_ratio) {
        if (group.front().first * w == h * group.front().second) {
          group.emplace_back(h, w);
          placed = true;
          break;
        }
      }
      if (!placed) by_ratio.push_back({{h, w}});
    }
  }
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (const auto& group : by_ratio) {
    for (const auto& [h, w] : group) out.emplace_back(h * tile, w * tile);
  }
  return out;
}

/// A picture as Llama 4's vision model takes it.
struct Llama4Tiles {
  Tensor<float, 4> tiles;   ///< [ratio_h * ratio_w (+ 1 global when more than one), S, S, 3]
  std::int64_t ratio_h = 1;  ///< tile rows
  std::int64_t ratio_w = 1;  ///< tile columns
};

/// One picture preprocessed as MaxText's preprocess_mm_data_llama4 does it (without its padding to 20 tiles).
inline Llama4Tiles llama4_preprocess(const Image& img, std::int64_t tile = 336, std::int64_t max_tiles = 16) {
  MAXTEXT_CHECK(img.width > 0 && img.height > 0, ArgumentError, "[llama4 image] empty picture (", img.width, " x ",
                img.height, ")");
  const auto canvases = llama4_supported_resolutions(max_tiles, tile);
  std::pair<std::int64_t, std::int64_t> best = canvases.front();
  std::int64_t best_distance = -1;
  for (const auto& c : canvases) {
    const std::int64_t d = std::llabs(c.first - img.height) + std::llabs(c.second - img.width);
    if (best_distance < 0 || d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  Llama4Tiles out;
  out.ratio_h = best.first / tile;
  out.ratio_w = best.second / tile;
  const std::int64_t local = out.ratio_h * out.ratio_w, count = local > 1 ? local + 1 : 1;
  out.tiles = Tensor<float, 4>({count, tile, tile, 3});
  float lut[256];
  for (int v = 0; v < 256; ++v) lut[v] = static_cast<float>((static_cast<double>(v) * (1.0 / 255.0) - 0.5) / 0.5);
  const float black = lut[0];
  for (std::int64_t ty = 0; ty < out.ratio_h; ++ty) {
    for (std::int64_t tx = 0; tx < out.ratio_w; ++tx) {
      const std::int64_t t = ty * out.ratio_w + tx;
      for (std::int64_t y = 0; y < tile; ++y) {
        const std::int64_t sy = ty * tile + y;
        for (std::int64_t x = 0; x < tile; ++x) {
          const std::int64_t sx = tx * tile + x;
          const bool inside = sy < img.height && sx < img.width;
          for (int c = 0; c < 3; ++c) out.tiles(t, y, x, c) = inside ? lut[img.at(sy, sx, c)] : black;
        }
      }
    }
  }
  if (local > 1) {
    const bool larger = img.width > tile || img.height > tile;
    const Image g = resize_image(img, tile, tile, larger ? ResizeFilter::lanczos : ResizeFilter::bilinear);
    float* dst = &out.tiles(local, 0, 0, 0);
    for (std::size_t i = 0; i < g.rgb.size(); ++i) dst[i] = lut[g.rgb[i]];
  }
  return out;
}

/// Llama 4's image token ids (its tokenizer's added tokens; MaxText's processor_llama4.py constants).
struct Llama4ImageTokens {
  std::int32_t begin = 200080;        ///< <|image_start|>
  std::int32_t end = 200081;          ///< <|image_end|>
  std::int32_t image = 200090;        ///< <|image|>: the prompt's placeholder, and the global tile's introduction
  std::int32_t patch = 200092;        ///< <|patch|>: where a soft token goes
  std::int32_t tile_x = 200084;       ///< <|tile_x_separator|>
  std::int32_t tile_y = 200085;       ///< <|tile_y_separator|>
  std::int64_t per_tile = 144;        ///< soft tokens per tile ((336 / 14 / 2)^2)
};

/// The ids that stand for one picture of ratio_h x ratio_w tiles (MaxText's get_tokens_for_this_image).
inline std::vector<std::int32_t> llama4_image_token_ids(std::int64_t ratio_h, std::int64_t ratio_w,
                                                        const Llama4ImageTokens& t = {}) {
  MAXTEXT_CHECK(ratio_h >= 1 && ratio_w >= 1 && ratio_h <= 256 && ratio_w <= 256 && ratio_h * ratio_w <= 256 &&
                    t.per_tile >= 0 && t.per_tile <= 65536,
                ArgumentError, "[llama4 image] a picture of ", ratio_h, " x ", ratio_w, " tiles of ", t.per_tile,
                " tokens: expected 1 to 256 tiles of 0 to 65536 tokens");
  std::vector<std::int32_t> ids{t.begin};
  const auto patches = [&] { ids.insert(ids.end(), static_cast<std::size_t>(t.per_tile), t.patch); };
  if (ratio_h * ratio_w > 1) {
    for (std::int64_t y = 0; y < ratio_h; ++y) {
      for (std::int64_t x = 0; x < ratio_w; ++x) {
        patches();
        if (x + 1 < ratio_w) ids.push_back(t.tile_x);
      }
      ids.push_back(t.tile_y);
    }
  }
  ids.push_back(t.image);
  patches();
  ids.push_back(t.end);
  return ids;
}

/// A tokenised prompt with each <|image|> placeholder expanded to its picture's ids (`grids`: each picture's
/// (ratio_h, ratio_w), in order). One placeholder per picture; a prompt that already holds <|patch|> or
/// <|image_start|> ids is refused (the expansion writes them). MaxText's add_extra_tokens_for_images_llama4 splits
/// at runs of <|image|>; here each placeholder is one picture, so two pictures may stand side by side.
inline std::vector<std::int32_t> llama4_expand_image_tokens(
    const std::vector<std::int32_t>& ids, const std::vector<std::pair<std::int64_t, std::int64_t>>& grids,
    const Llama4ImageTokens& t = {}) {
  std::vector<std::int32_t> out;
  std::size_t k = 0;
  for (const std::int32_t id : ids) {
    MAXTEXT_CHECK(id != t.patch && id != t.begin, ArgumentError, "[image] the prompt already holds ",
                  id == t.patch ? "a <|patch|>" : "an <|image_start|>", " (id ", id,
                  "): write one <|image|> per picture, the picture's tokens are added here");
    if (id != t.image) {
      out.push_back(id);
      continue;
    }
    MAXTEXT_CHECK(k < grids.size(), ArgumentError, "[image] the prompt has more <|image|> markers than the ",
                  grids.size(), " picture(s) given: one marker per picture");
    const auto more = llama4_image_token_ids(grids[k].first, grids[k].second, t);
    out.insert(out.end(), more.begin(), more.end());
    ++k;
  }
  MAXTEXT_CHECK(k == grids.size(), ArgumentError, "[image] the prompt has ", k, " <|image|> marker(s) for ",
                grids.size(), " picture(s): one marker per picture");
  return out;
}

}  // namespace maxtext::io
