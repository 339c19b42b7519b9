#include "mm/data/train_sample.h"

#include <torch/torch.h>

#include "mm/core/error.h"

namespace mm {
namespace {

// Vision tensors and second_per_grid_ts of all samples, in sample (hence text) order.
void concat_vision(const std::vector<TrainSample>& samples, TrainBatch& batch) {
  std::vector<torch::Tensor> pv, igrid, pvv, vgrid;
  for (const auto& s : samples) {
    if (s.pixel_values.defined()) {
      pv.push_back(s.pixel_values);
      igrid.push_back(s.image_grid_thw);
    }
    if (s.pixel_values_videos.defined()) {
      pvv.push_back(s.pixel_values_videos);
      vgrid.push_back(s.video_grid_thw);
    }
    batch.inputs.second_per_grid_ts.insert(batch.inputs.second_per_grid_ts.end(), s.second_per_grid_ts.begin(),
                                           s.second_per_grid_ts.end());
    batch.sample_indices.push_back(s.index);
    batch.types.push_back(s.type);
    batch.num_tokens += s.length();
    batch.num_target_tokens += s.num_targets();
  }
  if (!pv.empty()) {
    batch.inputs.pixel_values = torch::cat(pv);
    batch.inputs.image_grid_thw = torch::cat(igrid);
  }
  if (!pvv.empty()) {
    batch.inputs.pixel_values_videos = torch::cat(pvv);
    batch.inputs.video_grid_thw = torch::cat(vgrid);
  }
}

void check_samples(const std::vector<TrainSample>& samples, const char* what) {
  MM_CHECK(!samples.empty(), what, ": no samples");
  for (const auto& s : samples)
    MM_CHECK(s.length() > 0 && s.targets.defined() && s.targets.size(0) == s.length() &&
                 s.position_ids.defined() && s.position_ids.sizes() == torch::IntArrayRef({3, s.length()}),
             what, ": sample ", s.index, " has inconsistent input_ids / targets / position_ids");
}

}  // namespace

int64_t TrainSample::num_targets() const {
  return targets.defined() ? targets.ne(kIgnoreIndex).sum().item<int64_t>() : 0;
}

TrainBatch collate_padded(const std::vector<TrainSample>& samples, int64_t pad_token_id) {
  check_samples(samples, "collate_padded");
  const int64_t rows = static_cast<int64_t>(samples.size());
  int64_t seq = 0;
  for (const auto& s : samples) seq = std::max(seq, s.length());
  TrainBatch batch;
  auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  batch.inputs.input_ids = torch::full({rows, seq}, pad_token_id, i64);
  batch.inputs.attention_mask = torch::zeros({rows, seq}, i64);
  batch.targets = torch::full({rows, seq}, kIgnoreIndex, i64);
  batch.position_ids = torch::zeros({3, rows, seq}, i64);
  for (int64_t r = 0; r < rows; ++r) {
    const auto& s = samples[r];
    const int64_t len = s.length();
    batch.inputs.input_ids[r].narrow(0, 0, len).copy_(s.input_ids);
    batch.inputs.attention_mask[r].narrow(0, 0, len).fill_(1);
    batch.targets[r].narrow(0, 0, len).copy_(s.targets);
    batch.position_ids.select(1, r).narrow(1, 0, len).copy_(s.position_ids);
  }
  concat_vision(samples, batch);
  return batch;
}

TrainBatch collate_packed(const std::vector<TrainSample>& samples) {
  check_samples(samples, "collate_packed");
  std::vector<torch::Tensor> ids, targets, positions;
  TrainBatch batch;
  batch.cu_seqlens.push_back(0);
  for (const auto& s : samples) {
    ids.push_back(s.input_ids);
    targets.push_back(s.targets);
    positions.push_back(s.position_ids);
    batch.cu_seqlens.push_back(batch.cu_seqlens.back() + s.length());
  }
  batch.inputs.input_ids = torch::cat(ids).unsqueeze(0);
  batch.targets = torch::cat(targets).unsqueeze(0);
  batch.position_ids = torch::cat(positions, 1).unsqueeze(1);
  concat_vision(samples, batch);
  return batch;
}

}  // namespace mm
