#include "mm/train/grad_clip.h"

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <tuple>

namespace mm {

at::Tensor clip_grad_norm_tensor(const std::vector<at::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  // Grouped by device and dtype like torch (_group_tensors_by_device_and_dtype), so each
  // per-group _foreach_norm sees the same tensors in the same order.
  std::map<std::pair<std::string, int>, std::vector<at::Tensor>> groups;
  std::vector<std::pair<std::string, int>> order;
  for (const auto& p : params) {
    if (!p.defined() || !p.grad().defined()) continue;
    const auto& g = p.grad();
    std::pair<std::string, int> key{g.device().str(), static_cast<int>(g.scalar_type())};
    if (!groups.count(key)) order.push_back(key);
    groups[key].push_back(g);
  }
  if (groups.empty()) return at::zeros({}, at::kFloat);
  std::vector<at::Tensor> norms;
  at::Device first = groups[order.front()].front().device();
  for (const auto& key : order)
    for (auto& n : at::_foreach_norm(groups[key], 2)) norms.push_back(n.to(first));
  const auto total = at::linalg_vector_norm(at::stack(norms), 2);
  if (max_norm > 0) {
    // Python's `max_norm / tensor` is Tensor.__rdiv__: reciprocal() * max_norm. A non-finite
    // norm gives 1: the grads stay as they are, decided on the device.
    const auto clipped = at::clamp((total + 1e-6).reciprocal() * max_norm, c10::nullopt, 1.0);
    const auto coef = at::where(at::isfinite(total), clipped, at::ones_like(clipped));
    for (const auto& key : order) {
      auto& grads = groups[key];
      at::_foreach_mul_(grads, coef.to(grads.front().device()));
    }
  }
  return total;
}

double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm) {
  return clip_grad_norm_tensor(params, max_norm).item<double>();
}

}  // namespace mm
