// How a Wan DiT is cut into sharding units for data parallelism (FullyShardedModel): every
// transformer block is a unit; the parameters outside them (patch embedding, text and time
// embedders, output norm and projection) form one root unit.
#pragma once
#include <vector>

#include "mm/models/predictor/wan_transformer.h"
#include "mm/parallel/fully_shard.h"

namespace mm {

std::vector<parallel::UnitSpec> wan_sharding_units(WanTransformer3DModel& model);

}  // namespace mm
