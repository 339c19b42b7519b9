#include "mm/data/bucket_sampler.h"

#include <map>

#include "mm/core/error.h"
#include "mm/core/seed_mix.h"

namespace mm {

void BucketSamplerOptions::validate() const {
  MM_CHECK(batch_size >= 1, "bucket sampler: batch_size must be >= 1, got ", batch_size);
  MM_CHECK(world >= 1 && rank >= 0 && rank < world, "bucket sampler: rank ", rank, " outside world size ", world);
}

BucketBatchSampler::BucketBatchSampler(std::vector<int64_t> bucket_of, BucketSamplerOptions options)
    : bucket_of_(std::move(bucket_of)), options_(options) {
  options_.validate();
  for (size_t i = 0; i < bucket_of_.size(); ++i)
    MM_CHECK(bucket_of_[i] >= 0, "bucket sampler: sample ", i, " has a negative bucket ", bucket_of_[i]);
  restore({});
}

std::vector<std::vector<int64_t>> BucketBatchSampler::all_batches(int64_t epoch) const {
  std::map<int64_t, std::vector<int64_t>> members;  // ordered by bucket id: the same on every rank
  for (size_t i = 0; i < bucket_of_.size(); ++i) members[bucket_of_[i]].push_back(static_cast<int64_t>(i));
  std::vector<std::vector<int64_t>> batches;
  for (const auto& [bucket, samples] : members) {
    SamplerOptions per_bucket;
    per_bucket.shuffle = options_.shuffle;
    per_bucket.seed = stream_seed(options_.seed, static_cast<uint64_t>(bucket));  // a shuffle per bucket
    const std::vector<int64_t> order = Sampler(std::vector<int64_t>(samples.size()), per_bucket).order(epoch);
    for (size_t start = 0; start < order.size(); start += options_.batch_size) {
      const size_t end = std::min(order.size(), start + static_cast<size_t>(options_.batch_size));
      if (options_.drop_last && end - start < static_cast<size_t>(options_.batch_size)) break;
      std::vector<int64_t> batch;
      for (size_t k = start; k < end; ++k) batch.push_back(samples[order[k]]);
      batches.push_back(std::move(batch));
    }
  }
  SamplerOptions across;
  across.shuffle = options_.shuffle;
  across.seed = options_.seed;
  const std::vector<int64_t> order = Sampler(std::vector<int64_t>(batches.size()), across).order(epoch);
  std::vector<std::vector<int64_t>> shuffled;
  shuffled.reserve(order.size());
  for (int64_t b : order) shuffled.push_back(batches[b]);
  return shuffled;
}

EpochRemainder BucketBatchSampler::remainder() const {
  return options_.drop_last ? EpochRemainder::drop : EpochRemainder::wrap;
}

int64_t BucketBatchSampler::batches_per_rank() const {
  const int64_t n = static_cast<int64_t>(all_batches(0).size());
  return options_.drop_last ? n / options_.world : (n + options_.world - 1) / options_.world;
}

std::vector<std::vector<int64_t>> BucketBatchSampler::epoch_batches(const SamplerState& from) const {
  MM_CHECK(from.epoch >= 0, "bucket sampler: negative epoch ", from.epoch);
  const std::vector<std::vector<int64_t>> all = all_batches(from.epoch);
  std::vector<std::vector<int64_t>> mine;
  for (const int64_t position :
       rank_positions(static_cast<int64_t>(all.size()), from, options_.rank, options_.world, remainder()))
    mine.push_back(all[static_cast<size_t>(position)]);
  return mine;
}

std::optional<std::vector<int64_t>> BucketBatchSampler::next() {
  if (taken_ >= static_cast<int64_t>(current_.size())) return std::nullopt;
  return current_[static_cast<size_t>(taken_++)];
}

void BucketBatchSampler::start_epoch(int64_t epoch) { restore({epoch, 0, {}}); }

void BucketBatchSampler::restore(const SamplerState& from) {
  current_ = epoch_batches(from);
  start_ = from;
  taken_ = 0;
}

SamplerState BucketBatchSampler::after_taking(const std::vector<int64_t>& taken_per_rank) const {
  MM_CHECK(static_cast<int64_t>(taken_per_rank.size()) == options_.world, "bucket sampler: ", taken_per_rank.size(),
           " rank counts for ", options_.world, " ranks");
  return mm::after_taking(static_cast<int64_t>(all_batches(start_.epoch).size()), start_, taken_per_rank,
                          remainder());
}

}  // namespace mm
