// io/image.hpp: PNG and JPEG files decoded to 8-bit RGB, as Pillow's `Image.open(f).convert("RGB")` gives them.
//
// The decoding is done by the libraries everyone uses (Debian's libpng16 and libjpeg-turbo, the same libjpeg-turbo
// Pillow links): this header only drives them. A program that includes it links PNG::PNG and JPEG::JPEG (the CMake
// target maxtext::image does both). What the pixels are, for each kind of file (tests/fixtures/images checks each
// against Pillow 9.4 byte for byte, tests/reference/image_fixtures.py):
//   - PNG: palette images are looked up, 1/2/4-bit grey scaled to 0..255, grey replicated to R = G = B, alpha and
//     tRNS transparency dropped (not composited: Pillow's convert("RGB") drops them too), 16-bit colour reduced to its
//     high byte but 16-bit grey clipped to 255 (Pillow reads it as mode I), Adam7-interlaced files de-interlaced; gAMA / sRGB / iCCP are not applied (Pillow neither).
//   - JPEG: libjpeg's defaults (integer slow DCT, fancy upsampling), grey replicated; CMYK / YCCK files are refused
//     (Pillow would convert them with its own formula); EXIF orientation is not applied (Pillow neither). Extraneous
//     bytes between markers are tolerated; every other libjpeg warning (missing or corrupt data) is an error.
// Bad input is refused with an IoError naming the file and the problem: another format (GIF, BMP, WebP, ... by
// their signatures), a truncated or corrupt stream (libjpeg's "corrupt data" warnings are errors here: Pillow
// refuses a truncated JPEG too; libjpeg would fill the rest with grey), and images above ImageLimits (a decompression bomb: Pillow's 89.5-megapixel limit
// by default) before any pixel memory is allocated. libpng's and libjpeg's errors are reported through setjmp /
// longjmp inside functions that hold only plain C state, so no C++ object is skipped by a jump.
#pragma once

#include <png.h>
// jpeglib.h needs size_t and FILE declared before it.
#include <cstddef>
#include <cstdio>
#include <jpeglib.h>
#include <jerror.h>

#include <csetjmp>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "maxtext/core/error.hpp"

namespace maxtext::io {

/// An 8-bit RGB image, rows top to bottom, pixels left to right: rgb[(y * width + x) * 3 + c].
struct Image {
  std::int64_t width = 0;
  std::int64_t height = 0;
  std::vector<std::uint8_t> rgb;

