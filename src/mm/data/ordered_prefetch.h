// The one loading engine every task's data goes through: worker threads produce the items of an
// order (samples, or whole batches) up to `prefetch` positions ahead of the trainer, and the trainer
// takes them strictly in order whatever the thread timing, so what it sees, what it skips and where
// a checkpoint resumes are deterministic. With no workers the trainer's thread produces each item
// when it takes it. Restarting (a new epoch, a resume) drops whatever was produced for the old
// order.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "mm/core/error.h"

namespace mm {

template <typename Key, typename Result>
class OrderedPrefetch {
 public:
  // `produce` runs on the workers (so it must be thread-safe) and must not throw: it returns its
  // failure inside Result. `worker_init` runs once on each worker thread first.
  OrderedPrefetch(int num_workers, int prefetch, std::function<Result(const Key&)> produce,
                  std::function<void()> worker_init = {})
      : prefetch_(prefetch), produce_(std::move(produce)) {
    MM_CHECK(num_workers >= 0, "loader: num_workers must be >= 0, got ", num_workers);
    MM_CHECK(prefetch >= 1, "loader: prefetch must be >= 1, got ", prefetch);
    for (int w = 0; w < num_workers; ++w)
      workers_.emplace_back([this, worker_init] {
        if (worker_init) worker_init();
        worker_loop();
      });
  }
  ~OrderedPrefetch() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  OrderedPrefetch(const OrderedPrefetch&) = delete;
  OrderedPrefetch& operator=(const OrderedPrefetch&) = delete;

  // A new order: its keys are produced from position 0 on.
  void restart(std::vector<Key> keys) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++generation_;
      keys_ = std::move(keys);
      taken_ = next_dispatch_ = 0;
      results_.clear();
    }
    work_cv_.notify_all();
  }

  // The next position's key and result; nullopt past the end of the order.
  std::optional<std::pair<Key, Result>> take() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (taken_ >= static_cast<int64_t>(keys_.size())) return std::nullopt;
    const int64_t pos = taken_;
    Key key = keys_[static_cast<size_t>(pos)];
    std::optional<Result> result;
    if (workers_.empty()) {
      lock.unlock();
      result.emplace(produce_(key));
      lock.lock();
    } else {
      ready_cv_.wait(lock, [&] { return results_.count(pos) > 0; });
      result.emplace(std::move(results_.at(pos)));
      results_.erase(pos);
    }
    ++taken_;
    lock.unlock();
    work_cv_.notify_all();
    return std::pair<Key, Result>(std::move(key), std::move(*result));
  }

  // Positions taken since the last restart.
  int64_t taken() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return taken_;
  }

 private:
  void worker_loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      work_cv_.wait(lock, [&] {
        return stop_ || (next_dispatch_ < static_cast<int64_t>(keys_.size()) && next_dispatch_ < taken_ + prefetch_);
      });
      if (stop_) return;
      const int64_t pos = next_dispatch_++;
      const Key key = keys_[static_cast<size_t>(pos)];  // copied: a restart may replace keys_
      const uint64_t generation = generation_;
      lock.unlock();
      Result result = produce_(key);
      lock.lock();
      if (generation == generation_) {  // else the order it belonged to is gone
        results_.emplace(pos, std::move(result));
        ready_cv_.notify_all();
      }
    }
  }

  const int prefetch_;
  const std::function<Result(const Key&)> produce_;
  mutable std::mutex mutex_;
  std::condition_variable work_cv_, ready_cv_;
  std::vector<Key> keys_;
  int64_t taken_ = 0, next_dispatch_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::map<int64_t, Result> results_;  // position -> produced, not yet taken
  std::vector<std::thread> workers_;   // last: started after everything they use exists
};

}  // namespace mm
