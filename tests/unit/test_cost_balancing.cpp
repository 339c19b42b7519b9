// The compute-balanced assignment of a global batch to data-parallel ranks (data/cost_balancing.h),
// costed by the model's training FLOPs: on a skewed batch over 4 ranks the most loaded rank holds at
// most 1.1x the least loaded one's cost (the sampler's every-n-th deal: far more), each rank gets a
// micro-batch of the usual size, and the assignment is a function of the costs alone.
#include <gtest/gtest.h>

#include <set>

#include "mm/data/cost_balancing.h"
#include "mm/models/qwen_vl/qwen_vl_config.h"
#include "mm/train/model_flops.h"
#include "testing.h"

namespace mm {
namespace {

// 32 samples of a VLM batch as data arrive: mostly short captions with a small image, a few long
// documents, one video of many frames (published Qwen2.5-VL-7B shapes; the FLOPs are arithmetic).
std::vector<double> skewed_costs() {
  const QwenVLConfig config;
  std::vector<double> costs;
  for (int64_t i = 0; i < 32; ++i) {
    int64_t tokens = 96 + 37 * (i % 5);
    std::vector<std::vector<int64_t>> grids{{1, 16, 16}};
    if (i % 11 == 3) tokens = 3000 + 211 * (i % 3);  // long documents
    if (i == 17) grids = {{12, 28, 28}}, tokens = 12 * 196 + 200;  // a video
    costs.push_back(qwen_vl_training_flops(config, {tokens}, tokens / 4, grids));
  }
  return costs;
}

TEST(CostBalancing, ASkewedBatchOverFourRanksIsEvenWithinTenPercent) {
  const auto costs = skewed_costs();
  const auto balanced = balance_by_cost(costs, 4);
  std::vector<std::vector<int64_t>> strided(4);  // the sampler's deal: sample i to rank i % 4
  for (int64_t i = 0; i < 32; ++i) strided[static_cast<size_t>(i % 4)].push_back(i);
  const double before = cost_imbalance(costs, strided), after = cost_imbalance(costs, balanced);
  std::cout << "max/min rank cost: every 4th " << before << ", balanced " << after << "\n";
  EXPECT_LE(after, 1.1);
  EXPECT_GT(before, 1.5) << "the batch is not skewed enough to show anything";
  std::set<int64_t> seen;
  for (const auto& rank : balanced) {
    EXPECT_EQ(rank.size(), 8u);  // a micro-batch of the usual size
    EXPECT_TRUE(std::is_sorted(rank.begin(), rank.end()));
    seen.insert(rank.begin(), rank.end());
  }
  EXPECT_EQ(seen.size(), 32u);
}

TEST(CostBalancing, TheAssignmentIsAFunctionOfTheCosts) {
  const auto costs = skewed_costs();
  EXPECT_EQ(balance_by_cost(costs, 4), balance_by_cost(costs, 4));
  // Equal costs go in batch order to the lowest ranks: no hidden state, no randomness.
  EXPECT_EQ(balance_by_cost({5, 5, 5, 5, 5}, 2),
            (std::vector<std::vector<int64_t>>{{0, 2, 4}, {1, 3}}));
  // One rank takes everything; a capacity that cannot hold the batch is refused.
  EXPECT_EQ(balance_by_cost({3, 1, 2}, 1), (std::vector<std::vector<int64_t>>{{0, 1, 2}}));
  EXPECT_THROW_MSG(balance_by_cost({1, 2, 3}, 2, 1), "3 samples do not fit 2 ranks of 1");
  EXPECT_THROW_MSG(balance_by_cost({1, -2}, 2), "a sample cost of -2");
}

}  // namespace
}  // namespace mm