  Image() = default;
  Image(std::int64_t w, std::int64_t h) : width(w), height(h), rgb(static_cast<std::size_t>(w * h * 3)) {}
  std::uint8_t& at(std::int64_t y, std::int64_t x, int c) { return rgb[static_cast<std::size_t>((y * width + x) * 3 + c)]; }
  std::uint8_t at(std::int64_t y, std::int64_t x, int c) const {
    return rgb[static_cast<std::size_t>((y * width + x) * 3 + c)];
  }
};

/// What an image file may ask for before it is refused (checked on the header, before pixels are allocated).
struct ImageLimits {
  std::int64_t max_pixels = 89'478'485;           ///< width x height (Pillow's MAX_IMAGE_PIXELS)
  std::int64_t max_side = 65'535;                 ///< width and height each
  std::size_t max_file_bytes = std::size_t{512} << 20;  ///< read_image: the file's size
};

enum class ImageFormat { png, jpeg };

namespace detail {

/// The format from the first bytes, or a refusal that names what the bytes look like.
inline ImageFormat sniff_image(std::span<const std::uint8_t> b, std::string_view what) {
  const auto starts = [&](std::initializer_list<int> sig) {
    if (b.size() < sig.size()) return false;
    std::size_t i = 0;
    for (const int s : sig) {
      if (b[i++] != static_cast<std::uint8_t>(s)) return false;
    }
    return true;
  };
  if (starts({0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'})) return ImageFormat::png;
  if (starts({0xff, 0xd8, 0xff})) return ImageFormat::jpeg;
  std::string kind;
  if (starts({'G', 'I', 'F', '8'})) kind = " (a GIF file)";
  else if (starts({'B', 'M'})) kind = " (a BMP file)";
  else if (starts({'R', 'I', 'F', 'F'}) && b.size() >= 12 && std::memcmp(b.data() + 8, "WEBP", 4) == 0) kind = " (a WebP file)";
  else if (starts({'I', 'I', 42, 0}) || starts({'M', 'M', 0, 42})) kind = " (a TIFF file)";
  else if (b.size() >= 12 && std::memcmp(b.data() + 4, "ftyp", 4) == 0) kind = " (an ISO media file: HEIC / AVIF?)";
  else if (b.empty()) kind = " (it is empty)";
  throw IoError(str("[image] ", what, ": not a PNG or JPEG file", kind, "; convert it to PNG or JPEG first"));
}

inline void check_image_size(std::int64_t w, std::int64_t h, const ImageLimits& lim, std::string_view what) {
  MAXTEXT_CHECK(w > 0 && h > 0, IoError, "[image] ", what, ": empty image (", w, "x", h, ")");
  MAXTEXT_CHECK(w <= lim.max_side && h <= lim.max_side, IoError, "[image] ", what, ": ", w, "x", h,
                " pixels exceeds the limit of ", lim.max_side, " pixels per side (ImageLimits::max_side)");
  MAXTEXT_CHECK(w * h <= lim.max_pixels, IoError, "[image] ", what, ": ", w, "x", h, " = ", w * h,
                " pixels exceeds the limit of ", lim.max_pixels,
                " (a decompression bomb? ImageLimits::max_pixels, Pillow's MAX_IMAGE_PIXELS)");
}

// ---- PNG (libpng) -------------------------------------------------------------------------------------------
// Plain C state only: png_decode runs under setjmp.
struct PngState {
  const std::uint8_t* data;
  std::size_t size;
  std::size_t pos;
  char message[200];
  std::uint8_t* pixels;  ///< malloc'ed [h, w, 3]
  png_bytep* rows;       ///< malloc'ed row pointers
  std::int64_t width, height, max_pixels, max_side;
  int too_large;
  int gray16;    ///< the pixels are big-endian 16-bit grey samples
  int channels;  ///< 8-bit samples per pixel otherwise: 3 (RGB) or 4 (RGB + an alpha libpng kept)
};

extern "C" inline void maxtext_png_read(png_structp png, png_bytep out, png_size_t n) {
  auto* s = static_cast<PngState*>(png_get_io_ptr(png));
  if (n > s->size - s->pos) png_error(png, "the file ends before the image data does (truncated)");
  std::memcpy(out, s->data + s->pos, n);
  s->pos += n;
}
extern "C" inline void maxtext_png_error(png_structp png, png_const_charp msg) {
  auto* s = static_cast<PngState*>(png_get_error_ptr(png));
  std::snprintf(s->message, sizeof s->message, "%s", msg != nullptr ? msg : "libpng error");
  png_longjmp(png, 1);
}
extern "C" inline void maxtext_png_warning(png_structp, png_const_charp) {}

/// 0: decoded into s->pixels; -1: an error, described in s->message (or s->too_large).
inline int png_decode(PngState* s) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, s, maxtext_png_error, maxtext_png_warning);
  if (png == nullptr) {
    std::snprintf(s->message, sizeof s->message, "libpng could not start");
    return -1;
  }
  png_infop info = png_create_info_struct(png);
  if (info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, info != nullptr ? &info : nullptr, nullptr);
    return -1;
  }
  png_set_read_fn(png, s, maxtext_png_read);
  png_set_user_limits(png, 0x7fffffffu, 0x7fffffffu);  // the PNG maximum: ImageLimits is checked below, by name
  png_set_chunk_malloc_max(png, 64u << 20);  // text / ICC chunks: 64 MiB each at most
  png_read_info(png, info);
  png_uint_32 w = 0, h = 0;
  int depth = 0, color = 0, interlace = 0;
  png_get_IHDR(png, info, &w, &h, &depth, &color, &interlace, nullptr, nullptr);
  s->width = w;
  s->height = h;
  if (w == 0 || h == 0 || static_cast<std::int64_t>(w) > s->max_side || static_cast<std::int64_t>(h) > s->max_side ||
      static_cast<std::int64_t>(w) * static_cast<std::int64_t>(h) > s->max_pixels) {
    s->too_large = 1;
    png_destroy_read_struct(&png, &info, nullptr);
    return -1;
  }
  // 16-bit grey is the one 16-bit kind Pillow does not reduce to its high byte: it opens it as mode I and
  // convert("RGB") clips the value to 255. It is read as 16-bit samples and converted in decode_png.
  s->gray16 = color == PNG_COLOR_TYPE_GRAY && depth == 16;
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16 && !s->gray16) png_set_strip_16(png);
  if (color & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
  if ((color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) && !s->gray16) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  // A palette with tRNS expands to RGBA despite strip_alpha on some libpng versions: check what we get.
  s->channels = png_get_channels(png, info);
  const int out_depth = png_get_bit_depth(png, info);
  if (s->gray16 ? (out_depth != 16 || s->channels != 1) : (out_depth != 8 || (s->channels != 3 && s->channels != 4))) {
    std::snprintf(s->message, sizeof s->message, "unexpected pixel layout after conversion (%d channels of %d bits)",
                  s->channels, out_depth);
    png_destroy_read_struct(&png, &info, nullptr);
    return -1;
  }
  const std::size_t row_bytes = png_get_rowbytes(png, info);
  s->pixels = static_cast<std::uint8_t*>(std::malloc(row_bytes * h));
  s->rows = static_cast<png_bytep*>(std::malloc(sizeof(png_bytep) * h));
  if (s->pixels == nullptr || s->rows == nullptr) {
    std::snprintf(s->message, sizeof s->message, "out of memory for %u x %u pixels", w, h);
    png_destroy_read_struct(&png, &info, nullptr);
    return -1;
  }
  for (png_uint_32 y = 0; y < h; ++y) s->rows[y] = s->pixels + y * row_bytes;
  png_read_image(png, s->rows);
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return 0;
}

inline Image decode_png(std::span<const std::uint8_t> bytes, std::string_view what, const ImageLimits& lim) {
  // Every chunk must lie inside the file: libpng allocates a text chunk's declared length before it reads a byte of
  // it (1 GB from a 220-byte file, which the image fuzzer found), whatever png_set_chunk_malloc_max says.
  for (std::size_t pos = 8; pos + 8 <= bytes.size();) {
    const std::uint64_t len = std::uint64_t{bytes[pos]} << 24 | std::uint64_t{bytes[pos + 1]} << 16 |
                              std::uint64_t{bytes[pos + 2]} << 8 | std::uint64_t{bytes[pos + 3]};
    const std::string type(reinterpret_cast<const char*>(bytes.data() + pos + 4), 4);
    const std::uint64_t left = bytes.size() - pos - 8;  // after the length and type
    MAXTEXT_CHECK(len + 4 <= left, IoError, "[image] ", what, ": bad PNG file: the chunk at byte ", pos,
                  " declares ", len, " bytes of data, but the file ends ", left, " bytes later (truncated or corrupt)");
    if (type == "IEND") break;
    pos += static_cast<std::size_t>(len) + 12;
  }
  PngState s{};
  s.data = bytes.data();
  s.size = bytes.size();
  s.max_pixels = lim.max_pixels;
  s.max_side = lim.max_side;
  const int rc = png_decode(&s);
  struct Free {
    PngState& s;
    ~Free() {
      std::free(s.pixels);
      std::free(s.rows);
    }
  } release{s};
  if (s.too_large != 0) check_image_size(s.width, s.height, lim, what);
  MAXTEXT_CHECK(rc == 0, IoError, "[image] ", what, ": bad PNG file: ", s.message);
  Image img(s.width, s.height);
  const std::size_t n = static_cast<std::size_t>(s.width * s.height);
  for (std::size_t i = 0; i < n; ++i) {
    if (s.gray16 != 0) {
      const unsigned v = static_cast<unsigned>(s.pixels[2 * i]) << 8 | s.pixels[2 * i + 1];
      img.rgb[3 * i] = img.rgb[3 * i + 1] = img.rgb[3 * i + 2] = static_cast<std::uint8_t>(v > 255 ? 255 : v);
    } else {
      std::memcpy(&img.rgb[3 * i], s.pixels + i * static_cast<std::size_t>(s.channels), 3);  // alpha dropped
    }
  }
  return img;
}

// ---- JPEG (libjpeg-turbo) -----------------------------------------------------------------------------------
struct JpegError {
  jpeg_error_mgr mgr;  // first: libjpeg hands this pointer back
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX + 64];
  int warnings;
};
struct JpegState {
  const std::uint8_t* data;
  std::size_t size;
  std::uint8_t* pixels;
  std::int64_t width, height, max_pixels, max_side;
  int too_large, cmyk;
};

extern "C" inline void maxtext_jpeg_error(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}
extern "C" inline void maxtext_jpeg_warning(j_common_ptr cinfo, int level) {
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  // Extraneous bytes between markers are common in camera files and harmless (Pillow reads them too); every
  // other warning means missing or corrupt image data, which libjpeg fills in with grey.
  if (level < 0 && cinfo->err->msg_code != JWRN_EXTRANEOUS_DATA && e->warnings++ == 0) {
    (*cinfo->err->format_message)(cinfo, e->message);  // keep the first
  }
}
/// Progressive files with absurd numbers of scans cost CPU without bound (libjpeg-turbo's advice, its
/// doc/libjpeg.txt "Decompression parameter selection"): stop at 1000 scans.
extern "C" inline void maxtext_jpeg_progress(j_common_ptr cinfo) {
  auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (d->is_decompressor && d->input_scan_number > 1000) {
    auto* e = reinterpret_cast<JpegError*>(cinfo->err);
    std::snprintf(e->message, sizeof e->message, "more than 1000 progressive scans");
    std::longjmp(e->jump, 1);
  }
}

inline int jpeg_decode(JpegState* s, JpegError* err) {
  jpeg_decompress_struct cinfo;
  jpeg_progress_mgr progress;
  cinfo.err = jpeg_std_error(&err->mgr);
  err->mgr.error_exit = maxtext_jpeg_error;
  err->mgr.emit_message = maxtext_jpeg_warning;
  if (setjmp(err->jump)) {
    jpeg_destroy_decompress(&cinfo);
    return -1;
  }
  jpeg_create_decompress(&cinfo);
  progress.progress_monitor = maxtext_jpeg_progress;
  cinfo.progress = &progress;
  cinfo.mem->max_memory_to_use = 1024L << 20;  // coefficient buffers of progressive files: 1 GiB at most
  jpeg_mem_src(&cinfo, s->data, static_cast<unsigned long>(s->size));
  jpeg_read_header(&cinfo, TRUE);
  s->width = cinfo.image_width;
  s->height = cinfo.image_height;
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    s->cmyk = 1;
    jpeg_destroy_decompress(&cinfo);
    return -1;
  }
  if (s->width <= 0 || s->height <= 0 || s->width > s->max_side || s->height > s->max_side ||
      s->width * s->height > s->max_pixels) {
    s->too_large = 1;
    jpeg_destroy_decompress(&cinfo);
    return -1;
  }
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  if (cinfo.output_components != 3) {
    std::snprintf(err->message, sizeof err->message, "unexpected output of %d components", cinfo.output_components);
    jpeg_destroy_decompress(&cinfo);
    return -1;
  }
  const std::size_t row_bytes = static_cast<std::size_t>(cinfo.output_width) * 3;
  s->pixels = static_cast<std::uint8_t*>(std::malloc(row_bytes * cinfo.output_height));
  if (s->pixels == nullptr) {
    std::snprintf(err->message, sizeof err->message, "out of memory");
    jpeg_destroy_decompress(&cinfo);
    return -1;
  }
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = s->pixels + cinfo.output_scanline * row_bytes;
    if (jpeg_read_scanlines(&cinfo, &row, 1) != 1) break;  // suspended: the data ended (a warning says so)
  }
  const bool complete = cinfo.output_scanline == cinfo.output_height;
  if (complete) jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  if (!complete && err->warnings == 0) {
    std::snprintf(err->message, sizeof err->message, "the file ends before the image data does (truncated)");
    err->warnings = 1;
  }
  return 0;
}

