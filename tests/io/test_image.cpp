// tests/io/test_image.cpp: PNG / JPEG decoding (io/image.hpp), Pillow's resize (io/image_resize.hpp) and Gemma 3's
// preprocessing (families/gemma/image_processor.hpp) against Pillow 9.4: tests/fixtures/images, written by
// tests/reference/image_fixtures.py (the expected pixels are Pillow's; the decoder and the filters must give them
// byte for byte: tolerance 0, since a resize or decoder that differs by one level in one pixel is a different one).
#include <catch2/catch.hpp>

#include <array>
#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <zlib.h>

#include "maxtext/families/gemma/image_processor.hpp"
#include "maxtext/families/llama4/image_processor.hpp"
#include "maxtext/io/image.hpp"
#include "maxtext/io/image_resize.hpp"
#include "maxtext/io/npy.hpp"
#include "maxtext/tokenizer/tokenizer.hpp"
#include "support/test_support.hpp"

using namespace maxtext;

namespace {

std::string images_dir() { return test::fixtures_dir() + "/images"; }

nlohmann::json manifest() {
  std::ifstream f(images_dir() + "/manifest.json");
  REQUIRE(f.good());
  return nlohmann::json::parse(f);
}

std::vector<std::uint8_t> file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f.good());
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

/// Pillow's pixels [H, W, 3] uint8 from an .npy file; the first differing byte reported.
void check_pixels(const io::Image& got, const std::string& npy, const std::string& what) {
  const AnyTensor want = io::read_npy(images_dir() + "/" + npy);
  REQUIRE(want.dtype == DType::u8);
  REQUIRE(want.shape == std::vector<std::int64_t>{got.height, got.width, 3});
  const auto* w = reinterpret_cast<const std::uint8_t*>(want.data);
  REQUIRE(want.is_contiguous());
  std::int64_t diffs = 0, first = -1;
  for (std::size_t i = 0; i < got.rgb.size(); ++i) {
    if (got.rgb[i] != w[i]) {
      if (first < 0) first = static_cast<std::int64_t>(i);
      ++diffs;
    }
  }
  INFO(what << ": " << diffs << " of " << got.rgb.size() << " bytes differ from Pillow's"
            << (first >= 0 ? " (first at byte " + std::to_string(first) + ": " + std::to_string(got.rgb[first]) +
                                 " vs " + std::to_string(w[first]) + ")"
                           : std::string()));
  CHECK(diffs == 0);
}

template <class F>
void refused_with(F&& f, const std::string& needle) {
  try {
    f();
    FAIL("not refused (expected a message containing '" << needle << "')");
  } catch (const IoError& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find(needle) != std::string::npos);
  }
}

/// A PNG chunk with its CRC.
void put_chunk(std::vector<std::uint8_t>& out, const char* type, const std::vector<std::uint8_t>& data) {
  const auto be32 = [&](std::uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<std::uint8_t>(v >> s));
  };
  be32(static_cast<std::uint32_t>(data.size()));
  const std::size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  be32(static_cast<std::uint32_t>(crc32(0, out.data() + start, static_cast<uInt>(out.size() - start))));
}

}  // namespace

TEST_CASE("images: PNG and JPEG files decode to Pillow's convert(RGB) pixels byte for byte", "[image]") {
  const auto m = manifest();
  int decoded = 0, refused = 0;
  for (const auto& e : m.at("images")) {
    const std::string file = e.at("file").get<std::string>();
    const std::string path = images_dir() + "/" + file;
    INFO(file << " (" << e.at("notes").get<std::string>() << ")");
    if (e.at("expect") == "refused") {
      refused_with([&] { (void)io::read_image(path); }, "CMYK");
      ++refused;
      continue;
    }
    const io::Image img = io::read_image(path);
    CHECK(img.width == e.at("width").get<std::int64_t>());
    CHECK(img.height == e.at("height").get<std::int64_t>());
    if (e.contains("rgb_npy") && !e.at("rgb_npy").is_null()) {
      check_pixels(img, e.at("rgb_npy").get<std::string>(), file);
      ++decoded;
    }
  }
  CHECK(decoded >= 20);  // every kind the manifest lists: RGB, RGBA, grey, LA, palette (+tRNS), 1/2/4/16-bit, Adam7, JPEG
  CHECK(refused == 1);
}

