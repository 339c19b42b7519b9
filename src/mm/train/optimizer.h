// AdamW over named parameters, equal to torch.optim.AdamW: the fused kernel
// (at::_fused_adamw_, CPU and CUDA) or a per-tensor loop matching torch.optim.AdamW(foreach=False).
// Parameters are split into a decay group and a no-decay group the way the Hugging Face Trainer
// splits them, so a run here and a run under transformers apply weight decay to the same tensors.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace torch::nn {
class Module;
}

namespace mm {

class Checkpoint;

struct AdamWConfig {
  double lr = 1e-4;  // the base lr; step() takes the scheduled one
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool fused = true;
};

using NamedParams = std::vector<std::pair<std::string, at::Tensor>>;

// transformers 5.17 Trainer.get_decay_parameter_names by name: no decay when the lower-cased
// name contains "bias", "layernorm" or "rmsnorm", or a "norm" / "*_norm" path component
// ("model.norm.weight", "q_norm.weight").
bool is_no_decay_parameter(const std::string& name);

// Its other rule, by module type: the parameters of every torch::nn::LayerNorm in `module` (by
// their names in module.named_parameters()) get no decay either, whatever they are called
// (Qwen2-VL's "visual.blocks.0.norm1.weight", "visual.merger.ln_q.weight").
std::set<std::string> layer_norm_parameter_names(const torch::nn::Module& module);

class AdamW {
 public:
  // `trainable`: leaf tensors (any device, floating dtype) updated in place by step(). No decay
  // for the names is_no_decay_parameter picks and for `no_decay_names` (layer_norm_parameter_names
  // of the model, for the Trainer's split).
  AdamW(NamedParams trainable, AdamWConfig config, std::set<std::string> no_decay_names = {});

  // One update with learning rate `lr` from the current .grad() of each parameter. A parameter
  // whose grad is undefined is skipped (no state change), as torch does. `found_inf` (a float32
  // scalar, 1 or 0, on any device) skips the whole update where it is 1 without the host reading
  // it (the fused kernel checks it, as under torch's GradScaler; the per-tensor loop reads it);
  // the state of a parameter first met then is created with step 0, as torch does.
  void step(double lr, const at::Tensor& found_inf = {});
  // Takes the last step back out of steps_taken(), for a step found skipped afterwards.
  void forget_last_step() { --steps_taken_; }
  void zero_grad();  // drops the grads (set_to_none, torch's default)

  int64_t steps_taken() const { return steps_taken_; }
  const AdamWConfig& config() const { return config_; }
  const NamedParams& params() const { return params_; }
  double weight_decay_of(const std::string& name) const;  // config weight_decay or 0

  // The optimizer state as named tensors (for optimizer.safetensors):
  // "exp_avg.<param>" and "exp_avg_sq.<param>" (param's shape and dtype) and "step.<param>"
  // (a float32 scalar), for each parameter that has met a step (step 0 when found_inf skipped
  // every one).
  std::vector<std::pair<std::string, at::Tensor>> state_tensors() const;
  // Replaces the state by a saved one; every tensor is checked by name, shape and completeness
  // (all three per parameter) and a mismatch names it. Copies onto each parameter's device.
  void load_state_tensors(const std::vector<std::pair<std::string, at::Tensor>>& tensors);
  void load_state_tensors(const Checkpoint& checkpoint);

 private:
  struct State {
    at::Tensor exp_avg, exp_avg_sq, step;  // step: float32 scalar on the param's device (fused)
  };                                        // or on the CPU (per-tensor), as torch keeps it
  void step_fused(const std::vector<size_t>& active, double lr, const at::Tensor& found_inf);
  void step_single(const std::vector<size_t>& active, double lr);
  State& state_for(size_t i);

  NamedParams params_;
  std::set<std::string> no_decay_names_;
  std::vector<bool> no_decay_;
  AdamWConfig config_;
  std::map<size_t, State> state_;
  int64_t steps_taken_ = 0;
};

}  // namespace mm
