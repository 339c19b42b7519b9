// The global data position: any number of ranks continues where any other number stopped, in
// the uninterrupted run's global order, with no position skipped or taken twice; ranks that ran
// ahead (skipped bad samples) are remembered; checkpoints of the per-rank format still resume.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>

#include "mm/core/error.h"
#include "mm/data/global_cursor.h"

namespace {

using mm::EpochRemainder;
using mm::SamplerState;

// Every rank takes taken[r] of its share from `from`; returns the positions in dealt order
// (round by round, rank by rank: the global order in which the ranks step together).
std::vector<int64_t> take_round_robin(int64_t n, const SamplerState& from, int64_t world, int64_t rounds,
                                      EpochRemainder remainder = EpochRemainder::wrap) {
  std::vector<std::vector<int64_t>> shares;
  for (int64_t r = 0; r < world; ++r) shares.push_back(mm::rank_positions(n, from, r, world, remainder));
  std::vector<int64_t> out;
  for (int64_t k = 0; k < rounds; ++k)
    for (int64_t r = 0; r < world; ++r)
      if (k < static_cast<int64_t>(shares[r].size())) out.push_back(shares[r][k]);
  return out;
}

TEST(GlobalCursor, FromTheStartRankRTakesEveryWorldthPosition) {
  EXPECT_EQ(mm::rank_positions(10, {}, 1, 3, EpochRemainder::wrap), (std::vector<int64_t>{1, 4, 7, 0}));
  EXPECT_EQ(mm::rank_positions(10, {}, 2, 3, EpochRemainder::wrap), (std::vector<int64_t>{2, 5, 8, 1}));
  EXPECT_EQ(mm::rank_positions(10, {}, 2, 3, EpochRemainder::drop), (std::vector<int64_t>{2, 5, 8}));
  EXPECT_TRUE(mm::rank_positions(0, {}, 0, 2, EpochRemainder::wrap).empty());
  EXPECT_THROW(mm::rank_positions(10, {}, 3, 3, EpochRemainder::wrap), mm::Error);
}

// The issue's case: 80 of 1000 positions taken by 2 ranks in step, then 3 ranks or 1 continue.
TEST(GlobalCursor, StoppedOnTwoRanksContinuesOnThreeAndOneInTheGlobalOrder) {
  const int64_t n = 1000;
  const SamplerState start{4, 0, {}};
  const auto first = take_round_robin(n, start, 2, 40);
  const SamplerState saved = mm::after_taking(n, start, {40, 40}, EpochRemainder::wrap);
  EXPECT_EQ(saved, (SamplerState{4, 80, {}}));
  for (int64_t world : {3, 1, 7}) {
    SCOPED_TRACE(world);
    auto all = first;
    const auto rest = take_round_robin(n, saved, world, n);
    all.insert(all.end(), rest.begin(), rest.begin() + (n - 80));
    std::vector<int64_t> expected(n);
    std::iota(expected.begin(), expected.end(), 0);
    EXPECT_EQ(all, expected);  // the uninterrupted global order: nothing skipped or repeated
  }
}

// Ranks that took different counts (one skipped bad samples and ran ahead) leave gaps behind the
// fastest; random stops and world sizes, chained over several resumes, still visit every
// position exactly once per epoch.
TEST(GlobalCursor, UnevenRanksChainedOverManyWorldSizesVisitEachPositionOnce) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 60);
    const auto remainder = trial % 2 ? EpochRemainder::wrap : EpochRemainder::drop;
    SamplerState state{0, 0, {}};
    std::map<int64_t, int> visits;  // not counting the wrapped padding at an epoch's end
    for (int segment = 0; segment < 6; ++segment) {
      const int64_t world = 1 + static_cast<int64_t>(rng() % 5);
      const int64_t left = static_cast<int64_t>(mm::rank_positions(n, state, 0, 1, EpochRemainder::drop).size());
      std::vector<int64_t> taken(world);
      std::vector<std::vector<int64_t>> shares(world);
      for (int64_t r = 0; r < world; ++r) {
        shares[r] = mm::rank_positions(n, state, r, world, remainder);
        ASSERT_EQ(shares[r].size(), shares[0].size()) << "ranks must run the same number of steps";
        taken[r] = static_cast<int64_t>(rng() % (shares[r].size() + 1));
        for (int64_t k = 0; k < taken[r]; ++k)
          if (k * world + r < left) ++visits[shares[r][k]];
      }
      const SamplerState next = mm::after_taking(n, state, taken, remainder);
      EXPECT_EQ(SamplerState::from_json(next.to_json()), next);
      EXPECT_TRUE(std::is_sorted(next.done.begin(), next.done.end()));
      for (const int64_t d : next.done) EXPECT_GT(d, next.cursor);
      state = next;
    }
    const auto ahead = mm::rank_positions(n, state, 0, 1, EpochRemainder::drop);
    for (int64_t p = 0; p < n; ++p) {
      const bool is_ahead = std::find(ahead.begin(), ahead.end(), p) != ahead.end();
      EXPECT_EQ(visits[p], is_ahead ? 0 : 1) << "position " << p << " of " << n << ": visited once, or still ahead";
    }
  }
}

