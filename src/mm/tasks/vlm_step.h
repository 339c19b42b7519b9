// The vision-language loss and one optimizer step over VLM micro-batches: the trainer's step
// (train/train_step.h) with the summed cross-entropy over supervised tokens. The parity test
// drives this directly against a plain PyTorch loop over transformers.
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

#include "mm/data/train_sample.h"
#include "mm/models/qwen_vl/qwen_vl_model.h"
#include "mm/train/train_step.h"

namespace mm {

// Summed cross-entropy of `batch` (targets already shifted; -100 ignored), over the supervised
// positions only: the lm_head runs on those rows alone, which is where most of its cost goes.
// Returns a 0-dim float32 tensor that requires grad.
at::Tensor vlm_loss_sum(QwenVLForConditionalGeneration& model, const TrainBatch& batch);

// The trained FLOPs of `batch` (train/model_flops.h): the decoder over each sample's own tokens
// (the rows of a padded batch, the documents of a packed one: packing does not change the work),
// the LM head over the supervised rows, the vision tower over every image and video.
double vlm_batch_training_flops(const QwenVLConfig& config, const TrainBatch& batch);

// The loss of the step is the sum over all micro-batches divided by their total target count
// (over all ranks with options.data_parallel). `params` are the trainable parameters.
StepResult train_step(QwenVLForConditionalGeneration& model, AdamW& optimizer, double lr,
                      const std::vector<at::Tensor>& params, const std::vector<TrainBatch>& micro_batches,
                      const StepOptions& options);

}  // namespace mm
