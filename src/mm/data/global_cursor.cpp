#include "mm/data/global_cursor.h"

#include <algorithm>
#include <limits>

#include "mm/core/error.h"

namespace mm {
namespace {

// The positions of [cursor, n) not in done, ascending. Positions past the epoch's end do not
// exist, so a cursor or done entry beyond n counts as consumed (a checkpoint from before the
// global cursor can name the wrapped padding positions n, n + 1, ...).
std::vector<int64_t> remaining_positions(int64_t n, const SamplerState& from) {
  MM_CHECK(n >= 0 && from.epoch >= 0 && from.cursor >= 0, "data position: epoch ", from.epoch, ", cursor ",
           from.cursor, " for an epoch of ", n);
  std::vector<int64_t> left;
  auto done = std::lower_bound(from.done.begin(), from.done.end(), from.cursor);
  for (int64_t p = std::min(from.cursor, n); p < n; ++p) {
    while (done != from.done.end() && *done < p) ++done;
    if (done != from.done.end() && *done == p) continue;
    left.push_back(p);
  }
  return left;
}

int64_t share_size(int64_t left, int64_t world, EpochRemainder remainder) {
  return remainder == EpochRemainder::wrap ? (left + world - 1) / world : left / world;
}

// Dealt index i of the positions `left` of an epoch of n: past the last, the deal wraps around to
// the epoch's start (EpochRemainder::wrap pads the last round so).
int64_t dealt_position(const std::vector<int64_t>& left, int64_t i, int64_t n) {
  const auto m = static_cast<int64_t>(left.size());
  return i < m ? left[static_cast<size_t>(i)] : (i - m) % n;
}

}  // namespace

std::vector<int64_t> rank_positions(int64_t n, const SamplerState& from, int64_t rank, int64_t world,
                                    EpochRemainder remainder) {
  MM_CHECK(world >= 1 && rank >= 0 && rank < world, "data position: rank ", rank, " outside world size ", world);
  const std::vector<int64_t> left = remaining_positions(n, from);
  const int64_t m = static_cast<int64_t>(left.size());
  const int64_t count = share_size(m, world, remainder);
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k) mine.push_back(dealt_position(left, k * world + rank, n));
  return mine;
}

std::vector<std::vector<int64_t>> every_rank_positions(int64_t n, const SamplerState& from, int64_t world,
                                                       EpochRemainder remainder) {
  MM_CHECK(world >= 1, "data position: world size ", world);
  const std::vector<int64_t> left = remaining_positions(n, from);
  const int64_t count = share_size(static_cast<int64_t>(left.size()), world, remainder);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(world));
  for (auto& mine : out) mine.reserve(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k)
    for (int64_t r = 0; r < world; ++r) out[static_cast<size_t>(r)].push_back(dealt_position(left, k * world + r, n));
  return out;
}

SamplerState after_taking(int64_t n, const SamplerState& from, const std::vector<int64_t>& taken,
                          EpochRemainder remainder) {
  const int64_t world = static_cast<int64_t>(taken.size());
  MM_CHECK(world >= 1, "data position: no rank counts");
  const std::vector<int64_t> left = remaining_positions(n, from);
  const int64_t m = static_cast<int64_t>(left.size());
  const int64_t count = share_size(m, world, remainder);
  // Dealt index i = k * world + r went to rank r as its k-th. Everything before the first index
  // some rank has not taken is consumed by all.
  int64_t first_open = std::numeric_limits<int64_t>::max();
  for (int64_t r = 0; r < world; ++r) {
    const int64_t k = taken[static_cast<size_t>(r)];
    MM_CHECK(k >= 0 && k <= count, "data position: rank ", r, " took ", k, " of its ", count, " positions");
    first_open = std::min(first_open, k * world + r);
  }
  if (first_open >= m) return SamplerState{from.epoch, n, {}};
  SamplerState next{from.epoch, left[static_cast<size_t>(first_open)], {}};
  // Consumed beyond the cursor: earlier ones still ahead of it, and indices ranks took early.
  std::vector<int64_t> ahead;
  for (const int64_t d : from.done)
    if (d > next.cursor && d < n) ahead.push_back(d);
  for (int64_t i = first_open + 1; i < m; ++i)
    if (i / world < taken[static_cast<size_t>(i % world)]) ahead.push_back(left[static_cast<size_t>(i)]);
  std::sort(ahead.begin(), ahead.end());
  next.done = std::move(ahead);
  return next;
}

SamplerState global_from_interleaved(const std::vector<SamplerState>& per_rank, const std::string& where) {
  MM_CHECK(!per_rank.empty(), where, ": no per-rank data positions");
  const int64_t world = static_cast<int64_t>(per_rank.size());
  int64_t first_open = std::numeric_limits<int64_t>::max();
  for (int64_t r = 0; r < world; ++r) {
    const SamplerState& s = per_rank[static_cast<size_t>(r)];
    MM_CHECK(s.epoch == per_rank.front().epoch, where, ": data_ranks: rank ", r, " stopped in epoch ", s.epoch,
             " and rank 0 in epoch ", per_rank.front().epoch, "; a per-rank data position (written before the "
             "global one) cannot continue then");
    first_open = std::min(first_open, s.cursor * world + r);
  }
  SamplerState global{per_rank.front().epoch, first_open, {}};
  for (int64_t r = 0; r < world; ++r)
    for (int64_t k = 0; k < per_rank[static_cast<size_t>(r)].cursor; ++k)
      if (k * world + r > first_open) global.done.push_back(k * world + r);
  std::sort(global.done.begin(), global.done.end());
  return global;
}

}  // namespace mm
