// A run's state across process layouts: what one rank of a sharded run writes into a
// checkpoint (its slices, plus the whole tensors once), how the whole optimizer state of any
// checkpoint becomes this rank's slices, and the data position it continues from.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "mm/data/sampler.h"
#include "mm/parallel/fully_shard.h"
#include "mm/checkpoint/checkpoint_io.h"

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
// unchanged; another expert-parallel rank's experts' state left out.
NamedTensors local_optimizer_state(const parallel::FullyShardedModel& parallel, const NamedTensors& whole_state);

// The global data position a trainer_state.json holds ("data"), also from a checkpoint written
// before the global position existed (one position per rank in "data_ranks"). Any number of
// ranks continues from it. Errors name `where`.
SamplerState saved_data_position(const nlohmann::json& state, const std::string& where);

}  // namespace mm
