#include "mm/nn/rotary_2d.h"

#include <torch/torch.h>

#include "mm/core/error.h"

namespace mm {

at::Tensor axial_rope_inv_freq(int64_t head_dim, double theta) {
  MM_CHECK(head_dim > 0 && head_dim % 4 == 0, "axial rotary: head_dim ", head_dim, " must be a multiple of 4");
  const int64_t spatial_dim = head_dim / 2;
  return 1.0 / torch::pow(theta, torch::arange(0, spatial_dim, 2, torch::kFloat) / spatial_dim);
}

std::pair<at::Tensor, at::Tensor> axial_rope_cos_sin(const at::Tensor& positions, const at::Tensor& inv_freq) {
  MM_CHECK(positions.dim() == 2 && positions.size(1) == 2, "axial rotary: positions must be [seq, 2], got ",
           positions.sizes());
  // [seq, 2, head_dim / 4] -> [seq, head_dim / 2] (rows then columns) -> repeated halves
  at::Tensor freqs = positions.to(torch::kFloat).unsqueeze(-1) * inv_freq.to(positions.device(), torch::kFloat);
  freqs = freqs.flatten(1);
  freqs = at::cat({freqs, freqs}, -1);
  return {freqs.cos(), freqs.sin()};
}

at::Tensor apply_rotary_fp32(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
  shape.front() = cos.size(0);
  shape.back() = cos.size(1);
  const at::Tensor c = cos.view(shape), s = sin.view(shape);
  const at::Tensor xf = x.to(torch::kFloat);
  const int64_t half = x.size(-1) / 2;
  const at::Tensor rotated = at::cat({-xf.narrow(-1, half, half), xf.narrow(-1, 0, half)}, -1);
  return (xf * c + rotated * s).to(x.scalar_type());
}

}  // namespace mm
