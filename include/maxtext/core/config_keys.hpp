// core/config_keys.hpp: every key a config sets is honoured, refused by name, or on the documented list of keys that
// an inference forward pass ignores. io::load_config runs check_config_keys(cfg) on every YAML file and override; the
// `maxtext` program and the Python module also run it on the configs of config.json, GGUF and llama2.c files with
// their overrides (docs/config.md):
//   * keys the library reads: the Config fields (core/config.hpp) and the list keys it reads from Config::extra;
//   * Config fields that are read only at some values (attention, float32_weight_sum, cast_logits_to_fp32,
//     matmul_precision): any other value is refused by name;
//   * MaxText features this library does not implement (unsupported_features() in config.hpp, and the keys of
//     unhonoured_keys() below): refused when set to a value that turns them on. Booleans are read with the one parser
//     of config.hpp (true/True/TRUE/1, false/False/FALSE/0), so `use_multimodal: TRUE` is refused like `true`;
//   * the mesh keys (ici_* / dcn_*_parallelism, num_slices) are read by comm::Mesh where a program splits a model
//     (docs/distributed.md); alone, a mesh of more than one rank is refused there;
//   * inert keys: training, optimiser, data pipeline, checkpoint, logging, profiling, sharding rules, remat,
//     compiler and kernel-tiling knobs, sampling and serving settings of MaxText's base.yml
//     (src/maxtext/configs/base.yml, commit 000b810, 684 keys; the classification is ours), and the settings of a
//     feature that is refused when on (the vision / audio towers' sizes, the quantisation modes' parameters, ...):
//     accepted and ignored;
//   * any other key: refused, with the nearest known key ("did you mean rope_type?").
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/macros.hpp"
#include "maxtext/core/nearest.hpp"

