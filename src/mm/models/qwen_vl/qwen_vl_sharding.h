// The Qwen-VL sharding plan (nn/sharding_plan.h): every ViT block and decoder layer is a unit;
// the parameters outside them form one root unit per tower (patch embedding + merger;
// embeddings, final norm and head). Each tower has its own placement, e.g. the vision tower
// replicated and the language model sharded.
#pragma once
#include <vector>

#include "mm/models/qwen_vl/qwen_vl_model.h"
#include "mm/nn/sharding_plan.h"

namespace mm {

std::vector<ShardUnit> qwen_vl_sharding_units(QwenVLForConditionalGeneration& model, ShardPlacement vision,
                                              ShardPlacement language);

}  // namespace mm
