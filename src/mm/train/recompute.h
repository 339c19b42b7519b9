// Activation recomputation (checkpointing) for transformer blocks. libtorch has no
// torch.utils.checkpoint, so this is ours, built on torch::autograd::Function in the reentrant
// style (use_reentrant=True): the block's forward runs without keeping its activations; in
// backward the block is run again with grad enabled (same RNG and autocast state as the first
// time) and back-propagated, which accumulates into its parameters' .grad and yields the
// gradient of its input.
#pragma once
#include "mm/nn/block_runner.h"

namespace mm {

// A runner for Qwen2ModelImpl::block_runner / Qwen2_5_VisionTransformerImpl::block_runner.
// Tensors the block captures besides its input (rotary tables, masks) get no gradient, so they
// must not need one. Parameters get gradients even when the input needs none (e.g. the first
// block over frozen embeddings). Do not use it with a KV cache (the recompute would append
// twice); training has none.
BlockRunner recompute_runner();

}  // namespace mm
