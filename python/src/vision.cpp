// python/src/vision.cpp: images and the vision towers in the Python module (docs/vision.md, docs/python.md):
// read_image, resize_image (byte for byte Pillow's), gemma3_pan_and_scan, llama4_preprocess, gemma4_preprocess,
// Gemma3Vision (a Hugging Face Gemma3ForConditionalGeneration checkpoint's tower and projector), Llama4Vision (a
// Llama4ForConditionalGeneration checkpoint's vision model and projector) and Gemma4Vision (a
// Gemma4ForConditionalGeneration checkpoint's vision encoder and projector) and Qwen3Vision (the vision encoder of a
// Qwen3.5 / Qwen3-VL / Qwen3-Omni checkpoint, with its deepstack features): preprocess, encode, captures by MaxText's
// names, for numerics tests.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/families/gemma/image_processor.hpp"
#include "maxtext/families/gemma/pictures.hpp"
#include "maxtext/families/gemma/vision.hpp"
#include "maxtext/families/gemma4/image_processor.hpp"
#include "maxtext/families/gemma4/pictures.hpp"
#include "maxtext/families/llama4/image_processor.hpp"
#include "maxtext/families/llama4/pictures.hpp"
#include "maxtext/families/qwen/image_processor.hpp"
#include "maxtext/families/qwen/pictures.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/image.hpp"
#include "maxtext/io/image_resize.hpp"
#include "media_prompt.hpp"

namespace py = pybind11;

namespace maxtext::python {

namespace {

std::string path_of(py::handle h) { return py::str(py::module_::import("os").attr("fspath")(h)); }
bool is_path(py::handle h) { return py::isinstance<py::str>(h) || py::hasattr(h, "__fspath__"); }

py::array_t<std::uint8_t> image_to_numpy(const io::Image& img) {
  py::array_t<std::uint8_t> a({static_cast<py::ssize_t>(img.height), static_cast<py::ssize_t>(img.width), py::ssize_t{3}});
  std::memcpy(a.mutable_data(), img.rgb.data(), img.rgb.size());
  return a;
}

io::Image image_from(py::handle obj) {
  if (is_path(obj)) return io::read_image(path_of(obj));
  const auto a = py::array_t<std::uint8_t, py::array::c_style | py::array::forcecast>::ensure(obj);
  MAXTEXT_CHECK(a && a.ndim() == 3 && a.shape(2) == 3, ArgumentError,
                "[image] expected a path or a uint8 array [height, width, 3]");
  io::Image img(a.shape(1), a.shape(0));
  std::memcpy(img.rgb.data(), a.data(), img.rgb.size());
  return img;
}

py::array_t<float> tensor_to_numpy(const float* data, std::vector<py::ssize_t> shape) {
  py::array_t<float> a(shape);
  std::size_t n = 1;
  for (auto d : shape) n *= static_cast<std::size_t>(d);
  std::memcpy(a.mutable_data(), data, n * sizeof(float));
  return a;
}

/// capture=[names] as a Capture (null when None), and the captured values as {name: array}.
std::unique_ptr<layers::Capture> capture_of(const py::object& capture) {
  if (capture.is_none()) return nullptr;
  auto cap = std::make_unique<layers::Capture>();
  for (auto n : capture) cap->request(py::str(n));
  return cap;
}
py::object with_captures(py::array_t<float> tokens, const layers::Capture* cap) {
  if (cap == nullptr) return py::object(std::move(tokens));
  py::dict d;
  for (const auto& n : cap->order()) {
    const AnyTensor& t = cap->at(n);
    std::vector<py::ssize_t> shape(t.shape.begin(), t.shape.end());
    const Tensor<float, 1> flat = t.to<float, 1>({t.numel()});
    d[py::str(n)] = tensor_to_numpy(flat.data(), shape);
  }
  return py::make_tuple(tokens, d);
}

cpu::Backend vision_backend(int threads) {
  MAXTEXT_CHECK(threads >= 0, ArgumentError, "[vision] threads must be >= 0, found ", threads);
  cpu::Options o;
  o.threads = threads;
  return cpu::Backend(o);
}

/// float32 [n, S, S, 3] from a NumPy array (already preprocessed pixels or tiles).
Tensor<float, 4> pixels_from(py::handle obj, const char* what) {
  const auto a = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(obj);
  MAXTEXT_CHECK(a && a.ndim() == 4, ArgumentError, "[", what, "] encode: expected float pixels [n, S, S, 3] or a list "
                "of picture paths / arrays");
  Tensor<float, 4> px({a.shape(0), a.shape(1), a.shape(2), a.shape(3)});
  std::memcpy(px.data(), a.data(), static_cast<std::size_t>(px.size()) * sizeof(float));
  return px;
}

/// A family's pictures (models::Gemma3Pictures, models::Llama4Pictures) from a checkpoint, or from llama.cpp's mmproj
/// file (a .gguf; the image token ids then the family's defaults), loaded without the GIL.
template <class Pictures, class Ids>
std::unique_ptr<const Pictures> open_pictures(const std::string& weights, int threads) {
  const bool mmproj = std::filesystem::path(weights).extension() == ".gguf";
  py::gil_scoped_release nogil;
  return mmproj ? std::make_unique<const Pictures>(vision_backend(threads), io::read_gguf(weights), Ids{})
                : std::make_unique<const Pictures>(vision_backend(threads), weights);
}

/// (tiles float32 [n, S, S, 3], (ratio_h, ratio_w)): a picture as Llama 4's processor cut it.
py::tuple tiles_to_python(const io::Llama4Tiles& t) {
  return py::make_tuple(tensor_to_numpy(t.tiles.data(), {t.tiles.dim(0), t.tiles.dim(1), t.tiles.dim(2), 3}),
                        py::make_tuple(t.ratio_h, t.ratio_w));
}

/// The tower of models::Gemma3Pictures (families/gemma/pictures.hpp), which the server and the CLI use too; the
/// preprocessing is chosen per call here.
class Gemma3Vision {
 public:
  using P = Policy<cpu::Backend, float>;
  Gemma3Vision(const std::string& weights, int threads)
      : pics_(open_pictures<models::Gemma3Pictures<P>, io::Gemma3ImageTokens>(weights, threads)) {}
  const layers::Gemma3VisionConfig& config() const { return pics_->config(); }

