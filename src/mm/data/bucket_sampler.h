// Batches whose samples all share one bucket, in a deterministic per-epoch order, split between
// data-parallel ranks, resumable from a SamplerState (epoch, batches already taken on this rank).
//
// One epoch: each bucket's samples are shuffled (their own stream per bucket), cut into batches of
// batch_size (a smaller last batch per bucket, or none with drop_last), and the list of all
// batches is shuffled; rank r takes batches r, r + world, r + 2 world, ... All ranks take the same
// number of batches: without drop_last the order wraps around to pad the last ones (as torch's
// DistributedSampler does), with drop_last the batches that do not divide evenly are dropped, so
// ranks never share a sample. The shuffles are the existing Sampler's (own PRNG, Fisher-Yates), so
// the order is the same on every machine.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "mm/data/sampler.h"

namespace mm {

struct BucketSamplerOptions {
  int64_t batch_size = 1;
  bool drop_last = false;
  bool shuffle = true;
  uint64_t seed = 0;
  int64_t rank = 0, world = 1;

  void validate() const;  // errors name the field
};

class BucketBatchSampler {
 public:
  // bucket_of[i]: the bucket of dataset sample i (any non-negative ids).
  BucketBatchSampler(std::vector<int64_t> bucket_of, BucketSamplerOptions options = {});

  // This rank's batches of `epoch` (dataset indices), in visiting order.
  std::vector<std::vector<int64_t>> epoch_batches(int64_t epoch) const;
  int64_t batches_per_rank() const;

  // The next batch of the current epoch, or nullopt at its end (then start_epoch).
  std::optional<std::vector<int64_t>> next();
  void start_epoch(int64_t epoch);
  void start_epoch() { start_epoch(state_.epoch + 1); }
  // The position after the last batch next() returned; restore() of it continues from there.
  SamplerState state() const { return state_; }
  void restore(const SamplerState& state);  // throws mm::Error for a cursor past the epoch's end

  const BucketSamplerOptions& options() const { return options_; }
  int64_t dataset_size() const { return static_cast<int64_t>(bucket_of_.size()); }

 private:
  std::vector<std::vector<int64_t>> all_batches(int64_t epoch) const;  // every rank's, in order

  std::vector<int64_t> bucket_of_;
  BucketSamplerOptions options_;
  SamplerState state_;
  std::vector<std::vector<int64_t>> current_;  // epoch_batches(state_.epoch)
};

}  // namespace mm
