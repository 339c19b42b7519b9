// One Gated DeltaNet layer at the published Qwen3.5-9B shapes, for the DeltaNet benchmarks:
// hidden 4096; 16 key heads and 32 value heads of 128; conv kernel 4 (67M parameters).
#pragma once
#include "mm/nn/gated_delta_net.h"

namespace mm::bench {

inline GatedDeltaNetOptions qwen3_5_9b_delta_net() {
  GatedDeltaNetOptions options;
  options.hidden_size = 4096;
  options.num_key_heads = 16;
  options.num_value_heads = 32;
  options.key_head_dim = 128;
  options.value_head_dim = 128;
  options.conv_kernel = 4;
  return options;
}

}  // namespace mm::bench
