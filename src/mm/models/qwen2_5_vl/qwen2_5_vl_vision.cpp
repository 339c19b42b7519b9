#include "mm/models/qwen2_5_vl/qwen2_5_vl_vision.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "mm/core/error.h"
#include "mm/core/host_to_device.h"
#include "mm/nn/rotary_2d.h"
#include "mm/nn/varlen_attention.h"
#include "mm/models/qwen2_5_vl/qwen2_5_vl_vision_layout.h"

namespace mm {
namespace {

constexpr double kNormEps = 1e-6;

Linear linear(int64_t in, int64_t out) { return Linear(in, out, /*bias=*/true); }

}  // namespace

Qwen2_5_VLVisionConfig patch_and_attention_shape(int64_t hidden, int64_t num_heads, int64_t in_channels,
                                                 int64_t patch_size, int64_t temporal_patch_size) {
  Qwen2_5_VLVisionConfig p;
  p.hidden_size = hidden;
  p.num_heads = num_heads;
  p.in_channels = in_channels;
  p.patch_size = patch_size;
  p.temporal_patch_size = temporal_patch_size;
  return p;
}

torch::nn::LayerNorm vision_layer_norm(int64_t dim) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(kNormEps));
}

Qwen2_5_VisionPatchEmbedImpl::Qwen2_5_VisionPatchEmbedImpl(const Qwen2_5_VLVisionConfig& c, bool bias) {
  const std::vector<int64_t> kernel = {c.temporal_patch_size, c.patch_size, c.patch_size};
  proj = register_module("proj", torch::nn::Conv3d(torch::nn::Conv3dOptions(c.in_channels, c.hidden_size, kernel)
                                                       .stride(kernel)
                                                       .bias(bias)));
}

torch::Tensor Qwen2_5_VisionPatchEmbedImpl::forward(const torch::Tensor& pixel_values) {
  const torch::Tensor& w = proj->weight;
  const int64_t patch_dim = w[0].numel();
  MM_CHECK(pixel_values.dim() == 2 && pixel_values.size(1) == patch_dim,
           "vision patch embedding: pixel_values must be [num_patches, ", patch_dim,
           "] (in_channels * temporal_patch_size * patch_size^2), got ", pixel_values.sizes());
  const auto patches = pixel_values.to(w.scalar_type());
  if (!patches.is_cpu() || matmul_on_cpu) {
    const torch::Tensor flat = w.reshape({w.size(0), patch_dim});
    // With a bias, nn.Linear's addmm (transformers' fused form); without, the plain matmul.
    return proj->bias.defined() ? torch::linear(patches, flat, proj->bias) : torch::matmul(patches, flat.t());
  }
  return proj->forward(patches.reshape({-1, w.size(1), w.size(2), w.size(3), w.size(4)})).view({-1, w.size(0)});
}

Qwen2_5_VLVisionAttentionImpl::Qwen2_5_VLVisionAttentionImpl(const Qwen2_5_VLVisionConfig& c)
    : num_heads_(c.num_heads), head_dim_(c.hidden_size / c.num_heads) {
  qkv = register_module("qkv", linear(c.hidden_size, 3 * c.hidden_size));
  proj = register_module("proj", linear(c.hidden_size, c.hidden_size));
}

torch::Tensor Qwen2_5_VLVisionAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                                     const torch::Tensor& sin, const VarlenSegments& segments) {
  const int64_t seq = x.size(0);
  const torch::Tensor qkv_states = qkv(x).view({seq, 3, num_heads_, head_dim_});
  // Rotary on q and k together: [seq, 2, heads, head_dim]
  const torch::Tensor qk = apply_rotary_fp32(qkv_states.narrow(1, 0, 2), cos, sin);
  const torch::Tensor out = segments.attention(qk.select(1, 0), qk.select(1, 1), qkv_states.select(1, 2),
                                               std::pow(static_cast<double>(head_dim_), -0.5));
  return proj(out.reshape({seq, num_heads_ * head_dim_}));
}

Qwen2_5_VLVisionBlockImpl::Qwen2_5_VLVisionBlockImpl(const Qwen2_5_VLVisionConfig& c) {
  norm1 = register_module("norm1", RMSNorm(c.hidden_size, kNormEps));
  norm2 = register_module("norm2", RMSNorm(c.hidden_size, kNormEps));
  attn = register_module("attn", Qwen2_5_VLVisionAttention(c));
  mlp = register_module("mlp", GatedMLP(c.hidden_size, c.intermediate_size, /*bias=*/true, c.hidden_act));
}

torch::Tensor Qwen2_5_VLVisionBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                                 const torch::Tensor& sin, const VarlenSegments& segments) {
  const torch::Tensor h = x + attn(norm1(x), cos, sin, segments);
  return h + mlp(norm2(h));
}

