// Compute-balanced data parallelism: the samples of one global batch dealt to the data-parallel
// ranks so that each rank's work is about the same, instead of each taking every n-th sample. A
// sample's cost is its training FLOPs by the model's formula (train/model_flops.h: the decoder's
// linear layers per token, attention by the sum of squared segment lengths, the vision tower by its
// patches and squared windows), so a long video and many short captions weigh what they cost.
// The loss is normalised by the global target count (train/train_step.h), so which rank trains a
// sample does not change the result, only the time the slowest rank takes.
#pragma once
#include <cstdint>
#include <vector>

namespace mm {

// Longest processing time first under a capacity: the samples by cost, largest first (equal costs
// in batch order), each to the rank with the least cost so far among those holding fewer than
// `capacity` samples (equal totals: the lowest rank); capacity 0 = ceil(samples / ranks), so every
// rank gets a micro-batch of the usual size. Returns each rank's sample positions (indices into
// `costs`), ascending. Deterministic: every rank computes the same assignment from the same costs,
// and a resumed run from the same batch.
std::vector<std::vector<int64_t>> balance_by_cost(const std::vector<double>& costs, int64_t ranks,
                                                  int64_t capacity = 0);

// The largest over the smallest of the ranks' summed costs (1 = perfectly even).
double cost_imbalance(const std::vector<double>& costs, const std::vector<std::vector<int64_t>>& assignment);

}  // namespace mm
