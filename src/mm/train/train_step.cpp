#include "mm/train/train_step.h"

#include <torch/torch.h>

#include <cmath>

#include "mm/core/error.h"
#include "mm/core/nvtx_range.h"
#include "mm/parallel/autograd_collectives.h"
#include "mm/parallel/fully_shard.h"
#include "mm/train/autocast.h"
#include "mm/train/grad_clip.h"
#include "mm/train/optimizer.h"

namespace mm {

StepResult train_step(const std::vector<MicroBatchCounts>& counts,
                      const std::function<at::Tensor(size_t, const StepTotals&)>& loss_sum,
                      AdamW& optimizer, double lr, const std::vector<at::Tensor>& params, const StepOptions& options,
                      const char* what_units) {
  MM_CHECK(!counts.empty(), "train_step: no micro-batches");
  parallel::FullyShardedModel* dp = options.data_parallel;
  StepResult result;
  StepTotals totals{0, static_cast<int64_t>(counts.size())};
  for (const auto& c : counts) {
    result.loss_units += c.loss_units;
    result.tokens += c.tokens;
    result.samples += c.samples;
    result.model_flops += c.model_flops;
  }
  if (dp) {
    auto sums = torch::tensor({static_cast<double>(result.loss_units), static_cast<double>(result.tokens),
                               static_cast<double>(result.samples), result.model_flops,
                               static_cast<double>(totals.micro_batches)},
                              torch::kFloat64);
    dp->mesh().all_reduce_sum(sums);
    result.loss_units = static_cast<int64_t>(sums[0].item<double>());
    result.tokens = static_cast<int64_t>(sums[1].item<double>());
    result.samples = static_cast<int64_t>(sums[2].item<double>());
    result.model_flops = sums[3].item<double>();
    totals.micro_batches = static_cast<int64_t>(sums[4].item<double>());
  }
  totals.loss_units = result.loss_units;
  MM_CHECK(result.loss_units > 0, "train_step: the step's batches have no ", what_units);
  // Autocast where the parameters are: CPU autocast for a CPU run, CUDA autocast for a GPU one.
  const auto device = params.empty() ? c10::DeviceType::CPU : params.front().device().type();
  // The loss sum stays a float64 tensor where the loss is (the same sum the host would make in
  // double): reading it per micro-batch would make the host wait for the GPU before queueing the
  // next forward. It is read once, after the backward passes.
  at::Tensor step_loss;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (dp) {
      dp->set_requires_gradient_sync(i + 1 == counts.size());
      dp->begin_forward();
    }
    at::Tensor sum;
    {
      const NvtxRange range("forward");
      AutocastGuard autocast(options.bf16_autocast, device);
      sum = loss_sum(i, totals);
    }
    {
      const NvtxRange range("backward");
      (sum / static_cast<double>(result.loss_units)).backward();
      if (dp) dp->finish_backward();
    }
    const auto part = sum.detach().to(torch::kFloat64);
    step_loss = step_loss.defined() ? step_loss + part : part;
  }
  // Clipping and the update are queued without the host reading anything: a non-finite norm
  // skips the update through found_inf. The loss and the norm are read once, at the end.
  at::Tensor norm;
  {
    const NvtxRange range("clip_grad_norm");
    norm = dp ? dp->clip_grad_norm_tensor(options.max_grad_norm) : clip_grad_norm_tensor(params, options.max_grad_norm);
  }
  {
    const NvtxRange range("optimizer");
    optimizer.step(lr, at::isfinite(norm).logical_not().to(at::kFloat));
    optimizer.zero_grad();
  }
  // The loss and the norm come back in one copy: the host waits for the GPU once per step.
  const auto read = at::stack({step_loss.reshape({}), norm.to(step_loss.device(), torch::kFloat64).reshape({})})
                        .to(torch::kCPU);
  auto total = read.narrow(0, 0, 1).clone();
  if (dp) dp->mesh().all_reduce_sum(total);
  result.loss = total[0].item<double>() / static_cast<double>(result.loss_units);
  result.grad_norm = read[1].item<double>();
  result.skipped = !std::isfinite(result.grad_norm);
  if (result.skipped) optimizer.forget_last_step();
  if (dp) result.collective_seconds = dp->take_wait_seconds();
  result.all_to_all_seconds = parallel::take_exchange_seconds();
  return result;
}

}  // namespace mm
