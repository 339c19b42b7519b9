#include "mm/models/wan/wan_condition_bridge.h"

#include <torch/torch.h>

namespace mm {
namespace {

// Not a tensor list, so that autograd does not take the leaves for inputs of the bridge.
struct Leaves {
  std::vector<torch::Tensor> tensors;
};

struct Bridge : torch::autograd::Function<Bridge> {
  // Inputs: hidden, then the conditions that need gradients (a TensorList: autograd tracks each
  // element, where a std::vector would be one opaque argument); their leaves (same values, no
  // history) ride in saved_data.
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& hidden,
                               at::TensorList conditions, const Leaves& leaves) {
    (void)conditions;
    ctx->saved_data["leaves"] = c10::List<torch::Tensor>(leaves.tensors);
    return hidden.clone();
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto leaves = ctx->saved_data["leaves"].toTensorList();
    torch::autograd::variable_list grads{grad_outputs[0]};
    for (size_t i = 0; i < leaves.size(); ++i) grads.push_back(leaves.get(i).grad());
    grads.emplace_back();  // for the Leaves argument, which is no tensor
    return grads;
  }
};

}  // namespace

WanConditionBridge wan_condition_bridge(const torch::Tensor& hidden, const std::vector<torch::Tensor>& conditions) {
  WanConditionBridge out{conditions, hidden};
  if (!torch::GradMode::is_enabled()) return out;
  torch::autograd::variable_list bridged;
  std::vector<torch::Tensor> leaves;
  for (auto& c : out.leaves) {
    if (!c.defined() || !c.requires_grad()) continue;
    bridged.push_back(c);
    c = c.detach().requires_grad_(true);
    leaves.push_back(c);
  }
  if (!leaves.empty()) out.input = Bridge::apply(hidden, at::TensorList(bridged), Leaves{leaves});
  return out;
}

}  // namespace mm
