#include "mm/train/vlm_step.h"

#include <torch/torch.h>

#include <cmath>

#include "mm/core/error.h"
#include "mm/parallel/fully_shard.h"
#include "mm/train/autocast.h"
#include "mm/train/grad_clip.h"
#include "mm/train/optimizer.h"

namespace mm {

at::Tensor vlm_loss_sum(Qwen2_5_VLForConditionalGeneration& model, const TrainBatch& batch) {
  MM_CHECK(batch.targets.defined() && batch.targets.sizes() == batch.inputs.input_ids.sizes(),
           "training batch: targets must match input_ids");
  auto embeds = model->embed_inputs(batch.inputs);
  auto hidden = model->decode(embeds, batch.position_ids, batch.inputs.attention_mask, nullptr, batch.cu_seqlens);
  auto targets = batch.targets.to(hidden.device());
  auto supervised = targets.ne(-100);
  auto rows = hidden.index({supervised});  // [target tokens, hidden]
  auto logits = model->lm_logits(rows).to(torch::kFloat32);
  return torch::nn::functional::cross_entropy(
      logits, targets.index({supervised}),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
}

StepResult train_step(Qwen2_5_VLForConditionalGeneration& model, AdamW& optimizer, double lr,
                      const std::vector<at::Tensor>& params, const std::vector<TrainBatch>& micro_batches,
                      const StepOptions& options) {
  MM_CHECK(!micro_batches.empty(), "train_step: no micro-batches");
  parallel::FullyShardedModel* dp = options.data_parallel;
  StepResult result;
  for (const auto& batch : micro_batches) {
    result.target_tokens += batch.num_target_tokens;
    result.tokens += batch.num_tokens;
    result.samples += static_cast<int64_t>(batch.sample_indices.size());
  }
  if (dp) {
    auto counts = torch::tensor({static_cast<double>(result.target_tokens), static_cast<double>(result.tokens),
                                 static_cast<double>(result.samples)},
                                torch::kFloat64);
    dp->mesh().all_reduce_sum(counts);
    result.target_tokens = static_cast<int64_t>(counts[0].item<double>());
    result.tokens = static_cast<int64_t>(counts[1].item<double>());
    result.samples = static_cast<int64_t>(counts[2].item<double>());
  }
  MM_CHECK(result.target_tokens > 0, "train_step: the step's batches have no supervised tokens");
  const auto device = params.empty() ? c10::DeviceType::CPU : params.front().device().type();
  double loss_sum = 0;
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    if (dp) {
      dp->set_requires_gradient_sync(i + 1 == micro_batches.size());
      dp->begin_forward();
    }
    at::Tensor loss;
    {
      AutocastGuard autocast(options.bf16_autocast, device);
      loss = vlm_loss_sum(model, micro_batches[i]);
    }
    (loss / static_cast<double>(result.target_tokens)).backward();
    if (dp) dp->finish_backward();
    loss_sum += loss.item<double>();
  }
  if (dp) {
    auto total = torch::tensor({loss_sum}, torch::kFloat64);
    dp->mesh().all_reduce_sum(total);
    loss_sum = total[0].item<double>();
  }
  result.loss = loss_sum / static_cast<double>(result.target_tokens);
  result.grad_norm = dp ? dp->clip_grad_norm(options.max_grad_norm)
                              : clip_grad_norm(params, options.max_grad_norm);
  if (dp) result.collective_seconds = dp->take_wait_seconds();
  if (std::isfinite(result.grad_norm)) {
    optimizer.step(lr);
  } else {
    result.skipped = true;
  }
  optimizer.zero_grad();
  return result;
}

}  // namespace mm