TEST_CASE("images: resizing with each Pillow filter gives Pillow's bytes (down, up, one axis, same size)", "[image]") {
  const auto m = manifest();
  int checked = 0;
  for (const auto& e : m.at("resize")) {
    const std::string src = e.at("src").get<std::string>(), filter = e.at("filter").get<std::string>();
    const std::int64_t w = e.at("width").get<std::int64_t>(), h = e.at("height").get<std::int64_t>();
    const io::ResizeFilter f = io::parse_resize_filter(filter);
    CHECK(static_cast<int>(f) == e.at("pillow_filter").get<int>());
    const io::Image out = io::resize_image(io::read_image(images_dir() + "/" + src), w, h, f);
    REQUIRE(out.width == w);
    REQUIRE(out.height == h);
    check_pixels(out, e.at("npy").get<std::string>(), src + " -> " + std::to_string(w) + "x" + std::to_string(h) + " " + filter);
    ++checked;
  }
  CHECK(checked == 66);
}

TEST_CASE("images: Gemma 3 preprocessing at 896x896, MaxText's and Hugging Face's, equals Pillow + NumPy's", "[image][gemma3]") {
  const auto m = manifest();
  for (const auto& e : m.at("gemma3")) {
    const std::string src = e.at("src").get<std::string>();
    const io::Image img = io::read_image(images_dir() + "/" + src);
    for (const char* which : {"maxtext", "hf"}) {
      INFO(src << ", " << which);
      const auto& want = e.at(which);
      const auto how = io::parse_gemma3_image_processing(which);
      const Tensor<float, 3> x = io::gemma3_preprocess(img, 896, how);
      CHECK(io::gemma3_resize(img, 896, how).rgb.size() == std::size_t{896} * 896 * 3);
      // The first values' bits, and the f64 sum of all 2.4M values: one pixel one level off moves the sum by ~0.008,
      // about 1e-7 of it, far outside the 1e-12 allowed for summation order.
      const auto& first = want.at("first8_hwc");  // f32 values written as doubles: exact
      for (std::size_t i = 0; i < first.size(); ++i) CHECK(x.data()[i] == static_cast<float>(first[i].get<double>()));
      double sum = 0.0;
      for (std::int64_t i = 0; i < x.size(); ++i) sum += x.data()[i];
      const double ref = want.at("sum").get<double>();
      CHECK(std::abs(sum - ref) <= 1e-12 * std::max(1.0, std::abs(ref)) + 1e-9);
    }
  }
  // The per-value normalisation of both pipelines, against NumPy's for all 256 byte values.
  const auto& lut = m.at("gemma3_normalize_lut");
  for (const char* which : {"maxtext", "hf"}) {
    // A 1x1 picture "resized" to 1x1 is not resized: the values are the normalisation alone.
    const io::Gemma3ImageProcessing how = io::parse_gemma3_image_processing(which);
    for (int v = 0; v < 256; ++v) {
      io::Image one(1, 1);
      one.at(0, 0, 0) = one.at(0, 0, 1) = one.at(0, 0, 2) = static_cast<std::uint8_t>(v);
      const Tensor<float, 3> x = io::gemma3_preprocess(one, 1, how);
      std::uint32_t u = 0;
      std::memcpy(&u, &x.data()[0], 4);
      INFO(which << " value " << v);
      CHECK(u == std::stoul(lut.at(which).at(static_cast<std::size_t>(v)).get<std::string>(), nullptr, 16));
    }
  }
}

