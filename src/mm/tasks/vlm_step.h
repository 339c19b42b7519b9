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

// Summed cross-entropy of `batch` (targets already shifted; -100 ignored), over the supervised
// positions only: the lm_head runs on those rows alone, which is where most of its cost goes.
// With router_aux_loss_coef > 0 (an MoE model) plus the load-balancing term of this micro-batch,
// coef * aux averaged over the step's micro-batches (as transformers' Trainer averages each
// micro-batch's loss + coef * aux_loss), i.e. coef * aux * loss_units / micro_batches of
// `totals`; padding is excluded from aux, as transformers' attention mask excludes it.
// Returns a 0-dim float32 tensor that requires grad.
at::Tensor vlm_loss_sum(QwenVLForConditionalGeneration& model, const TrainBatch& batch,
                        double router_aux_loss_coef = 0, const StepTotals& totals = {});

// The trained FLOPs of `batch` (train/model_flops.h): the decoder over each sample's own tokens
// (the rows of a padded batch, the documents of a packed one: packing does not change the work),
// the LM head over the supervised rows, the vision tower over every image and video.
double vlm_batch_training_flops(const QwenVLConfig& config, const TrainBatch& batch);

// The loss of the step is the sum over all micro-batches divided by their total target count
// (over all ranks with options.data_parallel), plus an MoE model's load-balancing term at
// config.json's weight. `params` are the trainable parameters.
StepResult train_step(QwenVLForConditionalGeneration& model, AdamW& optimizer, double lr,
                      const std::vector<at::Tensor>& params, const std::vector<TrainBatch>& micro_batches,
                      const StepOptions& options);

}  // namespace mm
