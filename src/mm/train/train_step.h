// One optimizer step, the same for every task: forward and backward over the step's
// micro-batches, global-norm clipping, the AdamW update. The loss of the step is the sum over all
// micro-batches divided by their total loss units (target tokens, samples) over every rank, as
// transformers' Trainer does with num_items_in_batch, so gradient accumulation equals one big
// batch and N data-parallel ranks equal one process with N times the batch.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace mm {

namespace parallel {
class FullyShardedModel;
}

class AdamW;

struct StepOptions {
  bool bf16_autocast = false;  // bf16 compute, fp32 master weights and loss
  double max_grad_norm = 1.0;  // <= 0: measure only
  // Data parallel (replicated or sharded units): the model was wrapped by it, the optimizer
  // holds its optimizer_parameters(), and every rank calls the step with its own micro-batches.
  parallel::FullyShardedModel* data_parallel = nullptr;
};

struct StepResult {
  double loss = 0;       // the step's loss: summed losses over all loss units (of all ranks)
  double grad_norm = 0;  // global L2 norm before clipping
  bool skipped = false;  // the norm was not finite: no update was made
  int64_t tokens = 0, loss_units = 0, samples = 0;  // summed over all ranks
  double model_flops = 0;                           // summed over all ranks
  double collective_seconds = 0;  // time blocked on collectives (data parallel; excludes the counts)
  double all_to_all_seconds = 0;  // time in all-to-all exchanges (expert parallelism's dispatch)
};

// The whole step, over all ranks, as a micro-batch's loss may need it: a term averaged over the
// step's micro-batches (an MoE's load-balancing loss) is added to the summed loss as
// term * loss_units / micro_batches.
struct StepTotals {
  int64_t loss_units = 0;
  int64_t micro_batches = 0;
};

// What the step needs to know of micro-batch i before computing it.
struct MicroBatchCounts {
  int64_t loss_units = 0, tokens = 0, samples = 0;
  double model_flops = 0;  // for the FLOPs rate and MFU only
};

// loss_sum(i, totals): micro-batch i's loss summed over its loss units (0-dim, requires grad); called
// once per micro-batch in order, under autocast when options.bf16_autocast. `params`: the
// trainable parameters (clipped together; unused with options.data_parallel, which clips over the
// whole job; their device is the autocast device). Throws mm::Error naming `what_units` when
// the step has no loss units at all.
StepResult train_step(const std::vector<MicroBatchCounts>& counts,
                      const std::function<at::Tensor(size_t, const StepTotals&)>& loss_sum,
                      AdamW& optimizer, double lr, const std::vector<at::Tensor>& params, const StepOptions& options,
                      const char* what_units = "loss units");

}  // namespace mm