TEST_CASE("images: bad files are refused by name: other formats, truncation, corruption, decompression bombs", "[image]") {
  const std::string png = images_dir() + "/png_rgb8_64x48.png", jpg = images_dir() + "/jpeg_rgb_q90_420_64x48.jpg";
  const auto png_bytes = file_bytes(png), jpg_bytes = file_bytes(jpg);
  const auto decode = [](const std::vector<std::uint8_t>& b) { return io::decode_image(b, "test.img"); };

  refused_with([&] { (void)decode({'G', 'I', 'F', '8', '9', 'a', 1, 0}); }, "not a PNG or JPEG file (a GIF file)");
  refused_with([&] { (void)decode({'B', 'M', 0, 0}); }, "(a BMP file)");
  refused_with([&] { (void)decode({}); }, "(it is empty)");
  refused_with([&] { (void)io::read_image(images_dir() + "/no-such-file.png"); }, "cannot open the file");

  // Truncated: half of each file.
  refused_with([&] { (void)decode({png_bytes.begin(), png_bytes.begin() + png_bytes.size() / 2}); }, "bad PNG file");
  refused_with([&] { (void)decode({jpg_bytes.begin(), jpg_bytes.begin() + jpg_bytes.size() / 2}); }, "JPEG");
  // Corrupt: the PNG's image data flipped (zlib or CRC error), the JPEG's entropy-coded data overwritten.
  {
    auto b = png_bytes;
    for (std::size_t i = 60; i < b.size() - 20; i += 7) b[i] ^= 0x5a;
    refused_with([&] { (void)decode(b); }, "bad PNG file");
  }
  {
    auto b = jpg_bytes;
    for (std::size_t i = b.size() / 2; i < b.size() - 2; ++i) b[i] = 0xff;
    refused_with([&] { (void)decode(b); }, "JPEG");
  }

  // A chunk declaring more bytes than the file holds (a 1 GB text chunk in a 220-byte file, which the image fuzzer
  // found: libpng would allocate it first) is refused before libpng sees it.
  {
    std::vector<std::uint8_t> b = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    put_chunk(b, "IHDR", {0, 0, 0, 37, 0, 0, 0, 23, 2, 0, 0, 0, 0});
    const std::vector<std::uint8_t> text = {0x3c, 0x45, 0xe4, 0x93, 't', 'E', 'X', 't', 'k', 0, 'v'};
    b.insert(b.end(), text.begin(), text.end());
    refused_with([&] { (void)decode(b); }, "declares 1011213459 bytes of data, but the file ends");
  }

  // A decompression bomb: a valid PNG header announcing 20000 x 20000 pixels (400 megapixels), refused from the
  // header before any pixel memory exists.
  {
    std::vector<std::uint8_t> b = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    const std::vector<std::uint8_t> ihdr = {0, 0, 0x4e, 0x20, 0, 0, 0x4e, 0x20, 8, 2, 0, 0, 0};
    put_chunk(b, "IHDR", ihdr);
    put_chunk(b, "IDAT", {0x78, 0x9c, 0x03, 0x00});  // libpng reads the header up to the first IDAT
    put_chunk(b, "IEND", {});
    refused_with([&] { (void)decode(b); }, "decompression bomb");
  }
  // The same for a JPEG: its SOF0 frame header's height and width patched to 30000 x 30000.
  {
    auto b = jpg_bytes;
    bool patched = false;
    for (std::size_t i = 2; i + 9 < b.size(); ++i) {
      if (b[i] == 0xff && b[i + 1] == 0xc0) {
        b[i + 5] = 0x75, b[i + 6] = 0x30, b[i + 7] = 0x75, b[i + 8] = 0x30;
        patched = true;
        break;
      }
    }
    REQUIRE(patched);
    refused_with([&] { (void)decode(b); }, "decompression bomb");
  }
  // Smaller limits of the caller's own.
  io::ImageLimits small;
  small.max_pixels = 100;
  refused_with([&] { (void)io::decode_image(png_bytes, "small.png", small); }, "64x48 = 3072 pixels exceeds the limit of 100");
  small.max_file_bytes = 10;
  refused_with([&] { (void)io::read_image(png, small); }, "exceeds the limit of 10");
  CHECK_THROWS_AS(io::parse_resize_filter("cubicspline"), ArgumentError);
  CHECK_THROWS_AS(io::resize_image(io::Image(4, 4), 0, 3, io::ResizeFilter::bilinear), ArgumentError);
}

