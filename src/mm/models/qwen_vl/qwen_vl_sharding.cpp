#include "mm/models/qwen_vl/qwen_vl_sharding.h"

namespace mm {

std::vector<ShardUnit> qwen_vl_sharding_units(QwenVLForConditionalGeneration& model, ShardPlacement vision,
                                              ShardPlacement language) {
  return sharding_plan(*model,
                       {{&model->visual->blocks, "visual.blocks.", vision}, {&model->model->layers, "model.layers.", language}},
                       {{"visual (outside its blocks)", "visual.", vision},
                        {"language model (outside its layers)", "", language}});
}

}  // namespace mm
