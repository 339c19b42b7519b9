#include "mm/data/sampler.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <limits>
#include <numeric>
#include <random>

#include "mm/core/error.h"
#include "mm/data/cost_balancing.h"
#include "mm/data/global_cursor.h"

namespace mm {
namespace {

// Unbiased integer in [0, bound) from a 64-bit engine, by rejection; std::mt19937_64's output
// sequence is fixed by the standard, unlike std::uniform_int_distribution.
uint64_t below(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % bound;
  uint64_t x;
  do x = rng(); while (x >= limit);
  return x % bound;
}

void fisher_yates(std::vector<int64_t>& v, std::mt19937_64& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(rng, i)]);
}

}  // namespace

nlohmann::json SamplerState::to_json() const { return {{"epoch", epoch}, {"cursor", cursor}, {"done", done}}; }

SamplerState SamplerState::from_json(const nlohmann::json& json, const std::string& where) {
  MM_CHECK(json.is_object(), where, ": expected an object {\"epoch\", \"cursor\"}");
  SamplerState s;
  for (const char* key : {"epoch", "cursor"}) {
    MM_CHECK(json.contains(key) && json[key].is_number_integer() && json[key].get<int64_t>() >= 0, where, ".", key,
             ": expected a non-negative integer");
  }
  s.epoch = json["epoch"].get<int64_t>();
  s.cursor = json["cursor"].get<int64_t>();
  if (json.contains("done")) {  // absent in checkpoints from before the global cursor
    MM_CHECK(json["done"].is_array(), where, ".done: expected an array of positions");
    int64_t previous = s.cursor;
    for (const auto& d : json["done"]) {
      MM_CHECK(d.is_number_integer() && d.get<int64_t>() > previous, where, ".done: expected increasing positions "
               "after cursor ", s.cursor, ", got ", d.dump());
      previous = d.get<int64_t>();
      s.done.push_back(previous);
    }
  }
  return s;
}

Sampler::Sampler(std::vector<int64_t> lengths, SamplerOptions options)
    : lengths_(std::move(lengths)), options_(options) {
  MM_CHECK(options_.world >= 1 && options_.rank >= 0 && options_.rank < options_.world, "sampler: rank ",
           options_.rank, " outside world size ", options_.world);
  MM_CHECK(!options_.group_by_length || options_.group_size > 0,
           "sampler: group_by_length needs a positive group_size, got ", options_.group_size);
  MM_CHECK(!balanced() || (options_.costs.size() == lengths_.size() && options_.balance_block > 0), "sampler: ",
           options_.costs.size(), " sample costs for ", lengths_.size(), " samples, balance block ",
           options_.balance_block);
}

int64_t Sampler::size_per_rank() const {
  const int64_t n = dataset_size();
  return (n + options_.world - 1) / options_.world;
}

std::vector<int64_t> Sampler::order(int64_t epoch) const { return order(SamplerState{epoch, 0, {}}); }

std::vector<int64_t> Sampler::order(const SamplerState& from) const {
  const std::vector<int64_t> all = global_order(from.epoch);
  std::vector<int64_t> mine;
  for (const int64_t position : positions(from, options_.rank, all)) mine.push_back(all[static_cast<size_t>(position)]);
  return mine;
}

std::vector<int64_t> Sampler::positions(const SamplerState& from, int64_t rank,
                                        const std::vector<int64_t>& global) const {
  if (!balanced()) return rank_positions(dataset_size(), from, rank, options_.world, EpochRemainder::wrap);
  return balanced_positions(from, global)[static_cast<size_t>(rank)];
}

