#include "mm/models/qwen2_5_vl/qwen2_5_vl_vision_config.h"

#include <nlohmann/json.hpp>

#include "mm/core/config_checks.h"
#include "mm/core/error.h"
#include "mm/core/json_config.h"
#include "mm/core/memory_bounds.h"
#include "mm/nn/gated_mlp.h"

namespace mm {

void check_vision_heads(const char* width_key, int64_t width, int64_t num_heads, double rope_theta,
                        const std::string& hidden_act) {
  MM_CHECK(width % num_heads == 0, "config.json: vision_config.", width_key, " (", width,
           ") must be divisible by num_heads (", num_heads, ")");
  MM_CHECK((width / num_heads) % 4 == 0, "config.json: vision_config head dim ", width / num_heads,
           " must be divisible by 4 for 2D rotary embeddings");
  MM_CHECK(rope_theta > 0, "config.json: vision_config.rope_parameters.rope_theta must be positive");
  MM_CHECK(is_supported_activation(hidden_act), "config.json: vision_config.hidden_act '", hidden_act,
           "' is not supported");
}

void Qwen2_5_VLVisionConfig::validate() const {
  require_positive("config.json: vision_config.", {{"depth", depth},
                                                   {"hidden_size", hidden_size},
                                                   {"num_heads", num_heads},
                                                   {"patch_size", patch_size},
                                                   {"spatial_merge_size", spatial_merge_size},
                                                   {"temporal_patch_size", temporal_patch_size},
                                                   {"window_size", window_size}});
  check_vision_heads("hidden_size", hidden_size, num_heads, rope_theta, hidden_act);
  MM_CHECK(window_size % (patch_size * spatial_merge_size) == 0, "config.json: vision_config.window_size (",
           window_size, ") must be a multiple of patch_size * spatial_merge_size");
  for (int64_t i : fullatt_block_indexes)
    MM_CHECK(i >= 0 && i < depth, "config.json: vision_config.fullatt_block_indexes has ", i,
             ", outside [0, depth=", depth, ")");
  const double hv = static_cast<double>(hidden_size);
  const double merged = hv * static_cast<double>(spatial_merge_size * spatial_merge_size);
  const double block = 4 * hv * hv + 3 * hv * static_cast<double>(intermediate_size);
  check_model_fits_in_memory(
      "config.json",
      {{str_cat("vision_config.depth (", depth, ") x a ViT block of hidden_size ", hidden_size,
                " and intermediate_size ", intermediate_size),
        static_cast<double>(depth) * block},
       {str_cat("vision_config merger of hidden_size ", hidden_size, " to out_hidden_size ", out_hidden_size),
        merged * merged + merged * static_cast<double>(out_hidden_size)}});
}

Qwen2_5_VLVisionConfig Qwen2_5_VLVisionConfig::from_json(const nlohmann::json& json, const std::string& file) {
  const JsonView v(json, file, "vision_config.");
  Qwen2_5_VLVisionConfig vc;
  vc.depth = v.get<int64_t>("depth");
  vc.hidden_size = v.get<int64_t>("hidden_size");
  vc.hidden_act = v.get_or<std::string>("hidden_act", vc.hidden_act);
  vc.intermediate_size = v.get<int64_t>("intermediate_size");
  vc.num_heads = v.get<int64_t>("num_heads");
  vc.in_channels = v.get_or<int64_t>("in_channels", v.get_or<int64_t>("in_chans", vc.in_channels));
  vc.patch_size = v.get_or<int64_t>("patch_size", vc.patch_size);
  vc.spatial_merge_size = v.get_or<int64_t>("spatial_merge_size", vc.spatial_merge_size);
  vc.temporal_patch_size = v.get_or<int64_t>("temporal_patch_size", vc.temporal_patch_size);
  vc.tokens_per_second = v.get_or<int64_t>("tokens_per_second", vc.tokens_per_second);
  vc.window_size = v.get_or<int64_t>("window_size", vc.window_size);
  vc.out_hidden_size = v.get<int64_t>("out_hidden_size");
  vc.fullatt_block_indexes = v.get_or<std::vector<int64_t>>("fullatt_block_indexes", vc.fullatt_block_indexes);
  vc.rope_theta = v.child("rope_parameters").get_or<double>("rope_theta", vc.rope_theta);
  vc.initializer_range = v.get_or<double>("initializer_range", vc.initializer_range);
  vc.validate();
  return vc;
}

nlohmann::json Qwen2_5_VLVisionConfig::to_json() const {
  return {{"model_type", "qwen2_5_vl"}, {"depth", depth}, {"hidden_size", hidden_size},
          {"hidden_act", hidden_act}, {"intermediate_size", intermediate_size},
          {"num_heads", num_heads}, {"in_channels", in_channels},
          {"patch_size", patch_size}, {"spatial_merge_size", spatial_merge_size},
          {"temporal_patch_size", temporal_patch_size},
          {"tokens_per_second", tokens_per_second}, {"window_size", window_size},
          {"out_hidden_size", out_hidden_size}, {"initializer_range", initializer_range},
          {"fullatt_block_indexes", fullatt_block_indexes},
          {"rope_parameters", {{"rope_type", "axial"}, {"rope_theta", rope_theta}}}};
}

}  // namespace mm
