// Wan DiT architecture, read from a diffusers config.json (_class_name "WanTransformer3DModel",
// as Wan2.1 T2V/I2V/FLF2V and Wan2.2 T2V/I2V/TI2V ship their transformer). Defaults equal
// diffusers' constructor defaults.
#pragma once
#include <array>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

namespace mm {

struct WanTransformerConfig {
  std::array<int64_t, 3> patch_size{1, 2, 2};  // (frames, height, width) per token
  int64_t num_attention_heads = 40;
  int64_t attention_head_dim = 128;  // inner width = heads * head_dim
  int64_t in_channels = 16;
  int64_t out_channels = 16;  // a null/0 value in the file means in_channels, as in diffusers
  int64_t text_dim = 4096;    // width of the text encoder's hidden states
  int64_t freq_dim = 256;     // width of the sinusoidal timestep embedding
  int64_t ffn_dim = 13824;
  int64_t num_layers = 40;
  bool cross_attn_norm = true;  // an affine LayerNorm (norm2) before cross-attention
  // diffusers always builds RMS q/k norms over all heads (the field is not read there); any other
  // value names a different architecture and is refused rather than ignored.
  std::string qk_norm = "rms_norm_across_heads";
  double eps = 1e-6;
  // Image conditioning (Wan2.1 I2V / FLF2V): CLIP image features of width image_dim, embedded and
  // attended through separate key/value projections of input width added_kv_proj_dim (= inner
  // width, since they see the embedded image tokens). Both set or both unset.
  std::optional<int64_t> image_dim;
  std::optional<int64_t> added_kv_proj_dim;
  int64_t rope_max_seq_len = 1024;  // positions per axis the rotary table covers
  // FLF2V: a learned position embedding over the first + last frame's image tokens.
  std::optional<int64_t> pos_embed_seq_len;

  int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
  int64_t patch_volume() const { return patch_size[0] * patch_size[1] * patch_size[2]; }
  void validate() const;  // names the offending field

  // `source` names the file in errors.
  static WanTransformerConfig from_json(const nlohmann::json& json, const std::string& source);
  static WanTransformerConfig from_file(const std::filesystem::path& config_json);
};

}  // namespace mm
