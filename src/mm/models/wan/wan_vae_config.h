// The Wan causal 3D VAE architecture (diffusers' AutoencoderKLWan), read from its config.json:
// the Wan2.1 VAE (z_dim 16, 8x spatial / 4x temporal compression) and the Wan2.2 high-compression
// VAE (is_residual, patch_size 2, z_dim 48, its own decoder_base_dim, 16x spatial). Defaults are
// diffusers' (the Wan2.1 VAE).
#pragma once
#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace mm {

struct WanVAEConfig {
  int64_t base_dim = 96;
  int64_t decoder_base_dim = 96;  // config null -> base_dim
  int64_t z_dim = 16;             // latent channels (the encoder emits 2 * z_dim: mean and logvar)
  std::vector<int64_t> dim_mult = {1, 2, 4, 4};
  int64_t num_res_blocks = 2;
  // Per down level but the last: whether it also halves time (the decoder uses it reversed).
  std::vector<bool> temperal_downsample = {false, true, true};
  double dropout = 0.0;           // nn.Dropout after norm2 of every residual block (training only)
  std::vector<double> latents_mean;  // [z_dim]; defaults: Wan2.1's
  std::vector<double> latents_std;   // [z_dim]
  bool is_residual = false;       // Wan2.2: residual down/up blocks with avg-down / dup-up shortcuts
  int64_t in_channels = 3;        // encoder input channels, after patchify (Wan2.2: 3 * 2 * 2)
  int64_t out_channels = 3;       // decoder output channels, before unpatchify
  int64_t patch_size = 1;         // config null -> 1 (no patchify; diffusers treats both the same)
  int64_t scale_factor_temporal = 4;
  int64_t scale_factor_spatial = 8;

  WanVAEConfig();
  // diffusers' config.json keys (absent or null -> the defaults above); `source` names the file
  // in errors. Unknown keys (_diffusers_version ...) are ignored, as diffusers does.
  static WanVAEConfig from_json(const nlohmann::json& json, const std::string& source);
  static WanVAEConfig from_file(const std::filesystem::path& config_json);
  // Names the offending field; also checks that scale_factor_* agree with the architecture.
  void validate() const;

  int64_t spatial_compression() const { return scale_factor_spatial; }    // pixels per latent, H and W
  int64_t temporal_compression() const { return scale_factor_temporal; }  // frames per latent after the first
  int64_t video_channels() const { return in_channels / (patch_size * patch_size); }  // 3 for RGB
  int64_t decoded_channels() const { return out_channels / (patch_size * patch_size); }
};

}  // namespace mm
