// The Wan causal 3D VAE (diffusers' AutoencoderKLWan) for Wan2.1 and Wan2.2 videos and images.
// Videos are [B, C, F, H, W] in [-1, 1] with F = 1 + 4k frames: the first frame is encoded on its
// own, then 4 frames at a time, and each latent frame is decoded on its own, with the causal
// context carried in a feature cache, so memory stays bounded in the video length. Tiled encode /
// decode bound it in H and W too. Loads a diffusers "vae" directory (config.json +
// diffusion_pytorch_model.safetensors, possibly sharded with its index) by diffusers' names:
// encoder.*, quant_conv.*, post_quant_conv.*, decoder.*.
// Gradients flow through encode/decode when enabled; wrap inference in torch::NoGradGuard.
#pragma once
#include <ATen/core/Generator.h>

#include <filesystem>
#include <optional>

#include "mm/models/wan/wan_vae_coders.h"
#include "mm/models/wan/wan_vae_config.h"

namespace mm {

// Spatial tiling in sample pixels, as diffusers' enable_tiling() (same defaults). Tiles of
// min x min overlap by min - stride and are blended linearly; only inputs larger than one tile
// are tiled. Sizes must be multiples of the spatial compression, stride <= min.
struct WanVAETiling {
  int64_t tile_sample_min_height = 256;
  int64_t tile_sample_min_width = 256;
  int64_t tile_sample_stride_height = 192;
  int64_t tile_sample_stride_width = 192;
};

// diffusers' DiagonalGaussianDistribution over the latents.
struct LatentDistribution {
  torch::Tensor mean;    // [B, z_dim, F', H', W']
  torch::Tensor logvar;  // [B, z_dim, F', H', W'], clamped to [-30, 20]
  // mean + exp(logvar / 2) * noise, the noise drawn like diffusers' randn_tensor (equal values
  // for an equally seeded CPU generator); no generator -> the default one.
  torch::Tensor sample(const std::optional<at::Generator>& generator = std::nullopt) const;
  torch::Tensor mode() const { return mean; }
};

// diffusers' patchify / unpatchify (identity for patch_size 1): [B, C, F, H, W] <->
// [B, C * p * p, F, H / p, W / p], channel order (c, p_w, p_h).
torch::Tensor wan_patchify(const torch::Tensor& x, int64_t patch_size);
torch::Tensor wan_unpatchify(const torch::Tensor& x, int64_t patch_size);

class WanVAEImpl : public torch::nn::Module {
 public:
  explicit WanVAEImpl(const WanVAEConfig& config);
  // A diffusers VAE directory, weights converted to `dtype` and written once on `device`; every
  // tensor must match by name and shape.
  static std::shared_ptr<WanVAEImpl> from_pretrained(const std::filesystem::path& dir,
                                                     torch::ScalarType dtype = torch::kFloat32,
                                                     const c10::Device& device = c10::kCPU);

  // video: [B, video_channels (3), 1 + 4k, H, W] in [-1, 1], H and W multiples of
  // spatial_compression -> latents of [B, z_dim, 1 + k * 4 / temporal_compression, H / s, W / s].
  LatentDistribution encode(const torch::Tensor& video);
  // latents (raw, i.e. denormalized): [B, z_dim, F', h, w] -> video [B, 3, 1 + (F' - 1) * t, h * s, w * s]
  // clamped to [-1, 1].
  torch::Tensor decode(const torch::Tensor& latents);
  // diffusers' encode / decode after enable_tiling(tiling): the whole-frame path when the input
  // fits in one tile, otherwise overlapping tiles blended into one result.
  LatentDistribution tiled_encode(const torch::Tensor& video, const WanVAETiling& tiling);
  torch::Tensor tiled_decode(const torch::Tensor& latents, const WanVAETiling& tiling);

  // The latents that training, feature extraction and the image condition use: `video` [B, 3, F,
  // H, W] in [-1, 1] (any device and dtype) encoded on the VAE's device in its dtype, the
  // posterior's mean (diffusers' retrieve_latents "argmax"), normalized in fp32 (fp64 stays fp64)
  // as WanImageToVideoPipeline does; on the VAE's device.
  torch::Tensor encode_normalized(const torch::Tensor& video);
  // What training / feature extraction does after encode: (mean - latents_mean) * (1 / latents_std).
  torch::Tensor normalize_latents(const torch::Tensor& mean) const;  // [B, z_dim, ...] -> same
  // What WanPipeline does before decode: z / (1 / latents_std) + latents_mean.
  torch::Tensor denormalize_latents(const torch::Tensor& z) const;  // [B, z_dim, ...] -> same

  const WanVAEConfig& config() const { return config_; }

  WanEncoder3d encoder{nullptr};
  WanCausalConv3d quant_conv{nullptr};       // 1x1x1, 2 z_dim -> 2 z_dim
  WanCausalConv3d post_quant_conv{nullptr};  // 1x1x1, z_dim -> z_dim
  WanDecoder3d decoder{nullptr};

 private:
  void check_video(const torch::Tensor& video) const;
  void check_latents(const torch::Tensor& latents) const;
  void check_tiling(const WanVAETiling& tiling) const;
  // Encoder + quant_conv over the chunks of a patchified video: [B, 2 z_dim, F', h, w].
  torch::Tensor encode_chunks(const torch::Tensor& x);
  // post_quant_conv + decoder over the latent frames, before unpatchify: [B, out_channels, F, H, W].
  torch::Tensor decode_frames(const torch::Tensor& z);
  torch::Tensor encode_tiles(const torch::Tensor& x, const WanVAETiling& tiling);
  torch::Tensor decode_tiles(const torch::Tensor& z, const WanVAETiling& tiling);
  torch::Tensor latent_stat(const std::vector<double>& values, const torch::Tensor& like) const;

  WanVAEConfig config_;
};
TORCH_MODULE(WanVAE);

}  // namespace mm
