// LoRA fine-tuning (as PEFT's LoraConfig / get_peft_model with LLaMA-Factory's defaults):
// adapters on chosen mm::Linear layers, everything else frozen.
#pragma once
#include <torch/nn/module.h>

#include <string>
#include <vector>

namespace mm {

struct LoraConfig {
  int64_t rank = 8;
  double alpha = 16;
  double dropout = 0.0;
  // Last name component of the linears that get adapters: attention and MLP (experts included),
  // and Gated DeltaNet's counterparts of q/k/v and o (in_proj_qkv, in_proj_z for the output gate,
  // out_proj; not the per-head in_proj_a/b of a few outputs each).
  std::vector<std::string> target_modules = {"q_proj",      "k_proj",    "v_proj",   "o_proj",   "gate_proj",
                                             "up_proj",     "down_proj", "in_proj_qkv", "in_proj_z", "out_proj"};
  // LLaMA-Factory freezes and skips the vision tower by default.
  std::vector<std::string> exclude_prefixes = {"visual."};
};

// Attaches an adapter to every mm::Linear under `root` whose last name component is in
// target_modules and whose full name does not start with an excluded prefix, and freezes every
// other parameter (requires_grad false; the adapters' stay trainable). Returns how many adapters
// were attached; none is an mm::Error listing the linear layers that exist.
int64_t apply_lora(torch::nn::Module& root, const LoraConfig& config);

// Folds every attached adapter into its weight and removes it (see LinearImpl::merge_lora).
void merge_lora(torch::nn::Module& root);

}  // namespace mm
