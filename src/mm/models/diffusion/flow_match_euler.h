// The flow-matching Euler sampler of Wan and other rectified-flow models, equal to diffusers'
// FlowMatchEulerDiscreteScheduler (static shift; no dynamic shifting, terminal stretch, Karras /
// exponential / beta sigmas, inverted or stochastic sampling: configs asking for those are
// refused by name). Schedule: sigma_t = shift * s / (1 + (shift - 1) * s), s going linearly from
// the shifted 1 to the shifted 1/num_train_timesteps (diffusers applies the shift to those end
// points and then again to the schedule; kept, since checkpoints were tuned with it), then 0.
// Step: x_next = x + (sigma_next - sigma) * v, in fp32.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <vector>

#include "mm/models/diffusion/flow_sampler.h"

namespace mm {

struct FlowMatchEulerConfig {
  int64_t num_train_timesteps = 1000;
  double shift = 1.0;
  // Reads scheduler_config.json; an option this sampler does not implement is an error naming it.
  static FlowMatchEulerConfig from_file(const std::filesystem::path& scheduler_config_json);
};

class FlowMatchEulerScheduler : public FlowSampler {
 public:
  explicit FlowMatchEulerScheduler(FlowMatchEulerConfig config);

  void set_timesteps(int64_t num_inference_steps) override;
  const at::Tensor& timesteps() const override { return timesteps_; }  // [steps] float32, sigma * num_train_timesteps
  const at::Tensor& sigmas() const override { return sigmas_; }        // [steps + 1] float32, ending in 0
  int64_t step_index() const { return step_index_; }

  // One Euler step from the current sigma to the next; model_output (the predicted velocity) and
  // sample share a shape. Returns the next sample in model_output's dtype and advances.
  at::Tensor step(const at::Tensor& model_output, const at::Tensor& sample) override;

  // Training's noising at `sigma` (one per batch item or a scalar): sigma * noise + (1 - sigma) * sample.
  static at::Tensor scale_noise(const at::Tensor& sample, const at::Tensor& sigma, const at::Tensor& noise);

 private:
  FlowMatchEulerConfig config_;
  double sigma_min_ = 0, sigma_max_ = 1;
  at::Tensor timesteps_, sigmas_;
  int64_t step_index_ = 0;
};

}  // namespace mm
