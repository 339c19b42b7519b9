// The small layers of diffusers' Wan transformer, with diffusers' parameter names and dtype rules.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <string>

#include "mm/nn/linear.h"

namespace mm {

// diffusers' FP32LayerNorm: layer norm computed in fp32 (weight/bias upcast too), the result cast
// back to the input dtype. x: [..., dim] -> [..., dim]. Parameters weight [dim], bias [dim] only
// when affine.
class WanFP32LayerNormImpl : public torch::nn::Module {
 public:
  WanFP32LayerNormImpl(int64_t dim, double eps, bool affine);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight, bias;  // undefined without affine

 private:
  int64_t dim_;
  double eps_;
};
TORCH_MODULE(WanFP32LayerNorm);

// torch.nn.RMSNorm over the last dim (the q/k norms across all heads): torch's own rms_norm, so
// reduced precision behaves as there. x: [..., dim] -> [..., dim]. Parameter: weight [dim].
class WanRMSNormImpl : public torch::nn::Module {
 public:
  WanRMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;

 private:
  int64_t dim_;
  double eps_;
};
TORCH_MODULE(WanRMSNorm);

// diffusers' GELU activation module: proj then gelu ("none" or "tanh").
class WanGeluProjImpl : public torch::nn::Module {
 public:
  WanGeluProjImpl(int64_t in, int64_t out, std::string approximate);
  torch::Tensor forward(const torch::Tensor& x);  // [..., in] -> [..., out]
  Linear proj{nullptr};

 private:
  std::string approximate_;
};
TORCH_MODULE(WanGeluProj);

// diffusers' FeedForward with a GELU activation: net.0 (GELU: net.0.proj), net.1 (dropout 0, no
// parameters), net.2 (Linear). x: [..., dim] -> [..., dim_out].
class WanFeedForwardImpl : public torch::nn::Module {
 public:
  WanFeedForwardImpl(int64_t dim, int64_t inner_dim, int64_t dim_out, std::string approximate);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::ModuleList net{nullptr};
};
TORCH_MODULE(WanFeedForward);

}  // namespace mm
