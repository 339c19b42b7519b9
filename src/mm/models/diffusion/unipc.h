// The UniPC multistep sampler (predictor-corrector, B(h) variants) for flow-matching models, equal
// to diffusers' UniPCMultistepScheduler in the configuration Wan ships: use_flow_sigmas with
// flow_shift, prediction_type "flow_prediction", predict_x0. Any solver_order >= 1, bh1 / bh2,
// lower_order_final, disable_corrector, final_sigmas_type zero / sigma_min. Other diffusers
// options (beta schedules for epsilon models, thresholding, Karras sigmas, dynamic shifting, a
// solver_p) are refused by name. One deliberate difference: with bh1, a final sigma of 0 and a
// first-order last step, diffusers computes -inf * 0 and returns NaN; here that step returns the
// x0 prediction (the limit), as bh2 does in both.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "mm/models/diffusion/flow_sampler.h"

namespace mm {

struct UniPCConfig {
  int64_t num_train_timesteps = 1000;
  double flow_shift = 1.0;
  int64_t solver_order = 2;
  std::string solver_type = "bh2";  // bh1 | bh2
  bool lower_order_final = true;
  std::vector<int64_t> disable_corrector;  // step indices whose corrector is skipped
  std::string final_sigmas_type = "zero";  // zero | sigma_min
  void validate() const;
  // Reads scheduler_config.json (diffusers' keys); unsupported options are errors naming the key.
  static UniPCConfig from_file(const std::filesystem::path& scheduler_config_json);
};

class UniPCScheduler : public FlowSampler {
 public:
  explicit UniPCScheduler(UniPCConfig config);

  void set_timesteps(int64_t num_inference_steps) override;
  const at::Tensor& timesteps() const override { return timesteps_; }  // [steps] int64, as diffusers truncates them
  const at::Tensor& sigmas() const override { return sigmas_; }        // [steps + 1] float32
  int64_t step_index() const { return step_index_; }

  // One step: model_output is the predicted velocity at the current sigma for `sample`; returns
  // the sample at the next sigma (in sample's dtype) and advances. Corrects the previous step's
  // prediction first (UniC) when it may.
  at::Tensor step(const at::Tensor& model_output, const at::Tensor& sample) override;

 private:
  at::Tensor predict(const at::Tensor& sample, int64_t order) const;
  at::Tensor correct(const at::Tensor& model_t, const at::Tensor& last_sample, const at::Tensor& this_sample,
                     int64_t order) const;

  UniPCConfig config_;
  at::Tensor timesteps_, sigmas_;
  std::vector<at::Tensor> outputs_;  // the last solver_order x0 predictions, newest last
  at::Tensor last_sample_;
  int64_t step_index_ = 0, lower_order_nums_ = 0, this_order_ = 1;
};

}  // namespace mm
