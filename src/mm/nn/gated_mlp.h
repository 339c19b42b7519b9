// The gated MLP of Llama/Qwen2 language models and the Qwen2.5-VL vision blocks:
// down_proj(act(gate_proj(x)) * up_proj(x)). HF parameter names gate_proj, up_proj, down_proj.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <string>

#include "mm/nn/linear.h"

namespace mm {

// HF `hidden_act` names: silu, gelu, gelu_pytorch_tanh, quick_gelu.
bool is_supported_activation(const std::string& name);
// Throws for a name is_supported_activation rejects.
torch::Tensor apply_activation(const std::string& name, const torch::Tensor& x);

class GatedMLPImpl : public torch::nn::Module {
 public:
  GatedMLPImpl(int64_t hidden_size, int64_t intermediate_size, bool bias, std::string activation);
  // x: [..., hidden] -> [..., hidden]
  torch::Tensor forward(const torch::Tensor& x);

  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};

 private:
  std::string activation_;
};
TORCH_MODULE(GatedMLP);

}  // namespace mm
