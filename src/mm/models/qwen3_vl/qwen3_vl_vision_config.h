// The Qwen3-VL vision tower's architecture (config.json vision_config of model_type "qwen3_vl" /
// "qwen3_vl_moe"; transformers' Qwen3VLVisionConfig): a ViT with a learned square grid of
// position embeddings resampled to every image, 2D rotary, LayerNorm blocks with a two-layer
// MLP, a merger to out_hidden_size (the text model's width), and DeepStack mergers that take the
// outputs of the blocks at deepstack_visual_indexes to the first decoder layers.
#pragma once
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace mm {

struct Qwen3VLVisionConfig {
  int64_t depth = 27;
  int64_t hidden_size = 1152;
  std::string hidden_act = "gelu_pytorch_tanh";
  int64_t intermediate_size = 4304;
  int64_t num_heads = 16;
  int64_t in_channels = 3;
  int64_t patch_size = 16;
  int64_t spatial_merge_size = 2;
  int64_t temporal_patch_size = 2;
  int64_t out_hidden_size = 3584;
  // Rows of the learned position table: a square grid of sqrt(n) x sqrt(n) (transformers takes
  // int(n ** 0.5) as the side; a non-square n leaves the table's tail unused, as there).
  int64_t num_position_embeddings = 2304;
  std::vector<int64_t> deepstack_visual_indexes = {8, 16, 24};
  double rope_theta = 10000.0;  // vision_config.rope_parameters.rope_theta
  double initializer_range = 0.02;

  int64_t head_dim() const { return hidden_size / num_heads; }
  int64_t num_grid_per_side() const;

  // Sizes positive and consistent, and bounded by the machine's memory; errors name the key.
  void validate() const;
  // `vision_config` of `file`, validated; errors name the file and key. deepstack false (Qwen3.5's
  // tower): no DeepStack mergers, whatever the file says.
  static Qwen3VLVisionConfig from_json(const nlohmann::json& vision_config, const std::string& file,
                                       bool deepstack = true);
  nlohmann::json to_json() const;  // the transformers 5 vision_config
};

}  // namespace mm
