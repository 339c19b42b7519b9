// The gradient-clipping coefficient, shared by the one-process clipping (train/grad_clip.h) and
// the sharded one (parallel/fully_shard.h), which differ only in how they sum the norm.
#pragma once
#include <ATen/ATen.h>

namespace mm {

// torch.nn.utils.clip_grad_norm_'s min(1, max_norm / (norm + 1e-6)) as a tensor beside
// `total_norm` (Python's `max_norm / tensor` is Tensor.__rdiv__: reciprocal() * max_norm), and 1
// where the norm is not finite: the grads stay as they are, decided without reading the norm.
inline at::Tensor clip_coefficient(const at::Tensor& total_norm, double max_norm) {
  const auto clipped = at::clamp((total_norm + 1e-6).reciprocal() * max_norm, c10::nullopt, 1.0);
  return at::where(at::isfinite(total_norm), clipped, at::ones_like(clipped));
}

}  // namespace mm
