#include "mm/train/grad_clip.h"

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <tuple>

#include "mm/nn/clip_coefficient.h"

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
    const auto coef = clip_coefficient(total, max_norm);
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
