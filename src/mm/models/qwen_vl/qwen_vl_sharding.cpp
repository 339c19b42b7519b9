#include "mm/models/qwen_vl/qwen_vl_sharding.h"

namespace mm {

std::vector<ShardUnit> qwen_vl_sharding_units(QwenVLForConditionalGeneration& model, ShardPlacement vision,
                                              ShardPlacement language) {
  std::vector<ShardBlocks> lists{{&model->visual->blocks, "visual.blocks.", vision},
                                 {&model->model->layers, "model.layers.", language}};
  // The multi-token-prediction head's layers are decoder layers like the others; its fc and
  // norms go with the rest of the language model.
  if (model->mtp) lists.push_back({&model->mtp->layers, "mtp.layers.", language});
  return sharding_plan(*model, lists,
                       {{"visual (outside its blocks)", "visual.", vision},
                        {"language model (outside its layers)", "", language}});
}

}  // namespace mm
