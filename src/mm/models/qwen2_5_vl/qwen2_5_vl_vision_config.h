// The Qwen2.5-VL vision tower's architecture (config.json vision_config of model_type
// "qwen2_5_vl"; transformers' Qwen2_5_VLVisionConfig): window attention with full-attention
// blocks at fullatt_block_indexes, RMSNorm, a gated MLP, and a merger to out_hidden_size.
#pragma once
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace mm {

// The checks every Qwen ViT config shares: `width_key` (its hidden width's name in
// vision_config) divisible by num_heads into heads of a multiple of 4 (2D rotary), a positive
// rotary base, a supported activation. Errors name the key.
void check_vision_heads(const char* width_key, int64_t width, int64_t num_heads, double rope_theta,
                        const std::string& hidden_act);

struct Qwen2_5_VLVisionConfig {
  int64_t depth = 32;
  int64_t hidden_size = 3584;
  std::string hidden_act = "silu";
  int64_t intermediate_size = 3420;
  int64_t num_heads = 16;
  int64_t in_channels = 3;
  int64_t patch_size = 14;
  int64_t spatial_merge_size = 2;
  int64_t temporal_patch_size = 2;
  int64_t tokens_per_second = 4;
  int64_t window_size = 112;
  int64_t out_hidden_size = 3584;
  std::vector<int64_t> fullatt_block_indexes = {7, 15, 23, 31};
  // 2D rotary base: vision_config.rope_parameters.rope_theta (absent from the published configs;
  // transformers defaults it to 10000).
  double rope_theta = 10000.0;
  double initializer_range = 0.02;  // std of the random init of the vision tower (init_weights)

  // Sizes positive and consistent, and bounded by the machine's memory; errors name the key.
  void validate() const;
  // `vision_config` of `file`, validated; errors name the file and key.
  static Qwen2_5_VLVisionConfig from_json(const nlohmann::json& vision_config, const std::string& file);
  nlohmann::json to_json() const;  // the transformers 5 vision_config
};

}  // namespace mm
