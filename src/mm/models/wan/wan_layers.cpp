#include "mm/nn/compute_dtype.h"
#include "mm/models/wan/wan_layers.h"

#include <torch/torch.h>

namespace mm {

WanFP32LayerNormImpl::WanFP32LayerNormImpl(int64_t dim, double eps, bool affine) : dim_(dim), eps_(eps) {
  if (affine) {
    weight = register_parameter("weight", torch::ones({dim}));
    bias = register_parameter("bias", torch::zeros({dim}));
  }
}

torch::Tensor WanFP32LayerNormImpl::forward(const torch::Tensor& x) {
  const auto fp32 = at_least_fp32(x.scalar_type());  // fp64 stays fp64
  const auto w = weight.defined() ? weight.to(fp32) : torch::Tensor();
  const auto b = bias.defined() ? bias.to(fp32) : torch::Tensor();
  return torch::layer_norm(x.to(fp32), {dim_}, w, b, eps_).to(x.scalar_type());
}

WanRMSNormImpl::WanRMSNormImpl(int64_t dim, double eps) : dim_(dim), eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor WanRMSNormImpl::forward(const torch::Tensor& x) { return at::rms_norm(x, {dim_}, weight, eps_); }

WanGeluProjImpl::WanGeluProjImpl(int64_t in, int64_t out, std::string approximate)
    : approximate_(std::move(approximate)) {
  proj = register_module("proj", Linear(in, out, true));
}

torch::Tensor WanGeluProjImpl::forward(const torch::Tensor& x) { return torch::gelu(proj(x), approximate_); }

WanFeedForwardImpl::WanFeedForwardImpl(int64_t dim, int64_t inner_dim, int64_t dim_out, std::string approximate) {
  net = register_module("net", torch::nn::ModuleList(WanGeluProj(dim, inner_dim, std::move(approximate)),
                                                     torch::nn::Identity(), Linear(inner_dim, dim_out, true)));
}

torch::Tensor WanFeedForwardImpl::forward(const torch::Tensor& x) {
  return net->ptr<LinearImpl>(2)->forward(net->ptr<WanGeluProjImpl>(0)->forward(x));
}

}  // namespace mm
