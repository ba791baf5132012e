// models/split_model.hpp: a model of the precompiled block library (any_model_blocks.hpp) split over the ranks of a
// communicator as the config's mesh says (docs/distributed.md): ici_tensor_parallelism by heads and MLP columns
// (tensor_parallel_config), ici_expert_parallelism by experts (expert_parallel_config), ici_pipeline_parallelism by
// layers (pipeline_parallel_config: each stage its layers, whole), and their combinations: a stage's layers split by
// heads and expert columns over the tensor axis and by experts over the expert axis (sub-groups, Communicator::split). Each rank builds its share and
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
/// (comm::Mesh::from_config). Tensor, expert and pipeline axes combine: each stage's layers split by heads (and every
/// expert by its hidden columns) over the tensor axis and by experts over the expert axis.
inline comm::Mesh split_mesh(const Config& cfg, const comm::Communicator* world) {
  return comm::Mesh::from_config(cfg, world ? world->size() : 1);
}

/// The config of the rank at `at` of `mesh`'s share of `cfg`, as pipeline stage `stage`: its heads and MLP columns
/// (tensor_parallel_config) or its experts (expert_parallel_config), of its stage's layers
/// (pipeline_parallel_config).
inline Config split_share_config(const Config& cfg, const comm::Mesh& mesh, const comm::Mesh::Coords& at, int stage) {
  Config c = cfg;
  if (mesh.tensor > 1) c = tensor_parallel_config(c, mesh.tensor);
  if (mesh.expert > 1) c = expert_parallel_config(c, at.expert, mesh.expert);
  if (mesh.pipeline > 1) c = pipeline_parallel_config(c, stage, mesh.pipeline);
  return c;
}

/// The groups of `world` that `mesh` makes (comm::Groups): with one axis, `world` itself; else sub-groups
/// (Communicator::split, collective, the same calls on every rank): the ranks of this rank's stage (which hold its
/// residual stream replicated), ranked by their coordinate inside the stage; with tensor and expert axes both, the
/// stage's ranks of this rank's expert coordinate (its tensor group, ranked by tensor coordinate) and of its tensor
/// coordinate (its expert group); with stages, the stages of its coordinate inside the stage (its pipeline group),
/// ranked by stage.
inline comm::Groups split_groups(comm::Communicator& world, const comm::Mesh& mesh) {
  const comm::Mesh::Coords at = mesh.coords(world.rank());
  comm::Groups g;
  g.world = &world;
  const int axes = (mesh.tensor > 1) + (mesh.expert > 1) + (mesh.pipeline > 1);
  if (axes <= 1) {
    comm::Communicator* all = mesh.size() > 1 ? &world : nullptr;
    g.tensor = mesh.tensor > 1 ? all : nullptr;
    g.expert = mesh.expert > 1 ? all : nullptr;
    g.pipeline = mesh.pipeline > 1 ? all : nullptr;
    g.stage = mesh.pipeline > 1 ? nullptr : all;
    return g;
  }
  auto sub = [&](int color, int key, const std::string& what) {
    g.owned.push_back(world.split(color, key, "[mesh] " + what));
    return g.owned.back().get();
  };
  const int within = at.tensor + mesh.tensor * at.expert;  // the coordinate inside a stage
  const std::string stage = "pipeline stage " + std::to_string(at.pipeline);
  g.stage = mesh.pipeline > 1 ? sub(at.pipeline, within, "the ranks of " + stage) : &world;
  if (mesh.tensor > 1 && mesh.expert > 1) {
    g.tensor = sub(at.pipeline * mesh.expert + at.expert, at.tensor,
                   "the tensor ranks of expert rank " + std::to_string(at.expert) + " of " + stage);
    g.expert = sub(at.pipeline * mesh.tensor + at.tensor, at.expert,
                   "the expert ranks of tensor rank " + std::to_string(at.tensor) + " of " + stage);
  } else {
    g.tensor = mesh.tensor > 1 ? g.stage : nullptr;
    g.expert = mesh.expert > 1 ? g.stage : nullptr;
  }
  if (mesh.pipeline > 1) {
    g.pipeline = sub(within, at.pipeline, "the pipeline stages of stage rank " + std::to_string(within));
  }
  return g;
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
  const comm::Mesh::Coords at = mesh.coords(world.rank());
  const bool by_layers = mesh.pipeline > 1, by_share = mesh.tensor > 1 || mesh.expert > 1;
  const Config local = split_share_config(cfg, mesh, at, at.pipeline);
  if (by_layers) {
    // What a stage's model refuses (a KV donor on another stage, ...), every rank refuses alike, before any rank
    // waits for the others: each builds every other stage's model too (layers only, no weights).
    for (int s = 0; s < mesh.pipeline; ++s) {
      if (s != at.pipeline) (void)make_built_any_model<Tag>(split_share_config(cfg, mesh, at, s), opt, built);
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
  // The sub-groups now, while every rank is here (MPI_Comm_split cannot time out): a rank whose load then fails
  // leaves the others waiting in their first step's collective, which can.
  comm::Groups groups = split_groups(world, mesh);
  {
    // A stage's tensors (views), then this rank's slices of them (views): the loader copies only those.
    const auto shapes = model->param_shapes();
    std::optional<io::TensorMap> staged;
    if (by_layers) staged = stage_tensors(*full, shapes, whole->param_shapes());
    const io::TensorMap& src = staged ? *staged : *full;
    if (!by_share) {
      model->load(src);
    } else if (mesh.tensor > 1 && mesh.expert > 1) {
      // Two slices: this rank's heads and columns (the shapes of the model split by tensor alone), then its experts
      // of those; an expert kernel [E, D, F] narrows on F, then on E.
      comm::Mesh tensor_only = mesh;
      tensor_only.expert = 1;
      const auto by_tensor = make_built_any_model<Tag>(split_share_config(cfg, tensor_only, at, at.pipeline), opt,
                                                       built)->param_shapes();
      model->load(rank_slice(rank_slice(src, by_tensor, at.tensor, mesh.tensor), shapes, at.expert, mesh.expert));
    } else {
      model->load(mesh.tensor > 1 ? rank_slice(src, shapes, at.tensor, mesh.tensor)
                                  : rank_slice(src, shapes, at.expert, mesh.expert));
    }
  }
  whole.reset();
  full.reset();
  trim_heap();  // the whole model's temporaries back to the system (core/mapped_pages.hpp)
  model->set_comm_groups(groups);
  return model;
}

}  // namespace maxtext::models
