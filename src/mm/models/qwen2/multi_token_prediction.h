// Qwen3.5's multi-token-prediction head (checkpoint keys mtp.*; transformers has no module for it
// and drops it on load): for depth k = 1..D, the hidden state of position i and the embedding of
// token i + k are each RMS-normed, concatenated [embedding, hidden], projected back to the hidden
// width (fc), run through one full-attention decoder layer over the same positions and mask as the
// decoder, and normed; the model's lm_head on that predicts token i + k + 1. Depth 1 reads the
// decoder's final (normed) hidden state, depth k > 1 depth k - 1's output. The wiring is vLLM's
// Qwen3_5MultiTokenPredictor (the serving side of these checkpoints); the training loss over the
// depths is Megatron's multi-token prediction (DeepSeek-V3): weight / D times the sum of the depths'
// cross-entropies (tasks/vlm_step.h).
// Parameter names follow the checkpoints: fc.weight [hidden, 2 * hidden], layers.K.* (a Qwen3.5
// gated-attention decoder layer, sparse in an MoE model), norm.weight, pre_fc_norm_hidden.weight,
// pre_fc_norm_embedding.weight (all zero-centred, as the decoder's).
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include "mm/models/qwen2/qwen2_decoder.h"

namespace mm {

class MultiTokenPredictionImpl : public torch::nn::Module {
 public:
  explicit MultiTokenPredictionImpl(const Qwen2TextConfig& config);

  int64_t depths() const { return static_cast<int64_t>(layers->size()); }

  // Depth k (1-based): next_embeds [batch, seq, hidden] = the input embeddings shifted left by k
  // (position i holds token i + k's), hidden [batch, seq, hidden] = the previous depth's output;
  // context: the decoder's for these positions (Qwen2ModelImpl::context, no cache); balance: the
  // decoder's load-balancing loss, which a sparse layer of the head feeds too. Returns the
  // depth's normed output [batch, seq, hidden], what the lm_head reads.
  torch::Tensor forward(int64_t k, const torch::Tensor& next_embeds, const torch::Tensor& hidden,
                        const DecoderContext& context, std::shared_ptr<LoadBalancingLoss> balance = nullptr);

  Linear fc{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr}, pre_fc_norm_hidden{nullptr}, pre_fc_norm_embedding{nullptr};

  // When set, every layer runs through it (recomputation, sharding), as the decoder's do.
  BlockRunner block_runner;
};
TORCH_MODULE(MultiTokenPrediction);

}  // namespace mm
