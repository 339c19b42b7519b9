#include "mm/models/qwen_vl/qwen_vl_init_weights.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "mm/nn/gated_delta_net.h"
#include "mm/nn/linear.h"
#include "mm/nn/norms.h"

namespace mm {

void init_weights(QwenVLForConditionalGeneration& model, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  torch::NoGradGuard no_grad;
  auto fill = [&](torch::Tensor& target, double std) {
    auto values = torch::empty(target.sizes(), torch::kFloat32);
    values.normal_(0.0, std, gen);
    target.copy_(values);
  };
  const auto& config = model->config();
  for (const auto& item : model->named_modules("", /*include_self=*/false)) {
    const std::string& name = item.key();
    const double std = name.rfind("visual.", 0) == 0 ? config.vision_initializer_range() : config.text.initializer_range;
    torch::nn::Module* module = item.value().get();
    if (auto* linear = dynamic_cast<LinearImpl*>(module)) {
      fill(linear->weight, std);
      if (linear->bias.defined()) linear->bias.zero_();
    } else if (auto* conv = dynamic_cast<torch::nn::Conv3dImpl*>(module)) {
      fill(conv->weight, std);
      if (conv->bias.defined()) conv->bias.zero_();
    } else if (auto* embedding = dynamic_cast<torch::nn::EmbeddingImpl*>(module)) {
      fill(embedding->weight, std);
    } else if (auto* delta = dynamic_cast<GatedDeltaNetImpl*>(module)) {
      // As transformers' _init_weights for Qwen3.5: the conv like any conv, dt_bias ones, A_log
      // the log of U(0.01, 16) (its projections and gated norm are visited as modules of their own).
      fill(delta->conv_weight, std);
      delta->dt_bias.fill_(1.0);
      auto a = torch::empty(delta->A_log.sizes(), torch::kFloat32);
      a.uniform_(0.01, 16.0, gen);
      delta->A_log.copy_(a.log());
    } else if (auto* gated_norm = dynamic_cast<GatedRMSNormImpl*>(module)) {
      gated_norm->weight.fill_(1.0);
    } else if (auto* norm = dynamic_cast<RMSNormImpl*>(module)) {
      norm->weight.fill_(norm->zero_centered() ? 0.0 : 1.0);  // the scale 1 either way
    } else if (auto* layer_norm = dynamic_cast<torch::nn::LayerNormImpl*>(module)) {
      layer_norm->weight.fill_(1.0);
      layer_norm->bias.zero_();
    }
  }
}

}  // namespace mm
