// Gradient-norm clipping equal to torch.nn.utils.clip_grad_norm_ (L2, foreach path).
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

namespace mm {

// Total L2 norm of the .grad() of `params` (tensors without a grad are ignored), measured
// before clipping. When max_norm > 0 and the norm is finite, every grad is scaled by
// min(1, max_norm / (norm + 1e-6)) as torch does; max_norm <= 0 only measures. A non-finite
// norm leaves the grads untouched and is returned for the caller to report or skip the step.
double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm);

}  // namespace mm
