#include "mm/models/qwen2_vl/qwen2_vl_vision_config.h"

#include <nlohmann/json.hpp>

#include "mm/core/config_checks.h"
#include "mm/core/error.h"
#include "mm/core/json_config.h"
#include "mm/core/memory_bounds.h"
#include "mm/models/qwen2_5_vl/qwen2_5_vl_vision_config.h"

namespace mm {

Qwen2VLVisionConfig Qwen2VLVisionConfig::from_json(const nlohmann::json& json, const std::string& file) {
  const JsonView v(json, file, "vision_config.");
  Qwen2VLVisionConfig c;
  c.depth = v.get_or("depth", c.depth);
  c.embed_dim = v.get_or("embed_dim", c.embed_dim);
  c.hidden_size = v.get_or("hidden_size", c.hidden_size);
  c.hidden_act = v.get_or("hidden_act", c.hidden_act);
  c.mlp_ratio = v.get_or("mlp_ratio", c.mlp_ratio);
  c.num_heads = v.get_or("num_heads", c.num_heads);
  c.in_channels = v.get_or("in_channels", v.get_or("in_chans", c.in_channels));
  c.patch_size = v.get_or("patch_size", c.patch_size);
  c.spatial_merge_size = v.get_or("spatial_merge_size", c.spatial_merge_size);
  c.temporal_patch_size = v.get_or("temporal_patch_size", c.temporal_patch_size);
  c.rope_theta = v.child("rope_parameters").get_or<double>("rope_theta", c.rope_theta);
  c.initializer_range = v.get_or("initializer_range", c.initializer_range);
  c.validate();
  return c;
}

void Qwen2VLVisionConfig::validate() const {
  require_positive("config.json: vision_config.", {{"depth", depth},
                                                   {"embed_dim", embed_dim},
                                                   {"hidden_size", hidden_size},
                                                   {"mlp_ratio", mlp_ratio},
                                                   {"num_heads", num_heads},
                                                   {"in_channels", in_channels},
                                                   {"patch_size", patch_size},
                                                   {"spatial_merge_size", spatial_merge_size},
                                                   {"temporal_patch_size", temporal_patch_size}});
  check_vision_heads("embed_dim", embed_dim, num_heads, rope_theta, hidden_act);
  const double e = static_cast<double>(embed_dim), merged = e * static_cast<double>(spatial_merge_size * spatial_merge_size);
  check_model_fits_in_memory(
      "config.json", {{str_cat("vision_config.depth (", depth, ") x a block of embed_dim ", embed_dim, " and mlp_ratio ",
                               mlp_ratio),
                       static_cast<double>(depth) * (4 * e * e + 2 * e * static_cast<double>(mlp_hidden()))},
                      {str_cat("vision_config merger of embed_dim ", embed_dim, " to hidden_size ", hidden_size),
                       merged * merged + merged * static_cast<double>(hidden_size)}});
}

nlohmann::json Qwen2VLVisionConfig::to_json() const {
  return {{"model_type", "qwen2_vl_vision"}, {"depth", depth}, {"embed_dim", embed_dim}, {"hidden_size", hidden_size},
          {"hidden_act", hidden_act}, {"mlp_ratio", mlp_ratio}, {"num_heads", num_heads},
          {"in_channels", in_channels}, {"patch_size", patch_size}, {"spatial_merge_size", spatial_merge_size},
          {"temporal_patch_size", temporal_patch_size}, {"initializer_range", initializer_range},
          {"rope_parameters", {{"rope_type", "axial"}, {"rope_theta", rope_theta}}}};
}

}  // namespace mm
