#include "mm/data/loader.h"

#include <torch/torch.h>

#include <ATen/Parallel.h>

#include "mm/core/error.h"

// libtorch's CPU build runs intra-op parallelism on OpenMP, whose thread count is per calling
// thread; declared weak so a build without OpenMP links and simply keeps its default.
extern "C" void omp_set_num_threads(int) __attribute__((weak));

namespace mm {

void serial_intra_op_on_this_thread() {
  at::get_num_threads();  // runs ATen's lazy per-thread init first, which would undo the setting
  if (omp_set_num_threads) omp_set_num_threads(1);
}

void LoaderOptions::validate() const {
  MM_CHECK(micro_batch_size >= 1, "data.micro_batch_size must be >= 1, got ", micro_batch_size);
  MM_CHECK(max_seq_len >= 1, "data.max_seq_len must be >= 1, got ", max_seq_len);
  MM_CHECK(num_workers >= 0, "data.num_workers must be >= 0, got ", num_workers);
  MM_CHECK(prefetch >= 1, "data.prefetch must be >= 1, got ", prefetch);
}

DataLoader::DataLoader(const ConversationFile& file, const SampleEncoder& encoder, Sampler sampler,
                       LoaderOptions options, SamplerState start)
    : file_(file), encoder_(encoder), sampler_(std::move(sampler)), options_(options) {
  options_.validate();
  MM_CHECK(sampler_.dataset_size() == static_cast<int64_t>(file_.size()), "data loader: the sampler covers ",
           sampler_.dataset_size(), " samples but ", file_.path().string(), " holds ", file_.size());
  begin(start);
  for (int w = 0; w < options_.num_workers; ++w) workers_.emplace_back([this] { worker_loop(); });
}

DataLoader::~DataLoader() { stop_workers(); }

void DataLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_)
    if (t.joinable()) t.join();
  workers_.clear();
}

void DataLoader::begin(SamplerState state) {
  std::vector<int64_t> order = sampler_.order(state);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++generation_;
    order_ = std::move(order);
    taken_ = next_dispatch_ = 0;
    results_.clear();
    pending_.reset();
    start_ = std::move(state);
    consumed_ = 0;
  }
  work_cv_.notify_all();
}

void DataLoader::start_epoch() { start_epoch(start_.epoch + 1); }
void DataLoader::start_epoch(int64_t epoch) { begin({epoch, 0, {}}); }

DataLoader::Result DataLoader::produce(int64_t dataset_index) const {
  torch::NoGradGuard no_grad;
  Result r;
  try {
    const size_t i = static_cast<size_t>(dataset_index);
    r.sample = encoder_.encode(file_.get(i), file_.where(i));
  } catch (const SampleError& e) {
    r.error = e;
  } catch (...) {
    r.failure = std::current_exception();
  }
  return r;
}

void DataLoader::worker_loop() {
  // Samples are small: intra-op parallelism would only fight the other workers and the trainer.
  serial_intra_op_on_this_thread();
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    work_cv_.wait(lock, [&] {
      return stop_ || (next_dispatch_ < static_cast<int64_t>(order_.size()) &&
                       next_dispatch_ < taken_ + options_.prefetch);
    });
    if (stop_) return;
    const int64_t pos = next_dispatch_++;
    const int64_t index = order_[pos];
    const uint64_t generation = generation_;
    lock.unlock();
    Result r = produce(index);
    lock.lock();
    if (generation == generation_) {
      results_.emplace(pos, std::move(r));
      ready_cv_.notify_all();
    }
  }
}

std::optional<TrainSample> DataLoader::take() {
  while (true) {
    Result r;
    int64_t record = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (taken_ >= static_cast<int64_t>(order_.size())) return std::nullopt;
      const int64_t pos = taken_;
      record = order_[pos];
      if (workers_.empty()) {
        lock.unlock();
        r = produce(order_[pos]);
        lock.lock();
      } else {
        ready_cv_.wait(lock, [&] { return results_.count(pos) > 0; });
        r = std::move(results_.at(pos));
        results_.erase(pos);
      }
      ++taken_;
    }
    work_cv_.notify_all();
    if (r.failure) std::rethrow_exception(r.failure);
    if (r.error) {
      if (options_.fail_on_error) throw *r.error;
      skips_.add(r.error->reason(), record, r.error->what());
      continue;
    }
    if (options_.packing && r.sample->length() > options_.max_seq_len) {
      const std::string message = str_cat(file_.where(static_cast<size_t>(r.sample->index)), ": ",
                                          r.sample->length(), " tokens > packing max_seq_len ", options_.max_seq_len);
      if (options_.fail_on_error) throw SampleError(SkipReason::too_long, message);
      skips_.add(SkipReason::too_long, record, message);
      continue;
    }
    return std::move(r.sample);
  }
}

std::optional<TrainBatch> DataLoader::next() {
  std::vector<TrainSample> samples;
  if (options_.packing) {
    int64_t total = 0;
    while (true) {
      std::optional<TrainSample> s = pending_ ? std::move(pending_) : take();
      pending_.reset();
      if (!s) break;
      if (!samples.empty() && total + s->length() > options_.max_seq_len) {
        pending_ = std::move(s);
        break;
      }
      total += s->length();
      samples.push_back(std::move(*s));
    }
  } else {
    while (static_cast<int64_t>(samples.size()) < options_.micro_batch_size) {
      std::optional<TrainSample> s = take();
      if (!s) break;
      samples.push_back(std::move(*s));
    }
  }
  int64_t taken;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    taken = taken_;
  }
  // The pending sample was taken but belongs to the next batch: a resumed run starts there.
  consumed_ = pending_ ? taken - 1 : taken;
  if (samples.empty()) return std::nullopt;
  return options_.packing ? collate_packed(samples) : collate_padded(samples, options_.pad_token_id);
}

}  // namespace mm
