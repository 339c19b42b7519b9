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

double vlm_router_aux_loss_coef(const QwenVLConfig& config, std::optional<double> configured) {
  const auto& moe = config.text.moe;
  if (moe.num_experts == 0) return 0;
  return configured.value_or(moe.router_aux_loss_coef);
}

namespace {

// Installs a load-balancing loss on the decoder's sparse layers for one forward, and removes it
// again however the forward ends (a later inference forward must not feed it).
class LoadBalancingScope {
 public:
  LoadBalancingScope(Qwen2Model decoder, std::shared_ptr<LoadBalancingLoss> loss)
      : decoder_(std::move(decoder)), loss_(std::move(loss)) {
    if (loss_) decoder_->set_load_balancing(loss_);
  }
  ~LoadBalancingScope() {
    if (loss_) decoder_->set_load_balancing(nullptr);
  }
  LoadBalancingScope(const LoadBalancingScope&) = delete;
  LoadBalancingScope& operator=(const LoadBalancingScope&) = delete;

 private:
  Qwen2Model decoder_;
  std::shared_ptr<LoadBalancingLoss> loss_;
};

}  // namespace

at::Tensor vlm_loss_sum(QwenVLForConditionalGeneration& model, const TrainBatch& batch, double router_aux_loss_coef,
                        const StepTotals& totals) {
  MM_CHECK(batch.targets.defined() && batch.targets.sizes() == batch.inputs.input_ids.sizes(),
           "training batch: targets must match input_ids");
  const auto& moe = model->config().text.moe;
  std::shared_ptr<LoadBalancingLoss> balance;
  if (router_aux_loss_coef > 0 && moe.num_experts > 0) {
    MM_CHECK(totals.micro_batches > 0 && totals.loss_units > 0,
             "vlm_loss_sum: the load-balancing term needs the step's totals");
    balance = std::make_shared<LoadBalancingLoss>(moe.num_experts, moe.num_experts_per_tok,
                                                  batch.inputs.attention_mask);
  }
  at::Tensor hidden;
  {
    const LoadBalancingScope scope(model->model, balance);
    DeepstackInputs deepstack;
    auto embeds = model->embed_inputs(batch.inputs, &deepstack);
    hidden =
        model->decode(embeds, batch.position_ids, batch.inputs.attention_mask, nullptr, batch.cu_seqlens, &deepstack);
  }
  auto targets = batch.targets.to(hidden.device());
  auto supervised = targets.ne(-100);
  auto rows = hidden.index({supervised});  // [target tokens, hidden]
  auto logits = model->lm_logits(rows).to(torch::kFloat32);
  auto sum = torch::nn::functional::cross_entropy(
      logits, targets.index({supervised}), torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
  if (!balance) return sum;
  // The step back-propagates sum / loss_units, so the term enters the sum scaled by loss_units;
  // its gradient reaches the routers through the layers' own nodes (nn/load_balancing.h), at
  // d(step loss)/d(aux) = coef / micro_batches.
  const double per_micro_batch = router_aux_loss_coef / static_cast<double>(totals.micro_batches);
  const auto aux = balance->finish(per_micro_batch);
  return sum + aux.to(sum.device()) * (per_micro_batch * static_cast<double>(totals.loss_units));
}

StepResult train_step(QwenVLForConditionalGeneration& model, AdamW& optimizer, double lr,
                      const std::vector<at::Tensor>& params, const std::vector<TrainBatch>& micro_batches,
                      const StepOptions& options) {
  std::vector<MicroBatchCounts> counts;
  for (const auto& batch : micro_batches)
    counts.push_back({batch.num_target_tokens, batch.num_tokens, static_cast<int64_t>(batch.sample_indices.size())});
  return train_step(
      counts,
      [&, coef = vlm_router_aux_loss_coef(model->config())](size_t i, const StepTotals& totals) {
        return vlm_loss_sum(model, micro_batches[i], coef, totals);
      },
      optimizer, lr, params, options,
      "supervised tokens");
}

}  // namespace mm
