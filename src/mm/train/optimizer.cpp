#include "mm/train/optimizer.h"

#include <torch/torch.h>

#include <cmath>
#include <regex>
#include <tuple>

#include "mm/core/error.h"
#include "mm/core/safetensors.h"

namespace mm {

bool is_no_decay_parameter(const std::string& name) {
  static const std::regex pattern(R"(bias|layernorm|rmsnorm|(?:^|\.)norm(?:$|\.)|_norm(?:$|\.))");
  std::string lower = name;
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return std::regex_search(lower, pattern);
}

std::set<std::string> layer_norm_parameter_names(const torch::nn::Module& module) {
  std::set<std::string> names;
  for (const auto& item : module.named_modules("", /*include_self=*/true)) {
    if (!dynamic_cast<const torch::nn::LayerNormImpl*>(item.value().get())) continue;
    for (const auto& p : item.value()->named_parameters(/*recurse=*/false))
      names.insert(item.key().empty() ? p.key() : item.key() + "." + p.key());
  }
  return names;
}

AdamW::AdamW(NamedParams trainable, AdamWConfig config, std::set<std::string> no_decay_names)
    : params_(std::move(trainable)), no_decay_names_(std::move(no_decay_names)), config_(config) {
  MM_CHECK(config_.lr >= 0, "AdamW: lr must be >= 0, got ", config_.lr);
  MM_CHECK(config_.beta1 >= 0 && config_.beta1 < 1, "AdamW: beta1 must be in [0, 1), got ",
           config_.beta1);
  MM_CHECK(config_.beta2 >= 0 && config_.beta2 < 1, "AdamW: beta2 must be in [0, 1), got ",
           config_.beta2);
  MM_CHECK(config_.eps >= 0, "AdamW: eps must be >= 0, got ", config_.eps);
  MM_CHECK(config_.weight_decay >= 0, "AdamW: weight_decay must be >= 0, got ",
           config_.weight_decay);
  std::map<std::string, int> seen;
  for (const auto& [name, p] : params_) {
    MM_CHECK(p.defined(), "AdamW: parameter ", name, " is undefined");
    MM_CHECK(at::isFloatingType(p.scalar_type()), "AdamW: parameter ", name,
             " is not floating point (", p.scalar_type(), ")");
    MM_CHECK(seen[name]++ == 0, "AdamW: parameter ", name, " is listed twice");
    no_decay_.push_back(is_no_decay_parameter(name) || no_decay_names_.count(name) > 0);
  }
}

double AdamW::weight_decay_of(const std::string& name) const {
  return is_no_decay_parameter(name) || no_decay_names_.count(name) > 0 ? 0.0 : config_.weight_decay;
}

AdamW::State& AdamW::state_for(size_t i) {
  auto it = state_.find(i);
  if (it != state_.end()) return it->second;
  const auto& p = params_[i].second;
  State s;
  s.exp_avg = torch::zeros_like(p, at::MemoryFormat::Preserve);
  s.exp_avg_sq = torch::zeros_like(p, at::MemoryFormat::Preserve);
  s.step = torch::zeros({}, torch::TensorOptions()
                                .dtype(torch::kFloat)
                                .device(config_.fused ? p.device() : torch::Device(torch::kCPU)));
  return state_.emplace(i, std::move(s)).first->second;
}

void AdamW::step(double lr, const at::Tensor& found_inf) {
  torch::NoGradGuard no_grad;
  std::vector<size_t> active;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& g = params_[i].second.grad();
    if (!g.defined()) continue;
    MM_CHECK(g.sizes() == params_[i].second.sizes(), "AdamW: grad of ", params_[i].first,
             " has shape ", g.sizes(), ", the parameter ", params_[i].second.sizes());
    MM_CHECK(!g.is_sparse(), "AdamW: grad of ", params_[i].first, " is sparse");
    active.push_back(i);
  }
  ++steps_taken_;
  if (config_.fused) return step_fused(active, lr, found_inf);
  if (found_inf.defined() && found_inf.item<float>() != 0) return;  // the reference loop reads it too
  step_single(active, lr);
}

// torch's _fused_adam: tensors grouped by device and dtype (one kernel call each, here also per
// weight-decay group), steps incremented first, then the kernel, then, with found_inf, the
// steps decremented by it (the kernel itself leaves everything else when it is 1).
void AdamW::step_fused(const std::vector<size_t>& active, double lr, const at::Tensor& found_inf) {
  using Key = std::tuple<std::string, int, bool>;
  std::map<Key, std::vector<size_t>> groups;
  for (size_t i : active) {
    const auto& p = params_[i].second;
    groups[{p.device().str(), static_cast<int>(p.scalar_type()), no_decay_[i]}].push_back(i);
  }
  for (const auto& [key, members] : groups) {
    std::vector<at::Tensor> ps, gs, m, v, steps;
    for (size_t i : members) {
      State& s = state_for(i);
      ps.push_back(params_[i].second);
      gs.push_back(params_[i].second.grad());
      m.push_back(s.exp_avg);
      v.push_back(s.exp_avg_sq);
      steps.push_back(s.step);
    }
    at::_foreach_add_(steps, 1);
    const double wd = std::get<2>(key) ? 0.0 : config_.weight_decay;
    if (!found_inf.defined()) {
      at::_fused_adamw_(ps, gs, m, v, {}, steps, lr, config_.beta1, config_.beta2, wd, config_.eps,
                        /*amsgrad=*/false, /*maximize=*/false);
      continue;
    }
    const auto inf_here = found_inf.to(ps.front().device(), at::kFloat);
    at::_fused_adamw_(ps, gs, m, v, {}, steps, lr, config_.beta1, config_.beta2, wd, config_.eps,
                      /*amsgrad=*/false, /*maximize=*/false, /*grad_scale=*/std::nullopt, inf_here);
    at::_foreach_sub_(steps, std::vector<at::Tensor>(steps.size(), inf_here));
  }
}

