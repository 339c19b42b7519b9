// What a vision-language model needs of its vision tower, whichever family it is: merged patch
// features for the placeholder tokens, and its blocks (the units that sharding, recomputation and
// LoRA address). The Qwen2-VL, Qwen2.5-VL and Qwen3-VL towers implement it.
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>

#include <vector>

#include "mm/nn/block_runner.h"

namespace mm {

// What a tower gives the language model: the merged features that replace the placeholder tokens,
// and, for towers with DeepStack (Qwen3-VL), features of intermediate blocks that the decoder adds
// at the same positions after its first layers (deepstack[i] after decoder layer i).
struct VisionFeatures {
  torch::Tensor merged;                  // [merged tokens, language hidden size]
  std::vector<torch::Tensor> deepstack;  // each shaped as `merged`; empty without DeepStack
};

class VisionTowerImpl : public torch::nn::Module {
 public:
  // pixel_values: [num_patches, channels * temporal_patch * patch^2] in the processor's order;
  // grid_thw: [items, 3] int64 (t, h, w) in patches -> [merged tokens, language hidden size], in
  // the order of the placeholder tokens. Throws mm::Error naming what is malformed.
  virtual torch::Tensor forward(const torch::Tensor& pixel_values, const torch::Tensor& grid_thw) = 0;
  // The same with the DeepStack features of towers that have them.
  virtual VisionFeatures features(const torch::Tensor& pixel_values, const torch::Tensor& grid_thw) {
    return {forward(pixel_values, grid_thw), {}};
  }

  torch::nn::ModuleList blocks{nullptr};  // registered as "blocks" by the tower

  // When set, every block runs through it (recomputation, sharding); else directly.
  BlockRunner block_runner;
};

}  // namespace mm
