#include "mm/models/diffusion/flow_matching_objective.h"

#include <ATen/ATen.h>

#include <cmath>
#include <numbers>

#include "mm/core/error.h"
#include "mm/core/host_to_device.h"

namespace mm {

void FlowMatchingObjective::validate(const std::string& where) const {
  MM_CHECK(num_train_timesteps >= 1, where, ".num_train_timesteps: must be at least 1, got ", num_train_timesteps);
  MM_CHECK(shift > 0, where, ".shift: must be positive, got ", shift);
  MM_CHECK(logit_std > 0, where, ".logit_std: must be positive, got ", logit_std);
}

at::Tensor flow_matching_training_sigmas(const FlowMatchingObjective& objective) {
  const auto n = objective.num_train_timesteps;
  // As the scheduler's constructor: float32 timesteps N..1, divided by N, then shifted in float32.
  const auto s = at::linspace(1, static_cast<double>(n), n, at::kFloat).flip(0) / static_cast<double>(n);
  const double k = objective.shift;
  return k * s / (1 + (k - 1) * s);
}

at::Tensor sample_timestep_density(const FlowMatchingObjective& objective, int64_t batch, at::Generator& generator) {
  const auto options = at::TensorOptions().dtype(at::kFloat);
  if (objective.timestep_sampling == TimestepSampling::logit_normal)
    return at::sigmoid(at::normal(objective.logit_mean, objective.logit_std, {batch}, generator, options));
  auto u = at::rand({batch}, generator, options);
  if (objective.timestep_sampling == TimestepSampling::mode)
    u = 1 - u - objective.mode_scale * (at::cos(std::numbers::pi * u / 2).pow(2) - 1 + u);
  return u;
}

FlowMatchingBatch make_flow_matching_batch(const FlowMatchingObjective& objective, const at::Tensor& latents,
                                           const at::Tensor& noise, const at::Tensor& u) {
  MM_CHECK(latents.sizes() == noise.sizes(), "flow matching: noise ", noise.sizes(), " must have the latents' shape ",
           latents.sizes());
  MM_CHECK(u.dim() == 1 && u.size(0) == latents.size(0), "flow matching: u must be [batch=", latents.size(0),
           "], got ", u.sizes());
  const auto table = flow_matching_training_sigmas(objective).to(u.device());
  // (u * N).long() as the scripts do; u < 1 keeps the index in the table (clamped for u == 1 after `mode`).
  const auto index = (u * static_cast<double>(objective.num_train_timesteps)).to(at::kLong).clamp(0, table.size(0) - 1);
  FlowMatchingBatch out;
  out.sigmas = to_device_async(table.index_select(0, index), latents.device());  // u may come from a CPU generator
  out.timesteps = out.sigmas * static_cast<double>(objective.num_train_timesteps);
  std::vector<int64_t> shape(static_cast<size_t>(latents.dim()), 1);
  shape[0] = latents.size(0);
  const auto sigma = out.sigmas.view(shape).to(latents.dtype());
  out.noisy = (1 - sigma) * latents + sigma * noise;
  out.target = noise - latents;
  if (objective.loss_weighting == LossWeighting::sigma_sqrt) {
    out.weights = out.sigmas.pow(-2.0);
  } else if (objective.loss_weighting == LossWeighting::cosmap) {
    out.weights = 2 / (std::numbers::pi * (1 - 2 * out.sigmas + 2 * out.sigmas.pow(2)));
  } else {
    out.weights = at::ones_like(out.sigmas);
  }
  return out;
}

at::Tensor flow_matching_loss(const at::Tensor& prediction, const FlowMatchingBatch& batch) {
  MM_CHECK(prediction.sizes() == batch.target.sizes(), "flow matching: prediction ", prediction.sizes(),
           " must have the target's shape ", batch.target.sizes());
  const auto b = prediction.size(0);
  std::vector<int64_t> shape(static_cast<size_t>(prediction.dim()), 1);
  shape[0] = b;
  const auto error = (prediction.to(at::kFloat) - batch.target.to(at::kFloat)).pow(2);
  return (batch.weights.view(shape) * error).reshape({b, -1}).mean(1).mean();
}

}  // namespace mm
