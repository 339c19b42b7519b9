#include "mm/tasks/vlm_step.h"

#include <torch/torch.h>

#include <algorithm>

#include "mm/core/error.h"
#include "mm/core/host_to_device.h"
#include "mm/nn/compute_dtype.h"
#include "mm/train/model_flops.h"

namespace mm {

double vlm_batch_training_flops(const QwenVLConfig& config, const TrainBatch& batch, int64_t mtp_depths) {
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
  double flops = qwen_vl_training_flops(config, segments, batch.num_target_tokens, grids);
  if (mtp_depths > 0) {
    std::vector<int64_t> rows;
    for (int64_t k = 1; k <= mtp_depths; ++k) rows.push_back(multi_token_targets(batch, k).ne(kIgnoreIndex).sum().item<int64_t>());
    flops += qwen_mtp_training_flops(config.text, segments, rows);
  }
  return flops;
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

double vlm_mtp_loss_weight(const QwenVLForConditionalGenerationImpl& model, std::optional<double> configured) {
  if (!model.mtp) return 0;
  return configured.value_or(kDefaultMtpLossWeight);
}

at::Tensor multi_token_positions(const TrainBatch& batch, int64_t k) {
  const auto& ids = batch.inputs.input_ids;
  const int64_t seq = ids.size(1);
  auto out = torch::zeros(ids.sizes(), torch::TensorOptions().dtype(torch::kBool));
  if (k >= seq) return out;
  out.narrow(1, 0, seq - k).fill_(true);
  if (!batch.cu_seqlens.empty()) {
    // Position p and p + k must lie in one sample: the sample index of each position, compared.
    auto sample = torch::zeros({seq}, torch::kInt64);
    for (size_t i = 1; i + 1 < batch.cu_seqlens.size(); ++i)
      sample.narrow(0, batch.cu_seqlens[i], seq - batch.cu_seqlens[i]).add_(1);
    auto same = torch::zeros({seq}, torch::kBool);
    same.narrow(0, 0, seq - k).copy_(sample.narrow(0, 0, seq - k) == sample.narrow(0, k, seq - k));
    out &= same.unsqueeze(0);
  }
  if (batch.inputs.attention_mask.defined()) {
    const auto real = batch.inputs.attention_mask.to(torch::kCPU).to(torch::kBool);
    auto ahead = torch::zeros_like(real);
    ahead.narrow(1, 0, seq - k).copy_(real.narrow(1, k, seq - k));
    out &= real & ahead;
  }
  return out;
}

at::Tensor multi_token_targets(const TrainBatch& batch, int64_t k, const at::Tensor& positions) {
  const auto& targets = batch.targets;
  const int64_t seq = targets.size(1);
  auto out = torch::full_like(targets, kIgnoreIndex);
  if (k >= seq) return out;
  out.narrow(1, 0, seq - k).copy_(targets.narrow(1, k, seq - k));
  const auto reads = positions.defined() ? positions : multi_token_positions(batch, k);
  return out.masked_fill(reads.to(targets.device()).logical_not(), kIgnoreIndex);
}

namespace {

// The embeddings shifted left by k positions along the sequence: position p holds token p + k's
// where `positions` (multi_token_positions) says p + k is in p's sample, zeros elsewhere. Those
// positions predict nothing, but their routers count in the load-balancing loss, so what they read
// must not depend on how the samples were batched (padding, the next packed sample).
torch::Tensor shifted_left(const torch::Tensor& embeds, const at::Tensor& positions, int64_t k) {
  const int64_t seq = embeds.size(1);
  auto zeros = torch::zeros({embeds.size(0), std::min(k, seq), embeds.size(2)}, embeds.options());
  if (k >= seq) return zeros;
  auto shifted = torch::cat({embeds.narrow(1, k, seq - k), zeros}, 1);
  return shifted * to_device_async(positions, embeds.device()).to(embeds.scalar_type()).unsqueeze(-1);
}

// Summed cross-entropy of the rows of `hidden` whose target is not ignored. Which rows those are is
// found where the targets are (the host, in training) and sent as indices: a boolean index of the
// GPU's hidden states would make the host read the row count back from the GPU.
torch::Tensor supervised_cross_entropy(QwenVLForConditionalGeneration& model, const torch::Tensor& hidden,
                                       const torch::Tensor& targets) {
  const auto flat_targets = targets.reshape({-1});
  const auto supervised = flat_targets.ne(kIgnoreIndex).nonzero().squeeze(1);
  const auto device = hidden.device();
  auto rows = hidden.reshape({-1, hidden.size(-1)}).index_select(0, to_device_async(supervised, device));
  auto logits = model->lm_logits(rows);  // [target tokens, vocab]
  logits = logits.to(at_least_fp32(logits.scalar_type()));  // fp32 as the references; fp64 stays fp64
  return torch::nn::functional::cross_entropy(logits, to_device_async(flat_targets.index_select(0, supervised), device),
                                              torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
}

}  // namespace

at::Tensor vlm_loss_sum(QwenVLForConditionalGeneration& model, const TrainBatch& batch, const VlmLossWeights& weights,
                        const StepTotals& totals) {
  MM_CHECK(batch.targets.defined() && batch.targets.sizes() == batch.inputs.input_ids.sizes(),
           "training batch: targets must match input_ids");
  MM_CHECK(weights.mtp_loss_weight == 0 || model->mtp, "vlm_loss_sum: a multi-token-prediction loss weight of ",
           weights.mtp_loss_weight, " for a model without the head");
  // Context parallelism: each document of the batch causal over the split; a padded row is one
  // document whose right padding no real token sees, so the attention needs no mask.
  std::shared_ptr<const SequenceSplit> split;
  if (model->context_parallel) {
    const int64_t seq = batch.inputs.input_ids.size(1);
    split = model->context_parallel(batch.cu_seqlens.empty() ? std::vector<int64_t>{0, seq} : batch.cu_seqlens,
                                    /*causal=*/true);
  }
  const auto& moe = model->config().text.moe;
  const double router_aux_loss_coef = weights.router_aux_loss_coef;
  std::shared_ptr<LoadBalancingLoss> balance;
  if (router_aux_loss_coef > 0 && moe.num_experts > 0) {
    MM_CHECK(totals.micro_batches > 0 && totals.loss_units > 0,
             "vlm_loss_sum: the load-balancing term needs the step's totals");
    const auto& mask = batch.inputs.attention_mask;
    balance = std::make_shared<LoadBalancingLoss>(moe.num_experts, moe.num_experts_per_tok,
                                                  split && mask.defined() ? split->take(mask, 1) : mask);
    // Over the whole sequence, as one process computes it.
    if (split) balance->sum_over_ranks(split->sum);
  }
  at::Tensor hidden, embeds;
  {
    const LoadBalancingScope scope(model->model, balance);
    DeepstackInputs deepstack;
    // The whole sequence embedded (its vision features gathered), then this rank's tokens.
    embeds = model->embed_inputs(batch.inputs, &deepstack);
    hidden = split ? model->decode(split->take(embeds, 1), split->take(batch.position_ids, 2), {}, nullptr, {},
                                   &deepstack, split)
                   : model->decode(embeds, batch.position_ids, batch.inputs.attention_mask, nullptr, batch.cu_seqlens,
                                   &deepstack);
  }
  auto sum = supervised_cross_entropy(model, hidden, split ? split->take(batch.targets, 1) : batch.targets);
  if (weights.mtp_loss_weight > 0) {
    // Under context parallelism the head's layers run on this rank's tokens as the decoder's do;
    // what a depth reads ahead (the shifted embeddings, its targets) is formed on the whole
    // sequence, then sliced.
    const auto context =
        split ? model->model->context(split->take(embeds, 1), split->take(batch.position_ids, 2), {}, nullptr, {}, split)
              : model->model->context(embeds, batch.position_ids, batch.inputs.attention_mask, nullptr,
                                      batch.cu_seqlens);
    auto mine = [&](const at::Tensor& whole) { return split ? split->take(whole, 1) : whole; };
    const int64_t depths = model->mtp->depths();
    auto h = hidden;
    for (int64_t k = 1; k <= depths; ++k) {
      const auto positions = multi_token_positions(batch, k);  // what depth k reads, and predicts from
      h = model->mtp->forward(k, mine(shifted_left(embeds, positions, k)), h, context, balance);
      sum = sum + supervised_cross_entropy(model, h, mine(multi_token_targets(batch, k, positions))) *
                      (weights.mtp_loss_weight / static_cast<double>(depths));
    }
  }
  if (!balance) return sum;
  // The step back-propagates sum / loss_units, so the term enters the sum scaled by loss_units;
  // its gradient reaches the routers through the layers' own nodes (nn/load_balancing.h), at
  // d(step loss)/d(aux) = coef / micro_batches. A context-parallel group's ranks all hold one
  // micro-batch (counted once per rank in totals) and one loss: each adds 1 / ranks of its value.
  const double ranks = split ? static_cast<double>(split->ranks) : 1.0;
  const double per_micro_batch = router_aux_loss_coef * ranks / static_cast<double>(totals.micro_batches);
  const auto aux = balance->finish(per_micro_batch);
  return sum + aux.to(sum.device()) * (per_micro_batch * static_cast<double>(totals.loss_units) / ranks);
}

StepResult train_step(QwenVLForConditionalGeneration& model, AdamW& optimizer, double lr,
                      const std::vector<at::Tensor>& params, const std::vector<TrainBatch>& micro_batches,
                      const StepOptions& options) {
  std::vector<MicroBatchCounts> counts;
  for (const auto& batch : micro_batches)
    counts.push_back({batch.num_target_tokens, batch.num_tokens, static_cast<int64_t>(batch.sample_indices.size())});
  return train_step(
      counts,
      [&, weights = VlmLossWeights{vlm_router_aux_loss_coef(model->config()), vlm_mtp_loss_weight(*model)}](
          size_t i, const StepTotals& totals) { return vlm_loss_sum(model, micro_batches[i], weights, totals); },
      optimizer, lr, params, options,
      "supervised tokens");
}

}  // namespace mm
