#include "mm/nn/rotary.h"

#include <torch/torch.h>

#include "mm/core/error.h"
#include "mm/core/host_to_device.h"

namespace mm {
namespace {

// [..., seq] positions times [dim/2] frequencies -> [..., seq, dim/2] angles, in fp32.
torch::Tensor angles(const torch::Tensor& inv_freq, const torch::Tensor& position_ids) {
  return position_ids.to(torch::kFloat32).unsqueeze(-1) * inv_freq.to(position_ids.device());
}

RotaryCosSin cos_sin_of(const torch::Tensor& freqs, c10::ScalarType dtype) {
  auto full = torch::cat({freqs, freqs}, -1);
  return {full.cos().to(dtype), full.sin().to(dtype)};
}

torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

}  // namespace

torch::Tensor rope_inv_freq(int64_t head_dim, double theta, const c10::Device& device) {
  auto exponent = torch::arange(0, head_dim, 2, torch::kInt64).to(torch::kFloat32) / static_cast<double>(head_dim);
  return to_device_async(torch::pow(theta, exponent).reciprocal(), device);
}

RotaryCosSin rope_cos_sin(const torch::Tensor& inv_freq, const torch::Tensor& position_ids,
                          c10::ScalarType dtype) {
  MM_CHECK(position_ids.dim() == 2, "rope: position_ids must be [batch, seq], got ", position_ids.sizes());
  return cos_sin_of(angles(inv_freq, position_ids), dtype);
}

RotaryCosSin mrope_cos_sin(const torch::Tensor& inv_freq, const torch::Tensor& position_ids,
                           const std::vector<int64_t>& mrope_section, c10::ScalarType dtype) {
  MM_CHECK(position_ids.dim() == 3 && position_ids.size(0) == 3,
           "mrope: position_ids must be [3, batch, seq], got ", position_ids.sizes());
  auto freqs = angles(inv_freq, position_ids);  // [3, batch, seq, dim/2]
  std::vector<torch::Tensor> bands;
  int64_t start = 0;
  for (size_t i = 0; i < mrope_section.size(); ++i) {
    bands.push_back(freqs[static_cast<int64_t>(i % 3)].narrow(-1, start, mrope_section[i]));
    start += mrope_section[i];
  }
  MM_CHECK(start == inv_freq.size(0), "mrope: mrope_section sums to ", start, ", expected head_dim / 2 = ",
           inv_freq.size(0));
  return cos_sin_of(torch::cat(bands, -1), dtype);
}

RotaryCosSin interleaved_mrope_cos_sin(const torch::Tensor& inv_freq, const torch::Tensor& position_ids,
                                       const std::vector<int64_t>& mrope_section, c10::ScalarType dtype) {
  MM_CHECK(position_ids.dim() == 3 && position_ids.size(0) == 3,
           "mrope: position_ids must be [3, batch, seq], got ", position_ids.sizes());
  MM_CHECK(mrope_section.size() == 3, "mrope: mrope_section must have 3 entries, got ", mrope_section.size());
  const int64_t half = inv_freq.size(0);
  std::vector<int64_t> axis(static_cast<size_t>(half), 0);
  for (int64_t j = 0; j < half; ++j) {
    if (j % 3 == 1 && j < 3 * mrope_section[1]) axis[static_cast<size_t>(j)] = 1;
    if (j % 3 == 2 && j < 3 * mrope_section[2]) axis[static_cast<size_t>(j)] = 2;
  }
  const auto freqs = angles(inv_freq, position_ids);  // [3, batch, seq, dim/2]
  const auto index = host_values_on(axis, freqs.device()).view({1, 1, 1, half});
  const auto picked = freqs.gather(0, index.expand({1, freqs.size(1), freqs.size(2), half})).squeeze(0);
  return cos_sin_of(picked, dtype);
}

torch::Tensor apply_rotary(const torch::Tensor& x, const RotaryCosSin& rope) {
  auto cos = rope.cos.unsqueeze(1);
  auto sin = rope.sin.unsqueeze(1);
  const int64_t rotary_dim = cos.size(-1);
  if (rotary_dim == x.size(-1)) return x * cos + rotate_half(x) * sin;
  MM_CHECK(rotary_dim < x.size(-1), "rotary: tables of ", rotary_dim, " dims for heads of ", x.size(-1));
  // Partial rotary: the leading rotary_dim channels turn, the rest pass through unchanged.
  const auto turned = x.narrow(-1, 0, rotary_dim);
  return torch::cat({turned * cos + rotate_half(turned) * sin, x.narrow(-1, rotary_dim, x.size(-1) - rotary_dim)}, -1);
}

}  // namespace mm
