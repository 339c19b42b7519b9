// The Qwen3-VL vision encoder (HF: Qwen3VLVisionModel, checkpoint prefix "model.visual."): a
// Conv3d patch embedding with bias, learned position embeddings resampled to each image's grid,
// 2D rotary, LayerNorm blocks with a linear_fc1 -> act -> linear_fc2 MLP, attention within each
// frame, a LayerNorm + MLP merger of spatial_merge_size^2 patches, and the DeepStack mergers:
// the outputs of the blocks at deepstack_visual_indexes, merged (LayerNorm after the shuffle) and
// projected to the text width, which the decoder adds at the visual positions of its first
// layers. The patch embedding and the attention are Qwen2.5-VL's, computed as transformers does.
//
// Parameter names equal the HF state-dict names without the prefix: patch_embed.proj.{weight,bias},
// pos_embed.weight, blocks.N.{norm1,norm2}.{weight,bias}, blocks.N.attn.{qkv,proj}.{weight,bias},
// blocks.N.mlp.{linear_fc1,linear_fc2}.{weight,bias}, merger.{norm,linear_fc1,linear_fc2}.*,
// deepstack_merger_list.K.{norm,linear_fc1,linear_fc2}.*.
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <vector>

#include "mm/models/qwen2_5_vl/qwen2_5_vl_vision.h"
#include "mm/models/qwen3_vl/qwen3_vl_vision_config.h"
#include "mm/nn/linear.h"
#include "mm/nn/mlp.h"
#include "mm/nn/vision_tower.h"

namespace mm {

class VarlenSegments;

// Pre-norm block: x + attn(norm1(x)), then x + mlp(norm2(x)). A sharding / recompute unit.
class Qwen3VLVisionBlockImpl : public torch::nn::Module {
 public:
  explicit Qwen3VLVisionBlockImpl(const Qwen3VLVisionConfig& config);
  // x: [seq, hidden]; cos, sin: [seq, head_dim] fp32 -> [seq, hidden].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const VarlenSegments& segments);
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
  Qwen2_5_VLVisionAttention attn{nullptr};
  MLP mlp{nullptr};  // linear_fc1, linear_fc2, act = config.hidden_act
};
TORCH_MODULE(Qwen3VLVisionBlock);

// Each spatial_merge_size^2 consecutive tokens concatenated and projected: linear_fc1
// [hidden * m^2, hidden * m^2], exact GELU, linear_fc2 [out_hidden, hidden * m^2]. The LayerNorm
// runs before the concatenation over hidden (the main merger) or after it over hidden * m^2
// (`postshuffle_norm`: the DeepStack mergers).
class Qwen3VLPatchMergerImpl : public torch::nn::Module {
 public:
  Qwen3VLPatchMergerImpl(const Qwen3VLVisionConfig& config, bool postshuffle_norm);
  torch::Tensor forward(const torch::Tensor& x);  // [seq, hidden] -> [seq / m^2, out_hidden]
  torch::nn::LayerNorm norm{nullptr};
  Linear linear_fc1{nullptr}, linear_fc2{nullptr};

 private:
  bool postshuffle_norm_;
  int64_t merged_dim_;
};
TORCH_MODULE(Qwen3VLPatchMerger);

class Qwen3VLVisionModelImpl : public VisionTowerImpl {
 public:
  explicit Qwen3VLVisionModelImpl(const Qwen3VLVisionConfig& config);

  // pixel_values: [num_patches, in_channels * temporal_patch_size * patch_size^2], rows in the
  //               Qwen-VL processor's order; grid_thw: [num_items, 3] int64 (t, h, w) in patches.
  // Throws mm::Error naming what is wrong with a malformed grid_thw or a row count it does not
  // account for.
  // Returns the merged tokens [num_patches / m^2, out_hidden_size] in the placeholder tokens' order
  // and one DeepStack feature per deepstack_visual_indexes entry, in block order (as the
  // reference appends them: the first goes to decoder layer 0), each shaped as the merged tokens.
  VisionFeatures features(const torch::Tensor& pixel_values, const torch::Tensor& grid_thw) override;
  // The merged tokens alone.
  torch::Tensor forward(const torch::Tensor& pixel_values, const torch::Tensor& grid_thw) override;

  const Qwen3VLVisionConfig& config() const { return config_; }

  Qwen2_5_VisionPatchEmbed patch_embed{nullptr};
  torch::nn::Embedding pos_embed{nullptr};  // [num_position_embeddings, hidden]
  // blocks (VisionTowerImpl): Qwen3VLVisionBlock, config.depth of them
  Qwen3VLPatchMerger merger{nullptr};
  torch::nn::ModuleList deepstack_merger_list{nullptr};  // Qwen3VLPatchMerger, postshuffle norm

 private:
  // [num_patches, hidden] in `like`'s dtype: the table resampled to every item's grid.
  torch::Tensor position_embeddings(const std::vector<std::array<int64_t, 3>>& grid, const torch::Tensor& like);

  Qwen3VLVisionConfig config_;
  torch::Tensor inv_freq_;  // [head_dim / 4] fp32, not a parameter (not in checkpoints)
};
TORCH_MODULE(Qwen3VLVisionModel);

}  // namespace mm
