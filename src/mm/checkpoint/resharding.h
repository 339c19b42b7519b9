// A run's state across process layouts: what one rank of a sharded run writes into a
// checkpoint (its slices, plus the whole tensors once), how the whole optimizer state of any
// checkpoint becomes this rank's slices, and how the data position saved by N ranks is split
// over M ranks.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "mm/data/sampler.h"
#include "mm/parallel/fully_shard.h"
#include "mm/train/checkpoint_io.h"

namespace mm {

struct ShardedPieces {
  NamedTensors model, optimizer;  // this rank's part (see ShardedWrite)
  nlohmann::json model_layout, optimizer_layout;  // sharding.json's "model" and "optimizer"
};

// `buffers` (whole, e.g. rotary tables) and whole-kept parameters and optimizer scalars go into
// slice 0's files only.
ShardedPieces sharded_checkpoint_pieces(const parallel::FullyShardedModel& parallel, const NamedTensors& buffers,
                                        const NamedTensors& optimizer_state);

// "exp_avg.<param>" / "exp_avg_sq.<param>" of whole shape -> this rank's padded slices; "step.*"
// unchanged.
NamedTensors local_optimizer_state(const parallel::FullyShardedModel& parallel, const NamedTensors& whole_state);

// The per-rank sampler positions a trainer_state.json holds ("data_ranks", or "data" for one
// process). Errors name `where`.
std::vector<SamplerState> saved_data_positions(const nlohmann::json& state, const std::string& where);

// The positions for `ranks` ranks: the saved ones when their count is `ranks`; otherwise the
// global position (all saved ranks must be at the same one) split evenly.
std::vector<SamplerState> split_data_positions(const std::vector<SamplerState>& saved, int64_t ranks,
                                               const std::string& where);

}  // namespace mm
