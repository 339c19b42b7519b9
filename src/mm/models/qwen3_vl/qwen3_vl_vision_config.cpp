#include "mm/models/qwen3_vl/qwen3_vl_vision_config.h"

#include <nlohmann/json.hpp>

#include <cmath>

#include "mm/core/config_checks.h"
#include "mm/core/error.h"
#include "mm/core/json_config.h"
#include "mm/core/memory_bounds.h"
#include "mm/models/qwen2_5_vl/qwen2_5_vl_vision_config.h"

namespace mm {

int64_t Qwen3VLVisionConfig::num_grid_per_side() const {
  // int(n ** 0.5) as the reference takes it; the correction guards the floating square root of
  // a perfect square landing just below it.
  auto side = static_cast<int64_t>(std::sqrt(static_cast<double>(num_position_embeddings)));
  while (side * side > num_position_embeddings) --side;
  while ((side + 1) * (side + 1) <= num_position_embeddings) ++side;
  return side;
}

void Qwen3VLVisionConfig::validate() const {
  require_positive("config.json: vision_config.", {{"depth", depth},
                                                   {"hidden_size", hidden_size},
                                                   {"intermediate_size", intermediate_size},
                                                   {"num_heads", num_heads},
                                                   {"in_channels", in_channels},
                                                   {"patch_size", patch_size},
                                                   {"spatial_merge_size", spatial_merge_size},
                                                   {"temporal_patch_size", temporal_patch_size},
                                                   {"out_hidden_size", out_hidden_size},
                                                   {"num_position_embeddings", num_position_embeddings}});
  check_vision_heads("hidden_size", hidden_size, num_heads, rope_theta, hidden_act);
  for (size_t i = 0; i < deepstack_visual_indexes.size(); ++i) {
    const int64_t layer = deepstack_visual_indexes[i];
    MM_CHECK(layer >= 0 && layer < depth, "config.json: vision_config.deepstack_visual_indexes has ", layer,
             ", outside [0, depth=", depth, ")");
    for (size_t j = 0; j < i; ++j)
      MM_CHECK(deepstack_visual_indexes[j] != layer, "config.json: vision_config.deepstack_visual_indexes lists ",
               layer, " twice");
  }
  const double hv = static_cast<double>(hidden_size);
  const double merged = hv * static_cast<double>(spatial_merge_size * spatial_merge_size);
  const double block = 4 * hv * hv + 2 * hv * static_cast<double>(intermediate_size);
  const double mergers = static_cast<double>(1 + deepstack_visual_indexes.size());
  check_model_fits_in_memory(
      "config.json",
      {{str_cat("vision_config.depth (", depth, ") x a ViT block of hidden_size ", hidden_size,
                " and intermediate_size ", intermediate_size),
        static_cast<double>(depth) * block},
       {str_cat("vision_config.num_position_embeddings (", num_position_embeddings, ") x hidden_size ", hidden_size),
        static_cast<double>(num_position_embeddings) * hv},
       {str_cat("vision_config: ", 1 + deepstack_visual_indexes.size(), " mergers of hidden_size ", hidden_size,
                " to out_hidden_size ", out_hidden_size),
        mergers * (merged * merged + merged * static_cast<double>(out_hidden_size))}});
}

Qwen3VLVisionConfig Qwen3VLVisionConfig::from_json(const nlohmann::json& json, const std::string& file,
                                                   bool deepstack) {
  const JsonView v(json, file, "vision_config.");
  Qwen3VLVisionConfig c;
  c.depth = v.get_or<int64_t>("depth", c.depth);
  c.hidden_size = v.get_or<int64_t>("hidden_size", c.hidden_size);
  c.hidden_act = v.get_or<std::string>("hidden_act", c.hidden_act);
  c.intermediate_size = v.get_or<int64_t>("intermediate_size", c.intermediate_size);
  c.num_heads = v.get_or<int64_t>("num_heads", c.num_heads);
  c.in_channels = v.get_or<int64_t>("in_channels", c.in_channels);
  c.patch_size = v.get_or<int64_t>("patch_size", c.patch_size);
  c.spatial_merge_size = v.get_or<int64_t>("spatial_merge_size", c.spatial_merge_size);
  c.temporal_patch_size = v.get_or<int64_t>("temporal_patch_size", c.temporal_patch_size);
  c.out_hidden_size = v.get_or<int64_t>("out_hidden_size", c.out_hidden_size);
  c.num_position_embeddings = v.get_or<int64_t>("num_position_embeddings", c.num_position_embeddings);
  c.deepstack_visual_indexes =
      deepstack ? v.get_or<std::vector<int64_t>>("deepstack_visual_indexes", c.deepstack_visual_indexes)
                : std::vector<int64_t>{};
  const JsonView rope = v.child("rope_parameters");
  const auto rope_type = rope.get_or<std::string>("rope_type", "axial");
  MM_CHECK(rope_type == "axial", rope.where("rope_type"), ": '", rope_type,
           "' is not supported (the Qwen3-VL vision tower uses axial 2D rotary)");
  c.rope_theta = rope.get_or<double>("rope_theta", c.rope_theta);
  c.initializer_range = v.get_or<double>("initializer_range", c.initializer_range);
  c.validate();
  return c;
}

nlohmann::json Qwen3VLVisionConfig::to_json() const {
  return {{"model_type", "qwen3_vl_vision"}, {"depth", depth}, {"hidden_size", hidden_size},
          {"hidden_act", hidden_act}, {"intermediate_size", intermediate_size}, {"num_heads", num_heads},
          {"in_channels", in_channels}, {"patch_size", patch_size}, {"spatial_merge_size", spatial_merge_size},
          {"temporal_patch_size", temporal_patch_size}, {"out_hidden_size", out_hidden_size},
          {"num_position_embeddings", num_position_embeddings},
          {"deepstack_visual_indexes", deepstack_visual_indexes}, {"initializer_range", initializer_range},
          {"rope_parameters", {{"rope_type", "axial"}, {"rope_theta", rope_theta}}}};
}

}  // namespace mm
