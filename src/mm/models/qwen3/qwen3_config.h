// A Qwen3, Qwen3-MoE or Qwen3.5 (text-only) language model's config.json (model_type "qwen3",
// "qwen3_moe", "qwen3_5_text"), as the published checkpoints and transformers 5's save_pretrained
// write it, read into the shared Qwen decoder's config.
#pragma once
#include <filesystem>
#include <string>

#include "mm/models/qwen2/qwen2_text_config.h"

namespace mm {

struct Qwen3Config {
  std::string model_type;  // "qwen3", "qwen3_moe" or "qwen3_5_text"
  Qwen2TextConfig text;    // qk_norm on, o_proj_bias = attention_bias, head_dim from the file
  // Whether the forward adds router_aux_loss_coef * the load-balancing loss to the loss (as
  // transformers does only when asked for the router logits); false in the published configs.
  bool output_router_logits = false;

  bool is_moe() const { return text.moe.num_experts > 0; }
  // Errors name the file and the key.
  static Qwen3Config from_file(const std::filesystem::path& config_json);
};

}  // namespace mm
