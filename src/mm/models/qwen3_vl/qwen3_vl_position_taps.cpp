#include "mm/models/qwen3_vl/qwen3_vl_position_taps.h"

#include <torch/torch.h>

#include "mm/core/error.h"

namespace mm {
namespace {

// Two taps (floor, floor + 1, clamped to the table) per target index on one axis of `size`
// targets, and their linear weights. The operations and their order are the reference's, in fp32.
std::pair<at::Tensor, at::Tensor> axis_taps(const at::Tensor& index, const at::Tensor& size, int64_t side) {
  const at::Tensor src = index.to(torch::kFloat) * (side - 1) / (size - 1).clamp_min(1);
  const at::Tensor floor = torch::floor(src);
  const at::Tensor offsets = torch::arange(0, 2, torch::kLong);
  const at::Tensor taps = (floor.to(torch::kLong).unsqueeze(1) + offsets).clamp(0, side - 1);
  const at::Tensor distance = (src.unsqueeze(1) - floor.unsqueeze(1) - offsets).abs();
  return {taps, (1 - distance).clamp_min(0)};
}

}  // namespace

PositionTaps qwen3_vl_position_taps(const std::vector<std::array<int64_t, 3>>& grid_thw, int64_t side,
                                    int64_t spatial_merge_size) {
  const int64_t m = spatial_merge_size;
  MM_CHECK(side > 0 && m > 0, "Qwen3-VL position taps: table side (", side, ") and spatial_merge_size (", m,
           ") must be positive");
  std::vector<int64_t> rows, cols, heights, widths;
  for (const auto& [t, h, w] : grid_thw) {
    // One frame in merge-block order: blocks in raster order, m x m patches raster inside each.
    for (int64_t f = 0; f < t; ++f)
      for (int64_t bh = 0; bh < h / m; ++bh)
        for (int64_t bw = 0; bw < w / m; ++bw)
          for (int64_t ih = 0; ih < m; ++ih)
            for (int64_t iw = 0; iw < m; ++iw) {
              rows.push_back(bh * m + ih);
              cols.push_back(bw * m + iw);
              heights.push_back(h);
              widths.push_back(w);
            }
  }
  auto as_tensor = [](const std::vector<int64_t>& v) { return torch::tensor(v, torch::kLong); };
  const auto [h_taps, h_weights] = axis_taps(as_tensor(rows), as_tensor(heights), side);
  const auto [w_taps, w_weights] = axis_taps(as_tensor(cols), as_tensor(widths), side);
  return {(h_taps.unsqueeze(2) * side + w_taps.unsqueeze(1)).reshape({-1, 4}),
          (h_weights.unsqueeze(2) * w_weights.unsqueeze(1)).reshape({-1, 4})};
}

}  // namespace mm
