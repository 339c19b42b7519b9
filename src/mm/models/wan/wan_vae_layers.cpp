#include "mm/models/wan/wan_vae_layers.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

namespace mm {
namespace {

using Kernel3 = torch::ExpandingArray<3>;

// The last `n` frames of x (fewer when x is shorter), copied so that the chunk can be freed.
torch::Tensor last_frames(const torch::Tensor& x, int64_t n) {
  return x.slice(2, std::max<int64_t>(x.size(2) - n, 0)).clone();
}

// [B, C, T, H, W] <-> [B * T, C, H, W] for the per-frame 2D layers.
torch::Tensor frames_to_images(const torch::Tensor& x) {
  return x.permute({0, 2, 1, 3, 4}).reshape({x.size(0) * x.size(2), x.size(1), x.size(3), x.size(4)});
}
torch::Tensor images_to_frames(const torch::Tensor& x, int64_t batch) {
  return x.view({batch, x.size(0) / batch, x.size(1), x.size(2), x.size(3)}).permute({0, 2, 1, 3, 4});
}

}  // namespace

WanFeatureCache::Slot& WanFeatureCache::next() {
  if (cursor_ == slots_.size()) slots_.emplace_back();
  return slots_[cursor_++];
}

WanCausalConv3dImpl::WanCausalConv3dImpl(int64_t in, int64_t out, torch::ExpandingArray<3> kernel,
                                         torch::ExpandingArray<3> stride, torch::ExpandingArray<3> padding)
    : torch::nn::Conv3dImpl(torch::nn::Conv3dOptions(in, out, kernel).stride(stride).padding(0)),
      pad_t_(2 * (*padding)[0]),
      pad_h_((*padding)[1]),
      pad_w_((*padding)[2]) {}

torch::Tensor WanCausalConv3dImpl::forward(const torch::Tensor& x, const torch::Tensor& previous) {
  torch::Tensor input = x;
  int64_t pad_t = pad_t_;
  if (previous.defined() && pad_t_ > 0) {
    input = torch::cat({previous.to(x.device()), x}, 2);
    pad_t -= previous.size(2);
  }
  input = torch::constant_pad_nd(input, {pad_w_, pad_w_, pad_h_, pad_h_, pad_t, 0}, 0);
  return torch::nn::Conv3dImpl::forward(input);
}

torch::Tensor WanCausalConv3dImpl::forward_cached(const torch::Tensor& x, WanFeatureCache& cache) {
  auto& slot = cache.next();
  const bool cached = slot.state == WanFeatureCache::Slot::State::kFrames;
  auto keep = last_frames(x, kWanCacheFrames);
  if (keep.size(2) < kWanCacheFrames && cached) keep = torch::cat({last_frames(slot.frames, 1), keep}, 2);
  auto out = forward(x, cached ? slot.frames : torch::Tensor());
  slot.state = WanFeatureCache::Slot::State::kFrames;
  slot.frames = keep;
  return out;
}

WanVAERMSNormImpl::WanVAERMSNormImpl(int64_t dim, bool images) : scale_(std::sqrt(static_cast<double>(dim))) {
  gamma = register_parameter("gamma", images ? torch::ones({dim, 1, 1}) : torch::ones({dim, 1, 1, 1}));
}

torch::Tensor WanVAERMSNormImpl::forward(const torch::Tensor& x) {
  const bool low_precision = x.scalar_type() == torch::kHalf || x.scalar_type() == torch::kBFloat16;
  namespace F = torch::nn::functional;
  const auto normalized =
      F::normalize(low_precision ? x.to(torch::kFloat) : x, F::NormalizeFuncOptions().dim(1)).to(x.scalar_type());
  return normalized * scale_ * gamma;
}

WanResampleImpl::WanResampleImpl(int64_t dim, WanResampleMode mode, int64_t upsample_out_dim) : mode_(mode) {
  const bool up = mode == WanResampleMode::kUpsample2d || mode == WanResampleMode::kUpsample3d;
  auto conv = up ? torch::nn::Conv2d(torch::nn::Conv2dOptions(dim, upsample_out_dim, 3).padding(1))
                 : torch::nn::Conv2d(torch::nn::Conv2dOptions(dim, dim, 3).stride(2));
  resample = register_module("resample", torch::nn::ModuleList(torch::nn::Identity(), conv));
  if (mode == WanResampleMode::kUpsample3d)
    time_conv = register_module("time_conv", WanCausalConv3d(dim, dim * 2, Kernel3({3, 1, 1}), 1, Kernel3({1, 0, 0})));
  if (mode == WanResampleMode::kDownsample3d)
    time_conv = register_module("time_conv", WanCausalConv3d(dim, dim, Kernel3({3, 1, 1}), Kernel3({2, 1, 1}), 0));
}

torch::Tensor WanResampleImpl::forward(const torch::Tensor& input, WanFeatureCache& cache) {
  using State = WanFeatureCache::Slot::State;
  torch::Tensor x = input;
  const int64_t b = x.size(0), c = x.size(1), h = x.size(3), w = x.size(4);
  if (mode_ == WanResampleMode::kUpsample3d) {
    auto& slot = cache.next();
    if (slot.state == State::kEmpty) {
      slot.state = State::kFirstChunk;  // the first chunk keeps its frame count
    } else {
      auto keep = last_frames(x, kWanCacheFrames);
      if (keep.size(2) < kWanCacheFrames) {
        const auto before = slot.state == State::kFrames ? last_frames(slot.frames, 1) : torch::zeros_like(keep);
        keep = torch::cat({before, keep}, 2);
      }
      const int64_t t = x.size(2);
      // On the chunk after the first, diffusers pads with zeros rather than the first chunk's frame.
      x = time_conv->forward(x, slot.state == State::kFrames ? slot.frames : torch::Tensor());
      slot.state = State::kFrames;
      slot.frames = keep;
      // The 2 * dim output channels are two frames per input frame: interleave them into time.
      x = x.reshape({b, 2, c, t, h, w});
      x = torch::stack({x.select(1, 0), x.select(1, 1)}, 3).reshape({b, c, t * 2, h, w});
    }
  }
  auto images = frames_to_images(x);
  const auto conv = resample->ptr<torch::nn::Conv2dImpl>(1);
  if (mode_ == WanResampleMode::kUpsample2d || mode_ == WanResampleMode::kUpsample3d) {
    // diffusers upsamples in fp32 and casts back (nearest-exact: each pixel becomes a 2x2 block).
    const auto up = at::_upsample_nearest_exact2d(images.to(torch::kFloat), {2 * h, 2 * w}, 2.0, 2.0);
    images = conv->forward(up.to(images.scalar_type()));
  } else {
    images = conv->forward(torch::constant_pad_nd(images, {0, 1, 0, 1}, 0));
  }
  x = images_to_frames(images, b);
  if (mode_ == WanResampleMode::kDownsample3d) {
    auto& slot = cache.next();
    if (slot.state == State::kEmpty) {
      slot.state = State::kFrames;  // the first chunk passes through; its frames seed the next one
      slot.frames = x.clone();
    } else {
      auto keep = last_frames(x, 1);
      x = time_conv->forward(torch::cat({last_frames(slot.frames, 1), x}, 2));
      slot.frames = keep;
    }
  }
  return x;
}

WanResidualBlockImpl::WanResidualBlockImpl(int64_t in_dim, int64_t out_dim, double dropout) : dropout_(dropout) {
  norm1 = register_module("norm1", WanVAERMSNorm(in_dim, false));
  conv1 = register_module("conv1", WanCausalConv3d(in_dim, out_dim, 3, 1, 1));
  norm2 = register_module("norm2", WanVAERMSNorm(out_dim, false));
  conv2 = register_module("conv2", WanCausalConv3d(out_dim, out_dim, 3, 1, 1));
  if (in_dim != out_dim) conv_shortcut = register_module("conv_shortcut", WanCausalConv3d(in_dim, out_dim, 1));
}

torch::Tensor WanResidualBlockImpl::forward(const torch::Tensor& x, WanFeatureCache& cache) {
  const auto shortcut = conv_shortcut ? conv_shortcut->forward(x) : x;
  auto h = conv1->forward_cached(torch::silu(norm1(x)), cache);
  h = torch::dropout(torch::silu(norm2(h)), dropout_, is_training());
  return conv2->forward_cached(h, cache) + shortcut;
}

WanAttentionBlockImpl::WanAttentionBlockImpl(int64_t dim) {
  norm = register_module("norm", WanVAERMSNorm(dim, true));
  to_qkv = register_module("to_qkv", torch::nn::Conv2d(torch::nn::Conv2dOptions(dim, dim * 3, 1)));
  proj = register_module("proj", torch::nn::Conv2d(torch::nn::Conv2dOptions(dim, dim, 1)));
}

torch::Tensor WanAttentionBlockImpl::forward(const torch::Tensor& x) {
  const int64_t b = x.size(0), c = x.size(1), h = x.size(3), w = x.size(4);
  auto images = norm(frames_to_images(x));
  const int64_t n = images.size(0);
  // [N, 1, H*W, 3C]: one head, positions as the sequence; q, k, v are the channel thirds.
  const auto qkv = to_qkv(images).reshape({n, 1, c * 3, h * w}).permute({0, 1, 3, 2}).contiguous();
  const auto parts = qkv.chunk(3, -1);
  auto out = at::scaled_dot_product_attention(parts[0], parts[1], parts[2]);
  out = proj(out.squeeze(1).permute({0, 2, 1}).reshape({n, c, h, w}));
  return images_to_frames(out, b) + x;
}

WanMidBlockImpl::WanMidBlockImpl(int64_t dim, double dropout) {
  attentions = register_module("attentions", torch::nn::ModuleList(WanAttentionBlock(dim)));
  resnets = register_module("resnets", torch::nn::ModuleList(WanResidualBlock(dim, dim, dropout),
                                                             WanResidualBlock(dim, dim, dropout)));
}

torch::Tensor WanMidBlockImpl::forward(const torch::Tensor& x, WanFeatureCache& cache) {
  auto h = resnets->ptr<WanResidualBlockImpl>(0)->forward(x, cache);
  h = attentions->ptr<WanAttentionBlockImpl>(0)->forward(h);
  return resnets->ptr<WanResidualBlockImpl>(1)->forward(h, cache);
}

torch::Tensor wan_avg_down_3d(const torch::Tensor& input, int64_t out_channels, int64_t factor_t, int64_t factor_s) {
  const int64_t pad_t = (factor_t - input.size(2) % factor_t) % factor_t;
  const auto x = torch::constant_pad_nd(input, {0, 0, 0, 0, pad_t, 0}, 0);
  const int64_t b = x.size(0), c = x.size(1), t = x.size(2) / factor_t, h = x.size(3) / factor_s,
                w = x.size(4) / factor_s;
  const int64_t factor = factor_t * factor_s * factor_s;
  return x.view({b, c, t, factor_t, h, factor_s, w, factor_s})
      .permute({0, 1, 3, 5, 7, 2, 4, 6})
      .contiguous()
      .view({b, out_channels, c * factor / out_channels, t, h, w})
      .mean(2);
}

torch::Tensor wan_dup_up_3d(const torch::Tensor& input, int64_t out_channels, int64_t factor_t, int64_t factor_s,
                            bool first_chunk) {
  const int64_t factor = factor_t * factor_s * factor_s;
  const int64_t b = input.size(0), t = input.size(2), h = input.size(3), w = input.size(4);
  auto x = input.repeat_interleave(out_channels * factor / input.size(1), 1)
               .view({b, out_channels, factor_t, factor_s, factor_s, t, h, w})
               .permute({0, 1, 5, 2, 6, 3, 7, 4})
               .contiguous()
               .view({b, out_channels, t * factor_t, h * factor_s, w * factor_s});
  return first_chunk ? x.slice(2, factor_t - 1) : x;
}

}  // namespace mm
