// The hook through which training wraps every transformer block from outside (activation
// recomputation now, FSDP all-gather / reshard later) without branches in the models' forward.
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <functional>

namespace mm {

// One block's forward with everything but its hidden-state input captured:
// [..., hidden] -> [..., hidden]. It owns what it captures (by value), since a runner may keep it
// and call it again after the model's forward returned (recomputation in backward). Captured
// tensors (rotary tables, masks) must not need gradients.
using BlockFn = std::function<torch::Tensor(const torch::Tensor&)>;

// Runs `run` on `input` for `block` (whose parameters `run` uses) and returns its output. A model
// with a runner set calls it once per block instead of calling the block directly.
using BlockRunner =
    std::function<torch::Tensor(torch::nn::Module& block, const BlockFn& run, const torch::Tensor& input)>;

}  // namespace mm
