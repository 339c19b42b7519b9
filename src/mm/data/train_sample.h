// One encoded training sample and the batches collated from them (padded rows, or one packed row
// with per-sample boundaries for varlen attention).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "mm/models/qwen_vl/qwen_vl_model.h"

namespace mm {

inline constexpr int64_t kIgnoreIndex = -100;

struct TrainSample {
  int64_t index = -1;         // dataset index
  torch::Tensor input_ids;    // [len] int64, vision placeholders expanded
  // [len] int64: targets[p] = input_ids[p + 1] when token p + 1 is supervised, else -100;
  // targets[len - 1] = -100. Already shifted, so packing is plain concatenation.
  torch::Tensor targets;
  torch::Tensor position_ids;  // [3, len] int64 M-RoPE positions of this sample alone
  torch::Tensor pixel_values, image_grid_thw;         // [patches, C*T*P*P] f32, [images, 3] i64; or undefined
  torch::Tensor pixel_values_videos, video_grid_thw;  // [patches, C*T*P*P] f32, [videos, 3] i64; or undefined
  std::vector<double> second_per_grid_ts;             // [videos]
  std::string type;                                   // the record's "type"

  int64_t length() const { return input_ids.defined() ? input_ids.size(0) : 0; }
  int64_t num_targets() const;  // targets != -100
};

struct TrainBatch {
  // input_ids [rows, seq]; attention_mask [rows, seq] only when padded (undefined otherwise);
  // vision tensors of all samples concatenated in text order; second_per_grid_ts concatenated.
  QwenVLInputs inputs;
  torch::Tensor position_ids;        // [3, rows, seq] int64
  torch::Tensor targets;             // [rows, seq] int64, -100 = ignored (also at padding)
  std::vector<int64_t> cu_seqlens;   // packed: rows == 1 and boundaries [0, l1, l1+l2, ...]; else empty
  std::vector<int64_t> sample_indices;
  std::vector<std::string> types;    // per sample, the record's "type"
  int64_t num_tokens = 0;            // real (unpadded) tokens
  int64_t num_target_tokens = 0;     // targets != -100
};

// Right padding with pad_token_id; attention_mask 0, targets -100 and positions 0 at padding.
TrainBatch collate_padded(const std::vector<TrainSample>& samples, int64_t pad_token_id);
// One row: samples concatenated, positions restart per sample, cu_seqlens marks the boundaries.
TrainBatch collate_packed(const std::vector<TrainSample>& samples);

}  // namespace mm
