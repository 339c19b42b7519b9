// Lets the blocks' conditioning tensors (embedded text and image tokens, the projected timestep)
// carry gradients through a BlockRunner, whose BlockFn only passes the hidden state.
//
// A recomputing runner re-runs a block inside its own backward; a captured tensor with autograd
// history would be back-propagated there once per block, into the condition embedder's graph.
// So the blocks capture detached leaves instead (gradients of every block accumulate in them,
// during the outer backward or a runner's recompute alike), and the first block's input passes
// through a node whose backward hands those accumulated gradients to the real tensors. That
// node runs after every block's backward: its output is the first block's input, whose gradient
// exists only once all blocks are done (and the leaves' accumulation, which depends only on
// later nodes of the same blocks, runs first: the autograd engine gives accumulation priority).
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

namespace mm {

struct WanConditionBridge {
  std::vector<torch::Tensor> leaves;  // what the blocks use, one per condition (undefined stays undefined)
  torch::Tensor input;                // the first block's input, routed through the bridge
};

// hidden: the first block's input; conditions: tensors the blocks capture. Without grad mode or
// when no condition needs a gradient, returns them unchanged.
WanConditionBridge wan_condition_bridge(const torch::Tensor& hidden, const std::vector<torch::Tensor>& conditions);

}  // namespace mm
