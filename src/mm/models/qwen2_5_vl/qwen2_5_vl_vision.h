// The Qwen2.5-VL vision encoder (HF: Qwen2_5_VisionTransformerPretrainedModel, checkpoint
// prefix "visual."): 3D patch embedding, 2D rotary, window attention with full-attention
// blocks at fullatt_block_indexes, RMSNorm, gated MLP, spatial_merge_size^2 patch merger.
// Computes as transformers does in each dtype (SDPA attention per segment, rotary and RMSNorm
// in fp32), with the patch embedding as transformers' fused Linear form.
//
// Parameter names equal the HF state-dict names without "visual.": patch_embed.proj.weight,
// blocks.N.{norm1,norm2}.weight, blocks.N.attn.{qkv,proj}.{weight,bias},
// blocks.N.mlp.{gate_proj,up_proj,down_proj}.{weight,bias}, merger.ln_q.weight,
// merger.mlp.{0,2}.{weight,bias}.
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include "mm/nn/gated_mlp.h"
#include "mm/nn/linear.h"
#include "mm/nn/norms.h"
#include "mm/nn/vision_tower.h"
#include "mm/models/qwen2_5_vl/qwen2_5_vl_vision_config.h"

namespace mm {

class VarlenSegments;

// The fields of a Qwen2_5_VLVisionConfig that its patch embedding and attention read, for the
// towers that reuse those two (Qwen2-VL's with its embed_dim, Qwen3-VL's).
Qwen2_5_VLVisionConfig patch_and_attention_shape(int64_t hidden, int64_t num_heads, int64_t in_channels,
                                                 int64_t patch_size, int64_t temporal_patch_size);

// LayerNorm over `dim` with eps 1e-6: the norm of the Qwen2-VL and Qwen3-VL vision blocks and
// mergers.
torch::nn::LayerNorm vision_layer_norm(int64_t dim);

// Conv3d with kernel == stride over one flattened patch. On the CPU it runs as the reference's
// Conv3d, so bf16 rounds exactly as transformers does (a matmul gives the same sum but rounds
// about 2 elements in 10^4 one ulp apart, and 32 vision blocks amplify that into different bf16
// answers at real sizes). On CUDA it runs as a matmul on the flattened patch (transformers'
// fusion_config "patch_embeddings"): Conv3d with this shape is pathologically slow on some cuDNN
// versions, and GPU bf16 kernels differ from the reference's anyway.
// Parameter: proj.weight [hidden, in_channels, temporal_patch_size, patch_size, patch_size], and
// proj.bias [hidden] when `bias` (Qwen3-VL's patch embedding has one, Qwen2-VL's and Qwen2.5-VL's
// do not).
class Qwen2_5_VisionPatchEmbedImpl : public torch::nn::Module {
 public:
  explicit Qwen2_5_VisionPatchEmbedImpl(const Qwen2_5_VLVisionConfig& config, bool bias = false);
  // pixel_values: [num_patches, in_channels * temporal_patch_size * patch_size^2], any float
  // dtype (cast to the weight's) -> [num_patches, hidden].
  torch::Tensor forward(const torch::Tensor& pixel_values);
  torch::nn::Conv3d proj{nullptr};
  // The CUDA path's matmul on the CPU too: its CPU twin, which the tests prove against
  // transformers' fused patch embedding.
  bool matmul_on_cpu = false;
};
TORCH_MODULE(Qwen2_5_VisionPatchEmbed);

// Self-attention within the segments of `segments`, rotary on q and k computed in fp32.
// Parameters: qkv [3 * hidden, hidden] (+ bias), proj [hidden, hidden] (+ bias).
class Qwen2_5_VLVisionAttentionImpl : public torch::nn::Module {
 public:
  explicit Qwen2_5_VLVisionAttentionImpl(const Qwen2_5_VLVisionConfig& config);
  // x: [seq, hidden]; cos, sin: [seq, head_dim] fp32 -> [seq, hidden].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const VarlenSegments& segments);
  Linear qkv{nullptr}, proj{nullptr};

 private:
  int64_t num_heads_, head_dim_;
};
TORCH_MODULE(Qwen2_5_VLVisionAttention);

// Pre-norm block: x + attn(norm1(x)), then x + mlp(norm2(x)). A sharding / recompute unit.
class Qwen2_5_VLVisionBlockImpl : public torch::nn::Module {
 public:
  explicit Qwen2_5_VLVisionBlockImpl(const Qwen2_5_VLVisionConfig& config);
  // x: [seq, hidden]; cos, sin: [seq, head_dim] fp32 -> [seq, hidden].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const VarlenSegments& segments);
  RMSNorm norm1{nullptr}, norm2{nullptr};
  Qwen2_5_VLVisionAttention attn{nullptr};
  GatedMLP mlp{nullptr};  // with biases, act = config.hidden_act
};
TORCH_MODULE(Qwen2_5_VLVisionBlock);

// RMSNorm, then each spatial_merge_size^2 consecutive tokens concatenated and projected:
// mlp.0 [hidden * m^2, hidden * m^2], exact GELU, mlp.2 [out_hidden, hidden * m^2].
class Qwen2_5_VLPatchMergerImpl : public torch::nn::Module {
 public:
  explicit Qwen2_5_VLPatchMergerImpl(const Qwen2_5_VLVisionConfig& config);
  // x: [seq, hidden] -> [seq / m^2, out_hidden]
  torch::Tensor forward(const torch::Tensor& x);
  RMSNorm ln_q{nullptr};
  torch::nn::Sequential mlp{nullptr};

 private:
  int64_t merged_dim_;
};
TORCH_MODULE(Qwen2_5_VLPatchMerger);

class Qwen2_5_VisionTransformerImpl : public VisionTowerImpl {
 public:
  explicit Qwen2_5_VisionTransformerImpl(const Qwen2_5_VLVisionConfig& config);

  // pixel_values: [num_patches, in_channels * temporal_patch_size * patch_size^2], rows in the
  //               order the Qwen2-VL processor emits them (all images/videos concatenated).
  // grid_thw:     [num_items, 3] int64, (t, h, w) of each item in patches.
  // returns:      [num_patches / spatial_merge_size^2, out_hidden_size], merged tokens in the
  //               processor's order (the order of the placeholder tokens in the text).
  // Throws mm::Error when grid_thw is malformed (shape, non-positive sizes, h or w not divisible
  // by spatial_merge_size) or does not account for exactly the rows of pixel_values.
  torch::Tensor forward(const torch::Tensor& pixel_values, const torch::Tensor& grid_thw) override;

  const Qwen2_5_VLVisionConfig& config() const { return config_; }

  Qwen2_5_VisionPatchEmbed patch_embed{nullptr};
  // blocks (VisionTowerImpl): Qwen2_5_VLVisionBlock, config.depth of them
  Qwen2_5_VLPatchMerger merger{nullptr};

 private:
  Qwen2_5_VLVisionConfig config_;
  torch::Tensor inv_freq_;  // [head_dim / 4] fp32, not a parameter (not in checkpoints)
};
TORCH_MODULE(Qwen2_5_VisionTransformer);

}  // namespace mm