namespace maxtext {
namespace config_keys {

/// Keys the library reads from Config::extra (lists and modes without a typed field; the mesh keys comm::Mesh reads).
inline constexpr std::array<std::string_view, 42> extension = {
    "pagedattn_num_pages", "pagedattn_tokens_per_page", "pagedattn_max_pages_per_group",  // models/paged_memory.hpp
    "quantize_kvcache", "kv_quant_dtype", "kv_quant_axis",                                 // layers/kv_quant.hpp
    "compress_ratios", "engram_layers", "engram_vocab_bases", "learn_to_init_mode", "mrope_section", "no_rope_layers",
    "num_slices", "ici_diloco_parallelism", "ici_data_parallelism", "ici_fsdp_parallelism",
    "ici_fsdp_transpose_parallelism", "ici_sequence_parallelism", "ici_context_parallelism",
    "ici_context_usp_ulysses_parallelism", "ici_context_autoregressive_parallelism", "ici_tensor_parallelism",
    "ici_tensor_sequence_parallelism", "ici_autoregressive_parallelism", "ici_expert_parallelism",
    "ici_pipeline_parallelism", "dcn_diloco_parallelism", "dcn_data_parallelism", "dcn_fsdp_parallelism",
    "dcn_fsdp_transpose_parallelism", "dcn_sequence_parallelism", "dcn_context_parallelism",
    "dcn_context_usp_ulysses_parallelism", "dcn_context_autoregressive_parallelism", "dcn_tensor_parallelism",
    "dcn_tensor_sequence_parallelism", "dcn_autoregressive_parallelism", "dcn_expert_parallelism",
    "dcn_pipeline_parallelism",
    "num_layers_per_pipeline_stage", "num_pipeline_repeats", "pipeline_parallel_layers"};  // models/parallel.hpp

/// MaxText base.yml keys that cannot change the logits of a single-device inference forward pass.
inline constexpr std::string_view inert[] = {
    // The paged-attention kernel's tiling on TPUs (pages a compute block takes, head_dim padding) and page groups:
    // the paged cache here is read by the ordinary kernels (models/paged_memory.hpp).
    "pagedattn_pages_per_compute_block", "pagedattn_head_dim_alignment", "pagedattn_max_page_groups",
    "run_name", "override_model_config", "override_logical_axis_rules", "load_parameters_path",
    "load_full_state_path", "enable_checkpointing", "save_checkpoint_on_start", "save_checkpoint_on_completion",
    "async_checkpointing", "checkpoint_period", "max_num_checkpoints_to_keep", "enable_continuous_checkpointing",
    "enable_single_replica_ckpt_restoring", "checkpoint_todelete_subdir", "checkpoint_todelete_full_path",
    "force_unroll", "checkpoint_storage_target_data_file_size_bytes", "checkpoint_storage_use_ocdbt",
    "checkpoint_storage_use_zarr3", "checkpoint_storage_concurrent_gb", "enable_orbax_v1",
    "checkpoint_conversion_fn", "source_checkpoint_layout", "colocated_python_checkpointing",
    "enable_autocheckpoint", "reuse_example_batch", "metrics_file", "gcs_metrics", "enable_wandb",
    "wandb_project_name", "wandb_run_name", "save_config_to_gcs", "grad_dtype", "replicate_quant_scale",
    "save_quantized_params_path", "bwd_quantization_calibration_method", "te_comm_gemm_overlap",
    "mla_qk_head_chunk_size", "mtp_loss_scaling_factor", "mtp_eval_target_module", "num_moe_token_chunks",
    "moe_chunk_barrier", "use_custom_sort_vjp", "use_ring_of_experts", "num_moe_emb_chunks",
    "moe_dispatch_no_expert_sharding", "use_ragged_sort", "use_gather_mosaic_kernel", "ragged_gather_fallback",
    "ragged_gather_reduce_fallback", "ragged_gather_cost_estimate_flops", "ragged_gather_reduce_cost_estimate_flops",
    "ragged_gather_cost_estimate_bytes_accessed", "ragged_gather_reduce_cost_estimate_bytes_accessed",
    "wi_tile_fwd_batch_seq", "wi_tile_fwd_embed_dim", "wi_tile_fwd_mlp_dim", "wi_tile_dlhs_batch_seq",
    "wi_tile_dlhs_embed_dim", "wi_tile_dlhs_mlp_dim", "wi_tile_drhs_batch_seq", "wi_tile_drhs_embed_dim",
    "wi_tile_drhs_mlp_dim", "wo_tile_fwd_batch_seq", "wo_tile_fwd_embed_dim", "wo_tile_fwd_mlp_dim",
    "wo_tile_dlhs_batch_seq", "wo_tile_dlhs_embed_dim", "wo_tile_dlhs_mlp_dim", "wo_tile_drhs_batch_seq",
    "wo_tile_drhs_embed_dim", "wo_tile_drhs_mlp_dim", "merge_gating_gmm", "use_tokamax_gmm", "use_gmm_v2",
    "moe_fsdp_use_two_stage_all_gather", "shard_exp_on_fsdp", "use_2d_fsdp_sharding", "batch_split_factor",
    "num_pipeline_microbatches",
    "pipeline_delay_activation_forwarding", "pipeline_fsdp_ag_once", "pipeline_fsdp_ag_per_repeat",
    "scan_pipeline_iterations", "scan_pipeline_repeats", "scan_layers_per_stage",
    "set_remat_policy_on_pipeline_iterations", "set_remat_policy_on_layers_per_stage", "remat_policy",
    "decoder_layer_input", "indexer_cutoff_threshold", "context", "mlpwi", "mlpwi_0", "mlpwi_1", "mlpwo",
    "moe_mlpwi_0", "moe_mlpwi_1", "moe_mlpwo", "query_proj", "key_proj", "value_proj", "kv_proj", "qkv_proj",
    "out_proj", "query_wa_proj", "kv_wa_proj", "mla_q", "mla_kv", "attention_out", "engram",
    "optimizer_memory_host_offload", "parameter_memory_host_offload", "z_loss_multiplier", "indexer_sparse_training",
    "indexer_loss_scaling_factor", "use_sliced_mla_proj", "qk_clip_threshold", "record_internal_nn_metrics",
    "base_output_directory", "enable_multi_tier_checkpointing", "multi_tier_checkpointing_backup_interval_minutes",
    "multi_tier_checkpointing_backup_interval_steps", "mtc_data_parallelism", "enable_emergency_checkpoint",
    "local_checkpoint_directory", "local_checkpoint_period", "jax_cache_dir", "hardware", "internal_compile",
    "internal_compile_num_devices", "compile_xla_flags", "shard_mode", "custom_mesh_and_rule", "mesh_axes",
    "logical_axis_rules", "data_sharding", "input_data_sharding_logical_axes", "context_sharding",
    "ulysses_context_sharding", "custom_mesh_and_rule_for_eval", "logical_axis_rules_for_eval", "sharding_tolerance",
    "check_vma", "shard_optimizer_over_data",
    "dense_fsdp_use_two_stage_all_gather", "num_vocab_tiling", "tokenizer_path", "tokenizer_type",
    "use_chat_template", "chat_template_path", "chat_template", "tokenize_train_data", "tokenize_eval_data",
    "add_bos", "add_eos", "use_truncation", "per_device_batch_size", "expansion_factor_real_data",
    "eval_per_device_batch_size", "max_corpus_chars", "train_data_columns", "train_image_column",
    "eval_data_columns", "eval_image_column", "packing", "num_epoch", "generate_padding_batch_train",
    "generate_padding_batch_eval", "max_segments_per_seq", "enable_rampup_batch_size", "per_device_batch_size_start",
    "per_device_batch_size_increment", "global_rampup_samples", "use_dpo", "use_sft", "sft_train_on_completion_only",
    "dataset_type", "dataset_path", "dataset_name", "eval_dataset_name", "train_split", "eval_split", "hf_path",
    "hf_name", "hf_data_dir", "hf_train_files", "hf_eval_split", "hf_eval_files", "hf_access_token",
    "grain_train_files", "grain_eval_files", "grain_train_mixture_config_path", "grain_file_type",
    "grain_packing_type", "grain_worker_count", "grain_per_worker_buffer_size", "grain_num_threads",
    "grain_prefetch_buffer_size", "grain_worker_count_eval", "grain_per_worker_buffer_size_eval",
    "grain_ram_budget_mb", "grain_num_threads_eval", "grain_prefetch_buffer_size_eval",
    "grain_data_source_max_workers", "grain_shuffle_buffer_size", "grain_use_elastic_iterator",
    "colocated_python_data_input", "olmo_index_path", "olmo_path_remap_from", "olmo_path_remap_to",
    "olmo_apply_ngram_filter", "steps", "log_period", "max_inflight_computations", "training_objective",
    "block_diffusion_mask_id", "block_diffusion_min_noise", "block_diffusion_logit_alignment",
    "block_diffusion_canvas_policy", "jax_distributed_initialization_timeout", "jax_debug_log_modules",
    "skip_jax_distributed_system", "learning_rate", "lr_schedule_type", "learning_rate_final_fraction",
    "wsd_decay_steps_fraction", "wsd_decay_style", "warmup_steps_fraction", "learning_rate_schedule_steps", "prompt",
    "load_from_prefill_dir", "prefill_cache_dir", "autoregressive_decode_assert", "profiler",
    "upload_all_profiler_results", "skip_first_n_steps_for_profiler", "profiler_steps", "hide_profiler_step_metric",
    "profile_cleanly", "profile_periodically_period", "enable_tpu_profiling_options",
    "tpu_num_chips_to_profile_per_task", "tpu_num_sparse_core_tiles_to_trace", "tpu_num_sparse_cores_to_trace",
    "managed_mldiagnostics", "managed_mldiagnostics_on_demand_profiling", "managed_mldiagnostics_run_group",
    "managed_mldiagnostics_region", "dump_hlo", "dump_step", "dump_hlo_local_dir", "dump_hlo_delete_local_after",
    "dump_hlo_gcs_dir", "dump_hlo_local_module_name", "dump_hlo_module_name", "dump_hlo_xla_flags",
    "dump_hlo_upload_all", "dump_jaxpr", "dump_jaxpr_local_dir", "dump_jaxpr_delete_local_after",
    "dump_jaxpr_gcs_dir", "enable_data_shuffling", "data_shuffle_seed", "enable_diloco", "diloco_sync_period",
    "diloco_outer_lr", "diloco_outer_momentum", "dcn_bandwidth_limit", "dcn_bandwidth_burst",
    "dcn_bandwidth_latency", "dcn_bandwidth_interface", "gradient_clipping_threshold", "gradient_accumulation_steps",
    "opt_type", "skip_step_on_spikes", "skip_step_interval", "skip_step_scaling_factor", "trainable_parameters_mask",
    "adam_b1", "adam_b2", "adam_eps", "adam_eps_root", "adam_weight_decay", "adamw_mask", "mu_dtype", "muon_beta",
    "muon_weight_decay", "muon_consistent_rms", "compiled_trainstep_file", "compile_topology",
    "compile_topology_num_slices", "write_estimator_result", "decode_sampling_strategy", "decode_sampling_nucleus_p",
    "decode_sampling_top_k", "decode_sampling_temperature", "eval_start_step", "eval_interval", "eval_steps",
    "target_eval_loss", "abort_on_nan_loss", "abort_on_inf_loss", "enable_goodput_recording", "monitor_goodput",
    "goodput_upload_interval_seconds", "enable_pathways_goodput", "monitor_step_time_deviation",
    "step_deviation_interval_seconds", "enable_gcp_goodput_metrics", "enable_gcp_step_deviation_metrics",
    "report_heartbeat_metric_for_gcp_monitoring", "heartbeat_reporting_interval_in_seconds",
    "report_performance_metric_for_gcp_monitoring", "enable_tensorboard", "use_vertex_tensorboard",
    "vertex_tensorboard_project", "vertex_tensorboard_region", "max_checkify",
    "inference_microbenchmark_prefill_lengths", "inference_microbenchmark_stages",
    "inference_microbenchmark_loop_iters", "inference_microbenchmark_log_file_path",
    "inference_microbenchmark_num_samples", "inference_metadata_file", "inference_server", "prefill_slice",
    "generate_slice", "inference_benchmark_test", "enable_model_warmup", "enable_llm_inference_pool",
    "multi_sampling", "return_log_prob", "stack_prefill_result_cache", "prefill_cache_axis_order",
    "ar_cache_axis_order", "compute_axis_order", "reshape_q", "prometheus_port", "enable_jax_profiler",
    "jax_profiler_port", "xprof_tpu_power_trace_level", "xprof_e2e_enable_fw_throttle_event",
    "xprof_e2e_enable_fw_power_level_event", "xprof_e2e_enable_fw_thermal_event", "profile_power_events",
    "log_config", "debug_sharding", "enable_checkpoint_cloud_logger", "enable_single_controller", "custom_mesh",
    "allow_split_physical_axes", "optimize_mesh_for_tpu_v6e", "shardy", "remove_size_one_mesh_axis_from_type",
    "use_ragged_attention", "ragged_block_size", "sa_block_q", "sa_block_kv", "sa_block_kv_compute",
    "sa_block_q_dkv", "sa_block_kv_dkv", "sa_block_kv_dkv_compute", "sa_block_q_dq", "sa_block_kv_dq",
    "sa_use_fused_bwd_kernel", "sa_bwd_dkv_megacore", "sa_q_layout", "sa_k_layout", "sa_v_layout",
    "use_splash_scheduler", "ring_scan_unroll", "sa_fuse_reciprocal", "sa_use_base2_exp", "local_sa_block_q",
    "local_sa_block_kv", "local_sa_block_kv_compute", "local_sa_block_q_dkv", "local_sa_block_kv_dkv",
    "local_sa_block_kv_dkv_compute", "local_sa_block_q_dq", "local_sa_block_kv_dq", "local_sa_use_fused_bwd_kernel",
    "local_sa_q_layout", "local_sa_k_layout", "local_sa_v_layout", "local_use_splash_scheduler",
    "local_sa_fuse_reciprocal", "local_sa_use_base2_exp", "use_max_logit_estimate", "cost_estimate_flops_fwd",
    "cost_estimate_flops_bwd", "dq_reduction_steps", "context_parallel_load_balance", "context_parallel_strategy",
    "context_parallel_reorder_strategy", "prefill_chunk_size", "enable_prefix_caching", "prefix_caching_hbm_byte",
    "prefix_caching_dram_byte", "enable_padding_causal_mask", "freeze_vision_encoder_params",
    "freeze_audio_encoder_params", "remat_policy_for_vit", "image_path", "video_path", "audio_path",
    "image_placeholder", "video_placeholder", "audio_placeholder", "max_num_images_per_example",
    "projector_dropout_for_vit", "attention_dropout_for_audio", "activation_dropout_for_audio",
    "n_window_infer_for_audio", "conv_chunksize_for_audio", "num_conv_layers_for_audio", "max_sample_len_for_audio",
    "subslice_shape", "enable_nnx", "pure_nnx_decoder", "pure_nnx", "use_tokamax_splash", "use_jax_splash",
    "vllm_hf_config_path", "vllm_hf_overrides", "vllm_additional_config", "force_q_layout", "distill_alpha",
    "distill_temperature", "distill_beta", "distill_feature_loss_type", "distill_layer_indices", "distill_alpha_end",
    "distill_alpha_schedule", "distill_temperature_end", "distill_temperature_schedule", "distill_beta_end",
    "distill_beta_schedule", "elastic_enabled", "elastic_backup_kind", "elastic_timeout_seconds",
    "elastic_max_retries", "elastic_min_slice_count",
};

/// Settings of a feature that is refused when it is on (use_multimodal, use_audio, quantization, moba, use_indexer,
/// weight sparsity, attention_type block_diffusion): ignored while it is off.
inline constexpr std::string_view dependent[] = {
    "constant_bound_config", "quant_cfg_path", "use_qwix_quantization",
    "use_manual_quantization", "weight_quantization_calibration_method", "act_quantization_calibration_method",
    "quantization_local_shard_count", "weight_sparsity_update_step", "weight_sparsity_start_step",
    "causal_block_size", "moba_chunk_size", "moba_topk", "indexer_use_approx_top_k", "indexer_approx_top_k_recall",
    "indexer_mask_exact_topk", "dtype_mm", "image_size_for_vit", "use_audio_in_video", "video_max_grid_t",
    "video_max_grid_h", "video_max_grid_w", "posemb_type_for_vit", "vision_output_length", "hidden_size_for_vit",
    "intermediate_size_for_vit", "num_attention_heads_for_vit", "num_channels_for_vit", "tile_size_for_vit",
    "patch_size_for_vit", "conv_stride_for_vit", "num_hidden_layers_for_vit", "projector_input_dim_for_vit",
    "projector_output_dim_for_vit", "rope_theta_for_vit", "vision_output_dim_for_vit", "pixel_shuffle_ratio_for_vit",
    "spatial_merge_size_for_vit", "out_hidden_size_for_vit", "temporal_patch_size_for_vit",
    "num_position_embeddings_for_vit", "deepstack_visual_indexes_for_vit", "d_model_for_audio",
    "encoder_attention_heads_for_audio", "encoder_ffn_dim_for_audio", "encoder_layers_for_audio",
    "activation_function_for_audio", "num_mel_bins_for_audio", "max_source_positions_for_audio",
    "scale_embedding_for_audio", "n_window_for_audio", "downsample_hidden_size_for_audio", "output_dim_for_audio",
    "max_timescale_for_audio", "position_id_per_seconds",
};

namespace detail {
/// The one boolean reading (config.hpp's parser); a value that is no boolean is refused naming the key.
inline bool boolean(const std::string& key, const std::string& value) {
  bool b = false;
  ::maxtext::detail::parse_value(key, value, b);
  return b;
}
inline bool none_or_empty(const std::string& v) { return !::maxtext::detail::nonempty_list(v); }
inline double number(const std::string& key, const std::string& value) {
  double d = 0;
  ::maxtext::detail::parse_value(key, value, d);
  return d;
}
}  // namespace detail

/// A MaxText key that changes the forward pass when set, which this library does not implement: accepted while
/// `off(key, value)` holds (MaxText's default), refused otherwise.
struct Unhonoured {
  std::string_view key;
  std::string_view what;
  bool (*off)(const std::string& key, const std::string& value);
};

inline const std::vector<Unhonoured>& unhonoured_keys() {
  constexpr auto empty = [](const std::string&, const std::string& v) { return detail::none_or_empty(v); };
  constexpr auto is_false = [](const std::string& k, const std::string& v) { return !detail::boolean(k, v); };
  constexpr auto not_positive = [](const std::string& k, const std::string& v) { return detail::number(k, v) <= 0; };
  static const std::vector<Unhonoured> list = {
      {"lora_input_adapters_path", "LoRA adapters", empty},
      {"hf_lora_adapter_path", "a Hugging Face LoRA adapter", empty},
      {"checkpoint_is_quantized", "AQT-quantised checkpoints", is_false},
      {"weight_sparsity_n", "N:M weight sparsity", empty},
      {"weight_sparsity_m", "N:M weight sparsity", empty},
      {"ragged_buffer_factor", "a bounded MoE ragged buffer (it can drop tokens)", not_positive},
      {"experimental_sa_quant_q_fp8", "fp8 queries in splash attention", is_false},
      {"experimental_sa_quant_k_fp8", "fp8 keys in splash attention", is_false},
      {"use_audio", "the audio tower (maxtext-cpp runs the text decoder only)", is_false},
      {"use_chunked_prefill", "chunked prefill (the library prefills a prompt in one pass)", is_false},
  };
  return list;
}

/// Values of `attention` (MaxText's kernel choice) that compute the attention this library implements
/// (attention.md: the dot_product semantics, f32 flags included). `paged`: the same attention over a paged KV cache
/// (MaxText's page manager; models/paged_memory.hpp).
inline constexpr std::array<std::string_view, 6> attention_kernels = {"autoselected", "dot_product", "flash",
                                                                      "cudnn_flash_te", "cudnn_flash_jax", "paged"};
/// Values of matmul_precision (jax.lax.Precision names): CPU matrix products are full float32 at every one.
inline constexpr std::array<std::string_view, 6> matmul_precisions = {"default", "high",    "highest",
                                                                      "bfloat16", "tensorfloat32", "float32"};

/// Every key this library knows: the Config fields, the extension keys, the refused features and the inert keys.
inline std::vector<std::string> known_keys() {
  std::vector<std::string> k;
#define MAXTEXT_KNOWN_KEY(type, key, dflt) k.emplace_back(#key);
  MAXTEXT_CONFIG_FIELDS(MAXTEXT_KNOWN_KEY)
#undef MAXTEXT_KNOWN_KEY
  for (auto s : extension) k.emplace_back(s);
  for (const auto& f : unsupported_features()) k.emplace_back(f.key);
  for (const auto& u : unhonoured_keys()) k.emplace_back(u.key);
  for (auto s : inert) k.emplace_back(s);
  for (auto s : dependent) k.emplace_back(s);
  return k;
}

template <class List>
bool contains(const List& list, std::string_view key) {
  for (const auto& s : list) {
    if (std::string_view(s) == key) return true;
  }
  return false;
}

}  // namespace config_keys

/// Refuse (ConfigError / UnsupportedError, naming the key and where it was set) a key of `cfg` that is unknown, a
/// refused feature turned on, or a known key at a value the library does not honour; see the top of this file.
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API void check_config_keys(const Config& cfg) {
  namespace ck = config_keys;
  auto where = [&](const std::string& key) {
    const auto it = cfg.origin.find(key);
    return it == cfg.origin.end() ? std::string() : " (set in " + it->second + ")";
  };
  const std::string dt = cfg.dtype_canonical();
  // Config fields read only at some values.
  if (!ck::contains(ck::attention_kernels, cfg.attention)) {
    const std::string near = nearest_name(cfg.attention, ck::attention_kernels);
    MAXTEXT_THROW(ConfigError, "[config] attention: unknown kernel '", cfg.attention, "'", where("attention"),
                  near.empty() ? std::string() : "; did you mean " + near + "?", " (expected one of ",
                  std::vector<std::string>(ck::attention_kernels.begin(), ck::attention_kernels.end()), ")");
  }
  MAXTEXT_CHECK(ck::contains(ck::matmul_precisions, cfg.matmul_precision), ConfigError,
                "[config] matmul_precision: expected one of ",
                std::vector<std::string>(ck::matmul_precisions.begin(), ck::matmul_precisions.end()), ", found '",
                cfg.matmul_precision, "'", where("matmul_precision"));
  MAXTEXT_CHECK(cfg.float32_weight_sum || dt == "float32", UnsupportedError, "[config] float32_weight_sum = false",
                where("float32_weight_sum"), " (summing the experts' outputs in ", dt,
                ") is not implemented: the sum is always float32");
  MAXTEXT_CHECK(cfg.cast_logits_to_fp32 || dt == "float32", UnsupportedError, "[config] cast_logits_to_fp32 = false",
                where("cast_logits_to_fp32"), " (logits left in ", dt, ") is not implemented: logits are float32");
  for (const auto& [key, value] : cfg.extra) {
    if (ck::contains(ck::extension, key) || ck::contains(ck::inert, key) || ck::contains(ck::dependent, key)) continue;
    bool handled = false;
    for (const auto& f : unsupported_features()) {
      if (key != f.key) continue;
      handled = true;
      // validate() reads these with detail::truthy; the one boolean parser also catches TRUE (and refuses "yes").
      const bool on = f.enabled == ::maxtext::detail::truthy ? ck::detail::boolean(key, value) : f.enabled(value);
      MAXTEXT_CHECK(!on, UnsupportedError, "[config] ", key, " = ", value, where(key), " enables ", f.what,
                    ", which maxtext-cpp does not implement");
    }
    for (const auto& u : ck::unhonoured_keys()) {
      if (key != u.key) continue;
      handled = true;
      MAXTEXT_CHECK(u.off(key, value), UnsupportedError, "[config] ", key, " = ", value, where(key), " enables ",
                    u.what, ", which maxtext-cpp does not implement");
    }
    if (handled) continue;
    const std::string near = nearest_name(key, ck::known_keys());
    MAXTEXT_THROW(ConfigError, "[config] unknown key '", key, "'", where(key),
                  near.empty() ? std::string() : "; did you mean " + near + "?",
                  " (keys that only matter for training or device layout are accepted: docs/config.md)");
  }
}
#else
void check_config_keys(const Config& cfg);
#endif

}  // namespace maxtext