  py::array_t<float> preprocess(py::handle image, const std::string& how) const {
    const io::Image img = image_from(image);
    const Tensor<float, 3> x = io::gemma3_preprocess(img, config().image_size, io::parse_gemma3_image_processing(how));
    return tensor_to_numpy(x.data(), {x.dim(0), x.dim(1), x.dim(2)});
  }

  py::object encode(py::handle pictures, const std::string& how, py::object capture) const {
    const std::int64_t S = config().image_size;
    Tensor<float, 4> px;
    if (py::isinstance<py::list>(pictures) || py::isinstance<py::tuple>(pictures)) {  // files or uint8 pictures
      const auto seq = py::reinterpret_borrow<py::sequence>(pictures);
      px = Tensor<float, 4>({static_cast<std::int64_t>(seq.size()), S, S, 3});
      for (std::size_t i = 0; i < seq.size(); ++i) {
        const Tensor<float, 3> x = io::gemma3_preprocess(image_from(seq[i]), S, io::parse_gemma3_image_processing(how));
        std::copy(x.data(), x.data() + x.size(), &px(static_cast<std::int64_t>(i), 0, 0, 0));
      }
    } else {  // preprocessed float pixels [n, S, S, 3]
      px = pixels_from(pictures, "gemma3 vision");
    }
    const auto cap = capture_of(capture);
    Tensor<float, 3> out;
    {
      py::gil_scoped_release nogil;
      out = pics_->encode_pixels(px, cap.get());
    }
    return with_captures(tensor_to_numpy(out.data(), {out.dim(0), out.dim(1), out.dim(2)}), cap.get());
  }

 private:
  std::unique_ptr<const models::Gemma3Pictures<P>> pics_;
};

/// The vision model of models::Llama4Pictures (families/llama4/pictures.hpp), as the CLI and the server use it.
class Llama4Vision {
 public:
  using P = Policy<cpu::Backend, float>;
  Llama4Vision(const std::string& weights, int threads)
      : pics_(open_pictures<models::Llama4Pictures<P>, io::Llama4ImageTokens>(weights, threads)) {}
  const layers::Llama4VisionConfig& config() const { return pics_->config(); }
  const io::Llama4ImageTokens& image_tokens() const { return pics_->image_tokens(); }

