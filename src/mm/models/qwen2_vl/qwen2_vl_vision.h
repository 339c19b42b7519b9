// The Qwen2-VL vision encoder (HF: Qwen2VisionTransformerPretrainedModel, checkpoint prefix
// "visual." / "model.visual."): 3D patch embedding, 2D rotary, full attention within each frame
// in every block (no windows, unlike Qwen2.5-VL), LayerNorm, an fc1 -> quick_gelu -> fc2 MLP, and
// a LayerNorm + MLP merger of spatial_merge_size^2 patches. The patch embedding and the attention
// are Qwen2.5-VL's (which inherited them from Qwen2-VL), computed as transformers computes them.
//
// Parameter names equal the HF state-dict names without the prefix: patch_embed.proj.weight,
// blocks.N.{norm1,norm2}.{weight,bias}, blocks.N.attn.{qkv,proj}.{weight,bias},
// blocks.N.mlp.{fc1,fc2}.{weight,bias}, merger.ln_q.{weight,bias}, merger.mlp.{0,2}.{weight,bias}.
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include "mm/models/qwen2_5_vl/qwen2_5_vl_vision.h"
#include "mm/models/qwen2_vl/qwen2_vl_vision_config.h"
#include "mm/nn/mlp.h"
#include "mm/nn/vision_tower.h"

namespace mm {

class VarlenSegments;

// Pre-norm block: x + attn(norm1(x)), then x + mlp(norm2(x)). A sharding / recompute unit.
class Qwen2VLVisionBlockImpl : public torch::nn::Module {
 public:
  explicit Qwen2VLVisionBlockImpl(const Qwen2VLVisionConfig& config);
  // x: [seq, embed_dim]; cos, sin: [seq, head_dim] fp32 -> [seq, embed_dim].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const VarlenSegments& segments);
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
  Qwen2_5_VLVisionAttention attn{nullptr};
  MLP mlp{nullptr};
};
TORCH_MODULE(Qwen2VLVisionBlock);

// LayerNorm, then each spatial_merge_size^2 consecutive tokens concatenated and projected:
// mlp.0 [embed_dim * m^2, embed_dim * m^2], exact GELU, mlp.2 [hidden_size, embed_dim * m^2].
class Qwen2VLPatchMergerImpl : public torch::nn::Module {
 public:
  explicit Qwen2VLPatchMergerImpl(const Qwen2VLVisionConfig& config);
  torch::Tensor forward(const torch::Tensor& x);  // [seq, embed_dim] -> [seq / m^2, hidden_size]
  torch::nn::LayerNorm ln_q{nullptr};
  torch::nn::Sequential mlp{nullptr};

 private:
  int64_t merged_dim_;
};
TORCH_MODULE(Qwen2VLPatchMerger);

class Qwen2VisionTransformerImpl : public VisionTowerImpl {
 public:
  explicit Qwen2VisionTransformerImpl(const Qwen2VLVisionConfig& config);

  // pixel_values: [num_patches, in_channels * temporal_patch_size * patch_size^2], rows in the
  //               Qwen2-VL processor's order; grid_thw: [num_items, 3] int64 (t, h, w) in patches.
  // returns:      [num_patches / spatial_merge_size^2, hidden_size], in the same order.
  // Throws mm::Error naming what is wrong with a malformed grid_thw or a row count it does not
  // account for.
  torch::Tensor forward(const torch::Tensor& pixel_values, const torch::Tensor& grid_thw) override;

  const Qwen2VLVisionConfig& config() const { return config_; }

  Qwen2_5_VisionPatchEmbed patch_embed{nullptr};
  // blocks (VisionTowerImpl): Qwen2VLVisionBlock, config.depth of them
  Qwen2VLPatchMerger merger{nullptr};

 private:
  Qwen2VLVisionConfig config_;
  torch::Tensor inv_freq_;  // [head_dim / 4] fp32, not a parameter (not in checkpoints)
};
TORCH_MODULE(Qwen2VisionTransformer);

}  // namespace mm
