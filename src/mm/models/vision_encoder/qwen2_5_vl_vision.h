// The Qwen2.5-VL vision encoder (HF: Qwen2_5_VisionTransformerPretrainedModel, checkpoint
// prefix "visual."): 3D patch embedding, 2D rotary, window attention with full-attention
// blocks at fullatt_block_indexes, RMSNorm, gated MLP, 2x2 patch merger.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "mm/models/qwen2_5_vl_config.h"

namespace mm {

class Qwen2_5_VisionTransformerImpl : public torch::nn::Module {
 public:
  explicit Qwen2_5_VisionTransformerImpl(const Qwen2_5_VLVisionConfig& config);

  // pixel_values: [num_patches, in_channels * temporal_patch_size * patch_size^2], rows in the
  //               order the Qwen2-VL processor emits them (all images/videos concatenated).
  // grid_thw:     [num_items, 3] int64, (t, h, w) of each item in patches.
  // returns:      [num_patches / spatial_merge_size^2, out_hidden_size], merged tokens in the
  //               processor's order (the order of the placeholder tokens in the text).
  torch::Tensor forward(const torch::Tensor& pixel_values, const torch::Tensor& grid_thw);

  const Qwen2_5_VLVisionConfig& config() const { return config_; }

 private:
  Qwen2_5_VLVisionConfig config_;
};
TORCH_MODULE(Qwen2_5_VisionTransformer);

}  // namespace mm
