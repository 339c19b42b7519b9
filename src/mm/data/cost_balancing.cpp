#include "mm/data/cost_balancing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "mm/core/error.h"

namespace mm {

std::vector<std::vector<int64_t>> balance_by_cost(const std::vector<double>& costs, int64_t ranks, int64_t capacity) {
  MM_CHECK(ranks >= 1, "cost balancing: ", ranks, " ranks");
  const auto n = static_cast<int64_t>(costs.size());
  if (capacity == 0) capacity = (n + ranks - 1) / ranks;
  MM_CHECK(capacity * ranks >= n, "cost balancing: ", n, " samples do not fit ", ranks, " ranks of ", capacity);
  for (const double c : costs) MM_CHECK(std::isfinite(c) && c >= 0, "cost balancing: a sample cost of ", c);
  std::vector<int64_t> order(costs.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return costs[static_cast<size_t>(a)] > costs[static_cast<size_t>(b)];
  });
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(ranks));
  std::vector<double> load(static_cast<size_t>(ranks), 0.0);
  for (const int64_t sample : order) {
    size_t best = 0;
    double least = std::numeric_limits<double>::infinity();
    for (size_t r = 0; r < out.size(); ++r)
      if (static_cast<int64_t>(out[r].size()) < capacity && load[r] < least) least = load[r], best = r;
    out[best].push_back(sample);
    load[best] += costs[static_cast<size_t>(sample)];
  }
  for (auto& samples : out) std::sort(samples.begin(), samples.end());
  return out;
}

double cost_imbalance(const std::vector<double>& costs, const std::vector<std::vector<int64_t>>& assignment) {
  double most = 0, least = std::numeric_limits<double>::infinity();
  for (const auto& samples : assignment) {
    double sum = 0;
    for (const int64_t s : samples) sum += costs.at(static_cast<size_t>(s));
    most = std::max(most, sum);
    least = std::min(least, sum);
  }
  return least > 0 ? most / least : std::numeric_limits<double>::infinity();
}

}  // namespace mm
