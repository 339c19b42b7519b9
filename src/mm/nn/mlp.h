// The two-layer MLP of ViT-style blocks: fc2(act(fc1(x))), both with biases (CLIP's encoder
// layers, Qwen2-VL's and Qwen3-VL's vision blocks). Parameters fc1 [intermediate, hidden], fc2 [hidden,
// intermediate], registered under the names the checkpoint gives them ("fc1"/"fc2" by default;
// Qwen3-VL: "linear_fc1"/"linear_fc2").
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <string>

#include "mm/nn/linear.h"

namespace mm {

class MLPImpl : public torch::nn::Module {
 public:
  // `activation`: an HF hidden_act name (gated_mlp.h: silu, gelu, gelu_pytorch_tanh, quick_gelu).
  MLPImpl(int64_t hidden_size, int64_t intermediate_size, std::string activation,
          const std::string& fc1_name = "fc1", const std::string& fc2_name = "fc2");
  torch::Tensor forward(const torch::Tensor& x);  // [..., hidden] -> [..., hidden]
  Linear fc1{nullptr}, fc2{nullptr};

 private:
  std::string activation_;
};
TORCH_MODULE(MLP);

}  // namespace mm
