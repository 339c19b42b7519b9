// The training data loader: encodes samples (JSON parse, media decode, preprocessing,
// tokenization) on worker threads ahead of the trainer, and hands out micro-batches in the
// sampler's order whatever the thread timing. Unusable samples are skipped and counted in that
// same order, so batches, skips and the resumable state are all deterministic.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "mm/data/conversation.h"
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
  // `start`: where to begin (a state saved from state_after_last_batch, or {} for the start).
  DataLoader(const ConversationFile& file, const SampleEncoder& encoder, Sampler sampler, LoaderOptions options,
             SamplerState start = {});
  ~DataLoader();  // stops and joins the workers; never blocks on unfinished prefetching beyond one sample each
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next micro-batch; nullopt at the end of the epoch (then call start_epoch). Throws the
  // SampleError of the first bad sample with fail_on_error, and rethrows any other error a
  // worker hit.
  std::optional<TrainBatch> next();

  // Begins epoch `epoch` (default: the current one + 1) from its first position.
  void start_epoch();
  void start_epoch(int64_t epoch);

  // What a resumed run passes as `start` to produce exactly the batches that follow the last one
  // next() returned.
  SamplerState state_after_last_batch() const { return state_; }
  int64_t epoch() const { return state_.epoch; }
  const SkipCounts& skips() const { return skips_; }

 private:
  struct Result {
    std::optional<TrainSample> sample;
    std::optional<SampleError> error;
    std::exception_ptr failure;  // anything but a SampleError: a bug, rethrown as is
  };

  void begin(SamplerState state);
  void stop_workers();
  void worker_loop();
  Result produce(int64_t dataset_index) const;
  // The next usable sample at position taken_ (skipping and counting bad ones), or nullopt at
  // the end of the order. Advances taken_.
  std::optional<TrainSample> take();

  const ConversationFile& file_;
  const SampleEncoder& encoder_;
  Sampler sampler_;
  LoaderOptions options_;
  SkipCounts skips_;
  SamplerState state_;

  std::mutex mutex_;
  std::condition_variable work_cv_, ready_cv_;
  std::vector<int64_t> order_;        // this epoch's dataset indices
  int64_t taken_ = 0;                 // next position the trainer side takes
  int64_t next_dispatch_ = 0;         // next position a worker encodes
  uint64_t generation_ = 0;           // bumped per epoch; stale results are dropped
  bool stop_ = false;
  std::map<int64_t, Result> results_;  // position -> finished encoding
  std::optional<TrainSample> pending_;  // packing: taken but did not fit the last batch
  std::vector<std::thread> workers_;
};

}  // namespace mm
