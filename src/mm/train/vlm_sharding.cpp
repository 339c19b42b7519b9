#include "mm/train/vlm_sharding.h"

#include <set>

namespace mm {

std::vector<parallel::UnitSpec> vlm_sharding_units(Qwen2_5_VLForConditionalGeneration& model, parallel::Placement vision,
                                               parallel::Placement language) {
  std::vector<parallel::UnitSpec> units;
  std::set<const void*> in_blocks;
  auto add_blocks = [&](torch::nn::ModuleList& blocks, const std::string& prefix, parallel::Placement placement) {
    for (size_t i = 0; i < blocks->size(); ++i) {
      parallel::UnitSpec unit;
      unit.name = prefix + std::to_string(i);
      unit.block = blocks[i].get();
      unit.placement = placement;
      for (auto& p : blocks[i]->named_parameters()) {
        unit.params.emplace_back(unit.name + "." + p.key(), p.value());
        in_blocks.insert(p.value().unsafeGetTensorImpl());
      }
      units.push_back(std::move(unit));
    }
  };
  add_blocks(model->visual->blocks, "visual.blocks.", vision);
  add_blocks(model->model->layers, "model.layers.", language);
  parallel::UnitSpec vision_root{"visual (outside its blocks)", nullptr, {}, vision};
  parallel::UnitSpec language_root{"language model (outside its layers)", nullptr, {}, language};
  for (auto& p : model->named_parameters()) {
    if (in_blocks.count(p.value().unsafeGetTensorImpl())) continue;
    (p.key().rfind("visual.", 0) == 0 ? vision_root : language_root).params.emplace_back(p.key(), p.value());
  }
  for (auto* root : {&vision_root, &language_root})
    if (!root->params.empty()) units.push_back(std::move(*root));
  return units;
}

}  // namespace mm
