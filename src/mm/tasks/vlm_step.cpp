#include "mm/tasks/vlm_step.h"

#include <torch/torch.h>

#include "mm/core/error.h"

namespace mm {

at::Tensor vlm_loss_sum(QwenVLForConditionalGeneration& model, const TrainBatch& batch) {
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

StepResult train_step(QwenVLForConditionalGeneration& model, AdamW& optimizer, double lr,
                      const std::vector<at::Tensor>& params, const std::vector<TrainBatch>& micro_batches,
                      const StepOptions& options) {
  std::vector<MicroBatchCounts> counts;
  for (const auto& batch : micro_batches)
    counts.push_back({batch.num_target_tokens, batch.num_tokens, static_cast<int64_t>(batch.sample_indices.size())});
  return train_step(
      counts, [&](size_t i) { return vlm_loss_sum(model, micro_batches[i]); }, optimizer, lr, params, options,
      "supervised tokens");
}

}  // namespace mm
