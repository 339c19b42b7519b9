#include "mm/models/diffusion/unipc.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "mm/core/error.h"
#include "mm/core/json_config.h"

namespace mm {
namespace {

// log(alpha) - log(sigma) of a flow sigma (alpha = 1 - sigma): the half log-SNR UniPC steps in.
at::Tensor lambda_of(const at::Tensor& sigma) { return torch::log(1 - sigma) - torch::log(sigma); }

// The coefficients shared by predictor and corrector: rks (ratios of log-SNR steps, ending in 1),
// the differences D1 of older predictions, h*phi_1, B(h), and the right-hand side b of UniPC's
// order conditions.
struct Coefficients {
  at::Tensor rks, R, b, h_phi_1, B_h;
  std::vector<at::Tensor> D1s;
};

// For the step from sigmas[s0] to sigmas[t] with `order` - 1 older predictions (at sigmas[s0 - 1],
// sigmas[s0 - 2], ...; `outputs` holds the predictions, newest last = the one at s0).
Coefficients coefficients(const at::Tensor& sigmas, const std::vector<at::Tensor>& outputs, int64_t t, int64_t s0,
                          int64_t order, const std::string& solver_type, const c10::Device& device) {
  const auto lambda_t = lambda_of(sigmas[t].to(device)), lambda_s0 = lambda_of(sigmas[s0].to(device));
  const auto& m0 = outputs.back();
  Coefficients c;
  const auto h = lambda_t - lambda_s0;
  std::vector<at::Tensor> rks;
  for (int64_t i = 1; i < order; ++i) {
    const auto rk = (lambda_of(sigmas[s0 - i].to(device)) - lambda_s0) / h;
    rks.push_back(rk);
    c.D1s.push_back((outputs[outputs.size() - 1 - static_cast<size_t>(i)] - m0) / rk);
  }
  rks.push_back(torch::ones({}, lambda_t.options()));
  c.rks = torch::stack(rks);
  const auto hh = -h;  // predict_x0
  c.h_phi_1 = torch::expm1(hh);
  auto h_phi_k = c.h_phi_1 / hh - 1;
  double factorial = 1;
  c.B_h = solver_type == "bh1" ? hh : torch::expm1(hh);
  std::vector<at::Tensor> R, b;
  for (int64_t i = 1; i <= order; ++i) {
    R.push_back(torch::pow(c.rks, static_cast<double>(i - 1)));
    b.push_back(h_phi_k * factorial / c.B_h);
    factorial *= static_cast<double>(i + 1);
    h_phi_k = h_phi_k / hh - 1 / factorial;
  }
  c.R = torch::stack(R);
  c.b = torch::stack(b);
  return c;
}

// sum_k rhos[k] * D1s[k]
at::Tensor combine(const at::Tensor& rhos, const std::vector<at::Tensor>& D1s) {
  at::Tensor sum;
  for (size_t k = 0; k < D1s.size(); ++k) {
    const auto term = rhos[static_cast<int64_t>(k)] * D1s[k];
    sum = sum.defined() ? sum + term : term;
  }
  return sum;
}

}  // namespace

void UniPCConfig::validate() const {
  MM_CHECK(num_train_timesteps >= 2, "UniPC: num_train_timesteps must be at least 2");
  MM_CHECK(flow_shift > 0, "UniPC: flow_shift must be positive");
  MM_CHECK(solver_order >= 1, "UniPC: solver_order must be at least 1");
  MM_CHECK(solver_type == "bh1" || solver_type == "bh2", "UniPC: solver_type '", solver_type, "' is not bh1 or bh2");
  MM_CHECK(final_sigmas_type == "zero" || final_sigmas_type == "sigma_min", "UniPC: final_sigmas_type '",
           final_sigmas_type, "' is not zero or sigma_min");
}

UniPCConfig UniPCConfig::from_file(const std::filesystem::path& scheduler_config_json) {
  const auto json = read_json_file(scheduler_config_json);
  const JsonView root(json, scheduler_config_json.string());
  UniPCConfig c;
  c.num_train_timesteps = root.get_or("num_train_timesteps", c.num_train_timesteps);
  c.flow_shift = root.get_or("flow_shift", c.flow_shift);
  c.solver_order = root.get_or("solver_order", c.solver_order);
  c.solver_type = root.get_or("solver_type", c.solver_type);
  c.lower_order_final = root.get_or("lower_order_final", c.lower_order_final);
  c.disable_corrector = root.get_or("disable_corrector", c.disable_corrector);
  c.final_sigmas_type = root.get_or("final_sigmas_type", c.final_sigmas_type);
  MM_CHECK(root.get_or("use_flow_sigmas", false), root.where("use_flow_sigmas"),
           ": must be true (mmtrain's UniPC samples flow-matching models)");
  MM_CHECK(root.get_or<std::string>("prediction_type", "epsilon") == "flow_prediction", root.where("prediction_type"),
           ": must be flow_prediction");
  MM_CHECK(root.get_or("predict_x0", true), root.where("predict_x0"), ": false is not supported");
  for (const char* flag : {"thresholding", "use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas",
                           "use_dynamic_shifting", "rescale_betas_zero_snr"})
    MM_CHECK(!root.get_or(flag, false), root.where(flag), ": true is not supported by mmtrain's UniPC");
  for (const char* key : {"solver_p", "shift_terminal"})
    MM_CHECK(!root.has(key), root.where(key), ": not supported by mmtrain's UniPC");
  c.validate();
  return c;
}

UniPCScheduler::UniPCScheduler(UniPCConfig config) : config_(std::move(config)) { config_.validate(); }

void UniPCScheduler::set_timesteps(int64_t num_inference_steps) {
  MM_CHECK(num_inference_steps >= 1, "UniPC: num_inference_steps must be at least 1, got ", num_inference_steps);
  const auto n = static_cast<double>(config_.num_train_timesteps);
  // numpy.linspace(1, 1/N, steps + 1)[:-1] in float64, the flow shift, then float32 (as diffusers).
  const double start = 1.0, step = (1.0 / n - start) / static_cast<double>(num_inference_steps);
  std::vector<double> sigmas(static_cast<size_t>(num_inference_steps));
  std::vector<int64_t> timesteps(sigmas.size());
  for (int64_t i = 0; i < num_inference_steps; ++i) {
    const double s = static_cast<double>(i) * step + start;
    sigmas[static_cast<size_t>(i)] = config_.flow_shift * s / (1 + (config_.flow_shift - 1) * s);
  }
  if (std::fabs(sigmas[0] - 1) < 1e-6) sigmas[0] -= 1e-6;  // keeps log(1 - sigma) finite
  for (size_t i = 0; i < sigmas.size(); ++i) timesteps[i] = static_cast<int64_t>(sigmas[i] * n);
  sigmas.push_back(config_.final_sigmas_type == "zero" ? 0.0 : sigmas.back());
  sigmas_ = torch::tensor(sigmas, torch::kFloat64).to(torch::kFloat32);
  timesteps_ = torch::tensor(timesteps, torch::kLong);
  outputs_.assign(static_cast<size_t>(config_.solver_order), at::Tensor());
  last_sample_ = at::Tensor();
  step_index_ = 0;
  lower_order_nums_ = 0;
  this_order_ = 1;
}

at::Tensor UniPCScheduler::step(const at::Tensor& model_output, const at::Tensor& sample) {
  MM_CHECK(sigmas_.defined(), "UniPC: call set_timesteps before step");
  const int64_t steps = timesteps_.size(0);
  MM_CHECK(step_index_ < steps, "UniPC: all ", steps, " steps were already taken");
  MM_CHECK(model_output.sizes() == sample.sizes(), "UniPC: model output ", model_output.sizes(), " and sample ",
           sample.sizes(), " differ in shape");
  const auto& skip = config_.disable_corrector;
  const bool use_corrector = step_index_ > 0 && last_sample_.defined() &&
                             std::find(skip.begin(), skip.end(), step_index_ - 1) == skip.end();
  // flow_prediction with predict_x0: x0 = x - sigma * v.
  const auto x0 = sample - sigmas_[step_index_].to(sample.device()) * model_output;
  at::Tensor current = sample;
  if (use_corrector) current = correct(x0, last_sample_, sample, this_order_);
  std::rotate(outputs_.begin(), outputs_.begin() + 1, outputs_.end());
  outputs_.back() = x0;
  int64_t order = config_.lower_order_final ? std::min(config_.solver_order, steps - step_index_) : config_.solver_order;
  this_order_ = std::min(order, lower_order_nums_ + 1);  // warm-up of the multistep history
  last_sample_ = current;
  const auto next = predict(current, this_order_);
  if (lower_order_nums_ < config_.solver_order) ++lower_order_nums_;
  ++step_index_;
  return next;
}

// UniP-p: from sigma[i] to sigma[i+1].
at::Tensor UniPCScheduler::predict(const at::Tensor& x, int64_t order) const {
  const auto device = x.device();
  const auto sigma_t = sigmas_[step_index_ + 1].to(device), sigma_s0 = sigmas_[step_index_].to(device);
  const auto alpha_t = 1 - sigma_t;
  const auto& m0 = outputs_.back();
  const auto c = coefficients(sigmas_, outputs_, step_index_ + 1, step_index_, order, config_.solver_type, device);
  const auto x_t_ = sigma_t / sigma_s0 * x - alpha_t * c.h_phi_1 * m0;
  if (c.D1s.empty()) return x_t_.to(x.scalar_type());
  const auto rhos_p = order == 2 ? torch::full({1}, 0.5, x.options())
                                 : at::linalg_solve(c.R.slice(0, 0, -1).slice(1, 0, -1), c.b.slice(0, 0, -1)).to(x.scalar_type());
  return (x_t_ - alpha_t * c.B_h * combine(rhos_p, c.D1s)).to(x.scalar_type());
}

// UniC-p: corrects the sample predicted from sigma[i-1] to sigma[i] with the model output at it.
at::Tensor UniPCScheduler::correct(const at::Tensor& model_t, const at::Tensor& last_sample, const at::Tensor& this_sample,
                                   int64_t order) const {
  const auto device = this_sample.device();
  const auto sigma_t = sigmas_[step_index_].to(device), sigma_s0 = sigmas_[step_index_ - 1].to(device);
  const auto alpha_t = 1 - sigma_t;
  const auto& m0 = outputs_.back();
  const auto c = coefficients(sigmas_, outputs_, step_index_, step_index_ - 1, order, config_.solver_type, device);
  const auto rhos_c = order == 1 ? torch::full({1}, 0.5, last_sample.options())
                                 : at::linalg_solve(c.R, c.b).to(last_sample.scalar_type());
  const auto x_t_ = sigma_t / sigma_s0 * last_sample - alpha_t * c.h_phi_1 * m0;
  auto correction = rhos_c[-1] * (model_t - m0);
  if (!c.D1s.empty()) correction = combine(rhos_c.slice(0, 0, -1), c.D1s) + correction;
  return (x_t_ - alpha_t * c.B_h * correction).to(last_sample.scalar_type());
}

}  // namespace mm
