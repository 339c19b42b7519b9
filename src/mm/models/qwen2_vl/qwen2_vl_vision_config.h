// The Qwen2-VL vision tower's architecture (config.json vision_config of model_type "qwen2_vl";
// transformers' Qwen2VLVisionConfig): embed_dim wide blocks, and a merger projecting to
// hidden_size (the language model's width).
#pragma once
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>

namespace mm {

struct Qwen2VLVisionConfig {
  int64_t depth = 32;
  int64_t embed_dim = 1280;
  int64_t hidden_size = 3584;  // the merger's output: the text model's hidden_size
  std::string hidden_act = "quick_gelu";
  int64_t mlp_ratio = 4;
  int64_t num_heads = 16;
  int64_t in_channels = 3;  // "in_chans" in the published configs
  int64_t patch_size = 14;
  int64_t spatial_merge_size = 2;
  int64_t temporal_patch_size = 2;
  double rope_theta = 10000.0;  // vision_config.rope_parameters.rope_theta
  double initializer_range = 0.02;

  int64_t head_dim() const { return embed_dim / num_heads; }
  int64_t mlp_hidden() const { return embed_dim * mlp_ratio; }

  // `vision_config` of `file`; errors name the file and key.
  static Qwen2VLVisionConfig from_json(const nlohmann::json& vision_config, const std::string& file);
  // Sizes positive and consistent, and bounded by the machine's memory; errors name the key.
  void validate() const;
  nlohmann::json to_json() const;  // the transformers 5 vision_config
};

}  // namespace mm
