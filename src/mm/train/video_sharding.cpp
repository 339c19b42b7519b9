#include "mm/train/video_sharding.h"

#include <set>

namespace mm {

std::vector<parallel::UnitSpec> wan_sharding_units(WanTransformer3DModel& model) {
  std::vector<parallel::UnitSpec> units;
  std::set<const void*> in_blocks;
  for (size_t i = 0; i < model->blocks->size(); ++i) {
    parallel::UnitSpec unit;
    unit.name = "blocks." + std::to_string(i);
    unit.block = model->blocks[i].get();
    unit.placement = parallel::Placement::shard;
    for (auto& p : model->blocks[i]->named_parameters()) {
      unit.params.emplace_back(unit.name + "." + p.key(), p.value());
      in_blocks.insert(p.value().unsafeGetTensorImpl());
    }
    units.push_back(std::move(unit));
  }
  parallel::UnitSpec root{"transformer (outside its blocks)", nullptr, {}, parallel::Placement::shard};
  for (auto& p : model->named_parameters())
    if (!in_blocks.count(p.value().unsafeGetTensorImpl())) root.params.emplace_back(p.key(), p.value());
  units.push_back(std::move(root));
  return units;
}

}  // namespace mm
