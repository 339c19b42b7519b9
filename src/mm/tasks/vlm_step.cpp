#include "mm/tasks/vlm_step.h"

#include <torch/torch.h>

#include "mm/core/error.h"
#include "mm/train/model_flops.h"

namespace mm {

double vlm_batch_training_flops(const QwenVLConfig& config, const TrainBatch& batch) {
  std::vector<int64_t> segments;
  if (!batch.cu_seqlens.empty()) {
    for (size_t i = 1; i < batch.cu_seqlens.size(); ++i) segments.push_back(batch.cu_seqlens[i] - batch.cu_seqlens[i - 1]);
  } else if (batch.inputs.attention_mask.defined()) {
    const auto lengths = batch.inputs.attention_mask.to(torch::kCPU).to(torch::kInt64).sum(1).contiguous();
    segments.assign(lengths.data_ptr<int64_t>(), lengths.data_ptr<int64_t>() + lengths.numel());
  } else {
    segments.assign(static_cast<size_t>(batch.inputs.input_ids.size(0)), batch.inputs.input_ids.size(1));
  }
  std::vector<std::vector<int64_t>> grids;
  for (const auto& grid : {batch.inputs.image_grid_thw, batch.inputs.video_grid_thw}) {
    if (!grid.defined()) continue;
    const auto rows = grid.to(torch::kCPU).to(torch::kInt64).contiguous();
    for (int64_t i = 0; i < rows.size(0); ++i)
      grids.push_back({rows[i][0].item<int64_t>(), rows[i][1].item<int64_t>(), rows[i][2].item<int64_t>()});
  }
  return qwen_vl_training_flops(config, segments, batch.num_target_tokens, grids);
}

at::Tensor vlm_loss_sum(QwenVLForConditionalGeneration& model, const TrainBatch& batch) {
  MM_CHECK(batch.targets.defined() && batch.targets.sizes() == batch.inputs.input_ids.sizes(),
           "training batch: targets must match input_ids");
  DeepstackInputs deepstack;
  auto embeds = model->embed_inputs(batch.inputs, &deepstack);
  auto hidden =
      model->decode(embeds, batch.position_ids, batch.inputs.attention_mask, nullptr, batch.cu_seqlens, &deepstack);
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
