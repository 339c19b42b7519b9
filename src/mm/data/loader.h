// The training data loader: encodes samples (JSON parse, media decode, preprocessing,
// tokenization) on worker threads ahead of the trainer, and hands out micro-batches in the
// sampler's order whatever the thread timing. Unusable samples are skipped and counted in that
// same order, so batches, skips and the resumable state are all deterministic.
#pragma once
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <vector>

#include "mm/data/conversation.h"
#include "mm/data/ordered_prefetch.h"
#include "mm/data/sample_encoder.h"
#include "mm/data/sample_errors.h"
#include "mm/data/sampler.h"
#include "mm/data/train_sample.h"

namespace mm {

struct LoaderOptions {
  int64_t micro_batch_size = 1;  // padded batches: samples per batch
  // Packing: one row of the next samples whose total length is <= max_seq_len (a sample that
  // does not fit starts the next batch); micro_batch_size is not used.
  bool packing = false;
  int64_t max_seq_len = 2048;  // packing budget; a single longer sample is skipped as too_long
  int64_t pad_token_id = 0;
  int num_workers = 2;         // 0: encode on the calling thread
  int prefetch = 8;            // samples encoded ahead of the one the trainer needs next
  bool fail_on_error = false;  // the first unusable sample throws its SampleError

  void validate() const;
};

// Makes ATen ops on the calling thread run single-threaded (at::get_num_threads() == 1 there),
// leaving other threads' intra-op parallelism as it is. The loader's workers call it.
void serial_intra_op_on_this_thread();

class DataLoader {
 public:
  // The file, encoder and the loader's owner must outlive the loader (it keeps references).
  // `start`: the global data position to begin at (one after_taking gave for a checkpoint, or
  // {} for the start); this rank takes its share of what is left (global_cursor.h).
  DataLoader(const ConversationFile& file, const SampleEncoder& encoder, Sampler sampler, LoaderOptions options,
             SamplerState start = {});
  ~DataLoader() = default;  // stops and joins the workers; waits for at most one sample each
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next micro-batch; nullopt at the end of the epoch (then call start_epoch). Throws the
  // SampleError of the first bad sample with fail_on_error, and rethrows any other error a
  // worker hit.
  std::optional<TrainBatch> next();

  // Begins epoch `epoch` (default: the current one + 1) from its first position.
  void start_epoch();
  void start_epoch(int64_t epoch);

  // How many of this rank's positions the batches next() returned so far used (from the start
  // or start_epoch). With every rank's count, after_taking gives the global position a resumed
  // run, on any number of ranks, passes as `start` to continue exactly after those batches.
  int64_t taken_after_last_batch() const { return consumed_; }
  SamplerState after_taking(const std::vector<int64_t>& taken_per_rank) const {
    return sampler_.after_taking(start_, taken_per_rank);
  }
  const SamplerState& start() const { return start_; }
  int64_t epoch() const { return start_.epoch; }
  const SkipCounts& skips() const { return skips_; }
  SkipCounts& skips() { return skips_; }  // a resumed run merges the records skipped before

 private:
  struct Result {
    std::optional<TrainSample> sample;
    std::optional<SampleError> error;
    std::exception_ptr failure;  // anything but a SampleError: a bug, rethrown as is
  };

  void begin(SamplerState state);
  Result produce(int64_t dataset_index) const;
  // The next usable sample (skipping and counting bad ones), or nullopt at the end of the order.
  std::optional<TrainSample> take();

  const ConversationFile& file_;
  const SampleEncoder& encoder_;
  Sampler sampler_;
  LoaderOptions options_;
  SkipCounts skips_;
  SamplerState start_;     // global position this epoch's order began at
  int64_t consumed_ = 0;   // this rank's positions used by the batches returned
  std::optional<TrainSample> pending_;  // packing: taken but did not fit the last batch
  // Encodes dataset indices in sampler order on the workers; last, so that it stops (and joins
  // its workers) before anything they use goes away.
  std::unique_ptr<OrderedPrefetch<int64_t, Result>> prefetch_;
};

}  // namespace mm
