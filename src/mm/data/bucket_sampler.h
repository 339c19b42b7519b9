// Batches whose samples all share one bucket, in a deterministic per-epoch order, split between
// data-parallel ranks, resumable on any number of ranks from a global SamplerState (positions in
// the epoch's list of all batches; see global_cursor.h).
//
// One epoch: each bucket's samples are shuffled (their own stream per bucket), cut into batches of
// batch_size (a smaller last batch per bucket, or none with drop_last), and the list of all
// batches is shuffled; rank r takes batches r, r + world, r + 2 world, ... of what is left. All ranks take the same
// number of batches: without drop_last the order wraps around to pad the last ones (as torch's
// DistributedSampler does), with drop_last the batches that do not divide evenly are dropped, so
// ranks never share a sample. The shuffles are the existing Sampler's (own PRNG, Fisher-Yates), so
// the order is the same on every machine.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "mm/data/global_cursor.h"
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

  // This rank's batches (dataset indices) from the global position `from`, in visiting order.
  std::vector<std::vector<int64_t>> epoch_batches(const SamplerState& from) const;
  std::vector<std::vector<int64_t>> epoch_batches(int64_t epoch) const { return epoch_batches({epoch, 0, {}}); }
  int64_t batches_per_rank() const;  // in a whole epoch

  // This rank's batches of the current pass, from where it began (what next() walks).
  const std::vector<std::vector<int64_t>>& batches() const { return current_; }
  // The next batch of the current epoch, or nullopt at its end (then start_epoch).
  std::optional<std::vector<int64_t>> next();
  void start_epoch(int64_t epoch);
  void start_epoch() { start_epoch(start_.epoch + 1); }
  int64_t epoch() const { return start_.epoch; }
  // Where this rank began (restore or start_epoch) and how many batches next() has given since;
  // after_taking of every rank's count is the global position to save.
  const SamplerState& start() const { return start_; }
  int64_t taken() const { return taken_; }
  SamplerState after_taking(const std::vector<int64_t>& taken_per_rank) const;
  void restore(const SamplerState& from);

  const BucketSamplerOptions& options() const { return options_; }
  int64_t dataset_size() const { return static_cast<int64_t>(bucket_of_.size()); }

 private:
  std::vector<std::vector<int64_t>> all_batches(int64_t epoch) const;  // every rank's, in order

  std::vector<int64_t> bucket_of_;
  BucketSamplerOptions options_;
  EpochRemainder remainder() const;

  SamplerState start_;
  int64_t taken_ = 0;
  std::vector<std::vector<int64_t>> current_;  // epoch_batches(start_)
};

}  // namespace mm