TEST_CASE("images: Gemma 3 prompts get each picture's placeholder tokens, as MaxText and Hugging Face write them",
          "[image][gemma3][tokenizers]") {
  const std::string dir = test::shared_dir() + "/models/tokenizers/gemma3";
  test::require(dir + "/tokenizer.json", "Gemma 3 tokenizer");
  const auto tk = tokenizer::open_tokenizer(dir + "/tokenizer.json");
  const auto ids = tk->encode("Compare <start_of_image> with <start_of_image>, please.", false);
  const io::Gemma3ImagePrompt p = io::gemma3_expand_image_tokens(ids, 2);
  // Hugging Face's Gemma3Processor replaces each marker with this text and tokenises the whole prompt.
  std::string seq = "\n\n<start_of_image>";
  for (int i = 0; i < 256; ++i) seq += "<image_soft_token>";
  seq += "<end_of_image>\n\n";
  const auto want = tk->encode("Compare " + seq + " with " + seq + ", please.", false);
  CHECK(p.ids == want);
  REQUIRE(p.soft_starts.size() == 2);
  for (const std::int64_t s : p.soft_starts) {
    CHECK(p.ids[static_cast<std::size_t>(s - 1)] == 255999);
    CHECK(p.ids[static_cast<std::size_t>(s)] == 262144);
    CHECK(p.ids[static_cast<std::size_t>(s + 255)] == 262144);
    CHECK(p.ids[static_cast<std::size_t>(s + 256)] == 256000);
  }
  CHECK_THROWS_WITH(io::gemma3_expand_image_tokens(ids, 1),
                    Catch::Contains("2 <start_of_image> marker(s) for 1 picture(s)"));
  CHECK_THROWS_WITH(io::gemma3_expand_image_tokens(p.ids, 2), Catch::Contains("already holds an <image_soft_token>"));
}

TEST_CASE("images: llama.cpp's Gemma 3 preparation (letterbox, its bilinear resize) equals its re-statement byte for byte",
          "[image][gemma3][llamacpp]") {
  // tests/reference/llamacpp_image_preprocess.py re-states llama.cpp's mtmd-image.cpp (0309b28f): for every picture of
  // the fixture set at S = 64 and 32 (and two at 896, by float64 sum and four rows), the resized and padded bytes
  // and the normalised floats. Every byte and every float must agree: llama.cpp truncates its interpolation, so one
  // fused multiply-add or one rounding step taken differently shows up as a byte off by one.
  const std::string dir = images_dir() + "/llamacpp_gemma3";
  std::ifstream mf(dir + "/manifest.json");
  REQUIRE(mf.good());
  const nlohmann::json m = nlohmann::json::parse(mf);
  std::int64_t checked = 0;
  for (const auto& e : m.at("entries")) {
    const std::string src = test::source_dir() + "/" + e.at("source").get<std::string>();
    const std::int64_t S = e.at("S").get<std::int64_t>();
    INFO(src << " at " << S);
    const io::Image img = io::read_image(src);
    if (e.contains("llamacpp_aborts")) {  // llama.cpp asserts (a 1 x 1 picture); here it is refused by name
      try {
        (void)io::llamacpp_resize_pad(img, S);
        FAIL("not refused: llama.cpp aborts on this picture");
      } catch (const ArgumentError& err) {
        CHECK(std::string(err.what()).find("needs at least 2 x 2 pixels") != std::string::npos);
      }
      continue;
    }
    const io::Image r = io::llamacpp_resize_pad(img, S);
    const Tensor<float, 3> x = io::gemma3_preprocess(img, S, io::Gemma3ImageProcessing::llamacpp);
    REQUIRE(r.width == S);
    REQUIRE(r.height == S);
    if (!e.at("u8_npy").is_null()) {
      check_pixels(r, "llamacpp_gemma3/" + e.at("u8_npy").get<std::string>(), src);
      const AnyTensor want = io::read_npy(dir + "/" + e.at("npy").get<std::string>());
      REQUIRE(want.dtype == DType::f32);
      REQUIRE(want.numel() == x.size());
      CHECK(std::memcmp(want.data, x.data(), static_cast<std::size_t>(x.size()) * sizeof(float)) == 0);
    } else {  // 896: four rows of bytes and the float64 sum of the floats
      const AnyTensor rows = io::read_npy(dir + "/" + e.at("rows_u8_npy").get<std::string>());
      const auto* w = reinterpret_cast<const std::uint8_t*>(rows.data);
      std::int64_t k = 0, diffs = 0;
      for (const auto& y : e.at("rows")) {
        for (std::int64_t i = 0; i < S * 3; ++i) {
          diffs += r.rgb[static_cast<std::size_t>(y.get<std::int64_t>() * S * 3 + i)] != w[k++] ? 1 : 0;
        }
      }
      CHECK(diffs == 0);
      double sum = 0.0;
      for (std::int64_t i = 0; i < x.size(); ++i) sum += static_cast<double>(x.data()[i]);
      CHECK(sum == Approx(e.at("sum_f64").get<double>()).epsilon(1e-12));
    }
    ++checked;
  }
  CHECK(checked >= 50);
  CHECK(io::parse_gemma3_image_processing("llamacpp") == io::Gemma3ImageProcessing::llamacpp);
}

