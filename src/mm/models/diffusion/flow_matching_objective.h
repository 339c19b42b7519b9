// The flow-matching training objective of Wan and other rectified-flow models, as diffusers'
// training scripts compute it (training_utils.compute_density_for_timestep_sampling and
// compute_loss_weighting_for_sd3 with FlowMatchEulerDiscreteScheduler's training table):
//   u ~ density (uniform | logit_normal | mode)          one per sample
//   i = int(u * num_train_timesteps); sigma = table_sigmas[i]; t = sigma * num_train_timesteps,
//   where table_sigmas = shift(s) for s = N/N, (N-1)/N, ..., 1/N and shift(s) = k s / (1 + (k-1) s)
//   x_t = (1 - sigma) * x_0 + sigma * noise;   target v = noise - x_0
//   loss = mean over samples of mean over elements of weighting(sigma) * (v_pred - v)^2
// With the same torch CPU generator seed the draws equal diffusers' (same ATen kernels, same order).
#pragma once
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace mm {

// How training timesteps are drawn (flow_matching.timestep_sampling) and how the loss is weighted
// per timestep (flow_matching.loss_weighting), as diffusers' training_utils names them.
enum class TimestepSampling { uniform, logit_normal, mode };
enum class LossWeighting { none, sigma_sqrt, cosmap };

struct FlowMatchingObjective {
  int64_t num_train_timesteps = 1000;
  double shift = 5.0;                            // Wan's training shift
  TimestepSampling timestep_sampling = TimestepSampling::uniform;
  double logit_mean = 0.0, logit_std = 1.0;      // logit_normal
  double mode_scale = 1.29;                      // mode
  LossWeighting loss_weighting = LossWeighting::none;

  // Throws mm::Error naming the field (as "<where>.<field>").
  void validate(const std::string& where = "flow_matching") const;
};

// The noised input and the regression target of one batch.
struct FlowMatchingBatch {
  at::Tensor noisy;      // [B, ...] x_t, in x_0's dtype
  at::Tensor timesteps;  // [B] float32: what the predictor is conditioned on (sigma * N)
  at::Tensor sigmas;     // [B] float32
  at::Tensor target;     // [B, ...] noise - x_0
  at::Tensor weights;    // [B] float32 loss weights
};

// The training table: sigmas [N] float32 from shift(1) down to shift(1/N), as the scheduler's
// `sigmas` before set_timesteps.
at::Tensor flow_matching_training_sigmas(const FlowMatchingObjective& objective);

// u in [0, 1) for `batch` samples, drawn from `generator` exactly as diffusers draws them.
at::Tensor sample_timestep_density(const FlowMatchingObjective& objective, int64_t batch, at::Generator& generator);

// Noises `latents` [B, ...] with `noise` (same shape) at the timesteps u [B] selects.
FlowMatchingBatch make_flow_matching_batch(const FlowMatchingObjective& objective, const at::Tensor& latents,
                                           const at::Tensor& noise, const at::Tensor& u);

// The weighted MSE in fp32 (a scalar): mean over samples of the per-sample weighted mean.
at::Tensor flow_matching_loss(const at::Tensor& prediction, const FlowMatchingBatch& batch);

}  // namespace mm
