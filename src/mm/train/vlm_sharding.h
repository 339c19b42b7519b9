// How a Qwen2.5-VL model is cut into sharding units for data parallelism (FullyShardedModel):
// every ViT block and decoder layer is a unit; the parameters outside them form one root unit
// per tower (patch embedding + merger; embeddings, final norm and head). Each tower has its own
// placement, e.g. the vision tower replicated and the language model sharded.
#pragma once
#include <vector>

#include "mm/parallel/fully_shard.h"
#include "mm/models/vlm_model.h"

namespace mm {

std::vector<parallel::UnitSpec> vlm_sharding_units(Qwen2_5_VLForConditionalGeneration& model, parallel::Placement vision,
                                               parallel::Placement language);

}  // namespace mm
