// The encoder and decoder of the Wan causal 3D VAE (diffusers' WanEncoder3d / WanDecoder3d) and
// their level blocks. Both run one chunk of frames per call, carrying causal context between
// chunks in a WanFeatureCache; the caller resets the cache's cursor before each chunk.
// Parameter names are diffusers': encoder.{conv_in, down_blocks.N..., mid_block, norm_out, conv_out},
// decoder.{conv_in, mid_block, up_blocks.N..., norm_out, conv_out}.
#pragma once
#include "mm/models/wan/wan_vae_config.h"
#include "mm/models/wan/wan_vae_layers.h"

namespace mm {

// Wan2.2 encoder level: residual blocks then an optional downsampler, plus the input folded down
// by wan_avg_down_3d. Parameters: resnets.N, downsampler (down levels only).
class WanResidualDownBlockImpl : public torch::nn::Module {
 public:
  WanResidualDownBlockImpl(int64_t in_dim, int64_t out_dim, double dropout, int64_t num_res_blocks,
                           bool temporal_down, bool down);
  torch::Tensor forward(const torch::Tensor& x, WanFeatureCache& cache);  // [B, in, T, H, W] -> [B, out, T', H', W']
  torch::nn::ModuleList resnets{nullptr};
  WanResample downsampler{nullptr};

 private:
  int64_t out_dim_, factor_t_, factor_s_;
};
TORCH_MODULE(WanResidualDownBlock);

// Wan2.1 decoder level: num_res_blocks + 1 residual blocks then an optional upsampler (which
// halves the width). Parameters: resnets.N, upsamplers.0.
class WanUpBlockImpl : public torch::nn::Module {
 public:
  WanUpBlockImpl(int64_t in_dim, int64_t out_dim, double dropout, int64_t num_res_blocks,
                 std::optional<WanResampleMode> upsample);
  torch::Tensor forward(const torch::Tensor& x, WanFeatureCache& cache);
  torch::nn::ModuleList resnets{nullptr}, upsamplers{nullptr};
};
TORCH_MODULE(WanUpBlock);

// Wan2.2 decoder level: num_res_blocks + 1 residual blocks and an optional upsampler keeping the
// width, plus the input unfolded by wan_dup_up_3d. Parameters: resnets.N, upsampler.
class WanResidualUpBlockImpl : public torch::nn::Module {
 public:
  WanResidualUpBlockImpl(int64_t in_dim, int64_t out_dim, double dropout, int64_t num_res_blocks,
                         bool temporal_up, bool up);
  torch::Tensor forward(const torch::Tensor& x, WanFeatureCache& cache, bool first_chunk);
  torch::nn::ModuleList resnets{nullptr};
  WanResample upsampler{nullptr};

 private:
  int64_t out_dim_, factor_t_;
};
TORCH_MODULE(WanResidualUpBlock);

class WanEncoder3dImpl : public torch::nn::Module {
 public:
  explicit WanEncoder3dImpl(const WanVAEConfig& config);
  // x: one chunk [B, in_channels, T, H, W] (T = 1 for the first chunk, 4 after) ->
  // [B, 2 * z_dim, T', H / 2^(levels-1), W / 2^(levels-1)] (before quant_conv).
  torch::Tensor forward(const torch::Tensor& x, WanFeatureCache& cache);
  WanCausalConv3d conv_in{nullptr}, conv_out{nullptr};
  // Wan2.1: a flat list of WanResidualBlock and WanResample; Wan2.2: WanResidualDownBlock per level.
  torch::nn::ModuleList down_blocks{nullptr};
  WanMidBlock mid_block{nullptr};
  WanVAERMSNorm norm_out{nullptr};
};
TORCH_MODULE(WanEncoder3d);

class WanDecoder3dImpl : public torch::nn::Module {
 public:
  explicit WanDecoder3dImpl(const WanVAEConfig& config);
  // x: one latent frame [B, z_dim, 1, h, w] (after post_quant_conv) ->
  // [B, out_channels, 1 (first chunk) or temporal_compression, h * 2^(levels-1), w * 2^(levels-1)].
  torch::Tensor forward(const torch::Tensor& x, WanFeatureCache& cache, bool first_chunk);
  WanCausalConv3d conv_in{nullptr}, conv_out{nullptr};
  WanMidBlock mid_block{nullptr};
  torch::nn::ModuleList up_blocks{nullptr};  // WanUpBlock (Wan2.1) or WanResidualUpBlock (Wan2.2)
  WanVAERMSNorm norm_out{nullptr};
};
TORCH_MODULE(WanDecoder3d);

}  // namespace mm
