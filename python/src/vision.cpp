// python/src/vision.cpp: images and Gemma 3's vision tower in the Python module (docs/vision.md, docs/python.md):
// read_image, resize_image (byte for byte Pillow's), gemma3_pan_and_scan, and Gemma3Vision (a Hugging Face Gemma3ForConditionalGeneration
// checkpoint's tower and projector: preprocess, encode, captures by MaxText's names), for numerics tests.
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
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/image.hpp"
#include "maxtext/io/image_resize.hpp"

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

/// The tower of models::Gemma3Pictures (families/gemma/pictures.hpp), which the server and the CLI use too; the
/// preprocessing is chosen per call here.
class Gemma3Vision {
 public:
  using P = Policy<cpu::Backend, float>;
  Gemma3Vision(const std::string& weights, int threads) {
    const bool mmproj = std::filesystem::path(weights).extension() == ".gguf";  // llama.cpp's file of the tower
    py::gil_scoped_release nogil;
    pics_ = mmproj ? std::make_unique<const models::Gemma3Pictures<P>>(backend(threads), io::read_gguf(weights),
                                                                       io::Gemma3ImageTokens{})
                   : std::make_unique<const models::Gemma3Pictures<P>>(backend(threads), weights);
  }
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
      const auto a = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(pictures);
      MAXTEXT_CHECK(a && a.ndim() == 4, ArgumentError,
                    "[gemma3 vision] encode: expected float pixels [n, S, S, 3] or a list of picture paths / arrays");
      px = Tensor<float, 4>({a.shape(0), a.shape(1), a.shape(2), a.shape(3)});
      std::memcpy(px.data(), a.data(), static_cast<std::size_t>(px.size()) * sizeof(float));
    }
    layers::Capture cap;
    const bool capturing = !capture.is_none();
    if (capturing) {
      for (auto n : capture) cap.request(py::str(n));
    }
    Tensor<float, 3> out;
    {
      py::gil_scoped_release nogil;
      out = pics_->encode_pixels(px, capturing ? &cap : nullptr);
    }
    py::array_t<float> tokens = tensor_to_numpy(out.data(), {out.dim(0), out.dim(1), out.dim(2)});
    if (!capturing) return py::object(std::move(tokens));
    py::dict d;
    for (const auto& n : cap.order()) {
      const AnyTensor& t = cap.at(n);
      std::vector<py::ssize_t> shape(t.shape.begin(), t.shape.end());
      const Tensor<float, 1> flat = t.to<float, 1>({t.numel()});
      d[py::str(n)] = tensor_to_numpy(flat.data(), shape);
    }
    return py::make_tuple(tokens, d);
  }

 private:
  static cpu::Backend backend(int threads) {
    MAXTEXT_CHECK(threads >= 0, ArgumentError, "[gemma3 vision] threads must be >= 0, found ", threads);
    cpu::Options o;
    o.threads = threads;
    return cpu::Backend(o);
  }
  std::unique_ptr<const models::Gemma3Pictures<P>> pics_;
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
}

}  // namespace maxtext::python
