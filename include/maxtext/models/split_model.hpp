// models/split_model.hpp: a model of the precompiled block library (any_model_blocks.hpp) split over the ranks of a
// communicator as the config's mesh says (docs/distributed.md): ici_tensor_parallelism by heads and MLP columns
// (tensor_parallel_config), ici_expert_parallelism by experts (expert_parallel_config), ici_pipeline_parallelism by
// layers (pipeline_parallel_config: each stage its layers, whole). Each rank builds its share and
// keeps its slices (rank_slice) of the whole model's tensors, which every rank read from the same files: no weight
// byte passes through the communicator, and ranks whose files or config differ are refused before the first step.
// The `maxtext` program (mpirun) and the Python module (Model(comm=...)) open split models through it.
//
//   const comm::Mesh mesh = models::split_mesh(cfg, &world);
//   auto model = models::make_split_any_model(cfg, opt, world, std::move(tensors), models::NameScheme::hf,
//                                             MAXTEXT_BLOCKS_BUILT);
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "maxtext/comm/communicator.hpp"
#include "maxtext/comm/mesh.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/mapped_pages.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/models/any_model.hpp"
#include "maxtext/models/any_model_blocks.hpp"
#include "maxtext/models/parallel.hpp"

namespace maxtext::models {

/// The mesh of `cfg` over the ranks of `world` (nullptr: one process), a mesh that does not match them refused by name
/// (comm::Mesh::from_config), and the splits not built yet (two of tensor, expert and pipeline together) refused by
/// name.
inline comm::Mesh split_mesh(const Config& cfg, const comm::Communicator* world) {
  const comm::Mesh mesh = comm::Mesh::from_config(cfg, world ? world->size() : 1);
  const int axes = (mesh.tensor > 1) + (mesh.expert > 1) + (mesh.pipeline > 1);
  MAXTEXT_CHECK(axes <= 1, UnsupportedError, "[mesh] ", mesh.describe(), ": two kinds of parallelism together are not "
                "built yet; use one of ici_tensor_parallelism, ici_expert_parallelism and ici_pipeline_parallelism over "
                "all the ranks");
  return mesh;
}

/// Whether a split by `mesh` keeps every matrix whole (pipeline stages, or one rank): block-quantised GGUF matrices
/// can then be computed from as they lie in the mapped file, each rank touching only its own layers' pages.
inline bool split_keeps_matrices_whole(const comm::Mesh& mesh) { return mesh.tensor == 1 && mesh.expert == 1; }

/// `cfg`'s model split over `world` as split_mesh says (more than one rank): this rank's share, loaded with its slices
/// of `full` (the whole model's tensors under `names`), or, with `full` absent, of the whole model initialised from
/// `seed` alike on every rank. The ranks' fingerprints of the tensors and config must agree (a collective: every rank
/// calls it). `world` must outlive the model. `built`: MAXTEXT_BLOCKS_BUILT, as make_built_any_model takes it (a
/// template for the same reason: instantiated where the blocks' marks are).
template <class Tag = void>
std::unique_ptr<AnyModel> make_split_any_model(const Config& cfg, const AnyModelOptions& opt,
                                               comm::Communicator& world, std::optional<io::TensorMap> full,
                                               NameScheme names, std::uint64_t seed, const char* built) {
  const comm::Mesh mesh = split_mesh(cfg, &world);
  MAXTEXT_CHECK(mesh.size() > 1, ArgumentError, "[mesh] make_split_any_model: ", mesh.describe(),
                " is one rank; make_built_any_model opens an unsplit model");
  const bool by_experts = mesh.expert > 1, by_layers = mesh.pipeline > 1;
  const Config local = by_layers    ? pipeline_parallel_config(cfg, mesh.coords(world.rank()).pipeline, mesh.pipeline)
                       : by_experts ? expert_parallel_config(cfg, world.rank(), world.size())
                                    : tensor_parallel_config(cfg, mesh.tensor);
  if (by_layers) {
    // What a stage's model refuses (a KV donor on another stage, ...), every rank refuses alike, before any rank
    // waits for the others: each builds every other stage's model too (layers only, no weights).
    for (int s = 0; s < mesh.pipeline; ++s) {
      if (s != mesh.coords(world.rank()).pipeline) (void)make_built_any_model<Tag>(pipeline_parallel_config(cfg, s, mesh.pipeline), opt, built);
    }
  }
  auto model = make_built_any_model<Tag>(local, opt, built);
  MAXTEXT_CHECK(!model->needs_engram_vocab(), UnsupportedError, "[mesh] Engram layers are not split across ranks");
  auto whole = make_built_any_model<Tag>(cfg, opt, built);  // its parameters' names; no weights until loaded
  if (!full) {  // every rank initialises the whole model alike and keeps its slices
    whole->init(seed);
    full = whole->export_params();
  } else {
    model->set_name_scheme(names);
    whole->set_name_scheme(names);
  }
  check_ranks_agree(world, model_fingerprint(*full, cfg), "the weights and config of every rank");
  model->load(by_layers ? stage_tensors(*full, model->param_shapes(), whole->param_shapes())
                        : rank_slice(*full, model->param_shapes(), world.rank(), world.size()));
  whole.reset();
  full.reset();
  trim_heap();  // the whole model's temporaries back to the system (core/mapped_pages.hpp)
  model->set_comm_groups(by_layers    ? comm::Groups{&world, nullptr, nullptr, &world}
                         : by_experts ? comm::Groups{&world, nullptr, &world}
                                      : comm::Groups{&world, &world, nullptr});
  return model;
}

}  // namespace maxtext::models
