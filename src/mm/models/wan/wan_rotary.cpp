#include "mm/models/wan/wan_rotary.h"

#include <torch/torch.h>

#include "mm/core/error.h"

namespace mm {
namespace {

// Angles [positions, dim / 2] of one axis, in float64 (diffusers' freqs_dtype off MPS).
torch::Tensor axis_angles(int64_t dim, int64_t positions, double theta, const c10::Device& device) {
  const auto options = torch::TensorOptions().dtype(torch::kFloat64).device(device);
  const auto inv_freq = 1.0 / torch::pow(theta, torch::arange(0, dim, 2, options) / static_cast<double>(dim));
  return torch::outer(torch::arange(positions, options), inv_freq);
}

}  // namespace

WanRotaryTables wan_rotary_tables(int64_t head_dim, int64_t frames, int64_t height, int64_t width,
                                  int64_t max_seq_len, const c10::Device& device, double theta) {
  MM_CHECK(frames <= max_seq_len && height <= max_seq_len && width <= max_seq_len, "Wan rotary embedding: a ",
           frames, "x", height, "x", width, " patch grid exceeds rope_max_seq_len=", max_seq_len);
  const int64_t h_dim = 2 * (head_dim / 6);
  const int64_t t_dim = head_dim - 2 * h_dim;
  const auto f = axis_angles(t_dim, frames, theta, device).view({frames, 1, 1, -1}).expand({frames, height, width, -1});
  const auto h = axis_angles(h_dim, height, theta, device).view({1, height, 1, -1}).expand({frames, height, width, -1});
  const auto w = axis_angles(h_dim, width, theta, device).view({1, 1, width, -1}).expand({frames, height, width, -1});
  const auto angles = torch::cat({f, h, w}, -1).reshape({1, frames * height * width, 1, head_dim / 2});
  return {angles.cos().to(torch::kFloat32), angles.sin().to(torch::kFloat32)};
}

torch::Tensor wan_apply_rotary(const torch::Tensor& x, const WanRotaryTables& tables) {
  const auto pairs = x.unflatten(-1, {-1, 2});
  const auto x1 = pairs.select(-1, 0), x2 = pairs.select(-1, 1);
  const auto even = x1 * tables.cos - x2 * tables.sin;
  const auto odd = x1 * tables.sin + x2 * tables.cos;
  return torch::stack({even, odd}, -1).flatten(-2).to(x.scalar_type());
}

}  // namespace mm