std::vector<std::vector<int64_t>> Sampler::balanced_positions(const SamplerState& from,
                                                              const std::vector<int64_t>& global) const {
  const int64_t world = options_.world;
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(world));
  const auto dealt = every_rank_positions(dataset_size(), from, world, EpochRemainder::wrap);
  const auto count = static_cast<int64_t>(dealt.front().size());  // the same for every rank
  for (int64_t start = 0; start < count; start += options_.balance_block) {
    const int64_t size = std::min(options_.balance_block, count - start);
    std::vector<int64_t> block;
    for (const auto& share : dealt) block.insert(block.end(), share.begin() + start, share.begin() + start + size);
    std::sort(block.begin(), block.end());  // canonical: the deal depends on the block, not on who held what
    std::vector<double> costs;
    for (const int64_t p : block) costs.push_back(options_.costs[static_cast<size_t>(global[static_cast<size_t>(p)])]);
    const auto assignment = balance_by_cost(costs, world, size);
    for (int64_t r = 0; r < world; ++r)
      for (const int64_t i : assignment[static_cast<size_t>(r)])
        out[static_cast<size_t>(r)].push_back(block[static_cast<size_t>(i)]);
  }
  return out;
}

SamplerState Sampler::after_taking(const SamplerState& from, const std::vector<int64_t>& taken) const {
  MM_CHECK(static_cast<int64_t>(taken.size()) == options_.world, "sampler: ", taken.size(), " rank counts for ",
           options_.world, " ranks");
  if (!balanced()) return mm::after_taking(dataset_size(), from, taken, EpochRemainder::wrap);
  // Consumed: what `from` had, and the first taken[r] of each rank's positions; the new cursor is
  // the first position left, the consumed ones beyond it are `done`.
  const int64_t n = dataset_size();
  const auto global = global_order(from.epoch);
  std::vector<bool> consumed(static_cast<size_t>(n), false);
  for (int64_t p = 0; p < std::min(from.cursor, n); ++p) consumed[static_cast<size_t>(p)] = true;
  for (const int64_t d : from.done)
    if (d < n) consumed[static_cast<size_t>(d)] = true;
  const auto dealt = balanced_positions(from, global);
  for (int64_t r = 0; r < options_.world; ++r) {
    const auto& mine = dealt[static_cast<size_t>(r)];
    const int64_t k = taken[static_cast<size_t>(r)];
    MM_CHECK(k >= 0 && k <= static_cast<int64_t>(mine.size()), "data position: rank ", r, " took ", k, " of its ",
             mine.size(), " positions");
    for (int64_t i = 0; i < k; ++i) consumed[static_cast<size_t>(mine[static_cast<size_t>(i)])] = true;
  }
  SamplerState next{from.epoch, n, {}};
  for (int64_t p = 0; p < n; ++p)
    if (!consumed[static_cast<size_t>(p)]) {
      next.cursor = p;
      break;
    }
  for (int64_t p = next.cursor + 1; p < n; ++p)
    if (consumed[static_cast<size_t>(p)]) next.done.push_back(p);
  return next;
}

std::vector<int64_t> Sampler::global_order(int64_t epoch) const {
  MM_CHECK(epoch >= 0, "sampler: negative epoch ", epoch);
  std::vector<int64_t> all(lengths_.size());
  std::iota(all.begin(), all.end(), 0);
  if (options_.shuffle) {
    // One stream per (seed, epoch); seed_seq mixes both so nearby seeds do not correlate.
    std::seed_seq seq{static_cast<uint32_t>(options_.seed), static_cast<uint32_t>(options_.seed >> 32),
                      static_cast<uint32_t>(epoch), static_cast<uint32_t>(static_cast<uint64_t>(epoch) >> 32)};
    std::mt19937_64 rng(seq);
    fisher_yates(all, rng);
  }
  if (options_.group_by_length) {
    for (size_t start = 0; start < all.size(); start += options_.group_size) {
      const auto first = all.begin() + start;
      const auto last = all.begin() + std::min(all.size(), start + static_cast<size_t>(options_.group_size));
      // stable: equal lengths keep the shuffled order, so the result is fully determined
      std::stable_sort(first, last, [&](int64_t a, int64_t b) { return lengths_[a] > lengths_[b]; });
    }
  }
  return all;
}

}  // namespace mm
