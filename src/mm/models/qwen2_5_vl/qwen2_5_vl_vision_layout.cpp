#include "mm/models/qwen2_5_vl/qwen2_5_vl_vision_layout.h"

#include <algorithm>

#include "mm/core/error.h"

namespace mm {

std::vector<std::array<int64_t, 3>> vision_grid_of(const at::Tensor& grid_thw, const std::string& tower) {
  MM_CHECK(grid_thw.defined() && grid_thw.dim() == 2 && grid_thw.size(1) == 3, tower,
           ": grid_thw must be [num_items, 3], got ",
           grid_thw.defined() ? c10::str(grid_thw.sizes()) : std::string("an undefined tensor"));
  MM_CHECK(!c10::isFloatingType(grid_thw.scalar_type()) && !c10::isComplexType(grid_thw.scalar_type()), tower,
           ": grid_thw must be an integer tensor, got ", grid_thw.scalar_type());
  const at::Tensor cpu = grid_thw.to(at::kCPU, at::kLong).contiguous();
  const int64_t* p = cpu.data_ptr<int64_t>();
  std::vector<std::array<int64_t, 3>> grid(static_cast<size_t>(cpu.size(0)));
  for (size_t i = 0; i < grid.size(); ++i) grid[i] = {p[3 * i], p[3 * i + 1], p[3 * i + 2]};
  return grid;
}

Qwen2_5_VisionLayout qwen2_5_vision_layout(const std::vector<std::array<int64_t, 3>>& grid_thw,
                                           int64_t spatial_merge_size, int64_t window_units) {
  const int64_t m = spatial_merge_size, unit = m * m;
  MM_CHECK(m > 0 && window_units > 0, "Qwen2.5-VL vision layout: spatial_merge_size (", m,
           ") and merged units per window (", window_units, ") must be positive");
  Qwen2_5_VisionLayout layout;
  layout.cu_seqlens = {0};
  layout.cu_window_seqlens = {0};
  int64_t unit_offset = 0;
  for (size_t item = 0; item < grid_thw.size(); ++item) {
    const auto [t, h, w] = grid_thw[item];
    MM_CHECK(t > 0 && h > 0 && w > 0, "grid_thw row ", item, " is (", t, ", ", h, ", ", w,
             "); t, h and w must be positive");
    MM_CHECK(h % m == 0 && w % m == 0, "grid_thw row ", item, " is (", t, ", ", h, ", ", w,
             "); h and w must be divisible by spatial_merge_size ", m);
    const int64_t units_h = h / m, units_w = w / m;

    // Rotary positions: merge blocks in raster order, the m x m patches of a block in raster
    // order inside it; the same for every frame.
    std::vector<int64_t> frame;
    frame.reserve(static_cast<size_t>(2 * h * w));
    for (int64_t bh = 0; bh < units_h; ++bh)
      for (int64_t bw = 0; bw < units_w; ++bw)
        for (int64_t ih = 0; ih < m; ++ih)
          for (int64_t iw = 0; iw < m; ++iw) {
            frame.push_back(bh * m + ih);
            frame.push_back(bw * m + iw);
          }
    for (int64_t f = 0; f < t; ++f) {
      layout.position_ids.insert(layout.position_ids.end(), frame.begin(), frame.end());
      layout.cu_seqlens.push_back(layout.cu_seqlens.back() + h * w);
    }

    // Windows of window_units x window_units merged units per frame, the last row and column
    // of windows cut short by the grid edge; the reference pads with -100 and filters, which
    // leaves exactly these windows (empty ones vanish in its unique_consecutive).
    for (int64_t f = 0; f < t; ++f)
      for (int64_t wh = 0; wh < units_h; wh += window_units)
        for (int64_t ww = 0; ww < units_w; ww += window_units) {
          int64_t count = 0;
          for (int64_t r = wh; r < std::min(wh + window_units, units_h); ++r)
            for (int64_t c = ww; c < std::min(ww + window_units, units_w); ++c, ++count)
              layout.window_index.push_back(unit_offset + (f * units_h + r) * units_w + c);
          layout.cu_window_seqlens.push_back(layout.cu_window_seqlens.back() + count * unit);
        }
    unit_offset += t * units_h * units_w;
  }
  layout.num_patches = layout.cu_seqlens.back();
  return layout;
}

}  // namespace mm