  /// (tiles float32 [n, S, S, 3], (ratio_h, ratio_w)) of one picture.
  py::tuple preprocess(py::handle image) const {
    return tiles_to_python(io::llama4_preprocess(image_from(image), config().image_size, pics_->max_tiles()));
  }

  py::object encode(py::handle pictures, py::object capture) const {
    const auto cap = capture_of(capture);
    Tensor<float, 3> out;
    if (py::isinstance<py::list>(pictures) || py::isinstance<py::tuple>(pictures)) {  // files or uint8 pictures
      std::vector<io::Image> images;
      for (auto p : py::reinterpret_borrow<py::sequence>(pictures)) images.push_back(image_from(p));
      MAXTEXT_CHECK(cap == nullptr, ArgumentError, "[llama4 vision] encode: capture needs preprocessed tiles "
                    "(Llama4Vision.preprocess), not pictures");
      py::gil_scoped_release nogil;
      out = pics_->encode(images).tokens;
    } else {
      const Tensor<float, 4> tiles = pixels_from(pictures, "llama4 vision");
      py::gil_scoped_release nogil;
      out = pics_->encode_tiles(tiles, cap.get());
    }
    return with_captures(tensor_to_numpy(out.data(), {out.dim(0), out.dim(1), out.dim(2)}), cap.get());
  }

 private:
  std::unique_ptr<const models::Llama4Pictures<P>> pics_;
};

/// The vision encoder of models::Gemma4Pictures (families/gemma4/pictures.hpp), as the CLI and the server use it; the
/// preprocessing (MaxText's fixed size or Hugging Face's aspect-preserving one) is chosen per call here.
class Gemma4Vision {
 public:
  using P = Policy<cpu::Backend, float>;
  // Opened with Hugging Face's processor, which needs no fixed size (a tiny test model cannot take MaxText's
  // 672 x 960); each call names its own, and MaxText's fixed size is checked when a picture is preprocessed.
  Gemma4Vision(const std::string& weights, int threads) {
    const bool mmproj = std::filesystem::path(weights).extension() == ".gguf";
    const auto hf = io::Gemma4ImageProcessing::hf;
    py::gil_scoped_release nogil;
    pics_ = mmproj ? std::make_unique<const models::Gemma4Pictures<P>>(vision_backend(threads), io::read_gguf(weights),
                                                                        io::Gemma4ImageTokens{}, hf)
                   : std::make_unique<const models::Gemma4Pictures<P>>(vision_backend(threads), weights, hf);
  }
  const layers::Gemma4VisionConfig& config() const { return pics_->config(); }
  const io::Gemma4ImageTokens& image_tokens() const { return pics_->image_tokens(); }
  io::Gemma4Preprocess preprocessing(const std::string& how) const {
    io::Gemma4Preprocess o = pics_->preprocessing();
    o.how = io::parse_gemma4_image_processing(how);
    return o;
  }

  py::array_t<float> preprocess(py::handle image, const std::string& how) const {
    const Tensor<float, 3> x = io::gemma4_preprocess(image_from(image), preprocessing(how));
    return tensor_to_numpy(x.data(), {x.dim(0), x.dim(1), x.dim(2)});
  }

