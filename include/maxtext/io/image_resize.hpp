// io/image_resize.hpp: resizing 8-bit RGB images exactly as Pillow's Image.resize does (libImaging Resample.c and,
// for NEAREST, Geometry.c's scaling transform), so that a model's preprocessing gives the pixels its Python
// processor gives (Hugging Face's image processors and MaxText's multimodal/processor_*.py resize through Pillow).
//
// The algorithm, as Pillow defines it: a separable convolution, first along rows (only over the source rows the
// second pass reads), then along columns. For output index i of n over a source of N pixels, scale = N / n,
// filterscale = max(scale, 1) (downscaling widens the filter: antialiasing), support = filter support x
// filterscale, centre c = (i + 0.5) x scale, taps j in [trunc(c - support + 0.5), trunc(c + support + 0.5)) clipped
// to the image, weights filter((j - c + 0.5) / filterscale) normalised to sum 1, then rounded to 22-bit fixed point
// (half away from zero). Each pass accumulates in int32 from 2^21 (rounding), shifts right by 22 and clips to
// 0..255: the intermediate image is 8-bit, as Pillow's is. tests/fixtures/images checks every filter against
// Pillow 9.4 byte for byte (downscale, upscale, one axis only).
#pragma once

#include <cctype>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>
#include <string_view>
#include <vector>

#include "maxtext/core/error.hpp"
#include "maxtext/io/image.hpp"

namespace maxtext::io {

/// Pillow's resampling filters (Image.Resampling), with Pillow's numbering.
enum class ResizeFilter { nearest = 0, lanczos = 1, bilinear = 2, bicubic = 3, box = 4, hamming = 5 };

/// "nearest", "box", "bilinear", "hamming", "bicubic", "lanczos" (Pillow's names, any case); refused by name.
inline ResizeFilter parse_resize_filter(std::string_view name) {
  std::string n(name);
  for (char& ch : n) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (n == "nearest") return ResizeFilter::nearest;
  if (n == "box") return ResizeFilter::box;
  if (n == "bilinear" || n == "linear") return ResizeFilter::bilinear;
  if (n == "hamming") return ResizeFilter::hamming;
  if (n == "bicubic" || n == "cubic") return ResizeFilter::bicubic;
  if (n == "lanczos" || n == "antialias") return ResizeFilter::lanczos;
  throw ArgumentError(str("[image] unknown resize filter '", name,
                          "': expected nearest, box, bilinear, hamming, bicubic or lanczos"));
}

namespace detail {

inline double resize_filter_value(ResizeFilter f, double x) {
  constexpr double pi = std::numbers::pi;
  const auto sinc = [&](double v) { return v == 0.0 ? 1.0 : std::sin(v * pi) / (v * pi); };
  switch (f) {
    case ResizeFilter::box:
      return (x > -0.5 && x <= 0.5) ? 1.0 : 0.0;
    case ResizeFilter::bilinear:
      x = std::fabs(x);
      return x < 1.0 ? 1.0 - x : 0.0;
    case ResizeFilter::hamming: {
      x = std::fabs(x);
      if (x == 0.0) return 1.0;
      if (x >= 1.0) return 0.0;
      x *= pi;
      // Pillow's constants are float literals (0.54f, 0.46f) promoted to double.
      return std::sin(x) / x * (static_cast<double>(0.54f) + static_cast<double>(0.46f) * std::cos(x));
    }
    case ResizeFilter::bicubic: {
      constexpr double a = -0.5;
      x = std::fabs(x);
      if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
      if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
      return 0.0;
    }
    case ResizeFilter::lanczos:
      return (-3.0 <= x && x < 3.0) ? sinc(x) * sinc(x / 3) : 0.0;
    case ResizeFilter::nearest:
      break;
  }
  return 0.0;
}

inline double resize_filter_support(ResizeFilter f) {
  switch (f) {
    case ResizeFilter::box: return 0.5;
    case ResizeFilter::bilinear: return 1.0;
    case ResizeFilter::hamming: return 1.0;
    case ResizeFilter::bicubic: return 2.0;
    case ResizeFilter::lanczos: return 3.0;
    case ResizeFilter::nearest: break;
  }
  return 0.0;
}

inline constexpr int kResizePrecisionBits = 32 - 8 - 2;

/// One axis's taps: for output i, source indices [first[i], first[i] + count[i]) with fixed-point weights
/// w[i * ksize + j].
struct ResizeTaps {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<std::int32_t> w;
};

inline ResizeTaps resize_taps(int in_size, int out_size, ResizeFilter f) {
  // Pillow passes the source box as floats: (0, 0, width, height).
  const float in0 = 0.0f, in1 = static_cast<float>(in_size);
  const double scale = static_cast<double>(in1 - in0) / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = resize_filter_support(f) * filterscale;
  ResizeTaps t;
  t.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.first.resize(static_cast<std::size_t>(out_size));
  t.count.resize(static_cast<std::size_t>(out_size));
  t.w.assign(static_cast<std::size_t>(out_size) * static_cast<std::size_t>(t.ksize), 0);
  std::vector<double> k(static_cast<std::size_t>(t.ksize));
  const double inv_filterscale = 1.0 / filterscale;
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = in0 + (xx + 0.5) * scale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double w = resize_filter_value(f, (x + xmin - center + 0.5) * inv_filterscale);
      k[static_cast<std::size_t>(x)] = w;
      ww += w;
    }
    for (int x = 0; x < xmax; ++x) {
      double v = k[static_cast<std::size_t>(x)];
      if (ww != 0.0) v /= ww;
      t.w[static_cast<std::size_t>(xx) * static_cast<std::size_t>(t.ksize) + static_cast<std::size_t>(x)] =
          v < 0 ? static_cast<std::int32_t>(-0.5 + v * (1 << kResizePrecisionBits))
                : static_cast<std::int32_t>(0.5 + v * (1 << kResizePrecisionBits));
    }
    t.first[static_cast<std::size_t>(xx)] = xmin;
    t.count[static_cast<std::size_t>(xx)] = xmax;
  }
  return t;
}

