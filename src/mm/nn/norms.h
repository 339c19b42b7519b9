// Normalization layers shared by the model families.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

namespace mm {

// RMSNorm as in Llama/Qwen2: computed in fp32, scaled by `weight` in the input dtype.
// x: [..., hidden] -> [..., hidden]. Parameter: weight [hidden] (HF name "weight").
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t hidden_size, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

}  // namespace mm
