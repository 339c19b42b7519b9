#include "mm/models/wan/wan_vae_coders.h"

#include <torch/torch.h>

namespace mm {

WanResidualDownBlockImpl::WanResidualDownBlockImpl(int64_t in_dim, int64_t out_dim, double dropout,
                                                   int64_t num_res_blocks, bool temporal_down, bool down)
    : out_dim_(out_dim), factor_t_(temporal_down ? 2 : 1), factor_s_(down ? 2 : 1) {
  resnets = register_module("resnets", torch::nn::ModuleList());
  for (int64_t i = 0; i < num_res_blocks; ++i)
    resnets->push_back(WanResidualBlock(i == 0 ? in_dim : out_dim, out_dim, dropout));
  if (down) {
    const auto mode = temporal_down ? WanResampleMode::kDownsample3d : WanResampleMode::kDownsample2d;
    downsampler = register_module("downsampler", WanResample(out_dim, mode, out_dim / 2));
  }
}

torch::Tensor WanResidualDownBlockImpl::forward(const torch::Tensor& x, WanFeatureCache& cache) {
  auto h = x;
  for (const auto& resnet : *resnets) h = resnet->as<WanResidualBlockImpl>()->forward(h, cache);
  if (downsampler) h = downsampler->forward(h, cache);
  return h + wan_avg_down_3d(x, out_dim_, factor_t_, factor_s_);
}

WanUpBlockImpl::WanUpBlockImpl(int64_t in_dim, int64_t out_dim, double dropout, int64_t num_res_blocks,
                               std::optional<WanResampleMode> upsample) {
  resnets = register_module("resnets", torch::nn::ModuleList());
  for (int64_t i = 0; i <= num_res_blocks; ++i)
    resnets->push_back(WanResidualBlock(i == 0 ? in_dim : out_dim, out_dim, dropout));
  if (upsample) {
    upsamplers = register_module("upsamplers", torch::nn::ModuleList(WanResample(out_dim, *upsample, out_dim / 2)));
  }
}

torch::Tensor WanUpBlockImpl::forward(const torch::Tensor& x, WanFeatureCache& cache) {
  auto h = x;
  for (const auto& resnet : *resnets) h = resnet->as<WanResidualBlockImpl>()->forward(h, cache);
  if (upsamplers) h = upsamplers->ptr<WanResampleImpl>(0)->forward(h, cache);
  return h;
}

WanResidualUpBlockImpl::WanResidualUpBlockImpl(int64_t in_dim, int64_t out_dim, double dropout, int64_t num_res_blocks,
                                               bool temporal_up, bool up)
    : out_dim_(out_dim), factor_t_(temporal_up ? 2 : 1) {
  resnets = register_module("resnets", torch::nn::ModuleList());
  for (int64_t i = 0; i <= num_res_blocks; ++i)
    resnets->push_back(WanResidualBlock(i == 0 ? in_dim : out_dim, out_dim, dropout));
  if (up) {
    upsampler = register_module(
        "upsampler",
        WanResample(out_dim, temporal_up ? WanResampleMode::kUpsample3d : WanResampleMode::kUpsample2d, out_dim));
  }
}

torch::Tensor WanResidualUpBlockImpl::forward(const torch::Tensor& x, WanFeatureCache& cache, bool first_chunk) {
  auto h = x;
  for (const auto& resnet : *resnets) h = resnet->as<WanResidualBlockImpl>()->forward(h, cache);
  if (!upsampler) return h;
  return upsampler->forward(h, cache) + wan_dup_up_3d(x, out_dim_, factor_t_, 2, first_chunk);
}

WanEncoder3dImpl::WanEncoder3dImpl(const WanVAEConfig& config) {
  const int64_t dim = config.base_dim, levels = static_cast<int64_t>(config.dim_mult.size());
  std::vector<int64_t> dims = {dim};
  for (const auto m : config.dim_mult) dims.push_back(dim * m);
  conv_in = register_module("conv_in", WanCausalConv3d(config.in_channels, dims[0], 3, 1, 1));
  down_blocks = register_module("down_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < levels; ++i) {
    const bool down = i != levels - 1;
    const bool temporal = down && config.temperal_downsample[i];
    if (config.is_residual) {
      down_blocks->push_back(
          WanResidualDownBlock(dims[i], dims[i + 1], config.dropout, config.num_res_blocks, temporal, down));
      continue;
    }
    for (int64_t r = 0; r < config.num_res_blocks; ++r)
      down_blocks->push_back(WanResidualBlock(r == 0 ? dims[i] : dims[i + 1], dims[i + 1], config.dropout));
    if (down) {
      down_blocks->push_back(WanResample(
          dims[i + 1], temporal ? WanResampleMode::kDownsample3d : WanResampleMode::kDownsample2d, dims[i + 1] / 2));
    }
  }
  mid_block = register_module("mid_block", WanMidBlock(dims.back(), config.dropout));
  norm_out = register_module("norm_out", WanVAERMSNorm(dims.back(), false));
  conv_out = register_module("conv_out", WanCausalConv3d(dims.back(), config.z_dim * 2, 3, 1, 1));
}

torch::Tensor WanEncoder3dImpl::forward(const torch::Tensor& x, WanFeatureCache& cache) {
  auto h = conv_in->forward_cached(x, cache);
  for (const auto& layer : *down_blocks) {
    if (auto* block = layer->as<WanResidualDownBlockImpl>()) {
      h = block->forward(h, cache);
    } else if (auto* resnet = layer->as<WanResidualBlockImpl>()) {
      h = resnet->forward(h, cache);
    } else {
      h = layer->as<WanResampleImpl>()->forward(h, cache);
    }
  }
  h = mid_block->forward(h, cache);
  return conv_out->forward_cached(torch::silu(norm_out(h)), cache);
}

WanDecoder3dImpl::WanDecoder3dImpl(const WanVAEConfig& config) {
  const int64_t dim = config.decoder_base_dim, levels = static_cast<int64_t>(config.dim_mult.size());
  std::vector<int64_t> dims = {dim * config.dim_mult.back()};
  for (auto it = config.dim_mult.rbegin(); it != config.dim_mult.rend(); ++it) dims.push_back(dim * *it);
  conv_in = register_module("conv_in", WanCausalConv3d(config.z_dim, dims[0], 3, 1, 1));
  mid_block = register_module("mid_block", WanMidBlock(dims[0], config.dropout));
  up_blocks = register_module("up_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < levels; ++i) {
    const bool up = i != levels - 1;
    const bool temporal = up && config.temperal_downsample[levels - 2 - i];  // diffusers' temperal_upsample[i]
    if (config.is_residual) {
      up_blocks->push_back(
          WanResidualUpBlock(dims[i], dims[i + 1], config.dropout, config.num_res_blocks, temporal, up));
      continue;
    }
    // Wan2.1's upsamplers halve the width, so every level after the first starts at half.
    const int64_t in_dim = i > 0 ? dims[i] / 2 : dims[i];
    std::optional<WanResampleMode> mode;
    if (up) mode = temporal ? WanResampleMode::kUpsample3d : WanResampleMode::kUpsample2d;
    up_blocks->push_back(WanUpBlock(in_dim, dims[i + 1], config.dropout, config.num_res_blocks, mode));
  }
  norm_out = register_module("norm_out", WanVAERMSNorm(dims.back(), false));
  conv_out = register_module("conv_out", WanCausalConv3d(dims.back(), config.out_channels, 3, 1, 1));
}

torch::Tensor WanDecoder3dImpl::forward(const torch::Tensor& x, WanFeatureCache& cache, bool first_chunk) {
  auto h = conv_in->forward_cached(x, cache);
  h = mid_block->forward(h, cache);
  for (const auto& block : *up_blocks) {
    if (auto* residual = block->as<WanResidualUpBlockImpl>()) {
      h = residual->forward(h, cache, first_chunk);
    } else {
      h = block->as<WanUpBlockImpl>()->forward(h, cache);
    }
  }
  return conv_out->forward_cached(torch::silu(norm_out(h)), cache);
}

}  // namespace mm
