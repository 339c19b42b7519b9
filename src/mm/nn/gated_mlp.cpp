#include "mm/nn/gated_mlp.h"

#include <torch/torch.h>

#include "mm/core/error.h"

namespace mm {

bool is_supported_activation(const std::string& name) {
  return name == "silu" || name == "gelu_pytorch_tanh" || name == "gelu" || name == "quick_gelu";
}

torch::Tensor apply_activation(const std::string& name, const torch::Tensor& x) {
  if (name == "silu") return torch::silu(x);
  if (name == "gelu_pytorch_tanh") return torch::gelu(x, "tanh");
  if (name == "gelu") return torch::gelu(x);
  if (name == "quick_gelu") return x * torch::sigmoid(1.702 * x);
  fail("unsupported hidden_act '", name, "' (silu, gelu, gelu_pytorch_tanh, quick_gelu)");
}

GatedMLPImpl::GatedMLPImpl(int64_t hidden_size, int64_t intermediate_size, bool bias, std::string activation)
    : activation_(std::move(activation)) {
  MM_CHECK(is_supported_activation(activation_), "unsupported hidden_act '", activation_,
           "' (silu, gelu, gelu_pytorch_tanh, quick_gelu)");
  gate_proj = register_module("gate_proj", Linear(hidden_size, intermediate_size, bias));
  up_proj = register_module("up_proj", Linear(hidden_size, intermediate_size, bias));
  down_proj = register_module("down_proj", Linear(intermediate_size, hidden_size, bias));
}

torch::Tensor GatedMLPImpl::forward(const torch::Tensor& x) {
  return down_proj(apply_activation(activation_, gate_proj(x)) * up_proj(x));
}

}  // namespace mm
