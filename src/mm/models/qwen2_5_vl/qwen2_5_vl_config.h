// Qwen2.5-VL architecture, read from a Hugging Face config.json (model_type "qwen2_5_vl").
// Both layouts found in the wild are accepted: text fields at the top level with `rope_scaling`
// (the published checkpoints) and a nested `text_config` with `rope_parameters` (transformers 5).
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "mm/core/json_config.h"

namespace mm {

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

  void validate() const;
};

struct Qwen2TextConfig {
  int64_t vocab_size = 152064;
  int64_t hidden_size = 8192;
  int64_t intermediate_size = 29568;
  int64_t num_hidden_layers = 80;
  int64_t num_attention_heads = 64;
  int64_t num_key_value_heads = 8;
  std::string hidden_act = "silu";
  int64_t max_position_embeddings = 32768;
  double rms_norm_eps = 1e-6;
  double rope_theta = 1000000.0;
  std::vector<int64_t> mrope_section;  // [t, h, w] halves of head_dim; sums to head_dim / 2
  bool tie_word_embeddings = false;
  bool attention_bias = true;  // Qwen2 has q/k/v biases
  double initializer_range = 0.02;  // std of the random init of the language model and lm_head

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  void validate() const;
};

struct Qwen2_5_VLConfig {
  Qwen2_5_VLVisionConfig vision;
  Qwen2TextConfig text;
  int64_t image_token_id = 151655;
  int64_t video_token_id = 151656;
  int64_t vision_start_token_id = 151652;
  int64_t vision_end_token_id = 151653;
  std::vector<int64_t> eos_token_ids;  // from config.json / generation_config.json

  void validate() const;
  // Parses config.json; errors name the file and key.
  static Qwen2_5_VLConfig from_json(const nlohmann::json& json, const std::string& file);
  static Qwen2_5_VLConfig from_file(const std::filesystem::path& config_json);
  nlohmann::json to_json() const;  // the transformers 5 layout, loadable by transformers
};

}  // namespace mm
