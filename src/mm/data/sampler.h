// The order samples are visited in: deterministic by seed and epoch, resumable from a global
// position (global_cursor.h) on any number of ranks, optionally grouped by length (as Hugging
// Face's LengthGroupedSampler), and split into disjoint per-rank shards.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace mm {

// Where a run stands in its data, the same for every rank: positions of `epoch`'s global order
// before `cursor` are consumed, and so are the `done` ones after it (sorted, each > cursor).
struct SamplerState {
  int64_t epoch = 0;
  int64_t cursor = 0;
  std::vector<int64_t> done;

  nlohmann::json to_json() const;
  // Errors name `where` and the field.
  static SamplerState from_json(const nlohmann::json& json, const std::string& where = "sampler state");
  bool operator==(const SamplerState&) const = default;
};

struct SamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;
  // Shuffle, cut into mega-batches of group_size, sort each by estimated length, longest first.
  bool group_by_length = false;
  int64_t group_size = 0;  // mega-batch size, e.g. micro_batch * 50; required with group_by_length
  // Shards: from the start of an epoch rank r takes positions r, r + world, r + 2 world, ... of
  // the global order (from any other state, its share as global_cursor.h deals it). Every rank
  // gets the same count; the order wraps around to pad the last ones, so all ranks run the same
  // number of steps (as torch's DistributedSampler with drop_last=False).
  int64_t rank = 0, world = 1;
  // Compute balancing (data/cost_balancing.h): with a cost per dataset index and a block size
  // (the micro-batch), each block of `balance_block` positions per rank (world x block in all,
  // the same positions as the round-robin deal gives the ranks for that micro-batch) is dealt
  // again by cost, longest first, each rank keeping `balance_block` of them. Every rank and every
  // resume from a micro-batch boundary computes the same deal; the positions a step consumes are
  // the round-robin deal's, so the data position and the loss (normalised by the global target
  // count) do not depend on it. Empty costs: the round-robin deal.
  std::vector<double> costs;
  int64_t balance_block = 0;
};

class Sampler {
 public:
  // lengths: per dataset index, the estimated length (only read with group_by_length).
  Sampler(std::vector<int64_t> lengths, SamplerOptions options = {});

  // This rank's dataset indices for `epoch`, in visiting order. The same (seed, epoch) gives the
  // same order on every machine (own PRNG and Fisher-Yates, no std::shuffle).
  std::vector<int64_t> order(int64_t epoch) const;
  // This rank's dataset indices from the global position `from` to the end of its epoch.
  std::vector<int64_t> order(const SamplerState& from) const;
  // The global position after rank r took the first taken[r] of its order(from).
  SamplerState after_taking(const SamplerState& from, const std::vector<int64_t>& taken) const;

  int64_t dataset_size() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t size_per_rank() const;  // length of order(epoch)
  const SamplerOptions& options() const { return options_; }

 private:
  std::vector<int64_t> global_order(int64_t epoch) const;  // dataset indices, all ranks'
  // Rank `rank`'s positions in the epoch's global order from `from`, in visiting order.
  std::vector<int64_t> positions(const SamplerState& from, int64_t rank, const std::vector<int64_t>& global) const;
  // Every rank's positions under compute balancing.
  std::vector<std::vector<int64_t>> balanced_positions(const SamplerState& from, const std::vector<int64_t>& global) const;
  bool balanced() const { return !options_.costs.empty(); }

  std::vector<int64_t> lengths_;
  SamplerOptions options_;
};

}  // namespace mm
