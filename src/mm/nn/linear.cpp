#include "mm/nn/linear.h"

#include <torch/torch.h>

#include <cmath>

#include "mm/core/error.h"
#include "mm/nn/parameter_init.h"

namespace mm {

LinearImpl::LinearImpl(int64_t in_features, int64_t out_features, bool bias)
    : in_features_(in_features), out_features_(out_features) {
  MM_CHECK(in_features > 0 && out_features > 0, "Linear: sizes must be positive, got in=", in_features,
           " out=", out_features);
  weight = register_parameter("weight", torch::empty({out_features, in_features}));
  if (bias) this->bias = register_parameter("bias", torch::empty({out_features}));
  if (parameter_init_skipped()) return;  // a checkpoint overwrites both next
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    torch::NoGradGuard no_grad;
    this->bias.uniform_(-bound, bound);
  }
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x) {
  // at::linear as Python's F.linear: libtorch's functional::linear adds the bias after the
  // matmul for inputs above 2-D, rounding twice in bf16.
  auto out = torch::linear(x, weight, bias);
  if (!lora_A) return out;
  // As PEFT: the adapter path sees the input in its own dtype.
  auto h = x.to(lora_A->weight.scalar_type());
  if (lora_dropout_ > 0) h = torch::dropout(h, lora_dropout_, is_training());
  return out + lora_B(lora_A(h)) * lora_scale_;
}

void LinearImpl::add_lora(int64_t rank, double alpha, double dropout) {
  MM_CHECK(!lora_A, "Linear.add_lora: an adapter is already attached");
  MM_CHECK(rank > 0, "Linear.add_lora: rank must be positive, got ", rank);
  MM_CHECK(dropout >= 0 && dropout < 1, "Linear.add_lora: dropout must be in [0, 1), got ", dropout);
  const auto options = weight.options();
  lora_A = register_module("lora_A", torch::nn::Linear(torch::nn::LinearOptions(in_features_, rank).bias(false)));
  lora_B = register_module("lora_B", torch::nn::Linear(torch::nn::LinearOptions(rank, out_features_).bias(false)));
  {
    torch::NoGradGuard no_grad;
    lora_A->weight.set_data(lora_A->weight.to(options));  // kaiming_uniform(a=sqrt(5)) by Linear's reset
    lora_B->weight.set_data(torch::zeros({out_features_, rank}, options));
  }
  lora_A->train(is_training());
  lora_B->train(is_training());
  lora_scale_ = alpha / static_cast<double>(rank);
  lora_dropout_ = dropout;
}

torch::Tensor LinearImpl::merged_weight() const {
  if (!lora_A) return weight;
  torch::NoGradGuard no_grad;
  auto delta = torch::matmul(lora_B->weight.to(torch::kFloat32), lora_A->weight.to(torch::kFloat32)) * lora_scale_;
  return (weight.to(torch::kFloat32) + delta.to(weight.device())).to(weight.scalar_type());
}

void LinearImpl::merge_lora() {
  if (!lora_A) return;
  {
    torch::NoGradGuard no_grad;
    weight.copy_(merged_weight());
  }
  unregister_module("lora_A");
  unregister_module("lora_B");
  lora_A = nullptr;
  lora_B = nullptr;
  lora_scale_ = 0.0;
  lora_dropout_ = 0.0;
}

}  // namespace mm
