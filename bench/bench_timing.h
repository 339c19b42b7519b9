// Timing a benchmark step: one warm-up call (allocator, thread pool, lazy initialisation), then
// the median of STEPS timed calls, so one slow outlier does not move the result.
#pragma once
#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace mm::bench {

inline double median_step_ms(const std::function<void()>& step, int steps) {
  step();
  std::vector<double> ms;
  for (int i = 0; i < std::max(steps, 1); ++i) {
    const auto start = std::chrono::steady_clock::now();
    step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace mm::bench
