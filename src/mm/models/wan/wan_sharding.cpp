#include "mm/models/wan/wan_sharding.h"

namespace mm {

std::vector<ShardUnit> wan_sharding_units(WanTransformer3DModel& model) {
  return sharding_plan(*model, {{&model->blocks, "blocks.", ShardPlacement::shard}},
                       {{"transformer (outside its blocks)", "", ShardPlacement::shard}});
}

}  // namespace mm