  py::object encode(py::handle pictures, const std::string& how, py::object capture) const {
    const auto cap = capture_of(capture);
    if (py::isinstance<py::list>(pictures) || py::isinstance<py::tuple>(pictures)) {  // files or uint8 pictures
      MAXTEXT_CHECK(cap == nullptr, ArgumentError, "[gemma4 vision] encode: capture needs preprocessed pixels "
                    "(Gemma4Vision.preprocess), not pictures");
      std::vector<Tensor<float, 3>> px;
      for (auto p : py::reinterpret_borrow<py::sequence>(pictures)) {
        px.push_back(io::gemma4_preprocess(image_from(p), preprocessing(how)));
      }
      models::Gemma4EncodedPictures enc;
      {
        py::gil_scoped_release nogil;
        enc = pics_->encode_pixels(px);
      }
      py::list out;  // one [tokens, emb_dim] array per picture (their counts differ with Hugging Face's sizes)
      std::int64_t at = 0;
      const std::int64_t E = enc.rows.dim(1);
      for (const std::int64_t n : enc.tokens) {
        out.append(tensor_to_numpy(enc.rows.data() + at * E, {n, E}));
        at += n;
      }
      return py::object(std::move(out));
    }
    const Tensor<float, 4> batch = pixels_from(pictures, "gemma4 vision");
    std::vector<Tensor<float, 3>> px;
    const std::int64_t n = batch.dim(0), per = batch.dim(1) * batch.dim(2) * batch.dim(3);
    for (std::int64_t i = 0; i < n; ++i) {
      Tensor<float, 3> one({batch.dim(1), batch.dim(2), batch.dim(3)});
      std::copy(batch.data() + i * per, batch.data() + (i + 1) * per, one.data());
      px.push_back(std::move(one));
    }
    models::Gemma4EncodedPictures enc;
    {
      py::gil_scoped_release nogil;
      enc = pics_->encode_pixels(px, cap.get());
    }
    const std::int64_t tok = enc.tokens.front(), E = enc.rows.dim(1);
    return with_captures(tensor_to_numpy(enc.rows.data(), {n, tok, E}), cap.get());
  }

 private:
  std::unique_ptr<const models::Gemma4Pictures<P>> pics_;
};

/// The vision encoder of models::Qwen3Pictures (families/qwen/pictures.hpp); the preprocessing is chosen per call.
class Qwen3Vision {
 public:
  using P = Policy<cpu::Backend, float>;
  Qwen3Vision(const std::string& weights, int threads) {
    py::gil_scoped_release nogil;
    pics_ = std::make_unique<const models::Qwen3Pictures<P>>(vision_backend(threads), weights);
  }
  const layers::Qwen3VisionConfig& config() const { return pics_->config(); }

  /// (pixel_values float32 [t h w, C tp p p], (t, h, w)) of one picture.
  py::tuple preprocess(py::handle image, const std::string& how) const {
    io::Qwen3Preprocess o = pics_->preprocessing();
    o.how = io::parse_qwen3_image_processing(how);
    const io::Qwen3Patches p = io::qwen3_preprocess(image_from(image), o);
    return py::make_tuple(tensor_to_numpy(p.pixel_values.data(), {p.pixel_values.dim(0), p.pixel_values.dim(1)}),
                          py::make_tuple(p.t, p.h, p.w));
  }

  static py::dict output_to_python(const typename models::Qwen3Pictures<P>::Output& o) {
    py::dict d;
    d["tokens"] = tensor_to_numpy(o.tokens.data(), {o.tokens.dim(0), o.tokens.dim(1)});
    py::list deep;
    for (const auto& t : o.deepstack) deep.append(tensor_to_numpy(t.data(), {t.dim(0), t.dim(1)}));
    d["deepstack"] = deep;
    return d;
  }

  py::list encode(py::handle pictures, const std::string& how) const {
    std::vector<io::Image> images;
    for (auto p : py::reinterpret_borrow<py::sequence>(pictures)) images.push_back(image_from(p));
    std::vector<typename models::Qwen3Pictures<P>::Output> outs;
    {
      py::gil_scoped_release nogil;
      outs = pics_->encode(images, io::parse_qwen3_image_processing(how));
    }
    py::list out;
    for (const auto& o : outs) out.append(output_to_python(o));
    return out;
  }

  /// Token ids with one <|image_pad|> per picture (each after <|vision_start|>) -> the expanded prompt for the text
  /// model: {'ids', 'media_mask' [1, T], 'media_embeddings' [n, (1 + deepstack) * width], 'positions' [3, T]}.
  py::dict prompt(py::handle ids, py::handle pictures, const std::string& how) const {
    const std::vector<std::int32_t> prompt_ids = prompt_ids_from_python(ids, "qwen3 vision");
    std::vector<io::Image> images;
    for (auto p : py::reinterpret_borrow<py::sequence>(pictures)) images.push_back(image_from(p));
    models::MediaPrompt mp;
    {
      py::gil_scoped_release nogil;
      mp = pics_->expand(prompt_ids, pics_->encode(images, io::parse_qwen3_image_processing(how)));
    }
    return media_prompt_to_python(mp);
  }

