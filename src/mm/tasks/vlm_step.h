// The vision-language loss and one optimizer step over VLM micro-batches: the trainer's step
// (train/train_step.h) with the summed cross-entropy over supervised tokens. The parity test
// drives this directly against a plain PyTorch loop over transformers.
#pragma once
#include <ATen/core/Tensor.h>

#include <optional>
#include <vector>

#include "mm/data/train_sample.h"
#include "mm/models/qwen_vl/qwen_vl_model.h"
#include "mm/train/train_step.h"

namespace mm {

// The load-balancing loss weight a training run uses: `configured` (the run config's
// model.router_aux_loss_coef) when set, else config.json's router_aux_loss_coef; 0 for a dense
// model.
double vlm_router_aux_loss_coef(const QwenVLConfig& config, std::optional<double> configured = std::nullopt);

// The weight of the multi-token-prediction loss: 0 for a model without the head (built without
// it, or a checkpoint without one), else `configured` (model.mtp_loss_weight) when set, else
// kDefaultMtpLossWeight.
inline constexpr double kDefaultMtpLossWeight = 0.1;  // Megatron's mtp_loss_scaling_factor default
double vlm_mtp_loss_weight(const QwenVLForConditionalGenerationImpl& model, std::optional<double> configured = std::nullopt);

// The terms a training loss adds to the cross-entropy, by weight (0: the term is off).
struct VlmLossWeights {
  double router_aux_loss_coef = 0;  // an MoE model's load-balancing loss
  double mtp_loss_weight = 0;       // the multi-token-prediction head's loss
};

// Summed cross-entropy of `batch` (targets already shifted; -100 ignored), over the supervised
// positions only: the lm_head runs on those rows alone, which is where most of its cost goes.
// With mtp_loss_weight > 0 (a model with a multi-token-prediction head, models/qwen2/
// multi_token_prediction.h) plus weight / D times the summed cross-entropy of each depth k = 1..D
// over multi_token_targets: summed like the main loss, so the step divides it by the same target
// count (Megatron's per-token MTP loss).
// With router_aux_loss_coef > 0 (an MoE model) plus the load-balancing term of this micro-batch,
// coef * aux averaged over the step's micro-batches (as transformers' Trainer averages each
// micro-batch's loss + coef * aux_loss), i.e. coef * aux * loss_units / micro_batches of
// `totals`; padding is excluded from aux, as transformers' attention mask excludes it; the
// multi-token-prediction head's sparse layers count in it beside the decoder's (as every MoE layer
// of a Megatron model adds its own).
// Under context parallelism (model->context_parallel set) the sum over this rank's tokens only:
// the cp group's sums add up to the batch's; the load-balancing term is the whole sequence's
// (statistics summed over the group), 1 / cp of it on each rank. No multi-token-prediction term then.
// Returns a 0-dim float32 tensor (float64 for a model in fp64) that requires grad.
at::Tensor vlm_loss_sum(QwenVLForConditionalGeneration& model, const TrainBatch& batch,
                        const VlmLossWeights& weights = {}, const StepTotals& totals = {});

// Where multi-token-prediction depth k reads a token ahead in `batch`: [rows, seq] bool (CPU), true
// where p and p + k are real tokens of one sample. Elsewhere the depth reads a zero embedding and
// predicts nothing, whatever stands at p + k (padding, the next packed sample, nothing).
at::Tensor multi_token_positions(const TrainBatch& batch, int64_t k);
// The targets of depth k: [rows, seq], targets[p + k] where multi_token_positions holds, else -100.
// positions: multi_token_positions(batch, k) when the caller has it already (else computed).
at::Tensor multi_token_targets(const TrainBatch& batch, int64_t k, const at::Tensor& positions = {});

// The trained FLOPs of `batch` (train/model_flops.h): the decoder over each sample's own tokens
// (the rows of a padded batch, the documents of a packed one: packing does not change the work),
// the LM head over the supervised rows, the vision tower over every image and video; with
// mtp_depths > 0 the multi-token-prediction head too (each depth's LM head over its target rows).
double vlm_batch_training_flops(const QwenVLConfig& config, const TrainBatch& batch, int64_t mtp_depths = 0);

// The loss of the step is the sum over all micro-batches divided by their total target count
// (over all ranks with options.data_parallel), plus an MoE model's load-balancing term at
// config.json's weight and a multi-token-prediction head's loss at kDefaultMtpLossWeight.
// `params` are the trainable parameters.
StepResult train_step(QwenVLForConditionalGeneration& model, AdamW& optimizer, double lr,
                      const std::vector<at::Tensor>& params, const std::vector<TrainBatch>& micro_batches,
                      const StepOptions& options);

}  // namespace mm
