// The compute-balanced assignment of a global batch to data-parallel ranks (data/cost_balancing.h),
// costed by the model's training FLOPs: on a skewed batch over 4 ranks the most loaded rank holds at
// most 1.1x the least loaded one's cost (the sampler's every-n-th deal: far more), each rank gets a
// micro-batch of the usual size, and the assignment is a function of the costs alone. The sampler
// deals every micro-batch so (SamplerOptions::costs): the same positions per micro-batch as the
// round-robin deal, and a data position saved at any point resumes without a sample lost or repeated.
#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "mm/data/cost_balancing.h"
#include "mm/data/sampler.h"
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

// A sampler over 4 ranks whose epoch is 8 copies of the skewed batch (256 samples, in order: each
// micro-batch of 4 x 8 is one copy), dealt by cost in micro-batches of 8 per rank, or round-robin.
Sampler balanced_sampler(int64_t rank, bool balanced = true) {
  std::vector<double> costs;
  for (int copy = 0; copy < 8; ++copy)
    for (const double c : skewed_costs()) costs.push_back(c * (1.0 + 0.01 * copy));
  SamplerOptions options;
  options.shuffle = false;
  options.rank = rank;
  options.world = 4;
  if (balanced) {
    options.costs = costs;
    options.balance_block = 8;
  }
  return Sampler(std::vector<int64_t>(costs.size(), 0), options);
}

TEST(CostBalancing, TheSamplerDealsEachMicroBatchByCost) {
  const auto costs = balanced_sampler(0).options().costs;
  std::vector<std::vector<int64_t>> balanced, round_robin;
  for (int64_t r = 0; r < 4; ++r) {
    balanced.push_back(balanced_sampler(r).order(0));
    round_robin.push_back(balanced_sampler(r, false).order(0));
    ASSERT_EQ(balanced.back().size(), 64u);
  }
  double worst_balanced = 0, worst_round_robin = 0;
  for (size_t block = 0; block < 8; ++block) {
    // The same 32 samples in each micro-batch as round-robin, spread by cost.
    std::multiset<int64_t> a, b;
    std::vector<std::vector<int64_t>> deal(4), plain(4);
    for (size_t r = 0; r < 4; ++r) {
      a.insert(balanced[r].begin() + 8 * block, balanced[r].begin() + 8 * (block + 1));
      b.insert(round_robin[r].begin() + 8 * block, round_robin[r].begin() + 8 * (block + 1));
      deal[r].assign(balanced[r].begin() + 8 * block, balanced[r].begin() + 8 * (block + 1));
      plain[r].assign(round_robin[r].begin() + 8 * block, round_robin[r].begin() + 8 * (block + 1));
    }
    EXPECT_EQ(a, b) << "micro-batch " << block;
    worst_balanced = std::max(worst_balanced, cost_imbalance(costs, deal));
    worst_round_robin = std::max(worst_round_robin, cost_imbalance(costs, plain));
  }
  std::cout << "worst max/min rank cost of a micro-batch: round-robin " << worst_round_robin << ", balanced "
            << worst_balanced << "\n";
  EXPECT_LE(worst_balanced, 1.1);
  EXPECT_GT(worst_round_robin, 1.5);
}

// Saved after whole micro-batches, the rest of the epoch is the uninterrupted deal; saved anywhere
// (a rank that skipped bad samples took more), nothing is lost or repeated, on any rank count.
TEST(CostBalancing, ABalancedDataPositionResumesExactly) {
  std::vector<std::vector<int64_t>> whole;
  for (int64_t r = 0; r < 4; ++r) whole.push_back(balanced_sampler(r).order(0));
  const auto after_three = balanced_sampler(0).after_taking(SamplerState{}, {24, 24, 24, 24});
  EXPECT_TRUE(after_three.done.empty());
  for (int64_t r = 0; r < 4; ++r) {
    const auto rest = balanced_sampler(r).order(after_three);
    EXPECT_EQ(rest, std::vector<int64_t>(whole[r].begin() + 24, whole[r].end())) << "rank " << r;
  }
  const auto uneven = balanced_sampler(0).after_taking(SamplerState{}, {10, 8, 13, 8});
  std::multiset<int64_t> seen;
  for (int64_t r = 0; r < 4; ++r) {
    const std::vector<int64_t> taken{10, 8, 13, 8};
    seen.insert(whole[r].begin(), whole[r].begin() + taken[r]);
  }
  SamplerOptions two;
  two.shuffle = false;
  two.world = 2;
  two.costs = balanced_sampler(0).options().costs;
  two.balance_block = 8;
  for (int64_t r = 0; r < 2; ++r) {
    two.rank = r;
    const auto rest = Sampler(std::vector<int64_t>(256, 0), two).order(uneven);
    seen.insert(rest.begin(), rest.end());
  }
  std::vector<int64_t> expected(256);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()), std::set<int64_t>(expected.begin(), expected.end()));
  // The 217 left over 2 ranks: one rank's share wraps to the epoch's first sample (as torch's
  // DistributedSampler pads), nothing else is seen twice.
  EXPECT_EQ(seen.size(), 257u);
  EXPECT_EQ(seen.count(0), 2u);
}

}  // namespace
}  // namespace mm
