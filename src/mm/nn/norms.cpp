#include "mm/nn/norms.h"

#include <torch/torch.h>

namespace mm {

RMSNormImpl::RMSNormImpl(int64_t hidden_size, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({hidden_size}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  auto h = x.to(torch::kFloat32);
  h = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return weight * h.to(x.scalar_type());
}

GatedRMSNormImpl::GatedRMSNormImpl(int64_t hidden_size, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({hidden_size}));
}

torch::Tensor GatedRMSNormImpl::forward(const torch::Tensor& x, const torch::Tensor& gate) {
  auto h = x.to(torch::kFloat32);
  h = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  h = weight * h.to(x.scalar_type());
  return (h * torch::silu(gate.to(torch::kFloat32))).to(x.scalar_type());
}

}  // namespace mm
