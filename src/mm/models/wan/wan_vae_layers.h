// The layers of the Wan causal 3D VAE (diffusers' autoencoder_kl_wan.py): the causal 3D
// convolution and the temporal feature cache that lets a video pass through in chunks, the
// channel RMS norm, spatial/temporal resampling, the residual and attention blocks, the middle
// block, and Wan2.2's parameter-free avg-down / dup-up shortcuts. Tensors are [B, C, T, H, W].
// Parameter names are diffusers' (conv1.weight, norm1.gamma, resample.1.weight, time_conv.bias ...).
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

#include <vector>

namespace mm {

// diffusers' CACHE_T: a causal convolution with a 3-frame kernel looks back 2 frames.
inline constexpr int64_t kWanCacheFrames = 2;

// diffusers' feat_cache / feat_idx: one slot per cached convolution in call order, reset to the
// first slot before each chunk (start_chunk) and emptied between videos and tiles (clear).
class WanFeatureCache {
 public:
  struct Slot {
    // kFirstChunk is diffusers' "Rep" marker: a temporal upsampler has seen its first chunk
    // (which it passes through without doubling) but has no frames cached yet.
    enum class State { kEmpty, kFirstChunk, kFrames };
    State state = State::kEmpty;
    torch::Tensor frames;  // [B, C, 1 or 2, H, W]: the last input frames of the previous chunk
  };
  void start_chunk() { cursor_ = 0; }
  void clear() {
    slots_.clear();
    cursor_ = 0;
  }
  Slot& next();

 private:
  std::vector<Slot> slots_;
  size_t cursor_ = 0;
};

// A Conv3d that pads time on the past side only (2 * padding_t frames), so output frame t sees
// input frames <= t. Parameters weight [out, in, kt, kh, kw], bias [out].
class WanCausalConv3dImpl : public torch::nn::Conv3dImpl {
 public:
  WanCausalConv3dImpl(int64_t in, int64_t out, torch::ExpandingArray<3> kernel, torch::ExpandingArray<3> stride = 1,
                      torch::ExpandingArray<3> padding = 0);
  // x: [B, in, T, H, W]; previous: [B, in, P, H, W] frames that precede x (P <= 2), standing in
  // for that many zero frames of the causal padding, or undefined -> [B, out, T', H', W'].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& previous = {});
  // forward with the frames cached from the previous chunk, then caches the last two input frames
  // of this chunk (topped up with the previous one when the chunk has a single frame).
  torch::Tensor forward_cached(const torch::Tensor& x, WanFeatureCache& cache);

 private:
  int64_t pad_t_, pad_h_, pad_w_;
};
TORCH_MODULE(WanCausalConv3d);

// L2-normalizes over channels (dim 1) and scales by sqrt(dim) * gamma; fp16/bf16 normalize in
// fp32. gamma: [dim, 1, 1, 1] (videos) or [dim, 1, 1] (images, [N, C, H, W] input).
class WanVAERMSNormImpl : public torch::nn::Module {
 public:
  WanVAERMSNormImpl(int64_t dim, bool images);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor gamma;

 private:
  double scale_;
};
TORCH_MODULE(WanVAERMSNorm);

enum class WanResampleMode { kUpsample2d, kUpsample3d, kDownsample2d, kDownsample3d };

// Spatial 2x resampling per frame (nearest-exact upsampling + 3x3 conv to upsample_out_dim, or a
// bottom/right zero pad + stride-2 3x3 conv), plus for the 3d modes a causal time convolution:
// up doubles the frames of every chunk but the first (dim -> 2 * dim channels interleaved into
// time), down halves them with a stride-2 conv over the previous chunk's last frame and this one.
// Parameters: resample.1.{weight,bias} (Conv2d), time_conv.{weight,bias} (3d modes).
class WanResampleImpl : public torch::nn::Module {
 public:
  WanResampleImpl(int64_t dim, WanResampleMode mode, int64_t upsample_out_dim);
  // x: [B, dim, T, H, W] -> up: [B, upsample_out_dim, T or 2T, 2H, 2W];
  // down: [B, dim, T', H/2, W/2] (T' = T on the first chunk of downsample3d, else about T/2).
  torch::Tensor forward(const torch::Tensor& x, WanFeatureCache& cache);

  // diffusers' nn.Sequential(ZeroPad2d or WanUpsample, Conv2d): index 0 has no parameters and
  // is applied in forward; the list keeps the checkpoint's "resample.1" names.
  torch::nn::ModuleList resample{nullptr};
  WanCausalConv3d time_conv{nullptr};

 private:
  WanResampleMode mode_;
};
TORCH_MODULE(WanResample);

// norm1 -> SiLU -> conv1 (3x3x3 causal) -> norm2 -> SiLU -> dropout -> conv2, plus the input
// through conv_shortcut (1x1x1, only when in_dim != out_dim). [B, in, T, H, W] -> [B, out, T, H, W].
class WanResidualBlockImpl : public torch::nn::Module {
 public:
  WanResidualBlockImpl(int64_t in_dim, int64_t out_dim, double dropout);
  torch::Tensor forward(const torch::Tensor& x, WanFeatureCache& cache);
  WanVAERMSNorm norm1{nullptr}, norm2{nullptr};
  WanCausalConv3d conv1{nullptr}, conv2{nullptr}, conv_shortcut{nullptr};

 private:
  double dropout_;
};
TORCH_MODULE(WanResidualBlock);

// Single-head self-attention over the H*W positions of each frame separately, with a residual.
// Parameters: norm.gamma [dim, 1, 1], to_qkv (Conv2d dim -> 3 dim, 1x1), proj (Conv2d dim -> dim).
class WanAttentionBlockImpl : public torch::nn::Module {
 public:
  explicit WanAttentionBlockImpl(int64_t dim);
  torch::Tensor forward(const torch::Tensor& x);  // [B, dim, T, H, W] -> same
  WanVAERMSNorm norm{nullptr};
  torch::nn::Conv2d to_qkv{nullptr}, proj{nullptr};
};
TORCH_MODULE(WanAttentionBlock);

// resnets.0 -> attentions.0 -> resnets.1, all at width dim.
class WanMidBlockImpl : public torch::nn::Module {
 public:
  WanMidBlockImpl(int64_t dim, double dropout);
  torch::Tensor forward(const torch::Tensor& x, WanFeatureCache& cache);
  torch::nn::ModuleList attentions{nullptr}, resnets{nullptr};
};
TORCH_MODULE(WanMidBlock);

// Wan2.2's encoder shortcut (diffusers' AvgDown3D): folds factor_t x factor_s x factor_s
// space-time cells into channels and averages groups of them down to out_channels; time is
// first front-padded with zero frames to a multiple of factor_t.
// x: [B, C, T, H, W] -> [B, out_channels, ceil(T / factor_t), H / factor_s, W / factor_s].
torch::Tensor wan_avg_down_3d(const torch::Tensor& x, int64_t out_channels, int64_t factor_t, int64_t factor_s);

// Wan2.2's decoder shortcut (diffusers' DupUp3D): repeats channels and unfolds them into
// factor_t x factor_s x factor_s cells; on the first chunk only the last of the factor_t frames is
// kept (the temporal upsampler does not double the first chunk either).
// x: [B, C, T, H, W] -> [B, out_channels, T * factor_t (first chunk: T * factor_t - factor_t + 1),
// H * factor_s, W * factor_s].
torch::Tensor wan_dup_up_3d(const torch::Tensor& x, int64_t out_channels, int64_t factor_t, int64_t factor_s,
                            bool first_chunk);

}  // namespace mm