  py::object encode_patches(py::handle pixel_values, std::tuple<std::int64_t, std::int64_t, std::int64_t> grid,
                            py::object capture) const {
    const auto a = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(pixel_values);
    MAXTEXT_CHECK(a && a.ndim() == 2, ArgumentError, "[qwen3 vision] encode_patches: expected float pixel_values "
                  "[n * t * h * w, C * tp * p * p]");
    Tensor<float, 2> px({a.shape(0), a.shape(1)});
    std::memcpy(px.data(), a.data(), static_cast<std::size_t>(px.size()) * sizeof(float));
    const auto cap = capture_of(capture);
    typename models::Qwen3Pictures<P>::Output o;
    {
      py::gil_scoped_release nogil;
      o = pics_->encode_patches(px, std::get<0>(grid), std::get<1>(grid), std::get<2>(grid), cap.get());
    }
    py::dict d = output_to_python(o);
    if (cap == nullptr) return py::object(std::move(d));
    const py::tuple pair = py::reinterpret_borrow<py::tuple>(with_captures(py::array_t<float>(), cap.get()));
    return py::make_tuple(d, pair[py::size_t{1}]);
  }

 private:
  std::unique_ptr<const models::Qwen3Pictures<P>> pics_;
};

}  // namespace

void register_vision(py::module_& m) {
  m.def(
      "read_image", [](py::handle path) { return image_to_numpy(io::read_image(path_of(path))); }, py::arg("path"),
      "A PNG or JPEG file as uint8 [height, width, 3]: the pixels of Pillow's Image.open(path).convert('RGB'), byte "
      "for byte (docs/vision.md); other formats, corrupt files and decompression bombs raise IoError.");
  m.def(
      "resize_image",
      [](py::handle image, std::int64_t width, std::int64_t height, const std::string& filter) {
        return image_to_numpy(io::resize_image(image_from(image), width, height, io::parse_resize_filter(filter)));
      },
      py::arg("image"), py::arg("width"), py::arg("height"), py::arg("filter") = "bilinear",
      "image (a path or uint8 [h, w, 3]) resized as Pillow's img.resize((width, height), resample=filter), byte for "
      "byte; filter: nearest, box, bilinear, hamming, bicubic, lanczos.");
  m.def(
      "gemma3_pan_and_scan",
      [](py::handle image, std::int64_t min_crop_size, std::int64_t max_num_crops, double min_ratio_to_activate) {
        io::Gemma3PanAndScan o;
        o.min_crop_size = min_crop_size;
        o.max_num_crops = max_num_crops;
        o.min_ratio_to_activate = min_ratio_to_activate;
        py::list out;
        for (const io::Image& c : io::gemma3_pan_and_scan(image_from(image), o)) out.append(image_to_numpy(c));
        return out;
      },
      py::arg("image"), py::arg("min_crop_size") = 256, py::arg("max_num_crops") = 4,
      py::arg("min_ratio_to_activate") = 1.2,
      "The crops Hugging Face's Gemma3ImageProcessor (do_pan_and_scan) cuts from image (a path or uint8 [h, w, 3]), "
      "as uint8 arrays, left to right or top to bottom; [] when the picture is not elongated enough or a crop would "
      "be narrower than min_crop_size (docs/vision.md).");
  m.def(
      "gemma3_pan_and_scan_prompt",
      [](const std::string& text, const std::vector<std::size_t>& crops, const std::string& marker) {
        return io::gemma3_pan_and_scan_prompt(text, crops, marker);
      },
      py::arg("text"), py::arg("crops"), py::arg("marker") = "<start_of_image>",
      "text with its k-th marker replaced by Gemma3Processor's text for a picture with crops[k] crops (the marker "
      "alone for 0).");
  m.def(
      "llama4_preprocess",
      [](py::handle image, std::int64_t tile_size, std::int64_t max_tiles) {
        return tiles_to_python(io::llama4_preprocess(image_from(image), tile_size, max_tiles));
      },
      py::arg("image"), py::arg("tile_size") = 336, py::arg("max_tiles") = 16,
      "A picture (path or uint8 [h, w, 3]) as MaxText's Llama 4 processor cuts it: (tiles float32 [n, S, S, 3] in "
      "[-1, 1], (ratio_h, ratio_w)); the tiles row-major, then the global tile when there is more than one.");
  m.def(
      "llama4_image_token_ids",
      [](std::int64_t ratio_h, std::int64_t ratio_w, std::int64_t per_tile) {
        io::Llama4ImageTokens t;
        t.per_tile = per_tile;
        return io::llama4_image_token_ids(ratio_h, ratio_w, t);
      },
      py::arg("ratio_h"), py::arg("ratio_w"), py::arg("per_tile") = 144,
      "The token ids that stand for a picture of ratio_h x ratio_w tiles in a Llama 4 prompt (MaxText's "
      "get_tokens_for_this_image, Llama 4's ids).");
  m.def(
      "gemma4_preprocess",
      [](py::handle image, const std::string& how, std::int64_t height, std::int64_t width, std::int64_t patch,
         std::int64_t pooling, std::int64_t max_soft_tokens) {
        io::Gemma4Preprocess o;
        o.how = io::parse_gemma4_image_processing(how);
        o.height = height;
        o.width = width;
        o.patch = patch;
        o.pooling = pooling;
        o.max_soft_tokens = max_soft_tokens;
        const Tensor<float, 3> x = io::gemma4_preprocess(image_from(image), o);
        return tensor_to_numpy(x.data(), {x.dim(0), x.dim(1), x.dim(2)});
      },
      py::arg("image"), py::arg("how") = "maxtext", py::arg("height") = 672, py::arg("width") = 960,
      py::arg("patch_size") = 16, py::arg("pooling_kernel_size") = 3, py::arg("max_soft_tokens") = 280,
      "A picture (path or uint8 [h, w, 3]) as Gemma 4's vision encoder takes it, float32 [h, w, 3] in [0, 1]: "
      "MaxText's processor (how='maxtext': BICUBIC to width x height) or Hugging Face's ('hf': the aspect ratio kept, "
      "whole patch x pooling windows, at most max_soft_tokens x pooling^2 patches).");
  py::class_<Gemma3Vision>(m, "Gemma3Vision", R"(Gemma3Vision(weights, threads=0): the vision tower and projector of a
Hugging Face Gemma3ForConditionalGeneration checkpoint (a directory, safetensors file or index, config.json beside)
or of llama.cpp's mmproj file (a .gguf), on the CPU in float32 (docs/vision.md).)")
      .def(py::init<const std::string&, int>(), py::arg("weights"), py::arg("threads") = 0)
      .def_property_readonly("config",
                             [](const Gemma3Vision& v) {
                               const auto& c = v.config();
                               py::dict d;
                               d["image_size"] = c.image_size;
                               d["patch_size"] = c.patch_size;
                               d["hidden_size"] = c.hidden_size;
                               d["intermediate_size"] = c.intermediate_size;
                               d["num_layers"] = c.num_layers;
                               d["num_heads"] = c.num_heads;
                               d["tokens_per_image"] = c.tokens_per_image;
                               d["emb_dim"] = c.emb_dim;
                               d["eps"] = c.eps;
                               return d;
                             })
      .def("preprocess", &Gemma3Vision::preprocess, py::arg("image"), py::arg("how") = "maxtext",
           "A picture (path or uint8 [h, w, 3]) as the tower's input float32 [S, S, 3]: MaxText's processor (how="
           "'maxtext') or Hugging Face's ('hf').")
      .def("encode", &Gemma3Vision::encode, py::arg("pictures"), py::arg("how") = "maxtext",
           py::arg("capture") = py::none(),
           "Soft tokens float32 [n, 256, emb_dim] of pictures: float32 [n, S, S, 3] (preprocessed) or a list of paths "
           "/ uint8 arrays (preprocessed with `how`). capture=[names] (MaxText's module paths, e.g. "
           "'vision_encoder.Gemma3VisionEncoderLayer_0.Transformer.encoderblock_0') returns (tokens, {name: array}).");
  py::class_<Llama4Vision>(m, "Llama4Vision", R"(Llama4Vision(weights, threads=0): the vision model, pixel-shuffle
adapter and projector of a Hugging Face Llama4ForConditionalGeneration checkpoint (a directory, safetensors file or
index, config.json beside) or of llama.cpp's mmproj file (a .gguf), on the CPU in float32 (docs/vision.md).)")
      .def(py::init<const std::string&, int>(), py::arg("weights"), py::arg("threads") = 0)
      .def_property_readonly("config",
                             [](const Llama4Vision& v) {
                               const auto& c = v.config();
                               py::dict d;
                               d["image_size"] = c.image_size;
                               d["patch_size"] = c.patch_size;
                               d["hidden_size"] = c.hidden_size;
                               d["intermediate_size"] = c.intermediate_size;
                               d["num_layers"] = c.num_layers;
                               d["num_heads"] = c.num_heads;
                               d["rope_theta"] = c.rope_theta;
                               d["pixel_shuffle_ratio"] = c.pixel_shuffle_ratio;
                               d["projector_input_dim"] = c.projector_input_dim;
                               d["projector_output_dim"] = c.projector_output_dim;
                               d["tokens_per_tile"] = c.tokens_per_tile();
                               d["emb_dim"] = c.emb_dim;
                               d["eps"] = c.eps;
                               return d;
                             })
      .def_property_readonly("image_tokens",
                             [](const Llama4Vision& v) {
                               const auto& t = v.image_tokens();
                               py::dict d;
                               d["image_start"] = t.begin;
                               d["image_end"] = t.end;
                               d["image"] = t.image;
                               d["patch"] = t.patch;
                               d["tile_x_separator"] = t.tile_x;
                               d["tile_y_separator"] = t.tile_y;
                               return d;
                             })
      .def("preprocess", &Llama4Vision::preprocess, py::arg("image"),
           "A picture (path or uint8 [h, w, 3]) as MaxText's processor cuts it: (tiles float32 [n, S, S, 3], "
           "(ratio_h, ratio_w)).")
      .def("encode", &Llama4Vision::encode, py::arg("pictures"), py::arg("capture") = py::none(),
           "Soft tokens float32 [tiles, tokens per tile, emb_dim] of tiles float32 [n, S, S, 3] (preprocessed) or of "
           "a list of pictures (paths / uint8 arrays, each cut into its tiles). capture=[names] (MaxText's module "
           "paths, e.g. 'vision_encoder.Llama4VisionModel_0.Llama4VisionEncoder_0.layers_0'; with tiles only) returns "
           "(tokens, {name: array}).");
  py::class_<Qwen3Vision>(m, "Qwen3Vision", R"(Qwen3Vision(weights, threads=0): the vision encoder (with its deepstack
mergers) and projector of a Hugging Face Qwen3.5 / Qwen3-VL / Qwen3-Omni checkpoint (a directory, safetensors file or
index, config.json beside), on the CPU in float32 (docs/vision.md). prompt() expands a prompt's pictures for the text
model (Model.forward / generate with media_mask, media_embeddings and their MRoPE positions).)")
      .def(py::init<const std::string&, int>(), py::arg("weights"), py::arg("threads") = 0)
      .def_property_readonly("config",
                             [](const Qwen3Vision& v) {
                               const auto& c = v.config();
                               py::dict d;
                               d["patch_size"] = c.patch_size;
                               d["temporal_patch_size"] = c.temporal_patch_size;
                               d["hidden_size"] = c.hidden_size;
                               d["intermediate_size"] = c.intermediate_size;
                               d["num_layers"] = c.num_layers;
                               d["num_heads"] = c.num_heads;
                               d["spatial_merge_size"] = c.spatial_merge_size;
                               d["out_hidden_size"] = c.out_hidden_size;
                               d["num_position_embeddings"] = c.num_position_embeddings;
                               d["deepstack_visual_indexes"] = c.deepstack_layers;
                               d["rope_theta"] = c.rope_theta;
                               d["eps"] = c.eps;
                               return d;
                             })
      .def("preprocess", &Qwen3Vision::preprocess, py::arg("image"), py::arg("how") = "maxtext",
           "A picture (path or uint8 [h, w, 3]) as the encoder's input: (pixel_values float32 [t*h*w, C*tp*p*p] in "
           "merge-window order, (t, h, w)); how='maxtext' (MaxText's two resizes) or 'hf' (Hugging Face's one).")
      .def("encode", &Qwen3Vision::encode, py::arg("pictures"), py::arg("how") = "maxtext",
           "A list of pictures (paths / uint8 arrays) -> one {'tokens': [merged, out_hidden], 'deepstack': [...]} per "
           "picture.")
      .def("prompt", &Qwen3Vision::prompt, py::arg("ids"), py::arg("pictures"), py::arg("how") = "maxtext",
           "Token ids [T] with one <|image_pad|> per picture (each after <|vision_start|>) and the pictures (paths / "
           "uint8 arrays) -> {'ids', 'media_mask', 'media_embeddings', 'positions' [3, T]}: Model.forward(ids, "
           "media_mask=..., media_embeddings=..., mrope_positions=positions) or generate(..., media_positions=...).")
      .def("encode_patches", &Qwen3Vision::encode_patches, py::arg("pixel_values"), py::arg("grid"),
           py::arg("capture") = py::none(),
           "pixel_values of n pictures of one grid (t, h, w) -> {'tokens', 'deepstack'}; capture=[names] (MaxText's "
           "module paths, e.g. 'vision_encoder.Qwen3_5MoeVisionEncoder_0.blocks_0') returns (that, {name: array}).");
  py::class_<Gemma4Vision>(m, "Gemma4Vision", R"(Gemma4Vision(weights, threads=0): the vision encoder and projector of a
Hugging Face Gemma4ForConditionalGeneration checkpoint (a directory, safetensors file or index, config.json beside)
or of llama.cpp's mmproj file (a .gguf), on the CPU in float32 (docs/vision.md).)")
      .def(py::init<const std::string&, int>(), py::arg("weights"), py::arg("threads") = 0)
      .def_property_readonly("config",
                             [](const Gemma4Vision& v) {
                               const auto& c = v.config();
                               py::dict d;
                               d["image_size"] = py::make_tuple(c.image_height, c.image_width);
                               d["patch_size"] = c.patch_size;
                               d["hidden_size"] = c.hidden_size;
                               d["intermediate_size"] = c.intermediate_size;
                               d["num_layers"] = c.num_layers;
                               d["num_heads"] = c.num_heads;
                               d["pooling_kernel_size"] = c.pooling_kernel;
                               d["num_position_embeddings"] = c.num_position_embeddings;
                               d["rope_theta"] = c.rope_theta;
                               d["tokens_per_image"] = c.tokens_per_image();
                               d["emb_dim"] = c.emb_dim;
                               d["eps"] = c.eps;
                               return d;
                             })
      .def_property_readonly("image_tokens",
                             [](const Gemma4Vision& v) {
                               const auto& t = v.image_tokens();
                               py::dict d;
                               d["image_start"] = t.begin;
                               d["image_end"] = t.end;
                               d["image"] = t.image;
                               return d;
                             })
      .def("preprocess", &Gemma4Vision::preprocess, py::arg("image"), py::arg("how") = "maxtext",
           "A picture (path or uint8 [h, w, 3]) as the encoder's input float32 [h, w, 3]: MaxText's processor "
           "(how='maxtext', the fixed size) or Hugging Face's ('hf', the aspect ratio kept).")
      .def("encode", &Gemma4Vision::encode, py::arg("pictures"), py::arg("how") = "maxtext",
           py::arg("capture") = py::none(),
           "Soft tokens of preprocessed pixels float32 [n, h, w, 3] as float32 [n, tokens, emb_dim]; capture=[names] "
           "(MaxText's module paths, e.g. 'vision_encoder.Gemma4VisionEncoderLayer_0.layer_0') returns (tokens, "
           "{name: array}). A list of pictures (paths / uint8 arrays, preprocessed with `how`) gives a list of "
           "[tokens, emb_dim] arrays, one per picture.");
}

}  // namespace maxtext::python
