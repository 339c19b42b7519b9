// Random initialization of a Qwen-VL model for pretraining from scratch, by the rules of
// transformers' PreTrainedModel._init_weights (which the Qwen2-VL and Qwen2.5-VL models inherit):
// linear, conv and embedding weights ~ normal(0, std), biases 0, RMSNorm and LayerNorm weights 1
// (LayerNorm biases 0). std is
// vision_config.initializer_range inside the vision tower (a sub-model with its own config) and
// text_config.initializer_range elsewhere, the lm_head included (the top-level config has none,
// so transformers falls back to the text config's).
#pragma once
#include <cstdint>

#include "mm/models/qwen_vl/qwen_vl_model.h"

namespace mm {

// Deterministic: the same seed gives the same weights on any device and in any dtype (values are
// drawn in fp32 on the CPU from a private generator, then cast and copied), and the global RNG is
// left untouched. LoRA adapters, if already attached, are left as they are.
void init_weights(QwenVLForConditionalGeneration& model, uint64_t seed);

}  // namespace mm