TEST_CASE("images: Gemma 3 pan-and-scan crops and prompt text as Hugging Face's Gemma3ImageProcessor computes them",
          "[image][gemma3]") {
  // Expected crop rectangles worked out by hand from transformers' Gemma3ImageProcessor.pan_and_scan (min crop 256,
  // at most 4 crops, ratio 1.2): n = floor(long / short + 0.5), at most floor(long / 256), clamped to [2, 4]; crops
  // of ceil(side / n), the last one cut at the edge. (tests/tools/test_cli_vision.cpp checks the pixels against a
  // Pillow re-statement.)
  struct Case { std::int64_t w, h; std::vector<std::array<std::int64_t, 4>> rects; };  // x0, y0, width, height
  const std::vector<Case> cases = {
      {1000, 900, {}},                                                   // ratio 1.11 < 1.2
      {600, 500, {{0, 0, 300, 500}, {300, 0, 300, 500}}},                 // ratio 1.2 exactly: n = 1, raised to 2
      {1000, 700, {{0, 0, 500, 700}, {500, 0, 500, 700}}},               // the JPEG fixture's size
      {1001, 700, {{0, 0, 501, 700}, {501, 0, 500, 700}}},               // the last crop one narrower
      {2000, 400, {{0, 0, 500, 400}, {500, 0, 500, 400}, {1000, 0, 500, 400}, {1500, 0, 500, 400}}},  // n 5 -> 4
      {600, 200, {}},                                                    // n = 2 (floor(600 / 256)), rows of 200 < 256
      {500, 1300, {{0, 0, 500, 434}, {0, 434, 500, 434}, {0, 868, 500, 432}}},  // portrait, n = 3
      {300, 1000, {{0, 0, 300, 334}, {0, 334, 300, 334}, {0, 668, 300, 332}}},  // n = floor(3.83) = 3
      {510, 250, {}},                                                    // crops of 255 < 256
  };
  for (const Case& c : cases) {
    INFO(c.w << " x " << c.h);
    io::Image img(c.w, c.h);
    for (std::size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = static_cast<std::uint8_t>((i * 2654435761u) >> 24);
    const std::vector<io::Image> crops = io::gemma3_pan_and_scan(img);
    REQUIRE(crops.size() == c.rects.size());
    for (std::size_t k = 0; k < crops.size(); ++k) {
      const auto [x0, y0, cw, ch] = c.rects[k];
      CHECK(crops[k].width == cw);
      CHECK(crops[k].height == ch);
      bool same = true;
      for (std::int64_t y = 0; y < ch && same; ++y) {
        for (std::int64_t x = 0; x < cw && same; ++x) {
          for (int ch3 = 0; ch3 < 3; ++ch3) same = same && crops[k].at(y, x, ch3) == img.at(y0 + y, x0 + x, ch3);
        }
      }
      CHECK(same);
    }
  }
  // Options: at most 3 crops; no minimum ratio below the picture's.
  io::Gemma3PanAndScan o;
  o.max_num_crops = 3;
  CHECK(io::gemma3_pan_and_scan(io::Image(2000, 400), o).size() == 3);
  o.min_ratio_to_activate = 6.0;
  CHECK(io::gemma3_pan_and_scan(io::Image(2000, 400), o).empty());
  o.min_crop_size = 0;
  CHECK_THROWS_WITH(io::gemma3_pan_and_scan(io::Image(2000, 400), o), Catch::Contains("min_crop_size"));

  // The prompt: Gemma3Processor's text for a picture with crops, the marker alone without.
  CHECK(io::gemma3_pan_and_scan_text(0) == "<start_of_image>");
  CHECK(io::gemma3_pan_and_scan_text(2) == "Here is the original image <start_of_image> and here are some crops to "
                                           "help you see better <start_of_image> <start_of_image>");
  CHECK(io::gemma3_pan_and_scan_prompt("a <m> b <m> c <m>", {1, 0}, "<m>") ==
        "a Here is the original image <m> and here are some crops to help you see better <m> b <m> c <m>");
}

TEST_CASE("images: Llama 4 tiles, canvas and prompt ids as MaxText's processor_llama4 computes them",
          "[image][llama4]") {
  // Canvases worked by hand from find_supported_resolutions / get_best_resolution: the list opens with the ratio
  // groups of 16 tiles (1x16, then 2x8 with 1x4, ...), and the first nearest canvas wins.
  const auto canvases = io::llama4_supported_resolutions(16, 336);
  REQUIRE(canvases.size() >= 3);
  CHECK(canvases[0] == std::pair<std::int64_t, std::int64_t>{336, 16 * 336});
  CHECK(canvases[1] == std::pair<std::int64_t, std::int64_t>{2 * 336, 8 * 336});
  CHECK(canvases[2] == std::pair<std::int64_t, std::int64_t>{336, 4 * 336});
  std::int64_t total = 0;  // every grid of 1..16 tiles once: the sum over n of n's divisors = 50 grids
  for (std::int64_t n = 1; n <= 16; ++n) {
    for (std::int64_t h = 1; h <= n; ++h) total += n % h == 0 ? 1 : 0;
  }
  CHECK(static_cast<std::int64_t>(canvases.size()) == total);
  const auto grid = [](std::int64_t w, std::int64_t h) {
    const io::Llama4Tiles t = io::llama4_preprocess(io::Image(w, h), 336, 16);
    return std::pair<std::int64_t, std::int64_t>{t.ratio_h, t.ratio_w};
  };
  CHECK(grid(37, 23) == std::pair<std::int64_t, std::int64_t>{1, 1});      // one tile, no global tile
  CHECK(grid(1000, 700) == std::pair<std::int64_t, std::int64_t>{2, 3});    // 672 x 1008: |28| + |8|
  CHECK(grid(3000, 3000) == std::pair<std::int64_t, std::int64_t>{2, 8});   // 2640 ties 8x2's; 2x8 is listed first
  CHECK(io::llama4_preprocess(io::Image(37, 23)).tiles.dim(0) == 1);
  CHECK(io::llama4_preprocess(io::Image(1000, 700)).tiles.dim(0) == 7);

  // Prompt ids: MaxText's worked example (2 x 2 tiles, 4 patches a tile) is 27 ids.
  io::Llama4ImageTokens ids;
  ids.per_tile = 4;
  const auto t22 = io::llama4_image_token_ids(2, 2, ids);
  CHECK(t22.size() == 27);
  CHECK(t22.front() == ids.begin);
  CHECK(t22[5] == ids.tile_x);
  CHECK(t22[10] == ids.tile_y);
  CHECK(t22[21] == ids.image);
  CHECK(t22.back() == ids.end);
  CHECK(io::llama4_image_token_ids(1, 1, ids).size() == 7);  // <|image_start|> <|image|> 4 x <|patch|> <|image_end|>
  const auto expanded = io::llama4_expand_image_tokens({5, ids.image, 6, ids.image}, {{1, 1}, {2, 2}}, ids);
  CHECK(expanded.size() == 2 + 7 + 27);
  CHECK(expanded[1] == ids.begin);
  CHECK(expanded[9] == ids.begin);
  CHECK_THROWS_WITH(io::llama4_expand_image_tokens({ids.image, 1}, {{1, 1}, {1, 1}}, ids),
                    Catch::Contains("1 <|image|> marker(s) for 2 picture(s)"));
  CHECK_THROWS_WITH(io::llama4_expand_image_tokens({ids.patch}, {}, ids), Catch::Contains("<|patch|>"));
  // Sizes that would hang or allocate without bound are refused by name.
  CHECK_THROWS_WITH(io::llama4_preprocess(io::Image(8, 8), 336, 1000000), Catch::Contains("max tiles (1000000)"));
  CHECK_THROWS_WITH(io::llama4_preprocess(io::Image(8, 8), 100000, 16), Catch::Contains("tile size (100000)"));
  CHECK_THROWS_WITH(io::llama4_image_token_ids(1 << 20, 1 << 20, ids), Catch::Contains("expected 1 to 256 tiles"));
  CHECK_THROWS_WITH(io::llama4_image_token_ids((std::int64_t{1} << 62) + 1, 4, ids),
                    Catch::Contains("expected 1 to 256 tiles"));  // the product would wrap to 4
}

TEST_CASE("images: Llama 4 tiles and prompt ids equal the re-statement of MaxText's processor bit for bit",
          "[image][llama4]") {
  // Pixels and ids against the re-statement of MaxText's preprocessing (Pillow + NumPy, run here), bit for bit:
  // pictures smaller than one tile (padded), larger than their canvas (cut) with a LANCZOS global tile, and small
  // tile sizes (14, 20, 28 pixels; at most 4, 6 or 16 tiles) for grids of 2-6 tiles. (MaxText's BILINEAR global tile
  // never happens: a picture within one tile on both sides always gets the one-tile canvas.)
  if (std::system("/usr/bin/python3 -c 'import numpy, PIL' > /dev/null 2>&1") != 0) {
    test::skip("/usr/bin/python3 with numpy and Pillow not available");
  }
  const std::string out = (std::filesystem::current_path() / "llama4_preprocess").string();
  struct Case {
    const char* file;
    std::int64_t tile, max_tiles;
  };
  for (const Case c : {Case{"gemma_src_rgb_q85_1000x700.jpg", 336, 16}, Case{"png_rgb8_64x48.png", 336, 16},
                       Case{"jpeg_rgb_q90_420_37x23.jpg", 14, 16}, Case{"jpeg_rgb_q90_420_64x48.jpg", 28, 4},
                       Case{"png_p8_trns_37x23.png", 20, 6}}) {
    INFO(c.file << ", tile " << c.tile << ", at most " << c.max_tiles << " tiles");
    const std::string src = images_dir() + "/" + c.file;
    REQUIRE(std::system(("/usr/bin/python3 " + test::source_dir() + "/tests/reference/llama4_preprocess.py " + src + " " +
                         out + " --tile-size " + std::to_string(c.tile) + " --max-tiles " + std::to_string(c.max_tiles) +
                         " > /dev/null").c_str()) == 0);
    const io::Llama4Tiles got = io::llama4_preprocess(io::read_image(src), c.tile, c.max_tiles);
    const AnyTensor want = io::read_npy(out + "/tiles.npy");
    REQUIRE(want.shape == std::vector<std::int64_t>{got.tiles.dim(0), c.tile, c.tile, 3});
    std::int64_t differ = 0;
    for (std::int64_t i = 0; i < got.tiles.size(); ++i) differ += got.tiles.data()[i] != static_cast<float>(want.element(i)) ? 1 : 0;
    CHECK(differ == 0);
    std::ifstream af(out + "/aspect.json"), tf(out + "/tokens.json");
    const auto aspect = nlohmann::json::parse(af);
    CHECK(got.ratio_h == aspect.at("ratio_h").get<std::int64_t>());
    CHECK(got.ratio_w == aspect.at("ratio_w").get<std::int64_t>());
    io::Llama4ImageTokens t;
    t.per_tile = (c.tile / 14) * (c.tile / 14) / 4;
    const auto tokens = nlohmann::json::parse(tf);
    CHECK(io::llama4_image_token_ids(got.ratio_h, got.ratio_w, t) == tokens.get<std::vector<std::int32_t>>());
  }
}
