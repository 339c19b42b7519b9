// Random initialization of a Qwen2.5-VL model for pretraining from scratch, by the rules of
// transformers' PreTrainedModel._init_weights (which Qwen2_5_VLPreTrainedModel inherits): linear,
// conv and embedding weights ~ normal(0, std), biases 0, RMSNorm weights 1. std is
// vision_config.initializer_range inside the vision tower (a sub-model with its own config) and
// text_config.initializer_range elsewhere, the lm_head included (the top-level config has none,
// so transformers falls back to the text config's).
#pragma once
#include <cstdint>

#include "mm/models/qwen2_5_vl/qwen2_5_vl_model.h"

namespace mm {

// Deterministic: the same seed gives the same weights on any device and in any dtype (values are
// drawn in fp32 on the CPU from a private generator, then cast and copied), and the global RNG is
// left untouched. LoRA adapters, if already attached, are left as they are.
void init_weights(Qwen2_5_VLForConditionalGeneration& model, uint64_t seed);

}  // namespace mm
