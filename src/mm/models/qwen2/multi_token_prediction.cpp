#include "mm/models/qwen2/multi_token_prediction.h"

#include <torch/torch.h>

#include "mm/core/error.h"

namespace mm {

MultiTokenPredictionImpl::MultiTokenPredictionImpl(const Qwen2TextConfig& config) {
  MM_CHECK(!config.mtp_use_dedicated_embeddings,
           "text_config.mtp_use_dedicated_embeddings is true: a multi-token-prediction head with embeddings of its "
           "own is not supported (published Qwen3.5 checkpoints share the model's)");
  const auto layer_config = config.multi_token_prediction_layers();
  MM_CHECK(layer_config.num_hidden_layers > 0, "a multi-token-prediction head needs mtp_num_hidden_layers > 0");
  const int64_t h = config.hidden_size;
  const bool zero_centered = config.zero_centered_norms;
  fc = register_module("fc", Linear(2 * h, h, /*bias=*/false));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < layer_config.num_hidden_layers; ++i) layers->push_back(Qwen2DecoderLayer(layer_config, i));
  norm = register_module("norm", RMSNorm(h, config.rms_norm_eps, zero_centered));
  pre_fc_norm_hidden = register_module("pre_fc_norm_hidden", RMSNorm(h, config.rms_norm_eps, zero_centered));
  pre_fc_norm_embedding = register_module("pre_fc_norm_embedding", RMSNorm(h, config.rms_norm_eps, zero_centered));
}

torch::Tensor MultiTokenPredictionImpl::forward(int64_t k, const torch::Tensor& next_embeds, const torch::Tensor& hidden,
                                                const DecoderContext& context, std::shared_ptr<LoadBalancingLoss> balance) {
  MM_CHECK(k >= 1 && k <= depths(), "multi-token prediction: depth ", k, " of a head of ", depths());
  MM_CHECK(next_embeds.sizes() == hidden.sizes(), "multi-token prediction: embeddings ", next_embeds.sizes(),
           " and hidden states ", hidden.sizes(), " differ in shape");
  auto x = fc(torch::cat({pre_fc_norm_embedding(next_embeds), pre_fc_norm_hidden(hidden)}, -1));
  auto* layer = layers[static_cast<size_t>(k - 1)]->as<Qwen2DecoderLayer>();
  if (!block_runner) return norm(layer->forward(x, context.rope, context.mask, nullptr, balance.get()));
  // The runner may call `run` again in backward, after this frame is gone: capture by value.
  return norm(block_runner(
      *layer,
      [layer, rope = context.rope, mask = context.mask, balance](const torch::Tensor& in) {
        return layer->forward(in, rope, mask, nullptr, balance.get());
      },
      x));
}

}  // namespace mm