Qwen2_5_VLPatchMergerImpl::Qwen2_5_VLPatchMergerImpl(const Qwen2_5_VLVisionConfig& c)
    : merged_dim_(c.hidden_size * c.spatial_merge_size * c.spatial_merge_size) {
  ln_q = register_module("ln_q", RMSNorm(c.hidden_size, kNormEps));
  mlp = register_module("mlp", torch::nn::Sequential(linear(merged_dim_, merged_dim_), torch::nn::GELU(),
                                                     linear(merged_dim_, c.out_hidden_size)));
}

torch::Tensor Qwen2_5_VLPatchMergerImpl::forward(const torch::Tensor& x) {
  return mlp->forward(ln_q(x).reshape({-1, merged_dim_}));
}

Qwen2_5_VisionTransformerImpl::Qwen2_5_VisionTransformerImpl(const Qwen2_5_VLVisionConfig& config)
    : config_(config) {
  config_.validate();
  MM_CHECK(config_.window_size >= config_.patch_size * config_.spatial_merge_size,
           "config.json: vision_config.window_size (", config_.window_size,
           ") must be at least patch_size * spatial_merge_size (",
           config_.patch_size * config_.spatial_merge_size, ")");
  patch_embed = register_module("patch_embed", Qwen2_5_VisionPatchEmbed(config_));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < config_.depth; ++i) blocks->push_back(Qwen2_5_VLVisionBlock(config_));
  merger = register_module("merger", Qwen2_5_VLPatchMerger(config_));
  inv_freq_ = axial_rope_inv_freq(config_.hidden_size / config_.num_heads, config_.rope_theta);
}

torch::Tensor Qwen2_5_VisionTransformerImpl::forward(const torch::Tensor& pixel_values,
                                                     const torch::Tensor& grid_thw) {
  const auto& c = config_;
  const int64_t unit = c.spatial_merge_size * c.spatial_merge_size;
  const Qwen2_5_VisionLayout layout = qwen2_5_vision_layout(
      vision_grid_of(grid_thw, "Qwen2.5-VL vision"), c.spatial_merge_size, c.window_size / c.spatial_merge_size / c.patch_size);
  MM_CHECK(pixel_values.defined() && pixel_values.dim() == 2 && pixel_values.size(0) == layout.num_patches,
           "Qwen2.5-VL vision: grid_thw accounts for ", layout.num_patches,
           " patches (sum of t*h*w) but pixel_values has ",
           pixel_values.defined() && pixel_values.dim() > 0 ? c10::str(pixel_values.size(0), " rows")
                                                            : std::string("no rows"));
  const torch::Device device = pixel_values.device();
  const int64_t num_units = layout.num_patches / unit;
  const torch::Tensor window_index = torch::tensor(layout.window_index, torch::kLong);
  std::vector<int64_t> inverse(layout.window_index.size());
  for (size_t j = 0; j < inverse.size(); ++j)
    inverse[static_cast<size_t>(layout.window_index[j])] = static_cast<int64_t>(j);

  // Patches regrouped window by window (whole merge units move together), and their rotary
  // positions with them.
  const torch::Tensor unit_order = to_device_async(window_index, device);
  const torch::Tensor embedded = patch_embed(pixel_values);
  torch::Tensor hidden =
      embedded.view({num_units, unit, -1}).index_select(0, unit_order).view({layout.num_patches, -1});
  const torch::Tensor positions = torch::tensor(layout.position_ids, torch::kLong)
                                      .view({num_units, unit, 2})
                                      .index_select(0, window_index)
                                      .view({layout.num_patches, 2});
  const auto [cos, sin] = axial_rope_cos_sin(to_device_async(positions, device), to_device_async(inv_freq_, device));

  const VarlenSegments frames(layout.cu_seqlens, device);
  const VarlenSegments windows(layout.cu_window_seqlens, device);
  const auto& full = c.fullatt_block_indexes;
  for (size_t i = 0; i < blocks->size(); ++i) {
    const bool is_full = std::find(full.begin(), full.end(), static_cast<int64_t>(i)) != full.end();
    auto* block = blocks->ptr<Qwen2_5_VLVisionBlockImpl>(i).get();
    const VarlenSegments& segments = is_full ? frames : windows;
    if (!block_runner) {
      hidden = block->forward(hidden, cos, sin, segments);
      continue;
    }
    // The runner may call `run` again in backward, after this frame is gone: capture by value.
    hidden = block_runner(
        *block, [block, cos, sin, segments](const torch::Tensor& x) { return block->forward(x, cos, sin, segments); },
        hidden);
  }

  // Merged units back into processor order.
  return merger(hidden).index_select(0, host_values_on(inverse, device));
}

}  // namespace mm
