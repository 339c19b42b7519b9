#include "mm/nn/norms.h"

#include <torch/torch.h>

#include "mm/nn/compute_dtype.h"

namespace mm {

RMSNormImpl::RMSNormImpl(int64_t hidden_size, double eps, bool zero_centered)
    : eps_(eps), zero_centered_(zero_centered) {
  weight = register_parameter("weight", zero_centered ? torch::zeros({hidden_size}) : torch::ones({hidden_size}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  auto h = x.to(at_least_fp32(x.scalar_type()));
  h = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  if (zero_centered_) return (h * (1.0 + weight.to(h.scalar_type()))).to(x.scalar_type());
  return weight * h.to(x.scalar_type());
}

GatedRMSNormImpl::GatedRMSNormImpl(int64_t hidden_size, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({hidden_size}));
}

torch::Tensor GatedRMSNormImpl::forward(const torch::Tensor& x, const torch::Tensor& gate) {
  const auto fp = at_least_fp32(x.scalar_type());
  auto h = x.to(fp);
  h = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  h = weight * h.to(x.scalar_type());  // scaled in x's dtype, then gated in fp32, as the reference
  return (h * torch::silu(gate.to(fp))).to(x.scalar_type());
}

}  // namespace mm
