// Timing a benchmark step: one warm-up call (allocator, oneDNN primitive caches, thread pool), then
// the median of `repeats` timed calls, so one slow outlier does not move the result; repeats 0:
// one cold timed call (a peak-memory measurement that cannot afford a second run).
// tests/reference/bench_timing.py times the reference side alike.
#pragma once
#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace mm::bench {

inline double median_ms(const std::function<void()>& fn, int repeats) {
  if (repeats > 0) fn();
  std::vector<double> ms;
  for (int i = 0; i < std::max(repeats, 1); ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace mm::bench
