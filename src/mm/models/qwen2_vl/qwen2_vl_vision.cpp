#include "mm/models/qwen2_vl/qwen2_vl_vision.h"

#include <torch/torch.h>

#include "mm/core/error.h"
#include "mm/core/host_to_device.h"
#include "mm/models/qwen2_5_vl/qwen2_5_vl_vision_layout.h"
#include "mm/nn/rotary_2d.h"
#include "mm/nn/varlen_attention.h"

namespace mm {
namespace {

Qwen2_5_VLVisionConfig shared_parts_of(const Qwen2VLVisionConfig& c) {
  return patch_and_attention_shape(c.embed_dim, c.num_heads, c.in_channels, c.patch_size, c.temporal_patch_size);
}

}  // namespace

Qwen2VLVisionBlockImpl::Qwen2VLVisionBlockImpl(const Qwen2VLVisionConfig& c) {
  norm1 = register_module("norm1", vision_layer_norm(c.embed_dim));
  norm2 = register_module("norm2", vision_layer_norm(c.embed_dim));
  attn = register_module("attn", Qwen2_5_VLVisionAttention(shared_parts_of(c)));
  mlp = register_module("mlp", MLP(c.embed_dim, c.mlp_hidden(), c.hidden_act));
}

torch::Tensor Qwen2VLVisionBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                              const VarlenSegments& segments) {
  const torch::Tensor h = x + attn(norm1(x), cos, sin, segments);
  return h + mlp(norm2(h));
}

Qwen2VLPatchMergerImpl::Qwen2VLPatchMergerImpl(const Qwen2VLVisionConfig& c)
    : merged_dim_(c.embed_dim * c.spatial_merge_size * c.spatial_merge_size) {
  ln_q = register_module("ln_q", vision_layer_norm(c.embed_dim));
  mlp = register_module("mlp", torch::nn::Sequential(Linear(merged_dim_, merged_dim_, true), torch::nn::GELU(),
                                                     Linear(merged_dim_, c.hidden_size, true)));
}

torch::Tensor Qwen2VLPatchMergerImpl::forward(const torch::Tensor& x) {
  return mlp->forward(ln_q(x).reshape({-1, merged_dim_}));
}

Qwen2VisionTransformerImpl::Qwen2VisionTransformerImpl(const Qwen2VLVisionConfig& config) : config_(config) {
  config_.validate();
  patch_embed = register_module("patch_embed", Qwen2_5_VisionPatchEmbed(shared_parts_of(config_)));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < config_.depth; ++i) blocks->push_back(Qwen2VLVisionBlock(config_));
  merger = register_module("merger", Qwen2VLPatchMerger(config_));
  inv_freq_ = axial_rope_inv_freq(config_.head_dim(), config_.rope_theta);
}

torch::Tensor Qwen2VisionTransformerImpl::forward(const torch::Tensor& pixel_values, const torch::Tensor& grid_thw) {
  // The positions and the per-frame segments are Qwen2.5-VL's layout (its windows go unused:
  // every Qwen2-VL block attends within whole frames, in processor order).
  const Qwen2_5_VisionLayout layout = qwen2_5_vision_layout(vision_grid_of(grid_thw, "Qwen2-VL vision"), config_.spatial_merge_size, 1);
  MM_CHECK(pixel_values.defined() && pixel_values.dim() == 2 && pixel_values.size(0) == layout.num_patches,
           "Qwen2-VL vision: grid_thw accounts for ", layout.num_patches, " patches (sum of t*h*w) but pixel_values has ",
           pixel_values.defined() && pixel_values.dim() > 0 ? c10::str(pixel_values.size(0), " rows")
                                                            : std::string("no rows"));
  const torch::Device device = pixel_values.device();
  torch::Tensor hidden = patch_embed(pixel_values);
  const torch::Tensor positions = host_values_on(layout.position_ids, device).view({layout.num_patches, 2});
  const auto [cos, sin] = axial_rope_cos_sin(positions, to_device_async(inv_freq_, device));
  const VarlenSegments frames(layout.cu_seqlens, device);
  for (size_t i = 0; i < blocks->size(); ++i) {
    auto* block = blocks->ptr<Qwen2VLVisionBlockImpl>(i).get();
    if (!block_runner) {
      hidden = block->forward(hidden, cos, sin, frames);
      continue;
    }
    // The runner may call `run` again in backward, after this frame is gone: capture by value.
    hidden = block_runner(
        *block, [block, cos, sin, frames](const torch::Tensor& x) { return block->forward(x, cos, sin, frames); }, hidden);
  }
  return merger(hidden);
}

}  // namespace mm
