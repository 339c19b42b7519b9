#include "mm/tasks/generation.h"

#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <limits>

#include "mm/core/error.h"
#include "mm/nn/kv_cache.h"

namespace mm {

void GenerationConfig::validate() const {
  MM_CHECK(max_new_tokens > 0, "generation: max_new_tokens must be positive, got ", max_new_tokens);
  if (greedy) return;
  MM_CHECK(temperature > 0.0, "generation: temperature must be positive, got ", temperature);
  MM_CHECK(top_p > 0.0 && top_p <= 1.0, "generation: top_p must be in (0, 1], got ", top_p);
  MM_CHECK(top_k >= 0, "generation: top_k must be >= 0, got ", top_k);
}

torch::Tensor warp_logits(const torch::Tensor& logits, const GenerationConfig& config) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  auto scores = logits;
  if (config.temperature != 1.0) scores = scores / config.temperature;
  if (config.top_k > 0) {
    const int64_t k = std::min(config.top_k, scores.size(-1));
    auto kth = std::get<0>(torch::topk(scores, k)).narrow(-1, k - 1, 1);
    scores = scores.masked_fill(scores < kth, neg_inf);
  }
  if (config.top_p < 1.0) {
    auto [sorted, order] = torch::sort(scores, /*dim=*/-1, /*descending=*/false);
    auto remove_sorted = sorted.softmax(-1).cumsum(-1) <= (1.0 - config.top_p);
    remove_sorted.narrow(-1, remove_sorted.size(-1) - 1, 1).fill_(false);  // keep the most likely token
    auto remove = remove_sorted.scatter(-1, order, remove_sorted);
    scores = scores.masked_fill(remove, neg_inf);
  }
  return scores;
}

std::vector<std::vector<int64_t>> generate_batch(QwenVLForConditionalGeneration& model,
                                                 const QwenVLInputs& inputs,
                                                 const GenerationConfig& config) {
  config.validate();
  torch::NoGradGuard no_grad;
  const auto device = model->model->embed_tokens->weight.device();
  const int64_t batch = inputs.input_ids.size(0), prompt_len = inputs.input_ids.size(1);

  std::vector<int64_t> stop_ids = model->config().eos_token_ids;
  stop_ids.insert(stop_ids.end(), config.stop_token_ids.begin(), config.stop_token_ids.end());
  auto generator = at::make_generator<at::CPUGeneratorImpl>(config.seed);

  // Prefill: the whole prompt, logits of its last position only.
  KVCache cache(model->config().text.num_hidden_layers, prompt_len + config.max_new_tokens);
  DeepstackInputs deepstack;
  auto embeds = model->embed_inputs(inputs, &deepstack);
  auto rope = model->get_rope_index(inputs);
  torch::Tensor padding_mask;
  if (inputs.attention_mask.defined() && !inputs.attention_mask.to(torch::kBool).all().item<bool>())
    padding_mask = inputs.attention_mask.to(device).to(torch::kInt64);
  auto hidden = model->decode(embeds, rope.position_ids.to(device), padding_mask, &cache, {}, &deepstack);
  auto last_positions = rope.position_ids.to(device).narrow(2, prompt_len - 1, 1);  // [3, batch, 1]
  auto logits = model->lm_logits(hidden.narrow(1, prompt_len - 1, 1).squeeze(1));   // [batch, vocab]

  std::vector<std::vector<int64_t>> out(batch);
  std::vector<bool> done(batch, false);
  for (int64_t step = 0; step < config.max_new_tokens; ++step) {
    auto scores = logits.to(torch::kFloat32);
    torch::Tensor next;
    if (config.greedy) {
      next = scores.argmax(-1).to(torch::kCPU);
    } else {
      auto probs = warp_logits(scores.to(torch::kCPU), config).softmax(-1);
      next = torch::multinomial(probs, 1, /*replacement=*/false, generator).squeeze(1);
    }
    auto next_acc = next.accessor<int64_t, 1>();
    bool all_done = true;
    for (int64_t b = 0; b < batch; ++b) {
      if (done[b]) continue;
      out[b].push_back(next_acc[b]);
      done[b] = std::find(stop_ids.begin(), stop_ids.end(), next_acc[b]) != stop_ids.end();
      all_done = all_done && done[b];
    }
    if (all_done || step + 1 == config.max_new_tokens) break;

    last_positions = last_positions + 1;
    if (padding_mask.defined())
      padding_mask = torch::cat({padding_mask, torch::ones({batch, 1}, padding_mask.options())}, 1);
    auto step_embeds = model->model->embed(next.to(device).view({batch, 1}));
    hidden = model->decode(step_embeds, last_positions, padding_mask, &cache);
    logits = model->lm_logits(hidden.squeeze(1));
  }
  return out;
}

std::vector<int64_t> generate(QwenVLForConditionalGeneration& model, const QwenVLInputs& inputs,
                              const GenerationConfig& config) {
  MM_CHECK(inputs.input_ids.defined() && inputs.input_ids.dim() == 2 && inputs.input_ids.size(0) == 1,
           "generate: input_ids must be [1, seq]; use generate_batch for batches");
  return generate_batch(model, inputs, config).front();
}

}  // namespace mm
