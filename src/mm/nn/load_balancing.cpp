#include "mm/nn/load_balancing.h"

#include <torch/torch.h>

#include "mm/core/error.h"
#include "mm/core/host_to_device.h"

namespace mm {

struct LoadBalancingLoss::State {
  int64_t num_experts = 0, top_k = 0, layers = 0;
  at::Tensor mask;         // [tokens] fp32, or undefined
  at::Tensor assignments;  // [num_experts] fp32: C_e, summed layer by layer as the reference does
  at::Tensor probability;  // [num_experts] fp32: the probability column sums over all layers
  at::Tensor rows;         // 0-dim fp32: R
  bool finished = false;
  std::function<at::Tensor(const at::Tensor&)> sum_over_ranks;  // unset: this rank's tokens are all
  at::Tensor gradient;  // [num_experts]: what each layer's probability column sums receive
};

namespace {

// What the autograd node keeps: the state shared with the loss, so that a node made before
// finish() reads the gradient finish() sets.
struct StateHolder : torch::CustomClassHolder {
  explicit StateHolder(std::shared_ptr<LoadBalancingLoss::State> s) : state(std::move(s)) {}
  std::shared_ptr<LoadBalancingLoss::State> state;
};

// output -> output; column_sums' gradient is the constant finish() computed.
struct AttachGradient : torch::autograd::Function<AttachGradient> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor output, at::Tensor column_sums,
                            const std::shared_ptr<LoadBalancingLoss::State>& state) {
    (void)column_sums;
    ctx->saved_data["state"] = c10::IValue::make_capsule(c10::make_intrusive<StateHolder>(state));
    return output.view_as(output);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto state = c10::static_intrusive_pointer_cast<StateHolder>(ctx->saved_data["state"].toCapsule())->state;
    MM_CHECK(state->finished, "LoadBalancingLoss: backward before finish(): the layers' aux-loss gradient is unknown");
    return {grad_outputs[0], state->gradient, at::Tensor()};
  }
};

}  // namespace

LoadBalancingLoss::LoadBalancingLoss(int64_t num_experts, int64_t top_k, at::Tensor token_mask)
    : state_(std::make_shared<State>()) {
  MM_CHECK(num_experts > 0 && top_k > 0 && top_k <= num_experts, "LoadBalancingLoss: needs 0 < top_k <= experts, got ",
           top_k, " of ", num_experts);
  state_->num_experts = num_experts;
  state_->top_k = top_k;
  if (token_mask.defined()) state_->mask = token_mask.reshape(-1).to(torch::kFloat32);
}

int64_t LoadBalancingLoss::layers() const { return state_->layers; }

void LoadBalancingLoss::sum_over_ranks(std::function<at::Tensor(const at::Tensor&)> sum) {
  state_->sum_over_ranks = std::move(sum);
}

at::Tensor LoadBalancingLoss::attach(const at::Tensor& output, const at::Tensor& probs, const at::Tensor& chosen) {
  State& s = *state_;
  MM_CHECK(probs.dim() == 2 && probs.size(1) == s.num_experts && chosen.dim() == 2 && chosen.size(1) == s.top_k &&
               chosen.size(0) == probs.size(0),
           "LoadBalancingLoss: router probabilities must be [tokens, ", s.num_experts, "] and choices [tokens, ",
           s.top_k, "], got ", probs.sizes(), " and ", chosen.sizes());
  const int64_t tokens = probs.size(0);
  at::Tensor mask;
  if (s.mask.defined()) {
    MM_CHECK(s.mask.numel() == tokens, "LoadBalancingLoss: the attention mask has ", s.mask.numel(),
             " positions but the layer routed ", tokens, " tokens");
    mask = to_device_async(s.mask, probs.device());
  }
  auto weighted = probs.to(torch::kFloat32);
  if (mask.defined()) weighted = weighted * mask.unsqueeze(-1);
  auto column_sums = weighted.sum(0);  // [num_experts], with the router's history when grad is on
  if (!s.finished) {
    const auto options = torch::TensorOptions().dtype(torch::kFloat32).device(probs.device());
    if (!s.assignments.defined()) {
      s.assignments = torch::zeros({s.num_experts}, options);
      s.probability = torch::zeros({s.num_experts}, options);
      s.rows = torch::zeros({}, options);
    }
    torch::NoGradGuard no_grad;
    const auto flat = chosen.reshape(-1);
    if (mask.defined()) {
      s.assignments = s.assignments + torch::zeros({s.num_experts}, options).scatter_add(0, flat, mask.repeat_interleave(s.top_k));
      s.rows = s.rows + mask.sum();
    } else {
      s.assignments = s.assignments + torch::bincount(flat, {}, s.num_experts).to(torch::kFloat32);
      s.rows = s.rows + static_cast<double>(tokens);
    }
    s.probability = s.probability + column_sums.detach();
    ++s.layers;
  }
  if (!torch::GradMode::is_enabled() || !column_sums.requires_grad()) return output;
  return AttachGradient::apply(output, column_sums, state_);
}

at::Tensor LoadBalancingLoss::finish(double weight) {
  State& s = *state_;
  MM_CHECK(s.layers > 0, "LoadBalancingLoss: no sparse layer ran");
  const double experts = static_cast<double>(s.num_experts);
  if (s.sum_over_ranks) {
    const auto all = s.sum_over_ranks(torch::cat({s.assignments, s.probability, s.rows.view({1})}));
    s.assignments = all.narrow(0, 0, s.num_experts);
    s.probability = all.narrow(0, s.num_experts, s.num_experts);
    s.rows = all[2 * s.num_experts];
  }
  auto value = (s.assignments / s.rows * (s.probability / s.rows)).sum() * experts;
  s.gradient = s.assignments * (weight * experts) / (s.rows * s.rows);
  s.finished = true;
  return value;
}

}  // namespace mm
