#include "mm/nn/sharding_plan.h"

#include <set>

#include "mm/core/error.h"

namespace mm {

std::vector<ShardUnit> sharding_plan(torch::nn::Module& model, const std::vector<ShardBlocks>& blocks,
                                     const std::vector<ShardRoot>& roots) {
  std::vector<ShardUnit> units;
  std::set<const void*> in_blocks;
  for (const auto& list : blocks) {
    for (size_t i = 0; i < (*list.blocks)->size(); ++i) {
      ShardUnit unit;
      unit.name = list.prefix + std::to_string(i);
      unit.block = (*list.blocks)[i].get();
      unit.placement = list.placement;
      for (auto& p : (*list.blocks)[i]->named_parameters()) {
        unit.params.emplace_back(unit.name + "." + p.key(), p.value());
        in_blocks.insert(p.value().unsafeGetTensorImpl());
      }
      units.push_back(std::move(unit));
    }
  }
  std::vector<ShardUnit> root_units;
  for (const auto& root : roots) root_units.push_back({root.name, nullptr, {}, root.placement});
  for (auto& p : model.named_parameters()) {
    if (in_blocks.count(p.value().unsafeGetTensorImpl())) continue;
    size_t r = 0;
    while (r < roots.size() && p.key().rfind(roots[r].prefix, 0) != 0) ++r;
    MM_CHECK(r < roots.size(), "sharding plan: parameter ", p.key(), " is in no block and no root unit");
    root_units[r].params.emplace_back(p.key(), p.value());
  }
  for (auto& root : root_units)
    if (!root.params.empty()) units.push_back(std::move(root));
  return units;
}

}  // namespace mm
