// python/src/audio.cpp: sound in the Python module (docs/audio.md, docs/python.md): load_audio (libsndfile +
// libsoxr, as librosa.load(path, sr) reads files), log_mel (Whisper's features as MaxText's / Hugging Face's
// processor computes them), and Qwen3OmniAudio (the audio encoder of a Qwen3-Omni checkpoint: features, soft tokens,
// captures by MaxText's names, and a prompt's <|audio_pad|> markers expanded for the thinker), for numerics tests and
// applications.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/families/qwen/audio_processor.hpp"
#include "maxtext/families/qwen/sounds.hpp"
#include "maxtext/io/audio.hpp"
#include "media_prompt.hpp"

namespace py = pybind11;

namespace maxtext::python {

namespace {

py::array_t<float> to_numpy(const float* data, std::vector<py::ssize_t> shape) {
  py::array_t<float> a(shape);
  std::size_t n = 1;
  for (const auto s : shape) n *= static_cast<std::size_t>(s);
  if (n > 0) std::memcpy(a.mutable_data(), data, n * sizeof(float));
  return a;
}

py::array_t<float> to_numpy(const Tensor<float, 2>& t) { return to_numpy(t.data(), {t.dim(0), t.dim(1)}); }

std::string path_of(py::handle h) { return py::str(py::module_::import("os").attr("fspath")(h)); }
bool is_path(py::handle h) { return py::isinstance<py::str>(h) || py::hasattr(h, "__fspath__"); }

/// float32 mono samples from a 1-D array.
std::vector<float> samples_from(py::handle obj) {
  const auto a = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(obj);
  MAXTEXT_CHECK(a && a.ndim() == 1, ArgumentError, "[audio] expected a path or mono samples float32 [n]");
  return std::vector<float>(a.data(), a.data() + a.shape(0));
}

models::AudioPadding parse_padding(const std::string& p) {
  MAXTEXT_CHECK(p == "maxtext" || p == "none", ArgumentError, "[audio] padding '", p,
                "': maxtext (whole seconds, MaxText's processor) or none (Hugging Face's)");
  return p == "maxtext" ? models::AudioPadding::whole_seconds : models::AudioPadding::none;
}

layers::AudioForm parse_form(const std::string& f) {
  MAXTEXT_CHECK(f == "maxtext" || f == "hf", ArgumentError, "[audio] form '", f, "': maxtext or hf");
  return f == "hf" ? layers::AudioForm::hf : layers::AudioForm::maxtext;
}

class Qwen3OmniAudio {
 public:
  using P = Policy<cpu::Backend, float>;
  Qwen3OmniAudio(const std::string& weights, const std::string& form, int threads) {
    MAXTEXT_CHECK(threads >= 0, ArgumentError, "[audio] threads must be >= 0, found ", threads);
    cpu::Options o;
    o.threads = threads;
    const layers::AudioForm f = parse_form(form);
    py::gil_scoped_release nogil;
    s_ = std::make_unique<const models::Qwen3OmniSounds<P>>(cpu::Backend(o), weights, f);
  }
  const models::Qwen3OmniSounds<P>& sounds() const { return *s_; }

  std::vector<float> samples(py::handle clip) const {
    if (is_path(clip)) return io::load_audio(path_of(clip), s_->sampling_rate());
    return samples_from(clip);
  }

  py::array_t<float> features(py::handle clip) const {
    const std::vector<float> x = samples(clip);
    Tensor<float, 2> f;
    {
      py::gil_scoped_release nogil;
      f = s_->features(x);
    }
    return to_numpy(f);
  }

  /// A clip (path or samples at the encoder's rate), or features float32 [mel, frames] -> soft tokens.
  py::object encode(py::handle clip, py::object capture) const {
    std::unique_ptr<layers::Capture> cap;
    if (!capture.is_none()) {
      cap = std::make_unique<layers::Capture>();
      for (auto n : capture) cap->request(py::str(n));
    }
    Tensor<float, 2> out;
    if (!is_path(clip) && py::array::ensure(clip) && py::array::ensure(clip).ndim() == 2) {
      const auto a = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(clip);
      Tensor<float, 2> feats({a.shape(0), a.shape(1)});
      std::memcpy(feats.data(), a.data(), static_cast<std::size_t>(feats.size()) * sizeof(float));
      py::gil_scoped_release nogil;
      out = s_->encode_features(feats, cap.get());
    } else {
      const std::vector<float> x = samples(clip);
      py::gil_scoped_release nogil;
      out = s_->encode(x, cap.get());
    }
    if (!cap) return to_numpy(out);
    py::dict d;
    for (const auto& n : cap->order()) {
      const AnyTensor& t = cap->at(n);
      std::vector<py::ssize_t> shape(t.shape.begin(), t.shape.end());
      const Tensor<float, 1> flat = t.to<float, 1>({t.numel()});
      d[py::str(n)] = to_numpy(flat.data(), shape);
    }
    return py::make_tuple(to_numpy(out), d);
  }

