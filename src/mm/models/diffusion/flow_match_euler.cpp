#include "mm/models/diffusion/flow_match_euler.h"

#include <torch/torch.h>

#include "mm/core/error.h"
#include "mm/core/json_config.h"

namespace mm {

FlowMatchEulerConfig FlowMatchEulerConfig::from_file(const std::filesystem::path& scheduler_config_json) {
  const auto json = read_json_file(scheduler_config_json);
  const JsonView root(json, scheduler_config_json.string());
  FlowMatchEulerConfig c;
  c.num_train_timesteps = root.get_or("num_train_timesteps", c.num_train_timesteps);
  c.shift = root.get_or("shift", c.shift);
  for (const char* flag : {"use_dynamic_shifting", "invert_sigmas", "use_karras_sigmas", "use_exponential_sigmas",
                           "use_beta_sigmas", "stochastic_sampling"})
    MM_CHECK(!root.get_or(flag, false), root.where(flag), ": true is not supported by mmtrain's flow-matching Euler sampler");
  MM_CHECK(!root.has("shift_terminal"), root.where("shift_terminal"), ": not supported by mmtrain's flow-matching Euler sampler");
  MM_CHECK(c.num_train_timesteps >= 2, root.where("num_train_timesteps"), ": must be at least 2");
  MM_CHECK(c.shift > 0, root.where("shift"), ": must be positive");
  return c;
}

FlowMatchEulerScheduler::FlowMatchEulerScheduler(FlowMatchEulerConfig config) : config_(config) {
  MM_CHECK(config_.num_train_timesteps >= 2 && config_.shift > 0,
           "flow-matching Euler: num_train_timesteps must be >= 2 and shift positive");
  // The training sigmas' ends, in float32 as diffusers computes them at construction.
  const auto n = static_cast<double>(config_.num_train_timesteps);
  auto ends = torch::tensor({n, 1.0}, torch::kFloat32) / n;
  ends = config_.shift * ends / (1 + (config_.shift - 1) * ends);
  sigma_max_ = ends[0].item<double>();
  sigma_min_ = ends[1].item<double>();
}

void FlowMatchEulerScheduler::set_timesteps(int64_t num_inference_steps) {
  MM_CHECK(num_inference_steps >= 1, "flow-matching Euler: num_inference_steps must be at least 1, got ",
           num_inference_steps);
  const auto n = static_cast<double>(config_.num_train_timesteps);
  // numpy.linspace in float64 (i * step + start, the last point exactly `stop`), then the shift,
  // then float32.
  const double start = sigma_max_ * n, stop = sigma_min_ * n;
  std::vector<double> sigmas(static_cast<size_t>(num_inference_steps));
  const double step = num_inference_steps > 1 ? (stop - start) / static_cast<double>(num_inference_steps - 1) : 0;
  for (int64_t i = 0; i < num_inference_steps; ++i) {
    const double t = num_inference_steps > 1 && i == num_inference_steps - 1 ? stop : static_cast<double>(i) * step + start;
    const double s = t / n;
    sigmas[static_cast<size_t>(i)] = config_.shift * s / (1 + (config_.shift - 1) * s);
  }
  const auto shifted = torch::tensor(sigmas, torch::kFloat64).to(torch::kFloat32);
  timesteps_ = shifted * static_cast<double>(config_.num_train_timesteps);
  sigmas_ = torch::cat({shifted, torch::zeros({1}, torch::kFloat32)});
  step_index_ = 0;
}

at::Tensor FlowMatchEulerScheduler::step(const at::Tensor& model_output, const at::Tensor& sample) {
  MM_CHECK(sigmas_.defined(), "flow-matching Euler: call set_timesteps before step");
  MM_CHECK(step_index_ + 1 < sigmas_.size(0), "flow-matching Euler: all ", sigmas_.size(0) - 1,
           " steps were already taken");
  MM_CHECK(model_output.sizes() == sample.sizes(), "flow-matching Euler: model output ", model_output.sizes(),
           " and sample ", sample.sizes(), " differ in shape");
  const auto dt = (sigmas_[step_index_ + 1] - sigmas_[step_index_]).to(sample.device());
  ++step_index_;
  return (sample.to(torch::kFloat32) + dt * model_output).to(model_output.scalar_type());
}

at::Tensor FlowMatchEulerScheduler::scale_noise(const at::Tensor& sample, const at::Tensor& sigma,
                                                const at::Tensor& noise) {
  auto s = sigma.to(sample.device(), sample.scalar_type());
  while (s.dim() > 0 && s.dim() < sample.dim()) s = s.unsqueeze(-1);
  return s * noise + (1.0 - s) * sample;
}

}  // namespace mm
