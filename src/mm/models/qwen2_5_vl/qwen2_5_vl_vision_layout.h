// Token layout of the Qwen2.5-VL vision tower, computed on the CPU from grid_thw: the 2D rotary
// positions, the attention segments of full-attention blocks (one per frame) and of windowed
// blocks, and the permutation that groups merged units window by window (HF: get_vision_position_ids,
// get_vision_cu_seqlens, get_vision_window_index).
#pragma once
#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace mm {

struct Qwen2_5_VisionLayout {
  int64_t num_patches = 0;
  // [num_patches / merge^2] merged-unit indices in window order: window-ordered unit j is the
  // processor-ordered unit window_index[j].
  std::vector<int64_t> window_index;
  // [num_frames + 1] patch boundaries of the frames (full-attention segments).
  std::vector<int64_t> cu_seqlens;
  // [num_windows + 1] patch boundaries of the windows in window order, without empty windows.
  std::vector<int64_t> cu_window_seqlens;
  // [num_patches * 2] (row, column) of each patch in processor order (merge-block-major).
  std::vector<int64_t> position_ids;
};

// grid_thw: (t, h, w) per item, in patches. window_units: merged units per window side
// (window_size / patch_size / spatial_merge_size). Throws mm::Error on a grid that is not
// positive or whose h or w is not divisible by spatial_merge_size, naming the item.
// grid_thw [num_items, 3] (any integer dtype, any device) as (t, h, w) rows; errors name `tower`
// ("Qwen2.5-VL vision").
std::vector<std::array<int64_t, 3>> vision_grid_of(const at::Tensor& grid_thw, const std::string& tower);

Qwen2_5_VisionLayout qwen2_5_vision_layout(const std::vector<std::array<int64_t, 3>>& grid_thw,
                                           int64_t spatial_merge_size, int64_t window_units);

}  // namespace mm
