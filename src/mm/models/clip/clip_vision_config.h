// CLIP vision tower architecture (transformers' CLIPVisionConfig), read from a Hugging Face
// config.json: either a CLIPVisionModel's own config (model_type "clip_vision_model", as
// Wan2.1-I2V's image_encoder ships it) or a full CLIPModel config (model_type "clip"), whose
// "vision_config" object is used. Defaults are transformers 5.17's (openai/clip-vit-base-patch32).
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace mm {

struct CLIPVisionConfig {
  int64_t hidden_size = 768;
  int64_t intermediate_size = 3072;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t num_channels = 3;
  int64_t image_size = 224;  // square input side the position embeddings were trained for
  int64_t patch_size = 32;
  std::string hidden_act = "quick_gelu";  // "quick_gelu" (OpenAI CLIP) or "gelu" (open-clip ViT-H)
  double layer_norm_eps = 1e-5;
  double attention_dropout = 0.0;  // applied in training mode only

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  int64_t grid() const { return image_size / patch_size; }  // patches per side (the conv floors)
  int64_t num_positions() const { return grid() * grid() + 1; }  // patches + the class token

  // Throws mm::Error naming the offending field; `where` prefixes the message (file and key path).
  void validate(const std::string& where = "CLIP vision config: ") const;
  // A config.json object; `file` names it in errors.
  static CLIPVisionConfig parse(const nlohmann::json& json, const std::string& file);
  static CLIPVisionConfig from_file(const std::filesystem::path& config_json);
};

}  // namespace mm