TEST(GlobalCursor, ARankThatRanAheadIsRemembered) {
  // 2 ranks from the start; rank 1 took 3 (positions 1, 3, 5), rank 0 took 1 (position 0).
  const SamplerState s = mm::after_taking(20, {}, {1, 3}, EpochRemainder::wrap);
  EXPECT_EQ(s, (SamplerState{0, 2, {3, 5}}));
  // One rank continues: 2, 4, 6, 7, ... (3 and 5 are not taken again).
  EXPECT_EQ(mm::rank_positions(8, s, 0, 1, EpochRemainder::wrap), (std::vector<int64_t>{2, 4, 6, 7}));
  EXPECT_EQ(mm::after_taking(20, {}, {10, 10}, EpochRemainder::wrap), (SamplerState{0, 20, {}}));
  EXPECT_THROW(mm::after_taking(20, {}, {11, 10}, EpochRemainder::wrap), mm::Error);
}

// The one-pass deal of every rank (compute balancing needs them all) is each rank's own deal:
// from the start, after uneven progress with positions done ahead, wrapping and dropping.
TEST(GlobalCursor, EveryRanksPositionsAreEachRanksOwn) {
  const std::vector<SamplerState> states = {{0, 0, {}}, {1, 5, {7, 9, 12}}, {2, 20, {}}, {0, 23, {}}};
  for (const auto& from : states)
    for (const int64_t world : {1, 3, 4})
      for (const auto remainder : {EpochRemainder::wrap, EpochRemainder::drop}) {
        const auto all = mm::every_rank_positions(23, from, world, remainder);
        ASSERT_EQ(static_cast<int64_t>(all.size()), world);
        for (int64_t r = 0; r < world; ++r)
          EXPECT_EQ(all[static_cast<size_t>(r)], mm::rank_positions(23, from, r, world, remainder))
              << "cursor " << from.cursor << ", world " << world << ", rank " << r;
      }
}

TEST(GlobalCursor, PerRankCheckpointsOfTheOldFormatBecomeGlobal) {
  // Rank r of 2 took positions r, r + 2, ...: rank 0 took 3 (0, 2, 4), rank 1 took 4 (1, 3, 5, 7).
  const SamplerState s = mm::global_from_interleaved({{1, 3, {}}, {1, 4, {}}}, "old");
  EXPECT_EQ(s, (SamplerState{1, 6, {7}}));
  EXPECT_EQ(mm::global_from_interleaved({{0, 5, {}}}, "old"), (SamplerState{0, 5, {}}));
  // Padding positions past the end (the wrapped ones) count as consumed.
  EXPECT_TRUE(mm::rank_positions(5, mm::global_from_interleaved({{0, 3, {}}, {0, 3, {}}}, "old"), 0, 3,
                                 EpochRemainder::wrap).empty());
  EXPECT_THROW(mm::global_from_interleaved({{0, 3, {}}, {1, 0, {}}}, "old"), mm::Error);
}

TEST(GlobalCursor, StateJsonIsCheckedFieldByField) {
  EXPECT_EQ(SamplerState::from_json(nlohmann::json::parse(R"({"epoch": 2, "cursor": 5})")), (SamplerState{2, 5, {}}));
  EXPECT_EQ(SamplerState::from_json(nlohmann::json::parse(R"({"epoch": 2, "cursor": 5, "done": [7, 9]})")),
            (SamplerState{2, 5, {7, 9}}));
  for (const char* bad : {R"({"epoch": 2, "cursor": 5, "done": [9, 7]})", R"({"epoch": 2, "cursor": 5, "done": [5]})",
                          R"({"epoch": 2, "cursor": 5, "done": 7})", R"({"epoch": -1, "cursor": 5})"}) {
    try {
      SamplerState::from_json(nlohmann::json::parse(bad), "trainer_state.json: data");
      ADD_FAILURE() << bad;
    } catch (const mm::Error& e) {
      EXPECT_NE(std::string(e.what()).find("trainer_state.json: data"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