inline Image decode_jpeg(std::span<const std::uint8_t> bytes, std::string_view what, const ImageLimits& lim) {
  JpegState s{};
  s.data = bytes.data();
  s.size = bytes.size();
  s.max_pixels = lim.max_pixels;
  s.max_side = lim.max_side;
  JpegError err{};
  const int rc = jpeg_decode(&s, &err);
  struct Free {
    JpegState& s;
    ~Free() { std::free(s.pixels); }
  } release{s};
  MAXTEXT_CHECK(s.cmyk == 0, IoError, "[image] ", what,
                ": a CMYK / YCCK JPEG file; only greyscale and RGB (YCbCr) JPEG files are read (convert it to RGB)");
  if (s.too_large != 0) check_image_size(s.width, s.height, lim, what);
  MAXTEXT_CHECK(rc == 0, IoError, "[image] ", what, ": bad JPEG file: ", err.message);
  MAXTEXT_CHECK(err.warnings == 0, IoError, "[image] ", what, ": corrupt JPEG data: ", err.message);
  Image img(s.width, s.height);
  std::memcpy(img.rgb.data(), s.pixels, img.rgb.size());
  return img;
}

}  // namespace detail

/// The format of an encoded image (PNG or JPEG), from its signature; anything else is refused by name.
inline ImageFormat image_format(std::span<const std::uint8_t> bytes, std::string_view what = "image") {
  return detail::sniff_image(bytes, what);
}

/// Decode a PNG or JPEG file's bytes; `what` names it in errors (its path).
inline Image decode_image(std::span<const std::uint8_t> bytes, std::string_view what = "image",
                          const ImageLimits& limits = {}) {
  return detail::sniff_image(bytes, what) == ImageFormat::png ? detail::decode_png(bytes, what, limits)
                                                               : detail::decode_jpeg(bytes, what, limits);
}

/// Read and decode a PNG or JPEG file.
inline Image read_image(const std::string& path, const ImageLimits& limits = {}) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  MAXTEXT_CHECK(f.good(), IoError, "[image] ", path, ": cannot open the file");
  const std::streamoff size = f.tellg();
  MAXTEXT_CHECK(size >= 0, IoError, "[image] ", path, ": cannot read the file's size");
  MAXTEXT_CHECK(static_cast<std::size_t>(size) <= limits.max_file_bytes, IoError, "[image] ", path, ": ", size,
                " bytes exceeds the limit of ", limits.max_file_bytes, " (ImageLimits::max_file_bytes)");
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(bytes.data()), size);
  MAXTEXT_CHECK(f.good() || size == 0, IoError, "[image] ", path, ": cannot read the file");
  return decode_image(bytes, path, limits);
}

}  // namespace maxtext::io
