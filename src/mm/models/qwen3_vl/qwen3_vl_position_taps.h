// Where the Qwen3-VL vision tower reads its learned position embeddings: the square table of
// side x side rows is resampled bilinearly (align_corners) to each image's h x w patch grid, as
// four taps per patch with their weights (HF: get_vision_interpolation_indices_and_weights with
// mode "bilinear", align_corners=True). Computed on the CPU from grid_thw with the reference's
// fp32 operations, so the weights are bit-identical.
#pragma once
#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <vector>

namespace mm {

struct PositionTaps {
  at::Tensor indices;  // [num_patches, 4] int64 rows of the table: (h0,w0), (h0,w1), (h1,w0), (h1,w1)
  at::Tensor weights;  // [num_patches, 4] fp32, summing to 1 per patch
};

// grid_thw: (t, h, w) per item in patches (validated by the caller), patches in the processor's
// spatial-merge-block order, every frame of an item with the same taps.
PositionTaps qwen3_vl_position_taps(const std::vector<std::array<int64_t, 3>>& grid_thw, int64_t side,
                                    int64_t spatial_merge_size);

}  // namespace mm
