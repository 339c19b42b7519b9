#include "mm/models/qwen2_5_vl/qwen2_5_vl_sharding.h"

namespace mm {

std::vector<ShardUnit> qwen2_5_vl_sharding_units(Qwen2_5_VLForConditionalGeneration& model, ShardPlacement vision,
                                                 ShardPlacement language) {
  return sharding_plan(*model,
                       {{&model->visual->blocks, "visual.blocks.", vision}, {&model->model->layers, "model.layers.", language}},
                       {{"visual (outside its blocks)", "visual.", vision},
                        {"language model (outside its layers)", "", language}});
}

}  // namespace mm