inline std::uint8_t resize_clip8(std::int32_t v) {
  const std::int32_t s = v >> kResizePrecisionBits;  // arithmetic shift, as Pillow's
  return static_cast<std::uint8_t>(s < 0 ? 0 : (s > 255 ? 255 : s));
}

inline Image resize_nearest(const Image& src, int w, int h) {
  // Geometry.c ImagingScaleAffine: positions accumulated in double from the first pixel's centre.
  const double a0 = static_cast<double>(static_cast<float>(src.width)) / w;
  const double a4 = static_cast<double>(static_cast<float>(src.height)) / h;
  std::vector<std::int64_t> xin(static_cast<std::size_t>(w));
  double xo = a0 * 0.5;
  for (int x = 0; x < w; ++x) {
    xin[static_cast<std::size_t>(x)] = xo < 0.0 ? -1 : static_cast<std::int64_t>(xo);
    xo += a0;
  }
  Image out(w, h);
  double yo = a4 * 0.5;
  for (int y = 0; y < h; ++y) {
    const std::int64_t yi = yo < 0.0 ? -1 : static_cast<std::int64_t>(yo);
    for (int x = 0; x < w; ++x) {
      const std::int64_t xi = xin[static_cast<std::size_t>(x)];
      for (int c = 0; c < 3; ++c) {
        // Out-of-range positions cannot occur for a whole-image box; Pillow leaves zeros there.
        out.at(y, x, c) = (yi >= 0 && yi < src.height && xi >= 0 && xi < src.width) ? src.at(yi, xi, c) : 0;
      }
    }
    yo += a4;
  }
  return out;
}

}  // namespace detail

/// `src` resized to w x h pixels with `filter`, byte for byte as Pillow's `img.resize((w, h), resample=filter)`
/// (RGB images, the whole image as the box, no reducing_gap).
inline Image resize_image(const Image& src, std::int64_t w, std::int64_t h, ResizeFilter filter) {
  MAXTEXT_CHECK(src.width > 0 && src.height > 0 && src.rgb.size() == static_cast<std::size_t>(src.width * src.height * 3),
                ArgumentError, "[image] resize: the source image is empty or inconsistent (", src.width, "x",
                src.height, ", ", src.rgb.size(), " bytes)");
  MAXTEXT_CHECK(w > 0 && h > 0 && w <= 65535 && h <= 65535, ArgumentError, "[image] resize: the target size ", w,
                "x", h, " must be 1..65535 per side");
  if (w == src.width && h == src.height) return src;  // Pillow copies
  const int W = static_cast<int>(w), H = static_cast<int>(h);
  if (filter == ResizeFilter::nearest) return detail::resize_nearest(src, W, H);
  const int SW = static_cast<int>(src.width), SH = static_cast<int>(src.height);
  const bool horizontal = W != SW, vertical = H != SH;
  detail::ResizeTaps tv = detail::resize_taps(SH, H, filter);
  // The rows the vertical pass reads.
  const int y_first = tv.first[0];
  const int y_last = tv.first[static_cast<std::size_t>(H - 1)] + tv.count[static_cast<std::size_t>(H - 1)];
  Image tmp;
  const Image* in = &src;
  int row_offset = 0;
  if (horizontal) {
    const detail::ResizeTaps th = detail::resize_taps(SW, W, filter);
    const int rows = vertical ? y_last - y_first : SH;
    const int r0 = vertical ? y_first : 0;
    tmp = Image(W, rows);
    for (int y = 0; y < rows; ++y) {
      for (int x = 0; x < W; ++x) {
        const int x0 = th.first[static_cast<std::size_t>(x)], n = th.count[static_cast<std::size_t>(x)];
        const std::int32_t* k = &th.w[static_cast<std::size_t>(x) * static_cast<std::size_t>(th.ksize)];
        for (int c = 0; c < 3; ++c) {
          std::int32_t ss = 1 << (detail::kResizePrecisionBits - 1);
          for (int j = 0; j < n; ++j) ss += src.at(r0 + y, x0 + j, c) * k[j];
          tmp.at(y, x, c) = detail::resize_clip8(ss);
        }
      }
    }
    in = &tmp;
    row_offset = vertical ? y_first : 0;
  }
  if (!vertical) return horizontal ? tmp : src;
  Image out(in->width, H);
  for (int y = 0; y < H; ++y) {
    const int y0 = tv.first[static_cast<std::size_t>(y)] - row_offset, n = tv.count[static_cast<std::size_t>(y)];
    const std::int32_t* k = &tv.w[static_cast<std::size_t>(y) * static_cast<std::size_t>(tv.ksize)];
    for (std::int64_t x = 0; x < in->width; ++x) {
      for (int c = 0; c < 3; ++c) {
        std::int32_t ss = 1 << (detail::kResizePrecisionBits - 1);
        for (int j = 0; j < n; ++j) ss += in->at(y0 + j, x, c) * k[j];
        out.at(y, x, c) = detail::resize_clip8(ss);
      }
    }
  }
  return out;
}

}  // namespace maxtext::io
