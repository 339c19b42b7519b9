// A linear layer with an optional LoRA adapter. It replaces torch::nn::Linear in every model so
// that adapters (and later tensor-parallel variants) attach from outside without touching the
// model code. Parameter names equal torch::nn::Linear's ("weight", "bias"), so checkpoints load
// unchanged; an attached adapter adds "lora_A.weight" and "lora_B.weight" below this module.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

namespace mm {

class LinearImpl : public torch::nn::Module {
 public:
  // weight [out, in] initialized as torch::nn::Linear does (kaiming_uniform a=sqrt(5)); bias [out].
  // Both uninitialised under SkipParameterInit (parameter_init.h).
  LinearImpl(int64_t in_features, int64_t out_features, bool bias);

  // x: [..., in] -> [..., out]: linear(x, weight, bias), plus, with an adapter,
  // lora_B(lora_A(dropout(x))) * alpha / rank (PEFT's LoraLayer; dropout only in training mode).
  torch::Tensor forward(const torch::Tensor& x);

  // Attaches an adapter as PEFT's default init does: lora_A [rank, in] kaiming_uniform(a=sqrt(5)),
  // lora_B [out, rank] zeros, so the layer's output is unchanged until B trains. Adapter tensors
  // take the weight's dtype and device. Throws if one is already attached or rank <= 0.
  void add_lora(int64_t rank, double alpha, double dropout);
  bool has_lora() const { return static_cast<bool>(lora_A); }

  // weight + (B @ A) * alpha / rank computed in fp32 and cast to the weight's dtype; the weight
  // itself when no adapter is attached. Leaves the module untouched (for exports).
  torch::Tensor merged_weight() const;
  // Folds the adapter into weight and removes it (its parameters leave named_parameters()).
  void merge_lora();

  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }

  torch::Tensor weight;  // [out, in]
  torch::Tensor bias;    // [out], undefined without bias
  torch::nn::Linear lora_A{nullptr}, lora_B{nullptr};  // null without an adapter

 private:
  int64_t in_features_, out_features_;
  double lora_scale_ = 0.0, lora_dropout_ = 0.0;
};
TORCH_MODULE(Linear);

}  // namespace mm
