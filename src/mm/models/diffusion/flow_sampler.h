// The interface the generation pipelines step through, whichever flow-matching sampler a
// model's scheduler_config.json names (diffusers' `_class_name`).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <memory>

namespace mm {

class FlowSampler {
 public:
  virtual ~FlowSampler() = default;
  virtual void set_timesteps(int64_t num_inference_steps) = 0;
  // [steps]: the timesteps the predictor is conditioned on, in the reference's dtype.
  virtual const at::Tensor& timesteps() const = 0;
  virtual const at::Tensor& sigmas() const = 0;  // [steps + 1] float32
  // One step from the current timestep to the next: model_output is the predicted velocity.
  virtual at::Tensor step(const at::Tensor& model_output, const at::Tensor& sample) = 0;
};

// FlowMatchEulerDiscreteScheduler or UniPCMultistepScheduler (flow mode) from a diffusers
// scheduler_config.json; any other `_class_name` is an error naming the file and the supported ones.
std::unique_ptr<FlowSampler> make_flow_sampler(const std::filesystem::path& scheduler_config_json);

}  // namespace mm
