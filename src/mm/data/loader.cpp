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
  // Samples are small: intra-op parallelism on the workers would only fight each other and the trainer.
  prefetch_ = std::make_unique<OrderedPrefetch<int64_t, Result>>(
      options_.num_workers, options_.prefetch, [this](const int64_t& index) { return produce(index); },
      serial_intra_op_on_this_thread);
  begin(start);
}

void DataLoader::begin(SamplerState state) {
  prefetch_->restart(sampler_.order(state));
  pending_.reset();
  start_ = std::move(state);
  consumed_ = 0;
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

std::optional<TrainSample> DataLoader::take() {
  while (auto taken = prefetch_->take()) {
    auto& [record, r] = *taken;
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
  return std::nullopt;
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
  const int64_t taken = prefetch_->taken();
  // The pending sample was taken but belongs to the next batch: a resumed run starts there.
  consumed_ = pending_ ? taken - 1 : taken;
  if (samples.empty()) return std::nullopt;
  return options_.packing ? collate_packed(samples) : collate_padded(samples, options_.pad_token_id);
}

}  // namespace mm
