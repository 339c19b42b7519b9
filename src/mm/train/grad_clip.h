// Gradient-norm clipping equal to torch.nn.utils.clip_grad_norm_ (L2, foreach path).
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

namespace mm {

// Total L2 norm of the .grad() of `params` (tensors without a grad are ignored), measured
// before clipping, as a float32 scalar tensor on the first grad's device: nothing is read on the
// host, so a GPU step queues the clipping and the optimizer without waiting. When max_norm > 0
// and the norm is finite, every grad is scaled by min(1, max_norm / (norm + 1e-6)) as torch does;
// max_norm <= 0 only measures. A non-finite norm leaves the grads untouched (the caller skips the
// step through the optimizer's found_inf).
at::Tensor clip_grad_norm_tensor(const std::vector<at::Tensor>& params, double max_norm);

// The same, the norm read on the host (0 when no parameter has a grad).
double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm);

}  // namespace mm