// torch.optim.adam._single_tensor_adam with decoupled weight decay, op for op, so the float32
// rounding is the same.
void AdamW::step_single(const std::vector<size_t>& active, double lr) {
  const double beta1 = config_.beta1, beta2 = config_.beta2;
  for (size_t i : active) {
    auto& param = params_[i].second;
    const auto grad = param.grad();
    State& s = state_for(i);
    s.step.add_(1);
    const double wd = no_decay_[i] ? 0.0 : config_.weight_decay;
    if (wd != 0) param.mul_(1 - lr * wd);
    s.exp_avg.lerp_(grad, 1 - beta1);
    s.exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
    const double step = s.step.item<float>();
    const double bias_correction1 = 1 - std::pow(beta1, step);
    const double bias_correction2 = 1 - std::pow(beta2, step);
    const double step_size = lr / bias_correction1;
    const double bias_correction2_sqrt = std::pow(bias_correction2, 0.5);
    const auto denom = (s.exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(config_.eps);
    param.addcdiv_(s.exp_avg, denom, -step_size);
  }
}

void AdamW::zero_grad() {
  for (auto& [name, p] : params_) p.mutable_grad() = at::Tensor();
}

std::vector<std::pair<std::string, at::Tensor>> AdamW::state_tensors() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [i, s] : state_) {
    const auto& name = params_[i].first;
    out.emplace_back("exp_avg." + name, s.exp_avg);
    out.emplace_back("exp_avg_sq." + name, s.exp_avg_sq);
    out.emplace_back("step." + name, s.step);
  }
  return out;
}

void AdamW::load_state_tensors(const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < params_.size(); ++i) index[params_[i].first] = i;
  std::map<size_t, std::map<std::string, at::Tensor>> found;
  for (const auto& [key, t] : tensors) {
    const auto dot = key.find('.');
    const std::string kind = dot == std::string::npos ? "" : key.substr(0, dot);
    MM_CHECK(kind == "exp_avg" || kind == "exp_avg_sq" || kind == "step",
             "optimizer state: unexpected tensor ", key,
             " (expected exp_avg.<param>, exp_avg_sq.<param>, step.<param>)");
    const std::string name = key.substr(dot + 1);
    auto it = index.find(name);
    MM_CHECK(it != index.end(), "optimizer state: tensor ", key, " names no trainable parameter ",
             name);
    const auto& p = params_[it->second].second;
    if (kind == "step") {
      MM_CHECK(t.dim() == 0, "optimizer state: tensor ", key, " has shape ", t.sizes(),
               ", expected a scalar");
    } else {
      MM_CHECK(t.sizes() == p.sizes(), "optimizer state: tensor ", key, " has shape ", t.sizes(),
               ", the parameter ", p.sizes());
    }
    MM_CHECK(found[it->second].emplace(kind, t).second, "optimizer state: tensor ", key,
             " is given twice");
  }
  std::map<size_t, State> loaded;
  int64_t max_step = 0;
  for (const auto& [i, parts] : found) {
    const auto& [name, p] = params_[i];
    for (const char* kind : {"exp_avg", "exp_avg_sq", "step"})
      MM_CHECK(parts.count(kind), "optimizer state: tensor ", kind, ".", name,
               " is missing (the state of ", name, " is incomplete)");
    State s;
    const auto like = p.options();
    s.exp_avg = parts.at("exp_avg").to(like, false, /*copy=*/true);
    s.exp_avg_sq = parts.at("exp_avg_sq").to(like, false, /*copy=*/true);
    s.step = parts.at("step").to(torch::TensorOptions()
                                     .dtype(torch::kFloat)
                                     .device(config_.fused ? p.device() : torch::Device(torch::kCPU)),
                                 false, /*copy=*/true);
    max_step = std::max<int64_t>(max_step, std::llround(s.step.item<double>()));
    loaded.emplace(i, std::move(s));
  }
  state_ = std::move(loaded);
  steps_taken_ = max_step;
}

void AdamW::load_state_tensors(const Checkpoint& checkpoint) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& name : checkpoint.names()) tensors.emplace_back(name, checkpoint.tensor(name));
  load_state_tensors(tensors);
}

}  // namespace mm
