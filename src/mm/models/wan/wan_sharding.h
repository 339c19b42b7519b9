// The Wan DiT's sharding plan (nn/sharding_plan.h): every transformer block is a unit; the
// parameters outside them (patch embedding, text and time embedders, output norm and
// projection) form one root unit.
#pragma once
#include <vector>

#include "mm/models/wan/wan_transformer.h"
#include "mm/nn/sharding_plan.h"

namespace mm {

std::vector<ShardUnit> wan_sharding_units(WanTransformer3DModel& model);

}  // namespace mm
