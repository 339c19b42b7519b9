// One optimizer step of vision-language training: forward and backward over the step's
// micro-batches, global-norm clipping, the AdamW update. This is the unit `mmtrain train` runs
// and the parity test drives directly against a plain PyTorch loop over transformers.
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

#include "mm/data/train_sample.h"
#include "mm/models/vlm_model.h"

namespace mm {

namespace parallel {
class FullyShardedModel;
}

class AdamW;

struct StepOptions {
  bool bf16_autocast = false;  // bf16 compute, fp32 master weights and loss
  double max_grad_norm = 1.0;  // <= 0: measure only
  // Data parallel (replicated or sharded units): the model was wrapped by it, the optimizer
  // holds its optimizer_parameters(), and every rank calls train_step with its own micro-batches.
  parallel::FullyShardedModel* data_parallel = nullptr;
};

struct StepResult {
  double loss = 0;       // mean cross-entropy over the step's target tokens (of all ranks)
  double grad_norm = 0;  // global L2 norm before clipping
  bool skipped = false;  // the norm was not finite: no update was made
  int64_t tokens = 0, target_tokens = 0, samples = 0;  // summed over all ranks
  double collective_seconds = 0;  // time blocked on collectives (data parallel; excludes the counts)
};

// Summed cross-entropy of `batch` (targets already shifted; -100 ignored), over the supervised
// positions only: the lm_head runs on those rows alone, which is where most of its cost goes.
// Returns a 0-dim float32 tensor that requires grad.
at::Tensor vlm_loss_sum(Qwen2_5_VLForConditionalGeneration& model, const TrainBatch& batch);

// The loss of a step is the sum over all micro-batches divided by their total target count (as
// transformers' Trainer does with num_items_in_batch), so gradient accumulation equals one big
// batch; data parallel divides by the count over all ranks, so N ranks equal one process with
// N times the batch. `params` are the trainable parameters (clipped together; unused with
// options.data_parallel, which clips over the whole job).
StepResult train_step(Qwen2_5_VLForConditionalGeneration& model, AdamW& optimizer, double lr,
                      const std::vector<at::Tensor>& params, const std::vector<TrainBatch>& micro_batches,
                      const StepOptions& options);

}  // namespace mm
