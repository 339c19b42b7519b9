// Normalization layers shared by the model families.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

namespace mm {

// RMSNorm as in Llama/Qwen2: computed in fp32 (fp64 stays fp64), scaled by `weight` in the input dtype.
// x: [..., hidden] -> [..., hidden]. Parameter: weight [hidden] (HF name "weight").
// zero_centered (Qwen3.5's Qwen3_5RMSNorm, Qwen3-Next's): the weight is an offset from one,
// starting at zero, and the scale (1 + weight) is applied in fp32 before the cast back; weight
// decay then pulls the scale towards one rather than zero.
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t hidden_size, double eps, bool zero_centered = false);
  torch::Tensor forward(const torch::Tensor& x);
  bool zero_centered() const { return zero_centered_; }
  torch::Tensor weight;

 private:
  double eps_;
  bool zero_centered_;
};
TORCH_MODULE(RMSNorm);

// The gated RMSNorm of Gated DeltaNet's output (Qwen3.5's Qwen3_5RMSNormGated, FLA's
// FusedRMSNormGated with SiLU): normalise x in fp32, scale by `weight` in x's dtype, then multiply
// by silu(gate) in fp32. x, gate: [..., hidden] -> [..., hidden] in x's dtype.
class GatedRMSNormImpl : public torch::nn::Module {
 public:
  GatedRMSNormImpl(int64_t hidden_size, double eps);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& gate);
  torch::Tensor weight;  // [hidden], HF name "weight"

 private:
  double eps_;
};
TORCH_MODULE(GatedRMSNorm);

}  // namespace mm
