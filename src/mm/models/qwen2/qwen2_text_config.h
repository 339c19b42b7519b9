// The Qwen2 decoder's architecture as the Qwen-VL models carry it (their config.json's text part):
// either top-level fields with `rope_scaling` (the published checkpoints) or a nested
// `text_config` with `rope_parameters` (transformers 5).
#pragma once
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace mm {

class JsonView;

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
  // Sizes positive and consistent, and the decoder bounded by the machine's memory; errors name
  // the key.
  void validate() const;
  // The text fields of a Qwen-VL config.json (`root` is the whole file): text_config when present,
  // else the top level. Errors name the file and key.
  static Qwen2TextConfig from_json(const JsonView& root);
  // The transformers 5 text_config, with `model_type` (e.g. "qwen2_5_vl_text").
  nlohmann::json to_json(const std::string& model_type) const;
};

}  // namespace mm
