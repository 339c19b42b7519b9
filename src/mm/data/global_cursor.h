// A data position that any number of processes can resume from. One epoch visits the
// positions 0..n-1 of one global order (samples for the loader, batches for the bucket sampler).
// A SamplerState says which of them are consumed: every position before `cursor`, and the listed
// `done` positions after it (a rank that skipped bad samples ran ahead of the others). Each of
// `world` ranks takes its share of what is left, dealt round-robin; after a checkpoint the ranks'
// counts of taken positions give the next global state. So a run saved by 2 ranks continues on
// 3 (or 1) exactly where it stopped, with no position skipped or visited twice.
#pragma once
#include <cstdint>
#include <vector>

#include "mm/data/sampler.h"

namespace mm {

// How the last positions of an epoch are shared when they do not divide by the rank count.
enum class EpochRemainder {
  wrap,  // pad every rank to the same count by wrapping to the epoch's first positions
         // (torch's DistributedSampler with drop_last=False)
  drop,  // leave them out, so no rank ever repeats a position
};

// Rank `rank`'s positions (into the epoch's global order of n) from `from`, in visiting order.
// Every rank gets the same count. Throws mm::Error for a state that does not fit n.
std::vector<int64_t> rank_positions(int64_t n, const SamplerState& from, int64_t rank, int64_t world,
                                    EpochRemainder remainder);

// Every rank's rank_positions in one pass over the epoch (world lists), for deals that need all.
std::vector<std::vector<int64_t>> every_rank_positions(int64_t n, const SamplerState& from, int64_t world,
                                                       EpochRemainder remainder);

// The global state after rank r took the first taken[r] of its rank_positions(n, from, r, ...).
SamplerState after_taking(int64_t n, const SamplerState& from, const std::vector<int64_t>& taken,
                          EpochRemainder remainder);

// A checkpoint written before the global cursor held one {epoch, cursor} per rank, rank r having
// taken positions r, r + world, ... of the epoch; the same position as one global state.
SamplerState global_from_interleaved(const std::vector<SamplerState>& per_rank, const std::string& where);

}  // namespace mm
