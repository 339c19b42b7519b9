#include "mm/models/qwen3/qwen3_causal_lm.h"

#include <torch/torch.h>

#include "mm/core/error.h"
#include "mm/core/safetensors.h"
#include "mm/nn/kv_cache.h"
#include "mm/nn/parameter_init.h"
#include "mm/nn/weights.h"

namespace mm {

Qwen3ForCausalLMImpl::Qwen3ForCausalLMImpl(const Qwen3Config& config) : config_(config) {
  config_.text.validate();
  model = register_module("model", Qwen2Model(config.text));
  if (!config.text.tie_word_embeddings)
    lm_head = register_module("lm_head", Linear(config.text.hidden_size, config.text.vocab_size, /*bias=*/false));
}

std::shared_ptr<Qwen3ForCausalLMImpl> Qwen3ForCausalLMImpl::from_pretrained(const std::filesystem::path& dir,
                                                                            torch::Dtype dtype,
                                                                            const c10::Device& device) {
  MM_CHECK(std::filesystem::is_directory(dir), "from_pretrained: ", dir.string(), " is not a directory");
  const auto config = Qwen3Config::from_file(dir / "config.json");
  const auto checkpoint = Checkpoint::open(dir);
  auto result = build_for_loading(dtype, device, [&] { return Qwen3ForCausalLM(config); });
  WeightLoadOptions options;
  // A tied head is the embedding: a checkpoint that still carries its copy loads without it.
  options.checkpoint_to_module = [tied = config.text.tie_word_embeddings](const std::string& name) {
    return tied && name == "lm_head.weight" ? std::string() : name;
  };
  load_weights(*result, checkpoint, options);
  result->eval();
  return result.ptr();
}

torch::Tensor Qwen3ForCausalLMImpl::head(const torch::Tensor& hidden) {
  return lm_head ? lm_head(hidden) : torch::linear(hidden, model->embed_tokens->weight);
}

Qwen3Output Qwen3ForCausalLMImpl::forward(const Qwen3Inputs& in, KVCache* cache) {
  MM_CHECK(in.input_ids.defined() && in.input_ids.dim() == 2, "Qwen3ForCausalLM: input_ids must be [batch, seq]");
  const auto device = model->embed_tokens->weight.device();
  const int64_t batch = in.input_ids.size(0), seq = in.input_ids.size(1);
  auto positions = in.position_ids;
  if (!positions.defined()) {
    const int64_t past = cache ? cache->length() : 0;
    positions = torch::arange(past, past + seq, torch::TensorOptions().dtype(torch::kInt64).device(device))
                    .expand({batch, seq});
  }
  Qwen3Output out;
  auto hidden = model->forward(model->embed(in.input_ids), positions, in.attention_mask, cache, in.cu_seqlens);
  out.logits = head(hidden);
  if (config_.is_moe()) {
    out.router_logits = model->router_logits();
    // The aux loss pairs the mask with this forward's rows; with a cache the mask spans the prefix too.
    if (!cache) {
      const auto& moe = config_.text.moe;
      out.aux_loss = load_balancing_loss(out.router_logits, moe.num_experts, moe.num_experts_per_tok,
                                         in.attention_mask);
    }
  }
  if (in.labels.defined()) {
    MM_CHECK(in.labels.sizes() == in.input_ids.sizes(), "Qwen3ForCausalLM: labels ", in.labels.sizes(),
             " must match input_ids ", in.input_ids.sizes());
    // Position t predicts label t + 1 (transformers' ForCausalLMLoss), in fp32.
    auto logits = out.logits.narrow(1, 0, seq - 1).to(torch::kFloat32).reshape({-1, out.logits.size(-1)});
    auto targets = in.labels.to(device).narrow(1, 1, seq - 1).reshape(-1);
    out.loss = torch::nn::functional::cross_entropy(
        logits, targets, torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100));
    if (config_.output_router_logits && out.aux_loss.defined()) {
      // A recomputing block runner keeps the router logits of its no-grad first pass: the aux
      // loss would then train nothing, silently.
      MM_CHECK(!torch::GradMode::is_enabled() || !model->block_runner || out.aux_loss.requires_grad(),
               "Qwen3ForCausalLM: the load-balancing loss needs the router logits' gradients, which a "
               "recomputing block runner does not keep (not supported yet)");
      out.loss = out.loss + config_.text.moe.router_aux_loss_coef * out.aux_loss.to(out.loss.device());
    }
  }
  return out;
}

torch::Tensor Qwen3ForCausalLMImpl::generate_greedy(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                                    int64_t max_new_tokens) {
  torch::NoGradGuard no_grad;
  const auto device = model->embed_tokens->weight.device();
  auto ids = input_ids.to(device);
  const int64_t batch = ids.size(0), seq = ids.size(1);
  auto mask = attention_mask.defined() ? attention_mask.to(device).to(torch::kInt64)
                                       : torch::ones({batch, seq}, ids.options());
  // As generate: a token's position counts the real tokens before it; padding sits at 0.
  auto positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0);
  KVCache cache(config_.text.num_hidden_layers, seq + max_new_tokens);
  Qwen3Inputs step;
  step.input_ids = ids;
  step.attention_mask = mask;
  step.position_ids = positions;
  std::vector<torch::Tensor> tokens{ids};
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    auto logits = forward(step, &cache).logits;
    auto next = logits.select(1, logits.size(1) - 1).argmax(-1).view({batch, 1});
    tokens.push_back(next);
    step.input_ids = next;
    step.position_ids = step.position_ids.narrow(1, step.position_ids.size(1) - 1, 1) + 1;
    step.attention_mask = torch::cat({step.attention_mask, torch::ones({batch, 1}, mask.options())}, 1);
  }
  return torch::cat(tokens, 1);
}

}  // namespace mm