  /// Token ids [T] (or Qwen3Vision.prompt's dict) with one <|audio_pad|> per clip -> the expanded prompt.
  py::dict prompt(py::handle ids_or_prompt, py::handle clips) const {
    models::MediaPrompt in;
    if (py::isinstance<py::dict>(ids_or_prompt)) {
      in = media_prompt_from_python(py::reinterpret_borrow<py::dict>(ids_or_prompt), "audio");
    } else {
      in = models::text_prompt(prompt_ids_from_python(ids_or_prompt, "audio"));
    }
    std::vector<std::vector<float>> xs;
    for (auto c : py::reinterpret_borrow<py::sequence>(clips)) xs.push_back(samples(c));
    models::MediaPrompt mp;
    {
      py::gil_scoped_release nogil;
      std::vector<Tensor<float, 2>> enc;
      for (const auto& x : xs) enc.push_back(s_->encode(x));
      mp = s_->expand(in, enc);
    }
    return media_prompt_to_python(mp);
  }

 private:
  std::unique_ptr<const models::Qwen3OmniSounds<P>> s_;
};

}  // namespace

void register_audio(py::module_& m) {
  m.def(
      "load_audio",
      [](py::handle path, std::int64_t rate) {
        std::vector<float> x;
        const std::string p = path_of(path);
        {
          py::gil_scoped_release nogil;
          x = io::load_audio(p, rate);
        }
        return to_numpy(x.data(), {static_cast<py::ssize_t>(x.size())});
      },
      py::arg("path"), py::arg("rate") = 16000,
      "A sound file (any format libsndfile reads) as librosa.load(path, sr=rate, mono=True) gives it: float32 [n], "
      "the channels averaged, resampled by libsoxr at SOXR_HQ to ceil(n x rate / file rate) samples.");
  m.def(
      "log_mel",
      [](py::handle samples, const std::string& padding) {
        const std::vector<float> x = samples_from(samples);
        Tensor<float, 2> f;
        {
          py::gil_scoped_release nogil;
          f = models::log_mel_features(x, models::LogMelConfig{}, parse_padding(padding));
        }
        return to_numpy(f);
      },
      py::arg("samples"), py::arg("padding") = "maxtext",
      "Qwen3-Omni's (Whisper's) log-mel features float32 [128, frames] of 16 kHz mono samples; padding='maxtext' "
      "(zeros to whole seconds, MaxText's processor) or 'none' (Hugging Face's). docs/audio.md");
  py::class_<Qwen3OmniAudio>(m, "Qwen3OmniAudio", R"(Qwen3OmniAudio(weights, form='maxtext', threads=0): the audio
encoder and projector of a Hugging Face Qwen3-Omni checkpoint (a directory, safetensors file or index, config.json and
preprocessor_config.json beside), on the CPU in float32; form='hf' follows Hugging Face's processor and encoder
(docs/audio.md). prompt() expands a prompt's clips for the thinker (Model.forward / generate with media_mask,
media_embeddings and their MRoPE positions).)")
      .def(py::init<const std::string&, const std::string&, int>(), py::arg("weights"), py::arg("form") = "maxtext",
           py::arg("threads") = 0)
      .def_property_readonly("config",
                             [](const Qwen3OmniAudio& a) {
                               const auto& c = a.sounds().config();
                               py::dict d;
                               d["d_model"] = c.d_model;
                               d["encoder_layers"] = c.num_layers;
                               d["encoder_attention_heads"] = c.num_heads;
                               d["encoder_ffn_dim"] = c.ffn_dim;
                               d["num_mel_bins"] = c.num_mel_bins;
                               d["downsample_hidden_size"] = c.downsample_hidden_size;
                               d["output_dim"] = c.output_dim;
                               d["n_window"] = c.n_window;
                               d["n_window_infer"] = c.n_window_infer;
                               const auto& t = a.sounds().audio_tokens();
                               d["audio_start_token_id"] = t.audio_start;
                               d["audio_end_token_id"] = t.audio_end;
                               d["audio_token_id"] = t.audio;
                               d["sampling_rate"] = a.sounds().sampling_rate();
                               return d;
                             })
      .def("features", &Qwen3OmniAudio::features, py::arg("clip"),
           "A clip (path, or float32 samples at the encoder's rate) -> log-mel features float32 [mel, frames].")
      .def("encode", &Qwen3OmniAudio::encode, py::arg("clip"), py::arg("capture") = py::none(),
           "A clip (path, float32 samples [n], or features [mel, frames]) -> soft tokens float32 [tokens, output_dim]; "
           "capture=[names] (MaxText's module paths, e.g. 'audio_encoder.Qwen3OmniAudioEncoder_0.layers_0') returns "
           "(tokens, {name: array}).")
      .def("prompt", &Qwen3OmniAudio::prompt, py::arg("prompt"), py::arg("clips"),
           "Token ids [T] (or Qwen3Vision.prompt's dict) with one <|audio_pad|> per clip (each after "
           "<|audio_start|>) and the clips -> {'ids', 'media_mask', 'media_embeddings', 'positions' [3, T]}.");
}

}  // namespace maxtext::python
