// python/src/media_prompt.hpp: a prompt with its soft tokens (models::MediaPrompt) to and from the Python module's
// dict {'ids' [T], 'media_mask' [1, T], 'media_embeddings' [n, W], 'positions' [3, T]} (Qwen3Vision.prompt,
// Qwen3OmniAudio.prompt; vision.cpp, audio.cpp).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "maxtext/core/error.hpp"
#include "maxtext/models/media.hpp"

namespace maxtext::python {

/// Token ids [T] (any integer array) as int32, each in [0, 2^31).
inline std::vector<std::int32_t> prompt_ids_from_python(pybind11::handle h, const char* what) {
  namespace py = pybind11;
  const auto a = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>::ensure(h);
  MAXTEXT_CHECK(a && a.ndim() == 1, ArgumentError, "[", what, "] prompt: expected token ids [T]");
  std::vector<std::int32_t> ids;
  for (py::ssize_t i = 0; i < a.shape(0); ++i) {
    const std::int64_t v = a.data()[i];
    MAXTEXT_CHECK(v >= 0 && v <= 2147483647, ArgumentError, "[", what, "] prompt: token id ", v, " at ", i);
    ids.push_back(static_cast<std::int32_t>(v));
  }
  return ids;
}

inline pybind11::dict media_prompt_to_python(const models::MediaPrompt& mp) {
  namespace py = pybind11;
  const auto T = static_cast<py::ssize_t>(mp.ids.size());
  py::array_t<std::int32_t> ids(T), mask({py::ssize_t{1}, T}), pos({py::ssize_t{3}, T});
  py::array_t<float> rows({static_cast<py::ssize_t>(mp.embeddings.dim(0)), static_cast<py::ssize_t>(mp.embeddings.dim(1))});
  std::copy(mp.ids.begin(), mp.ids.end(), ids.mutable_data());
  std::copy(mp.mask.data(), mp.mask.data() + mp.mask.size(), mask.mutable_data());
  std::copy(mp.positions.data(), mp.positions.data() + mp.positions.size(), pos.mutable_data());
  std::copy(mp.embeddings.data(), mp.embeddings.data() + mp.embeddings.size(), rows.mutable_data());
  py::dict d;
  d["ids"] = ids;
  d["media_mask"] = mask;
  d["media_embeddings"] = rows;
  d["positions"] = pos;
  return d;
}

/// The dict media_prompt_to_python makes (shapes checked, by name).
inline models::MediaPrompt media_prompt_from_python(const pybind11::dict& d, const char* what) {
  namespace py = pybind11;
  for (const char* k : {"ids", "media_mask", "media_embeddings", "positions"}) {
    MAXTEXT_CHECK(d.contains(k), ArgumentError, "[", what, "] prompt: the dict lacks '", k, "' (Qwen3Vision.prompt's)");
  }
  const auto ids = py::array_t<std::int32_t, py::array::c_style | py::array::forcecast>::ensure(d["ids"]);
  const auto mask = py::array_t<std::int32_t, py::array::c_style | py::array::forcecast>::ensure(d["media_mask"]);
  const auto rows = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(d["media_embeddings"]);
  const auto pos = py::array_t<std::int32_t, py::array::c_style | py::array::forcecast>::ensure(d["positions"]);
  MAXTEXT_CHECK(ids && mask && rows && pos && ids.ndim() == 1 && mask.ndim() == 2 && rows.ndim() == 2 && pos.ndim() == 2 &&
                    mask.shape(0) == 1 && mask.shape(1) == ids.shape(0) && pos.shape(0) == 3 && pos.shape(1) == ids.shape(0),
                ArgumentError, "[", what, "] prompt: expected ids [T], media_mask [1, T], media_embeddings [n, W], "
                "positions [3, T]");
  models::MediaPrompt in;
  in.ids.assign(ids.data(), ids.data() + ids.shape(0));
  in.mask = Tensor<std::int32_t, 2>({1, ids.shape(0)});
  std::memcpy(in.mask.data(), mask.data(), static_cast<std::size_t>(in.mask.size()) * sizeof(std::int32_t));
  in.positions = Tensor<std::int32_t, 2>({3, ids.shape(0)});
  std::memcpy(in.positions.data(), pos.data(), static_cast<std::size_t>(in.positions.size()) * sizeof(std::int32_t));
  in.embeddings = Tensor<float, 2>({rows.shape(0), rows.shape(1)});
  std::memcpy(in.embeddings.data(), rows.data(), static_cast<std::size_t>(in.embeddings.size()) * sizeof(float));
  return in;
}

}  // namespace maxtext::python
