// Qwen3 / Qwen3-MoE causal language model (HF Qwen3ForCausalLM / Qwen3MoeForCausalLM): the shared
// Qwen decoder under "model." and an lm_head (absent when tied to model.embed_tokens). Loads a
// save_pretrained directory or a published checkpoint (per-expert MoE weights either way).
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <filesystem>
#include <vector>

#include "mm/models/qwen2/qwen2_decoder.h"
#include "mm/models/qwen3/qwen3_config.h"
#include "mm/nn/linear.h"

namespace mm {

class KVCache;

struct Qwen3Inputs {
  torch::Tensor input_ids;       // [batch, seq] int64
  torch::Tensor attention_mask;  // [batch, cached + seq], 1 = token, 0 = (left) padding; or undefined
  torch::Tensor labels;          // [batch, seq] int64, -100 = ignored; undefined: no loss
  torch::Tensor position_ids;    // [batch, seq]; undefined: cached + 0, 1, ... as transformers' forward
  std::vector<int64_t> cu_seqlens;  // packed samples (batch 1), see Qwen2ModelImpl::forward
};

struct Qwen3Output {
  torch::Tensor logits;  // [batch, seq, vocab]
  // Mean next-token cross entropy over the labels (shifted by one), in fp32, plus
  // router_aux_loss_coef * aux_loss when the config outputs router logits; undefined without labels.
  torch::Tensor loss;
  torch::Tensor aux_loss;  // MoE without a cache: the load-balancing loss (fp32 scalar), padding excluded
  std::vector<torch::Tensor> router_logits;  // MoE: [batch * seq, num_experts] per sparse layer
};

class Qwen3ForCausalLMImpl : public torch::nn::Module {
 public:
  explicit Qwen3ForCausalLMImpl(const Qwen3Config& config);
  // config.json and the safetensors of `dir`; every tensor must match (lm_head.weight optional
  // when tied). Returns the model in eval mode.
  static std::shared_ptr<Qwen3ForCausalLMImpl> from_pretrained(const std::filesystem::path& dir,
                                                               torch::Dtype dtype = torch::kFloat32,
                                                               const c10::Device& device = c10::kCPU);

  // With a cache, the new keys and values are appended to it.
  Qwen3Output forward(const Qwen3Inputs& inputs, KVCache* cache = nullptr);

  // Greedy decoding of max_new_tokens tokens with a KV cache (no stopping at eos), positions as
  // transformers' generate makes them from the attention mask (left padding allowed).
  // input_ids: [batch, seq]; attention_mask: [batch, seq] or undefined. Returns [batch, seq + max_new_tokens].
  torch::Tensor generate_greedy(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                int64_t max_new_tokens);

  const Qwen3Config& config() const { return config_; }
  // Training asks for the aux loss in the loss (transformers' output_router_logits=True).
  void set_output_router_logits(bool on) { config_.output_router_logits = on; }

  Qwen2Model model{nullptr};
  Linear lm_head{nullptr};  // [vocab, hidden]; null when tied

 private:
  torch::Tensor head(const torch::Tensor& hidden);  // [..., hidden] -> [..., vocab]
  Qwen3Config config_;
};
TORCH_MODULE(Qwen3ForCausalLM);

}  // namespace mm
